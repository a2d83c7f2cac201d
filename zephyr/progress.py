"""What a person watching a terminal sees while a command runs: one progress bar per command (or per
pipeline step), however many engine jobs it takes.

Why one bar: a command such as ``zephyr dedup fuzzy`` runs several engine jobs of several stages each; a bar
that restarted at 0 % for each of them had an ETA that covered only the current one. Here the bar counts
bytes of work: each stage is worth the bytes it is estimated to read (the estimate that sizes its partitions,
``zephyr.physical``), shared evenly by its tasks, and its total is the sum over every job of the command. A
command that knows its jobs before they run (a ``zephyr.cli.Command`` with ``plans``: its ``PlannedJob``s)
announces that sum up front (``expect``), so the bar and its ETA cover the whole command from its first
second; any other grows its total as its stages start. Beside the bar: the stage running, and the rows read
from the command's input, each row once (a second read of the same files, a shuffle partition, or files an
earlier job of the command wrote are not input).

Shown only when stderr is a terminal, unless ``--progress`` / ``--no-progress`` (``progress=`` in Python)
says otherwise. ``command(label)`` installs the display for a block; a ``Job`` reports to the one installed,
or, used from Python with ``progress=True`` and none installed, opens its own for its duration.

Work that is not an engine job counts in units of its own on the same line: training counts optimizer steps
(``count`` then ``count_to``, from ``zephyr.trainer.progress``), with its metrics as the postfix. ``write``
prints a line that stays above the bar (tqdm's ``write``), or plainly on stderr when no bar is drawn: the
trainer's periodic lines are shown with or without a terminal.
"""

from __future__ import annotations

import contextlib
import shutil
import sys
import threading
from collections.abc import Iterator
from typing import Any

_local = threading.local()


def enabled(setting: bool | None) -> bool:
    """``setting`` when given, else whether stderr is a terminal."""
    return sys.stderr.isatty() if setting is None else bool(setting)


def current() -> Display | None:
    """The display installed by the innermost ``command`` block of this thread, if any."""
    return getattr(_local, "display", None)


@contextlib.contextmanager
def command(label: str, setting: bool | None = None) -> Iterator[Display]:
    """Install one display labelled ``label`` for the block. When progress is off it is a display that shows
    nothing, so that the jobs of the block do not open their own."""
    outer = current()
    display = Display(label) if enabled(setting) else Quiet(label)
    _local.display = display
    finished = False
    try:
        yield display
        finished = True
    finally:
        _local.display = outer
        display.close(finished)


def write(line: str) -> None:
    """Print ``line`` on stderr, above the bar of the installed display when it draws one (so the bar is not
    torn), else plainly."""
    if (bar := getattr(current(), "_bar", None)) is not None:
        bar.write(line, file=sys.stderr)
    else:
        print(line, file=sys.stderr, flush=True)


