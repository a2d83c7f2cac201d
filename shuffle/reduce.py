"""The reduce side: one partition's run parts as sources within the byte budget, their k-way merge, the
reducers, and the group-by aggregations.

**Reading a partition** (``partition_sources``). First every run's index block for the partition is read (one
small read each, ``shuffle.runs``). Its byte counts tell how big the partition is before any payload is
touched; the blobs are then read a chunk of consecutive blobs at a time (``runs.part_sources``: about one
request per run):

* small enough (``Budget.in_memory_reduce_bytes``, assuming ``EXPANSION``× decompression; zephyr/budget.py):
  all parts are read, concatenated in run order and stably sorted once — one source; the fastest path;
* otherwise parts are merged as streams, at most ``fan_in`` at a time (one row group per open part stays in
  memory); with more parts than that, groups are merged first into intermediate sorted Parquet files in a
  scratch directory (external merge), and those files are merged in turn.

Both paths yield the same rows in the same order (stable sort by the merge key, ties in run order), so the
output bytes do not depend on which one ran.

**The merge** (``merge_sorted``): external k-way merge of sorted runs, vectorized a batch at a time.

Each source yields tables sorted by the same key. The merge keeps one *head* table per source. Each round:
the *cutoff* is the smallest last-key among the heads of sources that still have data to read; every row
strictly below the cutoff, in every head, is final — no unread row can sort before it. Those rows are cut
off (a prefix of each head, found by binary search), concatenated in source order and stably sorted, then
emitted. The source(s) whose last key *is* the cutoff read their next table, so every round makes progress.

Two properties follow. Emitted batches are globally ordered, and all rows with equal keys come out in one
batch (rows equal to the cutoff are held back until every source has moved past it) — a reducer can group
or deduplicate a batch on its own. Ties keep source order, then row order, so the output is deterministic.

Memory is one row group per source plus one batch; ``partition_sources`` bounds the fan-in by merging groups
of sources into intermediate runs first (external merge), so a reducer never holds more than ``fan_in`` heads.

**Reducers** receive their partition's sources (one iterator of tables per run part, in (map task, run)
order) and yield output tables. Group-wise reducers merge on the key hash only, so all rows of one key arrive
in one merged batch, then work on that batch with polars.

**Aggregations** run in two phases: partial on the map side, final on the reduce side.
``count``, ``sum``, ``min``, ``max``, ``mean``, ``first`` and ``last`` decompose: each map-side buffer is
reduced to one partial row per key (``PartialAggregate``), and the reducer combines partials. ``n_unique``
and ``list`` do not, so a plan using them ships raw rows. ``first``/``last`` follow input order: runs are
merged in (task, run) order and grouping keeps order. ``count`` with no column counts rows; with a column it
counts non-null values (SQL ``COUNT(col)``); ``sum``/``mean`` of a group with no non-null value is null (SQL).

>>> import pyarrow as pa
>>> t = pa.table({"k": ["a", "b", "a"], "x": [1, 2, 3]})
>>> aggregate(t, ["k"], [Agg("n", None, "count"), Agg("s", "x", "sum")]).to_pylist()
[{'k': 'a', 'n': 2, 's': 4}, {'k': 'b', 'n': 1, 's': 2}]
"""

from __future__ import annotations

import logging
import tempfile
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from itertools import chain, count, pairwise
from typing import Any, Literal

import fsspec
import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
from zephyr.shuffle.runs import Run, group_rows, part_sources, read_index_block
from zephyr.shuffle.writer import KEY_HASH, sort_frame, sort_table

from zephyr.budget import EXPANSION, Budget
from zephyr.errors import ConfigError, SchemaError, ZephyrError

log = logging.getLogger(__name__)
_BY_HASH = [(KEY_HASH, False)]


