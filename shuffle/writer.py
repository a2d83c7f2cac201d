"""The map side of a shuffle: assign each row its partition, buffer a task's rows, spill sorted runs when
the byte budget fills.

Memory: the buffer holds at most ``Budget.shuffle_buffer_bytes`` (zephyr/budget.py) of Arrow data (``Table.nbytes``); a spill
needs about twice that again (the sorted copy plus Parquet encoding), so a task stays near the budget
whatever its input size. ``combine`` (map-side partial aggregation or first-occurrence dedup) runs on the
buffer before it is partitioned, which shrinks what a group-by count or a dedup ships by orders of magnitude.

**Partitions**: a row hash for hash partitioning, range boundaries for sorting. Hash partitioning uses one 64-bit hash per row of the key columns (``KEY_HASH``). The same column is the sort
key of every spilled run of a hash shuffle, so reducers merge runs on a single ``uint64`` and group equal keys
(which share a hash) into the same emitted batch; the real key columns decide the groups inside that batch.
Key columns are cast to canonical types first (integers to Int64 — UInt64 by bit pattern — strings to String), so an ``int32``
key on one side of a join hashes like an ``int64`` key on the other. Hashes come from polars ``hash_rows``
with fixed seeds: stable between runs and processes of one polars version (keep versions equal on a cluster).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from itertools import chain
from typing import Literal

import fsspec
import numpy as np
import polars as pl
import pyarrow as pa
from zephyr.shuffle.runs import Written, write_run

from zephyr.budget import Budget
from zephyr.errors import SchemaError

log = logging.getLogger(__name__)

KEY_HASH = "__zephyr_key_hash"
PARTITION = "__zephyr_partition"
_SEEDS = dict(seed=0x5EED)


def _key_hash(table: pa.Table, keys: Sequence[str]) -> np.ndarray:
    """One ``uint64`` per row of ``table``'s key columns, cast first so equal values hash equally whatever
    integer/string width each side used."""
    missing = [k for k in keys if k not in table.column_names]
    if missing:
        raise SchemaError(f"key column(s) {missing} not found; available columns: {table.column_names}")
    frame = pl.from_arrow(table.select(list(keys)), rechunk=False)
    canonical = frame.select(_canonical(pl.col(name), frame.schema[name]) for name in keys)
    return canonical.hash_rows(**_SEEDS).to_numpy()


def _canonical(column: pl.Expr, dtype: pl.DataType) -> pl.Expr:
    """``column`` as the type its key hashes as: integers as Int64 (UInt64 by bit pattern: values above 2**63,
    hashes, must not overflow), categoricals as String, floats as Float64."""
    if dtype == pl.UInt64:
        return column.reinterpret(signed=True)
    if dtype.is_integer() or dtype.is_float():
        return column.cast(pl.Int64 if dtype.is_integer() else pl.Float64)
    return column.cast(pl.String) if dtype in (pl.Categorical, pl.Enum) else column


def numpy_to_arrow(values: np.ndarray) -> pa.Array:
    """A numeric numpy array as an Arrow array, zero-copy. ``pa.array(ndarray)`` would first probe for pandas
    (importing it, ~0.5 s per worker process, when it is installed)."""
    values = np.ascontiguousarray(values)
    return pa.Array.from_buffers(pa.from_numpy_dtype(values.dtype), len(values), [None, pa.py_buffer(values)])


def _hash_partitions(hashes: np.ndarray, num_partitions: int) -> np.ndarray:
    """Partition id per row: ``floor(hash * P / 2**64)``, computed as ``(hash >> 32) * P >> 32``.

    The id is monotonic in the hash, so a run sorted by hash alone is also sorted by partition: one
    single-column ``uint64`` sort orders a spill for both splitting and merging.
    """
    return (((hashes >> np.uint64(32)) * np.uint64(num_partitions)) >> np.uint64(32)).astype(np.int64)


def range_boundaries(sample: pa.Table, key: str, num_partitions: int, *, descending: bool) -> pa.Array:
    """``num_partitions - 1`` split points taken at even quantiles of a key sample (nulls excluded)."""
    values = pl.from_arrow(sample.select([key])).to_series().drop_nulls().sort(descending=descending)
    if num_partitions <= 1 or len(values) == 0:
        return pa.nulls(0, type=sample.schema.field(key).type)  # pa.array([]) would import pandas (~0.8 s)
    positions = (np.arange(1, num_partitions) * len(values)) // num_partitions
    return values.gather(positions).to_arrow()


def boundary_array(boundaries: Sequence[object]) -> pa.Array:
    """Caller-given split points (``Dataset.sort(boundaries=...)``) as an Arrow array: Python ints past
    ``int64`` (hash keys) make it ``uint64``; ``_range_partitions`` casts it to the key column's type."""
    values = list(boundaries)
    if not values:  # one partition
        return pa.nulls(0)
    if all(isinstance(v, int) and not isinstance(v, bool) for v in values):
        unsigned = any(v > np.iinfo(np.int64).max for v in values)
        return numpy_to_arrow(np.array(values, dtype=np.uint64 if unsigned else np.int64))
    return pa.array(values)


