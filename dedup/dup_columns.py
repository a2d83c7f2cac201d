"""The dup columns of the Dataset dedup functions: from cluster assignments to ``dup_cluster`` /
``dup_cluster_size`` / ``dup_keep``, shared by the exact and fuzzy paths.

Both paths end the same way: each row gets (CLUSTER, SIZE, KEEP, KEEPER) helper columns, by row number from
a small driver-side table (``Attach`` with ``cluster_node_info``) or by a join with per-group keepers formed
on the engine (``group_keepers`` then ``mark_keep``); ``Finish`` turns them into the user's columns, counts,
and annotates or removes. The keep rule (largest priority, then smallest id, then input order) is in
``group_keepers`` for the engine and in ``clusters.keep_ranks`` for the driver.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from zephyr.dedup.columns import CLUSTER, H0, H1, HELPERS, KEEP, KEEPER, ROW, SIZE
from zephyr.dedup.config import check_mode

from zephyr import counters
from zephyr.errors import SchemaError

if TYPE_CHECKING:
    from zephyr.dataset import Dataset

__all__ = [
    "Attach",
    "Finish",
    "StripRowNumbers",
    "cluster_node_info",
    "group_keepers",
    "has_column",
    "key_columns",
    "mark_keep",
]


def has_column(table: pa.Table, name: str | None, what: str) -> bool:
    """True when ``name`` is a column; an empty table without columns (an empty input file) is passed on
    untouched (False); any other table without it is a schema error naming the column."""
    if name is None or name in table.column_names:
        return True
    if table.num_rows == 0:
        return False
    raise SchemaError(
        f"{what} column {name!r} not found; the input has {', '.join(table.column_names)} "
        f"(pass --{what}-column / {what}_column=)"
    )


def key_columns(table: pa.Table, id_column: str | None, priority_column: str | None) -> dict[str, Any]:
    cols: dict[str, Any] = {}
    if id_column is not None:
        cols[id_column] = table[id_column]
    if priority_column is not None:
        has_column(table, priority_column, "priority")
        cols[priority_column] = table[priority_column]
    return cols


class Finish:
    """Turns the helper columns (CLUSTER, SIZE, KEEP: null for rows in no cluster) into dup_cluster /
    dup_cluster_size / dup_keep, counts, then annotates or removes. With ``row_numbers`` (annotate mode) the
    row's number (ROW) and its kept row's (KEEPER; its own outside a cluster) stay: what an index records."""

    def __init__(self, text_column: str, id_column: str | None, mode: str, row_numbers: bool = False):
        self.text_column, self.id_column, self.mode = text_column, id_column, mode
        self.row_numbers = row_numbers

    def __call__(self, table: pa.Table) -> Any:

        if not has_column(table, self.text_column, "text"):
            return table
        valid = pc.is_valid(table[self.text_column])
        own = table[self.id_column] if self.id_column is not None else table[ROW]
        # a row in no cluster has no SIZE; its CLUSTER may be null in a cluster too (a kept row without an id)
        lone = pc.and_(pc.is_null(table[SIZE]), valid)
        cluster = pc.if_else(lone, own.cast(table.schema.field(CLUSTER).type), table[CLUSTER])
        size = pc.if_else(lone, pa.scalar(1, pa.int64()), table[SIZE].cast(pa.int64()))
        keep = pc.fill_null(table[KEEP], True)
        keep_np = np.asarray(keep, dtype=bool)
        members = np.asarray(valid, dtype=bool)
        counters.increment("dedup/null_text", int((~members).sum()))
        kept_sizes, per = np.unique(np.asarray(size.fill_null(0))[keep_np & members], return_counts=True)
        for s, c in zip(kept_sizes.tolist(), per.tolist()):
            counters.increment(f"dedup/cluster_size={s}", c)
        duplicates = int((~keep_np).sum())
        counters.increment("dedup/duplicates", duplicates)
        numbers = {}
        if self.row_numbers:
            numbers = {ROW: table[ROW], KEEPER: pc.coalesce(table[KEEPER], table[ROW])}
        table = table.drop_columns(
            [c for c in (*HELPERS, "dup_cluster", "dup_cluster_size", "dup_keep") if c in table.column_names]
        )
        table = (
            table.append_column("dup_cluster", cluster)
            .append_column("dup_cluster_size", size)
            .append_column("dup_keep", keep)
        )
        for name, column in numbers.items():
            table = table.append_column(name, column)
        return StripRowNumbers("remove")(table) if self.mode == "remove" else table


class StripRowNumbers:
    """The user's view of a dedup output made with ``row_numbers=True``: the row-number columns dropped, and
    in ``remove`` mode the removed rows and the dup columns too (counted as dropped, reason ``duplicate``)."""

    def __init__(self, mode: str):
        check_mode(mode)
        self.mode = mode

    def __call__(self, table: pa.Table) -> Any:
        from zephyr.ops import BatchOutput

        table = table.drop_columns([c for c in (ROW, KEEPER) if c in table.column_names])
        if self.mode == "annotate" or "dup_keep" not in table.column_names:
            return table
        keep = table["dup_keep"]
        kept = table.filter(keep).drop_columns(["dup_cluster", "dup_cluster_size", "dup_keep"])
        removed = table.num_rows - kept.num_rows
        return BatchOutput(kept=kept, dropped={"duplicate": removed}) if removed else kept


class Attach:
    """Looks each row's number up in a small (ROW, CLUSTER, SIZE, KEEP, KEEPER) table held in memory: a
    broadcast join, so the input keeps its shards and order and the text is never shuffled."""

    def __init__(self, node_info: pa.Table | None, id_column: str | None):
        self.node_info, self.id_column = node_info, id_column

    def __call__(self, table: pa.Table) -> pa.Table:
        if ROW not in table.column_names or not has_column(table, self.id_column, "id"):
            return table
        if self.node_info is None or self.node_info.num_rows == 0:
            own = table.schema.field(self.id_column).type if self.id_column is not None else pa.int64()
            for name, kind in ((CLUSTER, own), (SIZE, pa.int64()), (KEEP, pa.bool_()), (KEEPER, pa.int64())):
                table = table.append_column(name, pa.nulls(table.num_rows, kind))
            return table
        idx = pc.index_in(table[ROW], value_set=self.node_info[ROW].combine_chunks())
        for name in (CLUSTER, SIZE, KEEP, KEEPER):
            table = table.append_column(name, self.node_info[name].take(idx))
        return table


def cluster_node_info(rows: pa.Table, labels: np.ndarray, id_column: str | None) -> pa.Table:
    """(ROW, CLUSTER, SIZE, KEEP, KEEPER) of the rows in clusters of 2 or more; ``labels[i]`` is the position
    in ``rows`` of row i's kept row (rows in keep order or not)."""
    sizes = np.bincount(labels, minlength=len(labels))[labels]
    grouped = np.flatnonzero(sizes > 1)
    own = rows[id_column] if id_column is not None else rows[ROW]
    return pa.table(
        {
            ROW: rows[ROW].take(pa.array(grouped)),
            CLUSTER: own.take(pa.array(labels[grouped])),
            SIZE: pa.array(sizes[grouped], pa.int64()),
            KEEP: pa.array(labels[grouped] == grouped),
            KEEPER: rows[ROW].take(pa.array(labels[grouped])),
        }
    ).combine_chunks()