@contextmanager
def partition_sources(
    runs: Sequence[Run], partition: int, merge_columns: Sequence[tuple[str, bool]] | None, budget_bytes: int
) -> Iterator[list[Iterator[pa.Table]]]:
    """Sources for one partition of ``runs`` (see the module docstring), for the ``with`` block: the
    intermediate files of an external merge lie in a local scratch directory until it ends."""
    budget = Budget(budget_bytes)
    chunk = budget.spill_row_group_bytes
    sources, stored = [], 0
    for run in runs:  # one index read each, then the partition's blobs
        fs, path = fsspec.core.url_to_fs(run.path)
        parts = read_index_block(fs, Run(path, run.slots), partition)
        stored += sum(p.length for p in parts)
        sources += part_sources(fs, parts, chunk)
    if sources and merge_columns is not None and stored * EXPANSION <= budget.in_memory_reduce_bytes:
        whole = pa.concat_tables([t for source in sources for t in source], promote_options="permissive")
        sources = [iter([sort_table(whole, merge_columns)])]
    fan_in = budget.merge_fan_in  # parts that stream at once: a row group each
    if merge_columns is None or len(sources) <= fan_in:  # no order needed, or few enough to merge at once
        yield sources
        return
    with tempfile.TemporaryDirectory(prefix="zephyr-merge-", ignore_cleanup_errors=True) as scratch:
        for level in count():
            if len(sources) <= fan_in:
                yield sources
                return
            groups = [sources[i : i + fan_in] for i in range(0, len(sources), fan_in)]
            log.info("partition %d: %d sources merged %d at a time", partition, len(sources), fan_in)
            sources = [
                _spill(merge_sorted(group, merge_columns), f"{scratch}/l{level}-{i:05d}.parquet", chunk)
                for i, group in enumerate(groups)
            ]


def _spill(tables: Iterator[pa.Table], path: str, row_group_bytes: int) -> Iterator[pa.Table]:
    """Write ``tables`` (one merge's output) to the Parquet file ``path``; its rows again, a row group at a time."""
    writer = None
    for table in tables:
        if writer is None:
            writer = pq.ParquetWriter(path, table.schema, compression="lz4", use_dictionary=False)
        table = table.cast(writer.schema) if table.schema != writer.schema else table
        writer.write_table(table, row_group_size=group_rows(table, row_group_bytes))
    if writer is None:
        return iter(())
    writer.close()
    reader = pq.ParquetFile(path)
    return (reader.read_row_group(group) for group in range(reader.num_row_groups))


# -- the merge ----------------------------------------------------------------------------------------------
SortColumns = Sequence[tuple[str, bool]]


class _Head:
    """The unread part of one source, and ``keys``: its merge key, as ``key_of`` makes it of the table."""

    def __init__(self, source: Iterator[pa.Table], key_of: Callable[[pa.Table], Any]):
        self.source, self.key_of = source, key_of
        self.table: pa.Table | None = None
        self.keys: Any = None
        self.exhausted = False
        self.extend()

    def extend(self) -> None:
        """Append the source's next non-empty table, or mark the source exhausted."""
        for table in self.source:
            if table.num_rows:
                if self.table is not None:
                    table = pa.concat_tables([self.table, table], promote_options="permissive")
                self.table, self.keys = table, self.key_of(table)
                return
        self.exhausted = True

    def take_front(self, n: int) -> pa.Table:
        front = self.table.slice(0, n)
        self.table, self.keys = self.table.slice(n), self.keys[n:]
        return front

    @property
    def rows(self) -> int:
        return 0 if self.table is None else self.table.num_rows


def _count_before(keys: pl.DataFrame, cutoff: pl.DataFrame, columns: SortColumns) -> int:
    """Rows of the sorted ``keys`` that sort strictly before the one-row ``cutoff`` (nulls last)."""
    if len(columns) == 1:
        name, descending = columns[0]
        series = keys.get_column(name)
        value = cutoff.get_column(name)[0]
        non_null = len(series) - series.null_count()
        if value is None:
            return non_null
        return int(series.slice(0, non_null).search_sorted(value, side="left", descending=descending))
    before = pl.lit(False)
    equal_so_far = pl.lit(True)
    for name, descending in columns:
        value = cutoff.get_column(name)[0]
        column = pl.col(name)
        if value is None:
            less, equal = column.is_not_null(), column.is_null()
        else:
            less = (column > value) if descending else (column < value)
            less = less.fill_null(False)
            equal = (column == value).fill_null(False)
        before = before | (equal_so_far & less)
        equal_so_far = equal_so_far & equal
    return int(keys.select(before.sum()).item())


