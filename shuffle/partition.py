"""Partition assignment for the shuffle: a row hash for hash partitioning and range boundaries for sorting.

Hash partitioning uses one 64-bit hash per row of the key columns (``KEY_HASH``). The same column is the sort
key of every spilled run of a hash shuffle, so reducers merge runs on a single ``uint64`` and group equal keys
(which share a hash) into the same emitted batch; the real key columns decide the groups inside that batch.
Key columns are cast to canonical types first (integers to Int64 — UInt64 by bit pattern — strings to String), so an ``int32``
key on one side of a join hashes like an ``int64`` key on the other. Hashes come from polars ``hash_rows``
with fixed seeds: stable between runs and processes of one polars version (keep versions equal on a cluster).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import polars as pl
import pyarrow as pa

from zephyr.errors import SchemaError

__all__ = [
    "numpy_to_arrow",
    "KEY_HASH",
    "PARTITION",
    "canonical_keys",
    "key_hash",
    "hash_partitions",
    "boundary_array",
    "range_boundaries",
    "range_partitions",
]

KEY_HASH = "__zephyr_key_hash"
PARTITION = "__zephyr_partition"
_SEEDS = dict(seed=0x5EED)


def canonical_keys(frame: pl.DataFrame, keys: Sequence[str]) -> pl.DataFrame:
    """Key columns cast so equal values hash equally whatever integer/string width each side used."""
    missing = [k for k in keys if k not in frame.columns]
    if missing:
        raise SchemaError(f"key column(s) {missing} not found; available columns: {frame.columns}")
    exprs = []
    for name in keys:
        dtype = frame.schema[name]
        if dtype == pl.UInt64:  # keep the bit pattern: values above 2**63 (hashes) must not overflow
            exprs.append(pl.col(name).reinterpret(signed=True))
        elif dtype.is_integer():
            exprs.append(pl.col(name).cast(pl.Int64))
        elif dtype == pl.Categorical or dtype == pl.Enum:
            exprs.append(pl.col(name).cast(pl.String))
        elif dtype.is_float():
            exprs.append(pl.col(name).cast(pl.Float64))
        else:
            exprs.append(pl.col(name))
    return frame.select(exprs)


def key_hash(table: pa.Table, keys: Sequence[str]) -> np.ndarray:
    """One ``uint64`` per row of ``table``'s key columns."""
    frame = canonical_keys(pl.from_arrow(table.select(list(keys)), rechunk=False), keys)
    return frame.hash_rows(**_SEEDS).to_numpy()


def numpy_to_arrow(values: np.ndarray) -> pa.Array:
    """A numeric numpy array as an Arrow array, zero-copy. ``pa.array(ndarray)`` would first probe for pandas
    (importing it, ~0.5 s per worker process, when it is installed)."""
    values = np.ascontiguousarray(values)
    return pa.Array.from_buffers(pa.from_numpy_dtype(values.dtype), len(values), [None, pa.py_buffer(values)])


def hash_partitions(hashes: np.ndarray, num_partitions: int) -> np.ndarray:
    """Partition id per row: ``floor(hash * P / 2**64)``, computed as ``(hash >> 32) * P >> 32``.

    The id is monotonic in the hash, so a run sorted by hash alone is also sorted by partition: one
    single-column ``uint64`` sort orders a spill for both splitting and merging.
    """
    if num_partitions == 1:
        return np.zeros(len(hashes), dtype=np.int64)
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
    ``int64`` (hash keys) make it ``uint64``; ``range_partitions`` casts it to the key column's type."""
    values = list(boundaries)
    if not values:  # one partition
        return pa.nulls(0)
    if all(isinstance(v, int) and not isinstance(v, bool) for v in values):
        unsigned = any(v > np.iinfo(np.int64).max for v in values)
        array = np.array(values, dtype=np.uint64 if unsigned else np.int64)
        # from the buffer: ``pa.array`` of a list or a numpy array imports pandas (~0.8 s)
        return pa.Array.from_buffers(
            pa.uint64() if unsigned else pa.int64(), len(array), [None, pa.py_buffer(array)]
        )
    return pa.array(values)


def range_partitions(
    table: pa.Table, key: str, boundaries: pa.Array, num_partitions: int, *, descending: bool
) -> np.ndarray:
    """Partition id per row for a global sort on ``key``: ascending ranges, nulls in the last partition."""
    column = pl.from_arrow(table.select([key])).to_series()
    if num_partitions == 1 or len(boundaries) == 0:
        return np.zeros(len(column), dtype=np.int64)
    bounds = pl.Series(boundaries).cast(column.dtype)
    if descending:  # partition i holds keys in (b_i, b_{i-1}]: flip to the ascending problem
        ids = len(bounds) - bounds.reverse().search_sorted(column, side="left").to_numpy().astype(np.int64)
    else:
        ids = bounds.search_sorted(column, side="right").to_numpy().astype(np.int64)
    ids[column.is_null().to_numpy()] = num_partitions - 1
    return ids