class Display:
    """One ``tqdm`` line: ``label [stage]``, the bar in estimated bytes of work over every job of the command
    (rate and ETA by tqdm), and the rows read from the command's input as the postfix."""

    def __init__(self, label: str):
        self.label = label
        self.rows = 0
        self.planned = 0  # bytes of work the command's plans announce (``expect``); 0: unknown
        self.done = 0.0  # bytes of work finished
        self._bar: Any = None  # drawn at the first stage: a display whose block runs no job shows nothing
        self._counting: str | None = None  # what ``count`` counts (e.g. "train"), while it does
        self._task_bytes = 0.0  # the work one task of the running stage is worth
        self._input = False  # whether the running stage reads the command's input
        self._seen: set[str] = set()  # files read or written by the command's stages so far

    def _open(self, total: float, unit: str, desc: str) -> None:
        if self._bar is None:
            from tqdm import tqdm

            # a terminal that reports a size of 0 x 0 (a fresh pty): tqdm would hide the bar below row 0
            size = shutil.get_terminal_size((120, 24))
            self._bar = tqdm(
                total=total,
                desc=desc,
                unit=unit,
                unit_scale=unit == "B",
                leave=True,
                ncols=size.columns or 120,
                nrows=size.lines or 24,
                file=sys.stderr,
            )
        self._bar.unit, self._bar.unit_scale = unit, unit == "B"

    def expect(self, nbytes: int) -> None:
        """The command's jobs are estimated to read ``nbytes`` in all (from its plans): the bar's total."""
        self.planned = max(0, int(nbytes))

    def stage(self, name: str, tasks: int, nbytes: int, reads: tuple[str, ...] | None = None) -> None:
        """An engine stage of ``tasks`` tasks begins, estimated to read ``nbytes``. ``reads``: the files of the
        source it reads (``()`` for an in-memory table, None for shuffle partitions); its rows are the
        command's input unless a stage of the command read or wrote one of them before (an in-memory table:
        when it is the first source of the command)."""
        total = max(self.planned, self.done + nbytes)
        self._open(total, "B", f"{self.label} [{_short(name)}]")
        if self._counting is not None:
            self._counting = None
            self._bar.reset(total=total)
            self._bar.n = self.done
        self._task_bytes = nbytes / max(tasks, 1)
        if reads is None:
            self._input = False
        elif not reads:
            self._input = not self._seen
            self._seen.add("")
        else:
            self._input = self._seen.isdisjoint(reads)
            self._seen.update(reads)
        self._bar.total = max(self._bar.total or 0, total)
        self._bar.set_description_str(f"{self.label} [{_short(name)}]", refresh=False)
        self._bar.set_postfix_str(f"{self.rows:,} rows read", refresh=True)

    def wrote(self, files: list[str]) -> None:
        """A job of the command wrote ``files``: a later stage reading them reads no input rows."""
        self._seen.update(files)

    def count(self, what: str, total: int, *, done: int = 0, unit: str = "step") -> None:
        """Work that is not an engine job begins: the bar counts ``unit`` from ``done`` (a resumed run's
        steps) to ``total``, labelled ``label [what]`` (``label`` alone when its last word is ``what``: ``zephyr
        train``, a stage named ``train``); its rate and ETA cover this run's units only."""
        desc = self.label if self.label.split()[-1:] == [what] else f"{self.label} [{what}]"
        self._open(total, unit, desc)
        self._counting = what
        self._bar.reset(total=total)
        self._bar.n = self._bar.initial = self._bar.last_print_n = done
        self._bar.set_description_str(desc, refresh=False)
        self._bar.refresh()

    def count_to(self, done: int, postfix: str) -> None:
        """``done`` units of the counted work are finished; ``postfix`` (e.g. the loss) follows the bar. The
        terminal is redrawn at tqdm's pace (``mininterval``), not at every call."""
        if self._bar is None or self._counting is None:
            return
        self._bar.set_postfix_str(postfix, refresh=False)
        self._bar.update(done - self._bar.n)

    def advance(self, rows: int) -> None:
        """One task of the running stage finished, having read ``rows`` rows."""
        if self._input:
            self.rows += rows
        self.done += self._task_bytes
        if self._bar is not None and self._counting is None:
            self._bar.set_postfix_str(f"{self.rows:,} rows read", refresh=False)
            self._bar.update(self.done - self._bar.n)

    def close(self, finished: bool = False) -> None:
        """Leave the line with the command's totals (at 100 % when the command ``finished``)."""
        if self._bar is None:
            return
        if self._counting is None:  # engine work: the command and its rows; counted work keeps its own
            if finished:
                self._bar.total = self._bar.n = self.done
            self._bar.set_description_str(self.label, refresh=False)
            self._bar.set_postfix_str(f"{self.rows:,} rows read", refresh=True)
        self._bar.close()


class Quiet(Display):
    """The display of a block whose progress is off: counts, shows nothing."""

    def stage(self, name: str, tasks: int, nbytes: int, reads: tuple[str, ...] | None = None) -> None:
        pass

    def count(self, what: str, total: int, *, done: int = 0, unit: str = "step") -> None:
        pass

    def close(self, finished: bool = False) -> None:
        pass


def _short(name: str) -> str:
    """A step's readable name: its last named operation (``map_batches(dedup.fuzzy.signatures)`` →
    ``dedup.fuzzy.signatures``), else its last operation."""
    last = name.split(" → ")[-1]
    if "(" in last and last.endswith(")"):
        inner = last[last.index("(") + 1 : -1]
        return inner or last
    return last