def _null_safe_equal(a: Any, b: Any) -> Any:
    both_null = pc.and_(pc.is_null(a), pc.is_null(b))
    if pa.types.is_null(a.type) or pa.types.is_null(b.type):  # a null-typed id: Arrow has no equal kernel
        return both_null
    return pc.or_(pc.fill_null(pc.equal(a, b), False), both_null)


def group_keepers(
    members: Dataset, keys: list[str], id_column: str | None, priority_column: str | None
) -> Dataset:
    """(keys..., KEEPER = row number of the kept row, CLUSTER = its id, SIZE) per group, by aggregations only:
    narrow each group to its largest priority, then its smallest id, then its smallest row number."""
    sizes = members.group_by(*keys).agg(**{SIZE: (ROW, "count")})
    best = members
    for column, how in ((priority_column, "max"), (id_column, "min"), (ROW, "min")):
        if column is None:
            continue
        top = best.group_by(*keys).agg(**{"__dedup_best": (column, how)})
        best = best.join(top, on=keys).map_batches(
            lambda t, c=column: t.filter(_null_safe_equal(t[c], t["__dedup_best"])).drop_columns(
                ["__dedup_best"]
            ),
            name=f"dedup.keep_{how}_{column}",
        )
    own = id_column if id_column is not None else ROW
    keepers = best.map_batches(
        lambda t: pa.table({**{k: t[k] for k in keys}, KEEPER: t[ROW], CLUSTER: t[own]}), name="dedup.keepers"
    )
    return keepers.join(sizes, on=keys)


def mark_keep(table: pa.Table) -> pa.Table:
    """KEEP = this row is its group's kept row (null outside any group of 2 or more rows)."""
    grouped = pc.greater(pc.fill_null(table[SIZE], 0), 1)
    keep = pc.if_else(grouped, pc.equal(table[ROW], table[KEEPER]), pa.nulls(table.num_rows, pa.bool_()))
    cluster = pc.if_else(grouped, table[CLUSTER], pa.nulls(table.num_rows, table.schema.field(CLUSTER).type))
    size = pc.if_else(grouped, table[SIZE], pa.nulls(table.num_rows, pa.int64()))
    keeper = pc.if_else(grouped, table[KEEPER], pa.nulls(table.num_rows, pa.int64()))
    table = table.drop_columns([c for c in (KEEPER, CLUSTER, SIZE, H0, H1) if c in table.column_names])
    return (
        table.append_column(CLUSTER, cluster)
        .append_column(SIZE, size)
        .append_column(KEEP, keep)
        .append_column(KEEPER, keeper)
    )
