"""The map side of a shuffle: buffer a task's rows, spill sorted runs when the byte budget fills.

Memory: the buffer holds at most ``Budget.shuffle_buffer_bytes`` (zephyr/budget.py) of Arrow data (``Table.nbytes``); a spill
needs about twice that again (the sorted copy plus Parquet encoding), so a task stays near the budget
whatever its input size. ``combine`` (map-side partial aggregation or first-occurrence dedup) runs on the
buffer before it is partitioned, which shrinks what a group-by count or a dedup ships by orders of magnitude.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Literal

import fsspec
import numpy as np
import polars as pl
import pyarrow as pa
from zephyr.shuffle.partition import (
    KEY_HASH,
    PARTITION,
    hash_partitions,
    key_hash,
    numpy_to_arrow,
    range_partitions,
)
from zephyr.shuffle.runs import RunWriter, row_group_bytes_for

from zephyr.budget import Budget

__all__ = ["ShuffleSpec", "ShuffleWriter"]

log = logging.getLogger(__name__)
COMBINE_MIN_REDUCTION = 0.5
"""A combine that keeps more than this share of its input rows is not worth its grouping."""


@dataclass(frozen=True)
class ShuffleSpec:
    """How map tasks partition and order their output. Plain data (plus a picklable combiner)."""

    kind: Literal["hash", "range", "round_robin"]
    num_partitions: int
    keys: tuple[str, ...] = ()
    """Hash keys, or the range-sort columns (the first one decides the partition)."""
    descending: tuple[bool, ...] = ()
    """Range sort only: one flag per key."""
    sort_by: tuple[tuple[str, bool], ...] = ()
    """Hash only: extra (column, descending) ordering of rows inside a key (group_by's ``sort_by``)."""
    boundaries: pa.Array | None = None
    """Range only: ``num_partitions - 1`` split points on ``keys[0]``."""
    combine: Callable[[pa.Table], pa.Table] | None = field(default=None, compare=False)
    """Applied to each buffer before partitioning: must be safe to apply again to its own output."""

    @property
    def sort_columns(self) -> list[tuple[str, bool]]:
        """The (column, descending) order of rows inside one run (and so inside each partition of it)."""
        if self.kind == "hash":
            keys = [(k, False) for k in self.keys] if self.sort_by else []
            return [(KEY_HASH, False), *keys, *self.sort_by]
        if self.kind == "range":
            return list(zip(self.keys, self.descending))
        return []


def sort_table(table: pa.Table, columns: Sequence[tuple[str, bool]]) -> pa.Table:
    """Stable sort with nulls last (polars, multi-threaded)."""
    if not columns or table.num_rows <= 1:
        return table
    frame = pl.from_arrow(table, rechunk=False)
    frame = frame.sort(
        [c for c, _ in columns],
        descending=[d for _, d in columns],
        nulls_last=True,
        maintain_order=True,
    )
    return frame.to_arrow()


class ShuffleWriter:
    """Accepts a map task's output tables and leaves sorted, indexed runs in ``directory``."""

    def __init__(
        self,
        spec: ShuffleSpec,
        fs: fsspec.AbstractFileSystem,
        directory: str,
        *,
        budget_bytes: int,
        task_index: int,
    ):
        self.spec = spec
        self.fs = fs
        self.directory = directory
        self.buffer_limit = Budget(budget_bytes).shuffle_buffer_bytes
        self.row_group_bytes = row_group_bytes_for(budget_bytes)
        self.task_index = task_index
        self._buffer: list[pa.Table] = []
        self._buffered_bytes = 0
        self._rows_seen = 0
        self._combine_useless = False
        self.runs: list[str] = []
        self.checksums: dict[str, dict] = {}
        """Checksum records of every run file written (data and index; ``zephyr.io.checksum``)."""
        self.rows_written = 0
        self.bytes_written = 0
        fs.makedirs(directory, exist_ok=True)

    def write(self, table: pa.Table) -> None:
        if table.num_rows == 0:
            return
        self._buffer.append(table)
        self._buffered_bytes += table.nbytes
        if self._buffered_bytes >= self.buffer_limit:
            self._spill()

    def close(self) -> list[str]:
        """Spill what is left; returns the data paths of the runs, in order."""
        if self._buffer:
            self._spill()
        return self.runs

    def _spill(self) -> None:
        table = pa.concat_tables(self._buffer, promote_options="permissive")
        self._buffer.clear()
        self._buffered_bytes = 0
        table = self._combine(table)
        spec = self.spec
        if spec.kind == "hash" and KEY_HASH not in table.column_names:
            table = table.append_column(
                KEY_HASH, numpy_to_arrow(key_hash(table, spec.keys).astype(np.uint64, copy=False))
            )
        elif spec.kind == "round_robin":
            start = self._rows_seen + self.task_index
            self._rows_seen += table.num_rows
            ids = (np.arange(start, start + table.num_rows) % spec.num_partitions).astype(np.int64)
            table = table.append_column(PARTITION, numpy_to_arrow(ids))
        # Partition ids are monotonic in the sort key (hash, or range key), so one sort orders both.
        table = sort_table(table, spec.sort_columns or [(PARTITION, False)])
        if spec.kind == "hash":
            partitions = hash_partitions(
                table.column(KEY_HASH).combine_chunks().to_numpy(), spec.num_partitions
            )
        elif spec.kind == "range":
            partitions = range_partitions(
                table, spec.keys[0], spec.boundaries, spec.num_partitions, descending=spec.descending[0]
            )
        else:
            partitions = table.column(PARTITION).combine_chunks().to_numpy()
            table = table.drop_columns([PARTITION])
        prefix = f"{self.directory}/run-{len(self.runs):05d}"
        run = RunWriter(self.fs, prefix, spec.num_partitions, self.row_group_bytes)
        rows, nbytes = run.write(table, partitions)
        self.checksums.update(run.checksums)
        self.runs.append(prefix + ".data")
        self.rows_written += rows
        self.bytes_written += nbytes
        log.debug("spilled run %s: %d rows, %d bytes", prefix, rows, nbytes)

    def _combine(self, table: pa.Table) -> pa.Table:
        """Map-side combine, switched off for the rest of the task when it stops paying (mostly-unique keys:
        then each row is only reshaped into the combiner's output layout, which costs no grouping)."""
        combine = self.spec.combine
        if combine is None:
            return table
        if self._combine_useless:
            return combine.project(table) if hasattr(combine, "project") else combine(table)
        combined = combine(table)
        if combined.num_rows > COMBINE_MIN_REDUCTION * table.num_rows:
            self._combine_useless = True
            log.debug(
                "combine kept %d of %d rows: off for the rest of this task", combined.num_rows, table.num_rows
            )
        return combined