def merge_sorted(sources: Sequence[Iterator[pa.Table]], columns: SortColumns) -> Iterator[pa.Table]:
    """Merge sources sorted by ``columns`` into globally sorted batches (see the module docstring).

    A hash shuffle's key (``KEY_HASH`` ascending, ``uint64``) is merged on numpy arrays, with binary searches and
    no conversions; any other key on polars frames of the key columns."""
    columns = list(columns)
    hashed = columns == _BY_HASH

    def key_of(table: pa.Table) -> Any:
        if hashed:
            return table.column(KEY_HASH).combine_chunks().to_numpy(zero_copy_only=False)
        return pl.from_arrow(table.select([c for c, _ in columns]), rechunk=False)

    heads = [_Head(iter(source), key_of) for source in sources]
    while True:
        live = [h for h in heads if h.rows]
        if not live:
            return
        frontier = [h for h in live if not h.exhausted]
        if not frontier:  # nothing left to read: the rest is final
            yield sort_table(pa.concat_tables([h.table for h in live], promote_options="permissive"), columns)
            return
        if hashed:
            cutoff = min(h.keys[-1] for h in frontier)
            at_cutoff = {id(h) for h in frontier if h.keys[-1] == cutoff}
            counts = [int(np.searchsorted(h.keys, cutoff, side="left")) for h in live]
        else:
            lasts = [h.keys.slice(h.rows - 1, 1) for h in frontier]
            cutoff = sort_frame(pl.concat(lasts), columns)[:1]
            # ``equals``, not ``==`` on the rows' tuples: NaN equals NaN and null equals null here, as the sort
            # orders them (with ``==`` a source whose last key was NaN never read on and the merge looped).
            at_cutoff = {id(h) for h, last in zip(frontier, lasts) if last.equals(cutoff)}
            counts = [_count_before(h.keys, cutoff, columns) for h in live]
        pieces = [head.take_front(n) for head, n in zip(live, counts) if n]
        if len(pieces) == 1:  # one source's prefix: already in order
            yield pieces[0]
        elif pieces:
            yield sort_table(pa.concat_tables(pieces, promote_options="permissive"), columns)
        # Sources at the cutoff (and sources emptied by this round) read on.
        for head in heads:
            if not head.exhausted and (id(head) in at_cutoff or head.rows == 0):
                head.extend()


# -- reducers ----------------------------------------------------------------------------------------------
Sources = Sequence[Iterator[pa.Table]]
JoinHow = Literal["inner", "left", "right", "outer"]


def _drop_hash(table: pa.Table) -> pa.Table:
    return table.drop_columns([KEY_HASH]) if KEY_HASH in table.column_names else table


@dataclass(frozen=True)
class GroupAggregateReducer:
    keys: tuple[str, ...]
    aggs: tuple[Agg, ...]
    partial: bool
    """True when map tasks already combined rows into partials (``PartialAggregate``)."""
    merge_columns = _BY_HASH

    def reduce(self, sources: Sources) -> Iterator[pa.Table]:
        for batch in merge_sorted(sources, _BY_HASH):
            if self.partial:  # combine the partial rows (``PartialAggregate``) into final values, per key
                yield _group(batch, self.keys, [_final(a) for a in self.aggs], keep_hash=False)
            else:
                yield _drop_hash(aggregate(_drop_hash(batch), self.keys, self.aggs))


@dataclass(frozen=True)
class GroupApplyReducer:
    """Calls ``fn`` once per group with the group's rows (a ``pa.Table``) in ``sort_by`` order."""

    keys: tuple[str, ...]
    sort_by: tuple[tuple[str, bool], ...]
    fn: Callable[[pa.Table], Any]
    merge_columns = _BY_HASH

    def reduce(self, sources: Sources) -> Iterator[pa.Table]:
        order = [(KEY_HASH, False), *[(k, False) for k in self.keys], *self.sort_by]
        for batch in merge_sorted(sources, _BY_HASH):
            batch = sort_table(batch, order)
            keys = pl.from_arrow(batch.select(list(self.keys)), rechunk=False)
            changed = keys.select(pl.any_horizontal(pl.all().ne_missing(pl.all().shift(1)))).to_series()
            # a group starts at the first row and wherever a key changes
            starts = np.flatnonzero(np.r_[True, changed.to_numpy()[1:]]).tolist()
            rows = _drop_hash(batch)
            tables = [_as_table(self.fn(rows.slice(a, b - a))) for a, b in pairwise([*starts, len(keys)])]
            outputs = [table for table in tables if table is not None and table.num_rows]
            if outputs:
                yield pa.concat_tables(outputs, promote_options="permissive")


