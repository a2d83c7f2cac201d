"""From cluster labels to output columns: keep rule, annotate/remove, cluster-size histogram.

Rows are addressed by *rank*: their position in the order of the id column (ties by input position),
so "minimum id" is "minimum rank". A cluster's id is the id of its smallest-rank member. The kept member
is the smallest-rank one, or, with a priority column, the one with the largest priority (ties: smallest
rank). Rows outside dedup (null text) get null cluster columns and ``dup_keep = true``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from zephyr.errors import ConfigError, SchemaError

__all__ = ["DedupResult", "id_ranks", "cluster_columns", "apply_mode", "size_histogram", "as_table"]


@dataclass
class DedupResult:
    """A dedup output: the table (annotated or with duplicates removed) and the job statistics."""

    table: pa.Table
    stats: dict[str, Any] = field(default_factory=dict)


def as_table(data: pa.Table | pa.RecordBatch | Any) -> pa.Table:
    """Accept a table, a record batch or an iterable of record batches."""
    if isinstance(data, pa.Table):
        return data
    if isinstance(data, pa.RecordBatch):
        return pa.Table.from_batches([data])
    batches = list(data)
    if not batches:
        raise ConfigError("no record batches given: pass a pyarrow.Table or a non-empty iterable of batches")
    return pa.Table.from_batches(batches)


def require_column(table: pa.Table, name: str, what: str) -> pa.ChunkedArray:
    if name not in table.column_names:
        raise SchemaError(
            f"{what} column {name!r} not found; the table has {', '.join(table.column_names)} "
            f"(pass the right name, e.g. text_column=... / --{what}-column)"
        )
    return table[name]


def id_ranks(table: pa.Table, id_column: str | None) -> np.ndarray:
    """int64 rank of each row in id order (ties and nulls by input position); row number without ids."""
    if id_column is None:
        return np.arange(table.num_rows, dtype=np.int64)
    ids = require_column(table, id_column, "id")
    return np.asarray(pc.rank(ids, sort_keys="ascending", tiebreaker="first"), dtype=np.int64) - 1


def cluster_columns(
    table: pa.Table,
    ranks: np.ndarray,
    labels: np.ndarray,
    members: np.ndarray,
    *,
    id_column: str | None,
    priority_column: str | None,
) -> tuple[pa.Array, pa.Array, np.ndarray]:
    """(dup_cluster, dup_cluster_size, keep) for all rows; ``labels[i]`` is the min rank of row i's cluster.

    ``members`` marks the rows that took part (others get nulls and keep = True).
    """
    n = table.num_rows
    row_of_rank = np.empty(n, dtype=np.int64)
    row_of_rank[ranks] = np.arange(n, dtype=np.int64)
    sizes = np.zeros(n, dtype=np.int64)
    sizes_by_label = np.bincount(labels[members], minlength=n)
    sizes[members] = sizes_by_label[labels[members]]
    keep = np.ones(n, dtype=bool)
    rows = np.flatnonzero(members)
    if priority_column is None:
        keep[rows] = ranks[rows] == labels[rows]
    else:
        prio = require_column(table, priority_column, "priority")
        prio_rank = np.asarray(pc.rank(prio, sort_keys="descending", tiebreaker="first"), dtype=np.int64)
        order = np.lexsort((ranks[rows], prio_rank[rows], labels[rows]))
        lab = labels[rows][order]
        first = np.ones(len(order), dtype=bool)
        first[1:] = lab[1:] != lab[:-1]
        keep[rows] = False
        keep[rows[order[first]]] = True
    cluster_rows = row_of_rank[labels]
    if id_column is None:
        cluster = pa.array(np.where(members, cluster_rows, 0), mask=~members, type=pa.int64())
    else:
        cluster = pc.take(table[id_column], pa.array(cluster_rows, mask=~members))
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
