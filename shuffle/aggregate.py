"""Group-by aggregations in two phases: partial on the map side, final on the reduce side.

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

from collections.abc import Sequence
from dataclasses import dataclass

import polars as pl
import pyarrow as pa
from zephyr.shuffle.partition import KEY_HASH

from zephyr.errors import ConfigError, SchemaError

__all__ = ["Agg", "AGGREGATIONS", "aggregate", "PartialAggregate", "final_aggregate", "is_decomposable"]

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


def final_aggregate(partials: pa.Table, keys: Sequence[str], aggs: Sequence[Agg]) -> pa.Table:
    """Combine partial rows (``PartialAggregate`` output) into final values, per key."""
    return _group(partials, keys, [_final(a) for a in aggs], keep_hash=False)