def _as_table(result: Any) -> pa.Table | None:
    if result is None or isinstance(result, pa.Table):
        return result
    if isinstance(result, pa.RecordBatch):
        return pa.Table.from_batches([result])
    if isinstance(result, dict):
        result = [result]
    if isinstance(result, list):
        return pa.Table.from_pylist(result) if result else None
    raise ZephyrError(
        f"group reduce function returned {type(result).__name__}; return a pyarrow Table, a dict, "
        "a list of dicts or None"
    )


@dataclass(frozen=True)
class DeduplicateReducer:
    """Keeps the first row of each key in input order."""

    keys: tuple[str, ...]
    merge_columns = _BY_HASH

    def reduce(self, sources: Sources) -> Iterator[pa.Table]:
        first = FirstOccurrence(self.keys)
        for batch in merge_sorted(sources, _BY_HASH):
            yield _drop_hash(first(batch))


@dataclass(frozen=True)
class FirstOccurrence:
    """Map-side combiner for ``deduplicate``: keep the first row of each key within a buffer."""

    keys: tuple[str, ...]

    def __call__(self, table: pa.Table) -> pa.Table:
        frame = pl.from_arrow(table, rechunk=False)
        return frame.unique(subset=list(self.keys), keep="first", maintain_order=True).to_arrow()


@dataclass(frozen=True)
class SortReducer:
    merge_columns: tuple[tuple[str, bool], ...]

    def reduce(self, sources: Sources) -> Iterator[pa.Table]:
        yield from merge_sorted(sources, self.merge_columns)


@dataclass(frozen=True)
class ConcatReducer:
    """Sources one after another (round-robin reshard; order = source order); no ``merge_columns``: no merge."""

    def reduce(self, sources: Sources) -> Iterator[pa.Table]:
        for table in chain.from_iterable(sources):
            yield _drop_hash(table)


_LEFT_ROW = "__zephyr_left_row"
_RIGHT_ROW = "__zephyr_right_row"
_CONSTANT_KEY = "__zephyr_constant_key"
_JOIN_SLICE_BYTES = 16 << 20
"""Output bytes per slice of an inner/left join (at one match per left row): bounds what a one-to-many join
holds in memory, and the batches the next op sees."""


def _slice_rows(left: pl.DataFrame, right: pl.DataFrame) -> int:
    """Left rows per slice: ``_JOIN_SLICE_BYTES`` over the bytes of one left row plus one right row."""
    per_row = left.estimated_size() / max(1, left.height) + right.estimated_size() / max(1, right.height)
    return max(256, int(_JOIN_SLICE_BYTES / max(1.0, per_row)))


