"""Reducers: what a reduce task does with the sorted runs of its partition, and the group-by aggregations.

Every reducer receives its partition's run parts as lazy sources (one iterator of tables per run part, in
(map task, run) order) and yields output tables. Group-wise reducers merge on the key hash only, so all rows
of one key arrive in one merged batch (see ``merge``), then work on that batch with polars.

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

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from itertools import chain
from typing import Any, Literal

import numpy as np
import polars as pl
import pyarrow as pa
from zephyr.shuffle.read import merge_sorted
from zephyr.shuffle.writer import KEY_HASH, sort_table

from zephyr.errors import ConfigError, SchemaError, ZephyrError

Sources = Sequence[Iterator[pa.Table]]
JoinHow = Literal["inner", "left", "right", "outer"]
_BY_HASH = [(KEY_HASH, False)]


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
            starts = np.flatnonzero(np.r_[True, changed.to_numpy()[1:]])  # the first row starts a group
            stops = np.append(starts[1:], len(keys))
            rows = _drop_hash(batch)
            tables = [
                _as_table(self.fn(rows.slice(a, b - a))) for a, b in zip(starts.tolist(), stops.tolist())
            ]
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
        left = left if left is not None else _empty_like(right, self.right_on, self.left_on, _LEFT_ROW)
        right = right if right is not None else _empty_like(left, self.left_on, self.right_on, _RIGHT_ROW)
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
    if not tables:
        if schema is None:
            return None
        return pl.from_arrow(_drop_hash(schema.empty_table())).with_row_index(row_column)
    frame = pl.from_arrow(pa.concat_tables(tables, promote_options="permissive"))
    return frame.with_row_index(row_column)


def _empty_like(
    other: pl.DataFrame, other_keys: Sequence[str], keys: Sequence[str], row_column: str
) -> pl.DataFrame:
    """An empty side with just its key columns (typed like the other side's) and a row index."""
    return pl.DataFrame(
        {k: pl.Series(k, [], dtype=other.schema[ok]) for k, ok in zip(keys, other_keys)}
    ).with_row_index(row_column)


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
AGGREGATIONS = ("count", "sum", "min", "max", "mean", "first", "last", "n_unique", "list")
_DECOMPOSABLE = {"count", "sum", "min", "max", "mean", "first", "last"}


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
    if agg.how == "count":
        expr = pl.len() if agg.column is None else pl.col(agg.column).count()
        return expr.cast(pl.Int64).alias(agg.output)
    column = pl.col(agg.column)
    expr = {
        "sum": pl.when(column.count() > 0).then(column.sum()),
        "min": column.min(),
        "max": column.max(),
        "mean": column.mean(),  # polars: null for an all-null group
        "first": column.first(),
        "last": column.last(),
        "n_unique": column.n_unique().cast(pl.Int64),
        "list": column,
    }[agg.how]
    return expr.alias(agg.output)


def _partial(agg: Agg) -> list[pl.Expr]:
    """Partial columns; sum and mean carry their non-null count so an all-null group stays null (SQL)."""
    if agg.how in ("mean", "sum"):
        column = pl.col(agg.column)
        return [
            column.sum().alias(f"__sum_{agg.output}"),
            column.count().cast(pl.Int64).alias(f"__cnt_{agg.output}"),
        ]
    return [_one_shot(agg)]


def _row_partial(agg: Agg, schema: pl.Schema) -> list[pl.Expr]:
    """``_partial`` of a group of one row, without grouping: same columns and dtypes."""
    if agg.how == "count":
        value = pl.lit(1, pl.Int64) if agg.column is None else pl.col(agg.column).is_not_null().cast(pl.Int64)
        return [value.alias(agg.output)]
    column = pl.col(agg.column)
    if agg.how in ("mean", "sum"):
        dtype = schema[agg.column]
        if dtype in (pl.Int8, pl.Int16, pl.UInt8, pl.UInt16, pl.Boolean):
            column = column.cast(pl.Int64)
        return [
            column.alias(f"__sum_{agg.output}"),
            column.is_not_null().cast(pl.Int64).alias(f"__cnt_{agg.output}"),
        ]
    return [column.alias(agg.output)]


def _final(agg: Agg) -> pl.Expr:
    out = pl.col(agg.output)
    if agg.how == "count":
        return out.sum().cast(pl.Int64).alias(agg.output)
    if agg.how in ("mean", "sum"):
        total = pl.col(f"__sum_{agg.output}").sum()
        count = pl.col(f"__cnt_{agg.output}").sum()
        value = total / count if agg.how == "mean" else total
        return pl.when(count > 0).then(value).alias(agg.output)
    return {"sum": out.sum(), "min": out.min(), "max": out.max(), "first": out.first(), "last": out.last()}[
        agg.how
    ].alias(agg.output)


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
        return _group(table, self.keys, [e for a in self.aggs for e in _partial(a)], keep_hash=True)

    def project(self, table: pa.Table) -> pa.Table:
        """Each row as its own partial (used when grouping a buffer would not shrink it)."""
        frame = pl.from_arrow(table, rechunk=False)
        keys = [*self.keys, KEY_HASH] if KEY_HASH in frame.columns else list(self.keys)
        exprs = [e for a in self.aggs for e in _row_partial(a, frame.schema)]
        return frame.select([pl.col(k) for k in keys] + exprs).to_arrow()
