"""How a job reads its inputs: the estimated bytes, the read split and the small-job decision, in one place.

``plan_read`` is the one read-planning rule: clients call it on their input paths before building a
``Dataset`` (the tokenize writer: how to split its inputs, how many tasks run at once, whether its jobs run
in this process), so no client re-sizes inputs or repeats the small-job rule; the driver applies the same
sizes and rule to a plan (``Job.run``). Sizes are ``zephyr.physical``'s (``size_of_files``, ``plan_bytes``:
Parquet footers, else file sizes × the format's factor) and the small-job rule is ``physical.runs_in_process``.
Outputs never depend on any of it: a split changes which task reads a row, never the rows' order.

>>> from zephyr.options import ExecutionOptions
>>> import pyarrow as pa, pyarrow.parquet as pq, tempfile, os
>>> path = os.path.join(tempfile.mkdtemp(), "a.parquet")
>>> pq.write_table(pa.table({"text": ["a b c"] * 100}), path)
>>> plan = plan_read([path], ExecutionOptions(executor="local", workers=2), split=True)
>>> (plan.approx_shard_bytes == SPLIT_MIN_BYTES, plan.tasks, plan.small)
(True, 1, True)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from zephyr.io.sources import list_shards
from zephyr.ops import ReadFiles
from zephyr.options import ExecutionOptions
from zephyr.physical import list_source_files, read_bytes, runs_in_process, size_of_files
from zephyr.plan import Segment

SPLIT_MIN_BYTES = 64 << 20
"""Inputs under twice this are read in shards of this size, not split further: a worker's start-up, imports and
a client's set-up (loading and proving a tokenizer: ~1-2 CPU-s) cost more than their work."""
TASK_MIN_BYTES = 16 << 20
"""Split read tasks hold at least this: a started worker pays ~10 ms of bookkeeping per task, so small tasks
keep every worker busy to the end (5 tasks of 64 MB on 2 workers left one idle a fifth of the step)."""
TASKS_PER_WORKER = 8
"""A split aims at this many read tasks per worker, so that the last ones are short."""


@dataclass(frozen=True)
class ReadPlan:
    """How a job reads its inputs (``plan_read``): what clients take instead of re-deriving sizes."""

    estimated_bytes: int
    """In-memory bytes read (Parquet footers, else file sizes × the format's factor: ``zephyr.io.sources``)."""
    approx_shard_bytes: int | None
    """The read split the engine chose; None: the sources' own shards. ``tasks``: the first stage's shards."""
    tasks: int
    small: bool
    """The job runs in the driver's process (``runs_in_process``)."""


def plan_read(inputs: str | Sequence[str], options: ExecutionOptions, *, split: bool = False) -> ReadPlan:
    """The one read-planning rule for the input paths ``inputs`` (listed and sized here). With ``split``, fewer
    shards than
    ``TASKS_PER_WORKER`` per worker are split into runs of row groups (Parquet) or byte ranges (plain JSONL)
    of ``max(TASK_MIN_BYTES, estimated / (TASKS_PER_WORKER × workers))``, or of ``SPLIT_MIN_BYTES`` for an
    input under twice that; in-process (one task at a time) nothing is split. Outputs never depend on it."""
    from zephyr.io.paths import input_files

    files, fmt = input_files(inputs)
    source = ReadFiles(tuple(files), fmt)
    shards, stats = list_source_files(source)
    size = size_of_files(source, shards, stats)
    estimated = read_bytes(Segment(source=source), lambda _: size)
    approx = None
    workers = options.num_workers
    if split and options.executor != "inprocess" and len(shards) < TASKS_PER_WORKER * workers:
        whole = estimated < 2 * SPLIT_MIN_BYTES
        approx = SPLIT_MIN_BYTES if whole else max(TASK_MIN_BYTES, estimated // (TASKS_PER_WORKER * workers))
        shards = list_shards(files, fmt, approx_shard_bytes=approx)
    one_task = approx is not None and len(shards) == 1
    return ReadPlan(
        estimated, approx, len(shards), runs_in_process(options, estimated, one_split_task=one_task)
    )