@dataclass(frozen=True)
class JoinReducer:
    """Hash join of one partition of each side, in memory (partitions are sized from the byte budget).

    Output order is deterministic: by left input order, then right input order; rows with no left match
    (right/outer joins) come last in right input order. Null keys never match (SQL semantics).
    """

    left_on: tuple[str, ...]
    right_on: tuple[str, ...]
    how: JoinHow
    suffix: str = "_right"

    def join(
        self,
        left_sources: Sources,
        right_sources: Sources,
        schemas: Sequence[pa.Schema | None] = (None, None),
    ) -> Iterator[pa.Table]:
        """``schemas`` (each side's, when known) type an empty side so outer joins keep all columns."""
        left = _load(left_sources, _LEFT_ROW, schemas[0])
        right = _load(right_sources, _RIGHT_ROW, schemas[1])
        # A side without rows: nothing to output when the join keeps only its matches (or both are empty).
        needs_left, needs_right = self.how in ("inner", "left"), self.how in ("inner", "right")
        if (left is None and (needs_left or right is None)) or (right is None and needs_right):
            return
        # An empty side without a known schema: the other side's key columns under its names, no rows.
        pairs = list(zip(self.left_on, self.right_on))
        if left is None:
            left = right.select(pl.col(r).alias(k) for k, r in pairs).clear().with_row_index(_LEFT_ROW)
        if right is None:
            right = left.select(pl.col(k).alias(r) for k, r in pairs).clear().with_row_index(_RIGHT_ROW)
        for side, frame, names in (("left", left, self.left_on), ("right", right, self.right_on)):
            for name in (n for n in names if n not in frame.columns):
                raise SchemaError(f"join key {name!r} not in the {side} dataset; columns: {frame.columns}")
        left, right = _align_key_types(left, right, self.left_on, self.right_on)
        left_on, right_on = list(self.left_on), list(self.right_on)
        if len(left_on) == 1 and left.schema[left_on[0]].is_float():
            # polars 2.1 joins one key that both sides flag sorted (a one-row partition always is) by merging,
            # and that merge never matches NaN with NaN; its multi-key join does, as duckdb does. A constant
            # second key takes that path and changes no match.
            left = left.with_columns(pl.lit(0, pl.UInt8).alias(_CONSTANT_KEY))
            right = right.with_columns(pl.lit(0, pl.UInt8).alias(_CONSTANT_KEY))
            left_on, right_on = [*left_on, _CONSTANT_KEY], [*right_on, _CONSTANT_KEY]
        how = {"inner": "inner", "left": "left", "right": "right", "outer": "full"}[self.how]
        # Inner and left joins go slice by slice of the left side: a one-to-many join (every pair of a
        # candidate list joined with its text) would otherwise hold the partition's whole output at once.
        # Slices are in left order, so the concatenation is the same rows in the same order.
        step = _slice_rows(left, right) if how in ("inner", "left") else max(1, left.height)
        for start in range(0, max(1, left.height), step):
            joined = left.slice(start, step).join(
                right,
                left_on=left_on,
                right_on=right_on,
                how=how,
                suffix=self.suffix,
                coalesce=True,
                nulls_equal=False,
            )
            joined = joined.sort([_LEFT_ROW, _RIGHT_ROW], nulls_last=True, maintain_order=True)
            yield joined.drop([_LEFT_ROW, _RIGHT_ROW, _CONSTANT_KEY], strict=False).to_arrow()


def _load(sources: Sources, row_column: str, schema: pa.Schema | None) -> pl.DataFrame | None:
    tables = [_drop_hash(t) for t in chain.from_iterable(sources) if t.num_rows]
    if not tables and schema is None:
        return None
    table = pa.concat_tables(tables or [_drop_hash(schema.empty_table())], promote_options="permissive")
    return pl.from_arrow(table).with_row_index(row_column)


