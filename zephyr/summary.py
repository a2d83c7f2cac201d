"""The one success summary every ``zephyr`` command ends with.

Why one helper: a person should tell what a run did without reading its stats file, and a script should not
need a parser per command. Every command returns a ``Summary``; ``zephyr.cli.main`` times the
command, adds the byte counts, and prints it one way:

- without ``--json``: a short table on **stderr** (progress and logs live there too), e.g.::

      zephyr dedup exact: done in 1.3 s
        rows        in 1,000 = kept 850 + dropped 120 + quarantined 30
        dropped     exact_duplicate 120
        bytes       in 1.2 MB, out 980.4 kB
        output      out/dedup
        stats       out/dedup.zephyr/stats.json
        next        zephyr tokenize out/dedup --tokenizer tokenizer.json --output tokens/

  stdout then holds only what a command computes as data (``zephyr count``'s number), so
  ``n=$(zephyr count data/)`` keeps working;
- with ``--json``: exactly one JSON object on **stdout** and nothing else there, with the same keys for every
  command (``KEYS``); command-specific numbers (tokens, shards, loss, PII counts, ...) go under ``details``.

The accounting always reads ``rows_in = rows_kept + rows_dropped + rows_quarantined`` (``balanced`` says
whether it holds). Rows a command rewrites in place (PII redaction, paragraph dedup) count as kept. ``unit``
says what the rows are: ``zephyr train`` counts the samples (training sequences) of the steps this call ran.
"""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

log = logging.getLogger(__name__)


@dataclass
class Summary:
    """What a command did, as a handler returns it (``zephyr.cli.main`` adds the command, time and bytes)."""

    rows_in: int
    rows_kept: int
    rows_dropped: int = 0
    rows_quarantined: int = 0
    dropped_by_reason: dict[str, int] = field(default_factory=dict)
    output: str | None = None
    """The data the command wrote (a directory, or one file such as a tokenizer.json); None: nothing."""
    stats: str | None = None
    """The stats sidecar or report a person opens next, if the command wrote one."""
    dropped_output: str | None = None
    """Where the dropped rows were written (with their drop reason), if they were."""
    quarantine_output: str | None = None
    """Where quarantined rows went, when there were any."""
    next: str | None = None
    """The command a person most likely runs next, ready to paste."""
    details: dict[str, Any] = field(default_factory=dict)
    """Numbers only this command has (tokens, shards, loss, ...)."""
    bytes_in: int | None = None
    """Input bytes on disk; None: ``main`` measures the command's ``inputs``."""
    unit: str = "rows"
    """What ``rows_*`` count, as the human table labels them (``zephyr train``: ``samples``)."""
    shown: tuple[str, ...] = ()
    """Keys of ``details`` the human table shows too, one line each (tokens, rows changed...), in order."""
    exit_code: int = 0
    """The command's exit status after its summary: nonzero for a run that finished but found what its
    caller must act on (``zephyr train check --json``: not ready)."""
    printed: str | None = None
    """The command's own answer on stdout (a count, a plan), printed before the table; with ``--json`` it is
    left out (it is in ``details`` or a row count already)."""

    @property
    def balanced(self) -> bool:
        return self.rows_in == self.rows_kept + self.rows_dropped + self.rows_quarantined

    def record(
        self, command: str, seconds: float, bytes_in: int | None, bytes_out: int | None
    ) -> dict[str, Any]:
        """The ``--json`` object: the same keys (``KEYS``) in the same order for every command."""
        return {
            "command": command,
            "unit": self.unit,
            "rows_in": int(self.rows_in),
            "rows_kept": int(self.rows_kept),
            "rows_dropped": int(self.rows_dropped),
            "rows_quarantined": int(self.rows_quarantined),
            "balanced": self.balanced,
            "dropped_by_reason": {k: int(v) for k, v in sorted(self.dropped_by_reason.items())},
            "bytes_in": bytes_in,
            "bytes_out": bytes_out,
            "seconds": round(seconds, 3),
            "output": self.output,
            "stats": self.stats,
            "dropped_output": self.dropped_output,
            "quarantine_output": self.quarantine_output if self.rows_quarantined else None,
            "next": self.next,
            "details": self.details,
        }


