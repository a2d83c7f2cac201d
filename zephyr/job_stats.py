"""Task totals over every engine job a command runs.

``zephyr filter`` (annotate, three routes, a report), ``zephyr dedup`` (hash or candidate jobs, then the
final write), ``zephyr quality score``, ``write_token_shards`` and most ``zephyr run`` steps run several
engine jobs; each job's own stats know only its stages. Their stats files must still say what all of them
did: a task retried or resumed in the first job counts as much as one in the last. Every ``Job`` hands its
stats to ``record`` when it writes them; a command collects them around its actions::

    with job_stats.recording() as jobs:
        ...  # any number of engine actions
    stats.update(job_stats.summarize(jobs))  # tasks, tasks_resumed, task_retries (sums) and one entry per job

Recordings nest (every enclosing block sees a job); outside one, ``record`` does nothing. The recording is
per context (``ContextVar``), like ``zephyr.counters``, so concurrent commands in threads do not mix.

One stage's record (``stage_record``) is built here too, from its tasks' markers: the driver runs stages,
this module does their accounting.

``WriteResult``, what a write action returns, is here too: shared by the driver (``zephyr.job``) and the facade
(``zephyr.dataset``).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

TASK_KEYS = ("tasks", "tasks_resumed", "task_retries")
"""Per-stage task counts that add up across stages and jobs."""

_active: ContextVar[tuple[list[dict[str, Any]], ...]] = ContextVar("zephyr_job_stats", default=())


def record(stats: dict[str, Any]) -> None:
    """Add one job's stats (``Job.write_stats``) to every enclosing ``recording``."""
    for jobs in _active.get():
        jobs.append(stats)


@contextmanager
def recording() -> Iterator[list[dict[str, Any]]]:
    """Collect the stats of every engine job that finishes while the block runs, in order."""
    jobs: list[dict[str, Any]] = []
    token = _active.set((*_active.get(), jobs))
    try:
        yield jobs
    finally:
        _active.reset(token)


def task_totals(stages: Iterable[dict[str, Any]]) -> dict[str, int]:
    """``tasks``, ``tasks_resumed`` and ``task_retries`` summed over stage records."""
    stages = list(stages)
    return {key: sum(int(stage.get(key, 0)) for stage in stages) for key in TASK_KEYS}


def summarize(jobs: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """The task totals of several jobs, and per job its stage names and totals (in the order they ran).

    >>> job = {"seconds": 0.5, "stages": [{"stage": "read", "tasks": 4, "tasks_resumed": 2, "task_retries": 1}]}
    >>> summarize([job, job])["tasks_resumed"], summarize([job])["jobs"][0]["stages"]
    (4, ['read'])
    """
    per_job = [
        {
            "stages": [s["stage"] for s in job["stages"]],
            **task_totals(job["stages"]),
            "seconds": job.get("seconds", 0),
        }
        for job in jobs
    ]
    return {**{key: sum(j[key] for j in per_job) for key in TASK_KEYS}, "jobs": per_job}


def add_counts(into: dict[str, int], more: Mapping[str, int]) -> dict[str, int]:
    """Add the named counts ``more`` into ``into`` (counters, drops by reason) and return it.

    >>> add_counts({"a": 1}, {"a": 2, "b": 1})
    {'a': 3, 'b': 1}
    """
    for key, value in more.items():
        into[key] = into.get(key, 0) + int(value)
    return into


def counter_totals(stages: Iterable[dict[str, Any]]) -> dict[str, int]:
    """The user counters (``zephyr.counters``) summed over stage records, in the order they first appear."""
    totals: dict[str, int] = {}
    for stage in stages:
        add_counts(totals, stage.get("counters", {}))
    return totals


def quarantine_files(stages: Iterable[dict[str, Any]]) -> list[str]:
    """The quarantine files of stage records, in stage and task order."""
    return [f for stage in stages for f in stage.get("quarantine_files", [])]


def ops_named(stages: Iterable[dict[str, Any]], labels: Iterable[str]) -> list[dict[str, Any]]:
    """The op records (``stage_record``'s ``ops``) whose label is one of ``labels``, over every stage in order:
    a caller accounts the rows of the ops it added itself, wherever the plan fused them."""
    wanted = set(labels)
    return [op for stage in stages for op in stage.get("ops", []) if op["op"] in wanted]


def _op_totals(markers: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], dict[str, int]]:
    """Per fused op, its row counts summed over the tasks; and the user counters summed."""
    ops: list[dict[str, Any]] = []
    user: dict[str, int] = {}
    for marker in markers:
        for i, op in enumerate(marker["ops"]):
            if i == len(ops):
                ops.append({**op, "dropped_by_reason": dict(op["dropped_by_reason"])})
                continue
            total = ops[i]
            for key in ("rows_in", "rows_out", "rows_dropped", "rows_quarantined"):
                total[key] += op[key]
            add_counts(total["dropped_by_reason"], op["dropped_by_reason"])
        add_counts(user, marker["counters"])
    return ops, user