def _align_key_types(
    left: pl.DataFrame, right: pl.DataFrame, left_on: Sequence[str], right_on: Sequence[str]
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Cast key pairs to a common type (int32 vs int64, string vs large string) so they can match."""
    for lk, rk in zip(left_on, right_on):
        lt, rt = left.schema[lk], right.schema[rk]
        if lt == rt:
            continue
        if lt.is_numeric() and rt.is_numeric():
            target = pl.Float64 if (lt.is_float() or rt.is_float()) else pl.Int64
        elif lt == pl.Null:
            target = rt
        elif rt == pl.Null:
            target = lt
        else:
            raise SchemaError(f"join keys {lk!r} ({lt}) and {rk!r} ({rt}) have incompatible types")
        left = left.with_columns(pl.col(lk).cast(target))
        right = right.with_columns(pl.col(rk).cast(target))
    return left, right


# -- aggregations -------------------------------------------------------------------------------------------
_DECOMPOSABLE = ("count", "sum", "min", "max", "mean", "first", "last")
AGGREGATIONS = (*_DECOMPOSABLE, "n_unique", "list")  # polars' own names (``pl.Expr.<how>``), but ``list``
_SMALL = (pl.Int8, pl.Int16, pl.UInt8, pl.UInt16, pl.Boolean)


@dataclass(frozen=True)
class Agg:
    """``output = how(column)``; ``column=None`` is only valid for ``count`` (rows per group)."""

    output: str
    column: str | None
    how: str

    def __post_init__(self) -> None:
        if self.how not in AGGREGATIONS:
            raise ConfigError(
                f"unknown aggregation {self.how!r} for {self.output!r}; use one of {AGGREGATIONS}"
            )
        if self.column is None and self.how != "count":
            raise ConfigError(f"aggregation {self.how!r} for {self.output!r} needs a column")


def is_decomposable(aggs: Sequence[Agg]) -> bool:
    return all(a.how in _DECOMPOSABLE for a in aggs)


def _one_shot(agg: Agg) -> pl.Expr:
    """``agg`` over one group: polars' aggregation of that name, with SQL's nulls and ``Int64`` counts."""
    if agg.column is None:
        return pl.len().cast(pl.Int64).alias(agg.output)
    column = pl.col(agg.column)
    if agg.how == "list":
        expr = column
    elif agg.how == "sum":  # an all-null group sums to null, not 0 (SQL)
        expr = pl.when(column.count() > 0).then(column.sum())
    else:
        expr = getattr(column, agg.how)()
    return (expr.cast(pl.Int64) if agg.how in ("count", "n_unique") else expr).alias(agg.output)


def _partials(aggs: Sequence[Agg]) -> list[Agg]:
    """The partial columns of decomposable ``aggs``: a ``sum`` or ``mean`` carries its sum and its non-null
    count, so the final value of an all-null group stays null (SQL) and a mean weighs every partial right."""
    out = []
    for agg in aggs:
        if agg.how in ("mean", "sum"):
            out += [
                Agg(f"__sum_{agg.output}", agg.column, "sum"),
                Agg(f"__cnt_{agg.output}", agg.column, "count"),
            ]
        else:
            out.append(agg)
    return out


def _row_partial(agg: Agg, schema: pl.Schema) -> pl.Expr:
    """``_one_shot`` of a partial ``agg`` over a group of one row, without grouping: same columns, same dtypes."""
    if agg.how == "count":
        value = pl.lit(1) if agg.column is None else pl.col(agg.column).is_not_null()
        return value.cast(pl.Int64).alias(agg.output)
    small = agg.how == "sum" and schema[agg.column] in _SMALL  # polars sums small integers as Int64
    return (pl.col(agg.column).cast(pl.Int64) if small else pl.col(agg.column)).alias(agg.output)


def _final(agg: Agg) -> pl.Expr:
    """A decomposable ``agg``'s value from its partial columns (``_partials``), over one key's partial rows."""
    if agg.how in ("mean", "sum"):
        total = pl.col(f"__sum_{agg.output}").sum()
        count = pl.col(f"__cnt_{agg.output}").sum()
        return pl.when(count > 0).then(total / count if agg.how == "mean" else total).alias(agg.output)
    out = pl.col(agg.output)
    return (out.sum().cast(pl.Int64) if agg.how == "count" else getattr(out, agg.how)()).alias(agg.output)


def _group(table: pa.Table, keys: Sequence[str], exprs: list[pl.Expr], *, keep_hash: bool) -> pa.Table:
    frame = pl.from_arrow(table, rechunk=False)
    missing = [c for c in keys if c not in frame.columns]
    if missing:
        raise SchemaError(f"group_by key(s) {missing} not found; available columns: {frame.columns}")
    group_keys = [*keys, KEY_HASH] if keep_hash and KEY_HASH in frame.columns else list(keys)
    try:
        result = frame.group_by(group_keys, maintain_order=True).agg(exprs)
    except pl.exceptions.ColumnNotFoundError as exc:
        raise SchemaError(f"aggregation column not found: {exc}; available columns: {frame.columns}") from exc
    return result.to_arrow()


def aggregate(table: pa.Table, keys: Sequence[str], aggs: Sequence[Agg]) -> pa.Table:
    """Aggregate a whole table in one pass (groups in first-appearance order)."""
    return _group(table, keys, [_one_shot(a) for a in aggs], keep_hash=False)


@dataclass(frozen=True)
class PartialAggregate:
    """Map-side combiner: one partial row per key (and key hash) per spilled buffer."""

    keys: tuple[str, ...]
    aggs: tuple[Agg, ...]

    def __call__(self, table: pa.Table) -> pa.Table:
        return _group(table, self.keys, [_one_shot(a) for a in _partials(self.aggs)], keep_hash=True)

    def project(self, table: pa.Table) -> pa.Table:
        """Each row as its own partial (used when grouping a buffer would not shrink it)."""
        frame = pl.from_arrow(table, rechunk=False)
        keys = [*self.keys, KEY_HASH] if KEY_HASH in frame.columns else list(self.keys)
        exprs = [_row_partial(a, frame.schema) for a in _partials(self.aggs)]
        return frame.select([pl.col(k) for k in keys] + exprs).to_arrow()
