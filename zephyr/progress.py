"""What a person watching a terminal sees while a command runs: one progress line per command (or per
pipeline step), however many engine jobs it takes.

Why one line: a command such as ``zephyr dedup fuzzy`` runs a dozen engine steps; a bar per step left a dozen
bars behind, each counting tasks and jumping from 0 to 100 %. Here the line names the command and the step
it is in, counts the rows and bytes read so far (bytes as decoded Arrow data, the work the engine does) with
their rate, and shows the step's completion by tasks, with an ETA. When the command ends, the line stays with
its totals.

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
import time
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
    try:
        yield display
    finally:
        _local.display = outer
        display.close()


def write(line: str) -> None:
    """Print ``line`` on stderr, above the bar of the installed display when it draws one (so the bar is not
    torn), else plainly."""
    display = current()
    bar = display._bar if display is not None else None
    if bar is not None:
        bar.write(line, file=sys.stderr)
    else:
        sys.stderr.write(line + "\n")
        sys.stderr.flush()


def _bytes(n: float) -> str:
    for unit in ("B", "kB", "MB", "GB", "TB"):
        if abs(n) < 1000 or unit == "TB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n:.1f} TB"


class Display:
    """One ``tqdm`` line: ``label [step k: name]`` with the step's tasks as the bar (rate and ETA by tqdm) and
    the rows and bytes read by the command so far, with their rate, as the postfix."""

    def __init__(self, label: str):
        self.label = label
        self.rows = 0
        self.bytes = 0
        self.steps = 0
        self.started = time.perf_counter()
        self._bar: Any = None  # drawn at the first step: a display whose block runs no job shows nothing
        self._counting: str | None = None  # what ``count`` counts (e.g. "train"), while it does

    def _open(self, total: int, unit: str, desc: str) -> None:
        if self._bar is None:
            from tqdm import tqdm

            # a terminal that reports a size of 0 x 0 (a fresh pty): tqdm would hide the bar below row 0
            size = shutil.get_terminal_size((120, 24))
            self._bar = tqdm(
                total=total,
                desc=desc,
                unit=unit,
                leave=True,
                ncols=size.columns or 120,
                nrows=size.lines or 24,
                file=sys.stderr,
            )
        self._bar.unit = unit

    def step(self, name: str, tasks: int) -> None:
        """A new engine step of ``tasks`` tasks begins."""
        self._open(tasks, "task", self.label)
        self._counting = None
        self.steps += 1
        self._bar.reset(total=tasks)
        self._bar.set_description_str(f"{self.label} [{self.steps}: {_short(name)}]", refresh=False)
        self._refresh()

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

    def advance(self, rows: int, nbytes: int) -> None:
        """One task finished, having read ``rows`` rows and ``nbytes`` bytes."""
        self.rows += rows
        self.bytes += nbytes
        if self._bar is not None and self._counting is None:
            self._bar.update(1)
            self._refresh()

    def _refresh(self) -> None:
        elapsed = max(time.perf_counter() - self.started, 1e-9)
        self._bar.set_postfix_str(
            f"{self.rows:,} rows, {_bytes(self.bytes)} read, {_bytes(self.bytes / elapsed)}/s", refresh=True
        )

    def close(self) -> None:
        """Leave the line with the command's totals."""
        if self._bar is None:
            return
        if self._counting is None:  # engine steps: their number and the rows read; counted work keeps its own
            self._bar.set_description_str(f"{self.label} [{self.steps} steps]", refresh=False)
            self._refresh()
        self._bar.close()


class Quiet(Display):
    """The display of a block whose progress is off: counts, shows nothing."""

    def step(self, name: str, tasks: int) -> None:
        self.steps += 1

    def count(self, what: str, total: int, *, done: int = 0, unit: str = "step") -> None:
        pass

    def close(self) -> None:
        pass


def _short(name: str) -> str:
    """A step's readable name: its last named operation (``map_batches(dedup.fuzzy.signatures)`` →
    ``dedup.fuzzy.signatures``), else its last operation."""
    last = name.split(" → ")[-1]
    if "(" in last and last.endswith(")"):
        inner = last[last.index("(") + 1 : -1]
        return inner or last
    return last