def stage_record(
    name: str,
    fingerprint: str,
    markers: list[dict[str, Any]],
    tasks: int,
    timing: tuple[float, int, int],
    wide: tuple[Any, int] | None = None,
) -> dict[str, Any]:
    """One stage's record from its task markers; ``timing`` is (wall seconds, tasks resumed, retries) and
    ``wide`` (the wide op, rows its map side wrote) for a reduce stage.

    Every stage balances ``rows_in = rows_out + rows_dropped + rows_quarantined``, with two kinds of exception
    named in its ``wide`` entry: an aggregation turns rows into groups (``rows_in`` rows, ``groups`` out) and
    a join's output is its matches. For a reduce stage, ``rows_in`` is what its map side wrote (before any
    map-side combine), so the rows a ``deduplicate`` removes — in the map-side combiner or in the reducer —
    are dropped with reason ``duplicate``."""
    from zephyr.ops import Deduplicate, GroupAggregate, GroupApply

    wall, skipped, retried = timing
    ops, user = _op_totals(markers)
    rows_in = sum(m["rows_in"] for m in markers)
    read_quarantined = sum(m.get("rows_read_quarantined", 0) for m in markers)
    wide_entry = None
    duplicates = 0
    if wide is not None:
        op, map_rows = wide
        reduced, rows_in = rows_in, map_rows
        wide_entry = {"op": type(op).__name__, "rows_in": map_rows, "rows_out": reduced}
        if isinstance(op, Deduplicate):
            duplicates = map_rows - reduced
            wide_entry.update(rows_dropped=duplicates, dropped_by_reason={"duplicate": duplicates})
        elif isinstance(op, GroupAggregate | GroupApply):
            wide_entry["groups"] = reduced
    return {
        "stage": name,
        "fingerprint": fingerprint[:16],
        "tasks": tasks,
        "tasks_resumed": skipped,
        "task_retries": retried,
        "rows_in": rows_in,
        "rows_out": sum(m["rows_out"] for m in markers),
        "rows_dropped": duplicates + sum(op["rows_dropped"] for op in ops),
        "rows_quarantined": read_quarantined + sum(op["rows_quarantined"] for op in ops),
        "rows_read_quarantined": read_quarantined,
        "bytes_out": sum(m["bytes_out"] for m in markers),
        "task_seconds": round(sum(m["seconds"] for m in markers), 3),
        "wall_seconds": round(wall, 3),
        "ops": ops,
        **({"wide": wide_entry} if wide_entry else {}),
        "counters": user,
        "quarantine_files": [m["quarantine"]["path"] for m in markers if m.get("quarantine")],
        "quarantine_rows": sum(m["quarantine"]["rows"] for m in markers if m.get("quarantine")),
    }


@dataclass(frozen=True)
class WriteResult:
    """What a ``write_*`` action produced: the files in shard order and the job's stats."""

    files: list[str]
    stats: dict
    checksums: dict[str, dict] = field(default_factory=dict)
    """Per file, its size and checksum as written (``zephyr.io.checksum``): a caller that resumes from these
    files later (``zephyr run``'s steps) checks them with ``zephyr.resume.check_files``."""