KEYS = tuple(Summary(0, 0).record("", 0.0, None, None))
"""The keys of every command's ``--json`` object, in this order (``Summary.record`` makes each one)."""


def from_stages(stages: Sequence[dict[str, Any]], **fields: Any) -> Summary:
    """The accounting of one engine job from its stage records (``WriteResult.stats["stages"]``).

    The stages counted are the chain that fed the output: from the last stage back, each earlier stage that
    wrote as many rows as the next one read. A job may read its input more than once (a sort samples its
    keys in a first pass; that pass, having set rows aside, wrote fewer rows than the real pass read, and
    one that set none aside adds nothing), and may re-read what it materialized (paragraph dedup: part of
    the chain). Rows in are what the chain's first stage read (unreadable rows included), kept what the last
    stage wrote; the drops (by reason) and rejects of every stage of the chain count. ``fields`` go to the
    ``Summary`` as they are, counts included (a command that counts its rows itself, as ``zephyr filter``).

    >>> read = {"rows_in": 4, "rows_out": 3, "rows_dropped": 0, "rows_quarantined": 1, "ops": []}
    >>> sort = {"rows_in": 3, "rows_out": 3, "rows_dropped": 0, "rows_quarantined": 0, "ops": []}
    >>> s = from_stages([read, read, sort])
    >>> (s.rows_in, s.rows_kept, s.rows_quarantined, s.balanced)
    (4, 3, 1, True)
    """
    if not stages:
        return Summary(**{"rows_in": 0, "rows_kept": 0, **fields})
    start = len(stages) - 1
    while start > 0 and int(stages[start - 1]["rows_out"]) == int(stages[start]["rows_in"]):
        start -= 1
    chain = stages[start:]
    from zephyr.job_stats import add_counts

    reasons: dict[str, int] = {}
    for stage in chain:
        for op in [*stage.get("ops", []), *([stage["wide"]] if "wide" in stage else [])]:
            add_counts(reasons, op.get("dropped_by_reason") or {})
    counts = {
        "rows_in": int(chain[0]["rows_in"]),
        "rows_kept": int(chain[-1]["rows_out"]),
        "rows_dropped": sum(int(s["rows_dropped"]) for s in chain),
        "rows_quarantined": sum(int(s["rows_quarantined"]) for s in chain),
        "dropped_by_reason": reasons,
    }
    return Summary(**{**counts, **fields})


def write_summary(
    result: Any,
    output: str,
    section: str,
    extra: dict[str, Any],
    *,
    jobs: list[dict[str, Any]] | None = None,
    stages: list[dict[str, Any]] | None = None,
    **fields: Any,
) -> Any:
    """Write ``OUTPUT.zephyr/stats.json`` (in the output's sidecar, ``zephyr.io.layout``) in the one format of
    every command's stats, and return the command's ``Summary``:
    at the top level the stats of the engine job that wrote ``OUTPUT`` (``result``) and the task totals of
    every job in ``jobs`` (default: that one); under ``section`` the command's own figures (``extra``), the
    ``dropped_output`` folder where rows were routed, and the row balance (``rows``: in, kept, dropped,
    quarantined) as ``stages`` (default: the write's; ``zephyr.removal.Routed.stages`` for a routed write)
    count it, or as ``fields`` give it (``rows_in=``...: ``from_stages``)."""
    from zephyr import job_stats
    from zephyr.io.layout import stats_path
    from zephyr.io.paths import write_bytes_atomic

    stats = {**result.stats, **job_stats.summarize(jobs or [result.stats]), section: dict(extra)}
    fields = {"output": output, "stats": stats_path(output), **fields}
    summary = from_stages(stats.get("stages", []) if stages is None else stages, **fields)
    if fields.get("dropped_output") is not None:
        stats[section]["dropped_output"] = fields["dropped_output"]
    rows = (summary.rows_in, summary.rows_kept, summary.rows_dropped, summary.rows_quarantined)
    stats[section]["rows"] = dict(zip(("in", "kept", "dropped", "quarantined"), rows))
    text = json.dumps(stats, indent=2, sort_keys=True, ensure_ascii=False, default=str) + "\n"
    write_bytes_atomic(stats_path(output), text.encode())
    return summary


