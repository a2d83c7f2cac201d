"""From cluster labels to output columns: keep rule, annotate/remove, cluster-size histogram.

Rows are addressed by *keep rank*: their position in keep order (largest priority, then smallest id,
then input position; nulls last), so the kept member of a cluster is its smallest-rank one and a cluster
is named by the id of that kept row. User ids only order rows; two rows with one id are still two rows.
Rows outside dedup (null text) get null cluster columns and ``dup_keep = true``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from zephyr.errors import ConfigError, SchemaError
from zephyr.io.schema import without_view_types

__all__ = ["DedupResult", "keep_ranks", "cluster_columns", "apply_mode", "size_histogram", "as_table"]


@dataclass
class DedupResult:
    """A dedup output: the table (annotated or with duplicates removed) and the job statistics."""

    table: pa.Table
    stats: dict[str, Any] = field(default_factory=dict)


def as_table(data: pa.Table | pa.RecordBatch | Any) -> pa.Table:
    """Accept a table, a record batch or an iterable of record batches; view-typed columns come back as
    plain ones (``zephyr.io.casting.without_view_types``: Arrow cannot select rows of a view)."""
    if isinstance(data, pa.Table):
        table = data
    elif isinstance(data, pa.RecordBatch):
        table = pa.Table.from_batches([data])
    else:
        batches = list(data)
        if not batches:
            raise ConfigError(
                "no record batches given: pass a pyarrow.Table or a non-empty iterable of batches"
            )
        table = pa.Table.from_batches(batches)
    return without_view_types(table)


def require_column(table: pa.Table, name: str, what: str) -> pa.ChunkedArray:
    if name not in table.column_names:
        raise SchemaError(
            f"{what} column {name!r} not found; the table has {', '.join(table.column_names)} "
            f"(pass the right name, e.g. text_column=... / --{what}-column)"
        )
    return table[name]


def keep_ranks(table: pa.Table, id_column: str | None, priority_column: str | None = None) -> np.ndarray:
    """int64 rank of each row in keep order: priority descending, then id ascending, then input position
    (nulls after every value in both columns). Rank 0 is the row every rule keeps first.

    Rows are told apart by position, never by id, so rows that share an id (a crawl merged twice) are still
    two rows: one is kept, the other is its duplicate.
    """
    n = table.num_rows
    keys = [np.arange(n, dtype=np.int64)]  # np.lexsort: least significant key first
    if id_column is not None:
        keys.append(_rank(require_column(table, id_column, "id"), "ascending"))
    if priority_column is not None:
        keys.append(_rank(require_column(table, priority_column, "priority"), "descending"))
    ranks = np.empty(n, dtype=np.int64)
    ranks[np.lexsort(keys)] = np.arange(n, dtype=np.int64)
    return ranks


def _rank(column: pa.ChunkedArray, order: str) -> np.ndarray:
    """Dense-enough rank of a column (equal values share a rank; nulls last). A dictionary-encoded column
    (a categorical id) ranks by its values, and a null-typed one ties every row: Arrow's rank has no kernel
    for either type."""
    if pa.types.is_null(column.type):  # no value at all (an all-null id in JSONL): every row ties
        return np.zeros(len(column), dtype=np.int64)
    if pa.types.is_dictionary(column.type):
        column = column.cast(column.type.value_type)
    return np.asarray(pc.rank(column, sort_keys=order, tiebreaker="min"), dtype=np.int64)


def cluster_columns(
    table: pa.Table,
    ranks: np.ndarray,
    labels: np.ndarray,
    members: np.ndarray,
    *,
    id_column: str | None,
) -> tuple[pa.Array, pa.Array, np.ndarray]:
    """(dup_cluster, dup_cluster_size, keep) for all rows; ``labels[i]`` is the keep rank of the row that row
    i's cluster keeps. ``dup_cluster`` is that row's id (its position without an id column).

    ``members`` marks the rows that took part (others get nulls and keep = True).
    """
    n = table.num_rows
    row_of_rank = np.empty(n, dtype=np.int64)
    row_of_rank[ranks] = np.arange(n, dtype=np.int64)
    sizes = np.zeros(n, dtype=np.int64)
    sizes_by_label = np.bincount(labels[members], minlength=n)
    sizes[members] = sizes_by_label[labels[members]]
    keep = ~members | (ranks == labels)
    kept_rows = row_of_rank[labels]
    if id_column is None:
        cluster = pa.array(np.where(members, kept_rows, 0), mask=~members, type=pa.int64())
    else:
        cluster = pc.take(table[id_column], pa.array(kept_rows, mask=~members))
        if isinstance(cluster, pa.ChunkedArray):
            cluster = cluster.combine_chunks()
    size = pa.array(sizes, mask=~members, type=pa.int64())
    return cluster, size, keep


def apply_mode(table: pa.Table, cluster: pa.Array, size: pa.Array, keep: np.ndarray, mode: str) -> pa.Table:
    """``annotate``: add dup_cluster/dup_cluster_size/dup_keep; ``remove``: keep only the kept rows."""
    if mode == "annotate":
        out = table
        for name, col in (("dup_cluster", cluster), ("dup_cluster_size", size), ("dup_keep", pa.array(keep))):
            if name in out.column_names:
                out = out.drop_columns([name])
            out = out.append_column(name, col)
        return out
    if mode == "remove":
        return table.filter(pa.array(keep))
    raise ConfigError(f"mode must be 'annotate' or 'remove', got {mode!r}")


def size_histogram(labels: np.ndarray, members: np.ndarray) -> dict[str, int]:
    """{cluster size: number of clusters of that size} over the member rows (JSON-friendly keys)."""
    if not members.any():
        return {}
    sizes = np.bincount(labels[members])
    sizes = sizes[sizes > 0]
    values, counts = np.unique(sizes, return_counts=True)
    return {str(int(v)): int(c) for v, c in zip(values, counts)}