def _range_partitions(table: pa.Table, spec: ShuffleSpec) -> np.ndarray:
    """Partition id per row for a global sort on ``spec.keys[0]`` cut at ``spec.boundaries``: ascending ranges
    (descending ones for a descending sort), nulls in the last partition."""
    column = pl.from_arrow(table.select([spec.keys[0]])).to_series()
    num_partitions, boundaries = spec.num_partitions, spec.boundaries
    if num_partitions == 1 or len(boundaries) == 0:
        return np.zeros(len(column), dtype=np.int64)
    bounds = pl.Series(boundaries).cast(column.dtype)
    if spec.descending[0]:  # partition i holds keys in (b_i, b_{i-1}]: flip to the ascending problem
        ids = len(bounds) - bounds.reverse().search_sorted(column, side="left").to_numpy().astype(np.int64)
    else:
        ids = bounds.search_sorted(column, side="right").to_numpy().astype(np.int64)
    ids[column.is_null().to_numpy()] = num_partitions - 1
    return ids


# -- the writer ---------------------------------------------------------------------------------------------
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


def sort_frame(frame: pl.DataFrame, columns: Sequence[tuple[str, bool]]) -> pl.DataFrame:
    """Stable sort by (column, descending) pairs with nulls last (polars, multi-threaded): the one order of
    the shuffle, for runs, merges and their cutoffs alike."""
    names, descending = [c for c, _ in columns], [d for _, d in columns]
    return frame.sort(names, descending=descending, nulls_last=True, maintain_order=True)


def sort_table(table: pa.Table, columns: Sequence[tuple[str, bool]]) -> pa.Table:
    """``sort_frame`` of a table (one of a row or none, or no columns to sort by: as it is)."""
    if not columns or table.num_rows <= 1:
        return table
    return sort_frame(pl.from_arrow(table, rechunk=False), columns).to_arrow()


def write_runs(
    tables: Iterable[pa.Table],
    spec: ShuffleSpec,
    fs: fsspec.AbstractFileSystem,
    directory: str,
    *,
    budget_bytes: int,
    task_index: int,
) -> tuple[list[Written], int, pa.Schema | None]:
    """A map task's output ``tables``, buffered up to ``Budget.shuffle_buffer_bytes`` and spilled a buffer at a
    time as sorted, indexed runs in ``directory`` (``_partition``, ``runs.write_run``): the runs as written, in order, the rows given
    and the schema of the last table given (an empty result still says what its columns are).

    The map-side ``combine`` is switched off for the rest of the task when it stops paying (it keeps more than
    ``COMBINE_MIN_REDUCTION`` of a buffer's rows: mostly-unique keys); then each row is only reshaped into the
    combiner's output layout (its ``project``), which costs no grouping."""
    budget = Budget(budget_bytes)
    fs.makedirs(directory, exist_ok=True)
    written: list[Written] = []
    buffer, buffered, rows, schema, combine = [], 0, 0, None, spec.combine
    for table in chain(tables, [None]):  # None: the end, spill what is left
        if table is not None:
            rows, schema = rows + table.num_rows, table.schema
            if table.num_rows:
                buffer.append(table)
                buffered += table.nbytes
        if not buffer or (table is not None and buffered < budget.shuffle_buffer_bytes):
            continue
        table, buffer, buffered = pa.concat_tables(buffer, promote_options="permissive"), [], 0
        if combine is not None:
            rows_in, table = table.num_rows, combine(table)
            if combine is spec.combine and table.num_rows > COMBINE_MIN_REDUCTION * rows_in:
                combine = getattr(combine, "project", combine.__call__)
                log.debug("combine kept %d of %d rows: off for this task", table.num_rows, rows_in)
        table, partitions = _partition(table, spec, task_index + sum(w.rows for w in written))
        prefix = f"{directory}/run-{len(written):05d}"
        written.append(
            write_run(fs, prefix, table, partitions, spec.num_partitions, budget.spill_row_group_bytes)
        )
        log.debug("spilled run %s: %d rows, %d bytes", prefix, written[-1].rows, written[-1].bytes)
        del table, partitions  # the buffer goes before the next input table is made
    return written, rows, schema


def _partition(table: pa.Table, spec: ShuffleSpec, first_row: int) -> tuple[pa.Table, np.ndarray]:
    """One buffer sorted by (partition, sort key), and the partition of each of its rows; round-robin deals
    its rows from ``first_row`` (the task's index plus the rows it spilled before)."""
    if spec.kind == "hash" and KEY_HASH not in table.column_names:
        table = table.append_column(KEY_HASH, numpy_to_arrow(_key_hash(table, spec.keys)))
    elif spec.kind == "round_robin":
        ids = (np.arange(first_row, first_row + table.num_rows) % spec.num_partitions).astype(np.int64)
        table = table.append_column(PARTITION, numpy_to_arrow(ids))
    # Partition ids are monotonic in the sort key (hash, or range key), so one sort orders both.
    table = sort_table(table, spec.sort_columns or [(PARTITION, False)])
    if spec.kind == "hash":
        return table, _hash_partitions(
            table.column(KEY_HASH).combine_chunks().to_numpy(), spec.num_partitions
        )
    if spec.kind == "range":
        return table, _range_partitions(table, spec)
    return table.drop_columns([PARTITION]), table.column(PARTITION).combine_chunks().to_numpy()
