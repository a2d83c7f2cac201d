"""Task totals over every engine job a command runs.

``zephyr filter`` (annotate, three routes, a report), ``zephyr dedup`` (hash or candidate jobs, then the
final write), ``zephyr quality score``, ``write_token_shards`` and most ``zephyr run`` stages run several
engine jobs; each job's own stats know only its stages. Their stats files must still say what all of them
did: a task retried or resumed in the first job counts as much as one in the last. Every ``Job`` hands its
stats to ``record`` when it writes them; a command collects them around its actions::

    with job_stats.recording() as jobs:
        ...  # any number of engine actions
    stats.update(job_stats.summarize(jobs))  # tasks, tasks_resumed, task_retries (sums) and one entry per job

Recordings nest (every enclosing block sees a job); outside one, ``record`` does nothing. The recording is
per context (``ContextVar``), like ``zephyr.counters``, so concurrent commands in threads do not mix.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

__all__ = ["TASK_KEYS", "record", "recording", "summarize", "task_totals"]

TASK_KEYS = ("tasks", "tasks_resumed", "task_retries")
"""Per-stage task counts that add up across stages and jobs."""

_active: ContextVar[tuple[list[dict[str, Any]], ...]] = ContextVar("zephyr_job_stats", default=())


def record(stats: dict[str, Any]) -> None:
    """Add one job's stats (``Job.stats()``) to every enclosing ``recording``."""
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
    totals = dict.fromkeys(TASK_KEYS, 0)
    for stage in stages:
        for key in TASK_KEYS:
            totals[key] += int(stage.get(key, 0))
    return totals


def summarize(jobs: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """The task totals of several jobs, and per job its stage names and totals (in the order they ran).

    >>> job = {"seconds": 0.5, "stages": [{"stage": "read", "tasks": 4, "tasks_resumed": 2, "task_retries": 1}]}
    >>> summarize([job, job])["tasks_resumed"], summarize([job])["jobs"][0]["stages"]
    (4, ['read'])
    """
    per_job = [
        {"stages": [s["stage"] for s in job["stages"]], **task_totals(job["stages"]), "seconds": job.get("seconds", 0)}
        for job in jobs
    ]
    return {**{key: sum(j[key] for j in per_job) for key in TASK_KEYS}, "jobs": per_job}