def bytes_under(paths: Iterable[str]) -> int:
    """Bytes on disk of the files ``paths`` name: a file's size, or every file under a folder (an output zephyr
    wrote holds its data only, its sidecar is ``OUT.zephyr/``; a checkpoint's ``.metadata`` and
    ``__0_0.distcp`` are the checkpoint)."""
    from zephyr.io.paths import filesystem

    total = 0
    for path in paths:
        fs, root = filesystem(path)
        total += int(fs.du(root)) if fs.exists(root) else 0
    return total


def _measure(paths: Iterable[str] | None, expand: bool) -> int | None:
    """``bytes_under`` of inputs (``expand``: their data files, as a read lists them) or an output; None when
    they cannot be listed. A summary is printed after the work succeeded: a listing that fails now (a path
    moved meanwhile) must not turn the run into a failure, so it is logged and the count left out."""
    if not paths:
        return None
    try:
        from zephyr.io.paths import expand_paths

        return bytes_under(expand_paths(list(paths), formats=None) if expand else paths)
    except Exception as exc:  # noqa: BLE001 - see the docstring; logged, never hidden
        log.info("summary: bytes of %s not measured (%s)", paths, exc)
        return None


def _bytes(n: int | None) -> str:
    from zephyr.config import format_bytes

    return "?" if n is None else format_bytes(n, decimal=True)


def human(record: dict[str, Any], shown: Sequence[str] = ()) -> str:
    """The table a person reads (see the module docstring), from a ``Summary.record``, with the ``details``
    named by ``shown`` (``Summary.shown``) on lines of their own."""
    lines = [f"{record['command']}: done in {record['seconds']:.1f} s"]

    def row(label: str, text: str) -> None:
        lines.append(f"  {label:<11} {text}")

    if record["details"].get("ran") is False:  # zephyr explain: a plan, no rows
        row("rows", "none read: the plan only")
        return "\n".join(lines)
    row(
        record["unit"],
        f"in {record['rows_in']:,} = kept {record['rows_kept']:,} + dropped {record['rows_dropped']:,} "
        f"+ quarantined {record['rows_quarantined']:,}"
        + ("" if record["balanced"] else "  (DOES NOT BALANCE)"),
    )
    if record["dropped_by_reason"]:
        top = sorted(record["dropped_by_reason"].items(), key=lambda kv: (-kv[1], kv[0]))
        row(
            "dropped by",
            ", ".join(f"{reason} {n:,}" for reason, n in top[:6]) + (", ..." if len(top) > 6 else ""),
        )
    for key in shown:
        value = record["details"].get(key)
        row(key.replace("_", " "), f"{value:,}" if isinstance(value, int) else str(value))
    sizes = [f"in {_bytes(record['bytes_in'])}"] if record["bytes_in"] is not None else []
    sizes += [f"out {_bytes(record['bytes_out'])}"] if record["output"] else []
    if sizes:
        row("bytes", ", ".join(sizes))
    for key in ("output", "dropped_output", "quarantine_output", "stats", "next"):
        if record[key]:
            row(key.removesuffix("_output") or key, str(record[key]))
    return "\n".join(lines)


def emit(
    summary: Summary,
    *,
    command: str,
    seconds: float,
    inputs: Sequence[str] | None,
    as_json: bool,
) -> dict[str, Any]:
    """Measure the bytes, then print ``summary``: one JSON object on stdout (``as_json``), else the table on
    stderr. Returns the record."""
    bytes_in = summary.bytes_in if summary.bytes_in is not None else _measure(inputs, expand=True)
    bytes_out = _measure([summary.output] if summary.output else None, expand=False)
    record = summary.record(command, seconds, bytes_in, bytes_out)
    if as_json:
        print(json.dumps(record, default=str), flush=True)
    else:
        if summary.printed is not None:
            print(summary.printed, flush=True)
        print(human(record, summary.shown), file=sys.stderr, flush=True)
    return record
