"""Logical operations: what a ``Dataset`` method appends to the plan. Plain frozen dataclasses.

Narrow ops (``RowOp``: map, filter, flat_map; ``MapBatches``, ``Select``) transform a stream of batches and
fuse into one stage. Wide ops (``GroupAggregate``, ``GroupApply``, ``Deduplicate``, ``Sort``, ``Join``,
``Reshard``) need rows from every input shard and cut the plan with a shuffle.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

import pyarrow as pa

from zephyr.shuffle.reduce import Agg

OnError = Literal["raise", "quarantine"]


class Op:
    """Base of all logical ops."""


@dataclass(frozen=True)
class ReadFiles(Op):
    paths: tuple[str, ...]
    format: Literal["parquet", "jsonl", "vortex", "warc"]
    columns: tuple[str, ...] | None = None
    schema: pa.Schema | None = None
    approx_shard_bytes: int | None = None
    on_error: OnError = "raise"
    unify_schemas: bool = False
    """Promote types that differ between files (``zephyr.io.schema``); else files must agree."""


@dataclass(frozen=True, eq=False)
class FromTable(Op):
    """In-memory rows; staged to Parquet in the work directory before any task runs (never pickled)."""

    table: pa.Table
    num_shards: int = 1


@dataclass(frozen=True, eq=False)
class RowOp(Op):
    """A row function: ``map`` (a dict per row), ``filter`` (a truth value) or ``flat_map`` (dicts)."""

    kind: Literal["map", "filter", "flat_map"]
    fn: Callable[[dict], Any]
    on_error: OnError = "raise"


@dataclass(frozen=True, eq=False)
class MapBatches(Op):
    fn: Callable[[pa.Table], Any]
    batch_rows: int | None = None
    name: str | None = None


@dataclass(frozen=True)
class Select(Op):
    columns: tuple[str, ...]


@dataclass(frozen=True)
class WithRowIndex(Op):
    """Adds an int64 column that names each row: ``shard_index << ROW_INDEX_SHARD_SHIFT | position``.

    Unique within a plan and increasing in input order (shards are contiguous runs of the input, in order),
    but not dense. Deterministic for a given input and shard layout, whatever the executor or worker count,
    so two jobs over the same plan agree on it: dedup addresses rows by it instead of by user ids.
    """

    name: str


ROW_INDEX_SHARD_SHIFT = 40
"""Rows per shard up to 2⁴⁰, shards up to 2²³ in a non-negative int64."""


@dataclass(frozen=True)
class GroupAggregate(Op):
    keys: tuple[str, ...]
    aggs: tuple[Agg, ...]
    num_partitions: int | None = None


@dataclass(frozen=True, eq=False)
class GroupApply(Op):
    keys: tuple[str, ...]
    sort_by: tuple[tuple[str, bool], ...]
    fn: Callable[[pa.Table], Any]
    num_partitions: int | None = None


@dataclass(frozen=True)
class Deduplicate(Op):
    keys: tuple[str, ...]
    num_partitions: int | None = None


@dataclass(frozen=True)
class Sort(Op):
    by: tuple[str, ...]
    descending: tuple[bool, ...]
    num_partitions: int | None = None
    boundaries: tuple[Any, ...] | None = None
    """Split points on ``by[0]`` given by the caller (``len + 1`` partitions); None: cut from a key sample."""


@dataclass(frozen=True, eq=False)
class Join(Op):
    right: tuple[Op, ...]
    """The right side's own plan (its ops), so that planning needs no ``Dataset``."""
    left_on: tuple[str, ...]
    right_on: tuple[str, ...]
    how: Literal["inner", "left", "right", "outer"]
    suffix: str = "_right"
    num_partitions: int | None = None


@dataclass(frozen=True)
class Reshard(Op):
    num_shards: int


@dataclass
class BatchOutput:
    """What a ``map_batches`` function may return to quarantine rows or count drops by reason.

    ``kept`` continues down the plan; ``quarantined`` rows go to the quarantine output with the reason in a
    ``quarantine_reason`` column (add it yourself, or give ``quarantine_reason`` for all of them); ``dropped``
    counts rows the function removed on purpose, by reason (they are counted, not stored).
    """

    kept: pa.Table | pa.RecordBatch
    quarantined: pa.Table | None = None
    dropped: dict[str, int] = field(default_factory=dict)
    quarantine_reason: str | None = None


NARROW_OPS = (RowOp, MapBatches, Select, WithRowIndex)
WIDE_OPS = (GroupAggregate, GroupApply, Deduplicate, Sort, Join, Reshard)
