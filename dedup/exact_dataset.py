"""Document-level exact dedup on a ``Dataset`` (``exact_dedup_dataset``).

With ``execution``, one pass hashes every row into a small (row, hash, id, priority) table; when it fits the
driver, groups form there and a second pass attaches the cluster columns by row number (the text is never
shuffled). Otherwise, and without ``execution`` (lazy), the shuffle path: hash → keepers by aggregation
(``dup_columns.group_keepers``) → a join back on the hash. See ``dedup.dataset_ops`` for the columns and
counters every dedup stage shares.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from zephyr.dedup.clusters import keep_ranks
from zephyr.dedup.columns import H0, H1, ROW
from zephyr.dedup.config import ExactDedupConfig, check_mode
from zephyr.dedup.dup_columns import (
    Attach,
    Finish,
    cluster_node_info,
    group_keepers,
    has_column,
    key_columns,
    mark_keep,
)
from zephyr.dedup.eager import execution_kwargs, in_memory_limit

if TYPE_CHECKING:
    from zephyr.dataset import Dataset
    from zephyr.options import ExecutionOptions

__all__ = ["ExactJobPlans", "exact_dedup_dataset", "exact_job_plans"]

logger = logging.getLogger(__name__)


def _hash_columns(texts: pa.ChunkedArray, normalize: str) -> tuple[pa.Array, pa.Array]:
    """The two 64-bit halves of each normalized text's xxh3-128 (int64 bit patterns: the engine's shuffle keys
    are signed integers); null for null text."""
    from zephyr.dedup.exact import document_hashes

    hashes = document_hashes(texts, normalize)
    mask = ~np.asarray(pc.is_valid(texts), dtype=bool)
    return tuple(pa.array(hashes[:, k].view(np.int64), mask=mask, type=pa.int64()) for k in (0, 1))


class _AddDocHash:
    """Adds H0/H1 (the text's hash) to every row."""

    def __init__(self, text_column: str, normalize: str):
        self.text_column, self.normalize = text_column, normalize

    def __call__(self, table: pa.Table) -> pa.Table:
        if not has_column(table, self.text_column, "text"):
            return table
        h0, h1 = _hash_columns(table[self.text_column], self.normalize)
        return table.append_column(H0, h0).append_column(H1, h1)


class _MemberHashes:
    """(ROW, H0, H1[, id][, priority]) of every row with text: the small table the exact path groups."""

    def __init__(self, text_column: str, id_column: str | None, normalize: str, priority_column: str | None):
        self.text_column, self.id_column, self.normalize = text_column, id_column, normalize
        self.priority_column = priority_column

    def __call__(self, table: pa.Table) -> pa.Table:
        if not (has_column(table, self.text_column, "text") and has_column(table, self.id_column, "id")):
            return pa.table({ROW: pa.array([], pa.int64())})
        table = table.filter(pc.is_valid(table[self.text_column]))
        h0, h1 = _hash_columns(table[self.text_column], self.normalize)
        return pa.table(
            {ROW: table[ROW], H0: h0, H1: h1, **key_columns(table, self.id_column, self.priority_column)}
        )


def _exact_node_info(
    members: pa.Table, id_column: str | None, priority_column: str | None
) -> pa.Table | None:
    """(ROW, CLUSTER, SIZE, KEEP) of the rows whose normalized text occurs more than once, in the driver."""
    from zephyr.dedup.exact import group_labels

    if H0 not in members.column_names or members.num_rows == 0:
        return None
    counts = members.group_by([H0, H1]).aggregate([([], "count_all")])
    repeated = counts.filter(pc.greater(counts["count_all"], 1)).select([H0, H1])
    if repeated.num_rows == 0:
        return None
    dup = members.join(repeated, keys=[H0, H1], join_type="inner")
    dup = dup.take(pc.sort_indices(dup[ROW]))  # input order: the keep rule's last tie-break
    ranks = keep_ranks(dup, id_column, priority_column)
    hashes = np.stack([np.asarray(dup[h]).view(np.uint64) for h in (H0, H1)], axis=1)
    labels_by_rank = group_labels(hashes, ranks, np.ones(dup.num_rows, dtype=bool))
    position_of_rank = np.empty(dup.num_rows, dtype=np.int64)
    position_of_rank[ranks] = np.arange(dup.num_rows)
    return cluster_node_info(dup, position_of_rank[labels_by_rank], id_column)


def exact_dedup_dataset(
    ds: Dataset,
    *,
    text_column: str = "text",
    id_column: str | None = "id",
    normalize: str = "default",
    mode: str = "annotate",
    priority_column: str | None = None,
    execution: ExecutionOptions | dict[str, Any] | None = None,
    in_memory_rows: int | None = None,
    stats: dict[str, Any] | None = None,
) -> Dataset:
    """Document-level exact dedup on the engine; same output as ``exact.exact_dedup``.

    Without ``execution`` the plan is lazy (the shuffle path). With ``execution``, one eager pass hashes
    each row into a small (row, hash, id, priority) table; when it has at most ``in_memory_rows`` rows
    (default: 64 bytes a row within a quarter of the memory budget), groups form in the driver and the
    returned plan reads the input once more and attaches the cluster columns by row number. ``stats``
    receives which path ran and why.

    >>> import zephyr
    >>> ds = zephyr.from_items([{"id": 2, "text": "A  b"}, {"id": 1, "text": "a b"}, {"id": 1, "text": "a B"}])
    >>> exact_dedup_dataset(ds, mode="remove").to_arrow(executor="inprocess").to_pylist()
    [{'id': 1, 'text': 'a b'}]
    """
    ExactDedupConfig(normalize=normalize)
    check_mode(mode)
    plans = exact_job_plans(
        ds,
        text_column=text_column,
        id_column=id_column,
        normalize=normalize,
        mode=mode,
        priority_column=priority_column,
    )
    info: dict[str, Any] = {"in_memory": False}
    if execution is not None:
        kw = execution_kwargs(execution)
        limit = in_memory_limit(kw, in_memory_rows)
        members = plans.member_hashes.materialize(**kw)
        count = members.count(**kw)
        info.update(member_rows=count, in_memory_limit=limit)
        if count <= limit:
            info["in_memory"] = True
            node_info = _exact_node_info(members.to_arrow(**kw), id_column, priority_column)
            info["duplicate_rows"] = 0 if node_info is None else node_info.num_rows
            if stats is not None:
                stats.update(info)
            return plans.attached(node_info)
        info["fallback"] = f"{count} rows exceed the in-memory limit {limit}"
        logger.info("exact dedup: shuffle path (%s)", info["fallback"])
    if stats is not None:
        stats.update(info)
    return plans.shuffle_path


@dataclass(frozen=True)
class ExactJobPlans:
    """The lazy plans of exact dedup's engine jobs, built once for the run and for ``zephyr explain``."""

    member_hashes: Dataset
    """Job 1 (with ``execution``): the (row, hash, id, priority) table, materialized and counted."""
    shuffle_path: Dataset
    """The output when the member rows exceed the in-memory limit (or without ``execution``)."""
    rows: Dataset
    finish: Finish
    id_column: str | None

    def attached(self, node_info: pa.Table | None) -> Dataset:
        """The output when groups formed in the driver: the cluster columns attached by row number."""
        attach = Attach(node_info, self.id_column)
        return self.rows.map_batches(attach, name="dedup.exact.attach").map_batches(
            self.finish, name="dedup.exact.finish"
        )


def exact_job_plans(
    ds: Dataset,
    *,
    text_column: str = "text",
    id_column: str | None = "id",
    normalize: str = "default",
    mode: str = "annotate",
    priority_column: str | None = None,
) -> ExactJobPlans:
    """Every plan ``exact_dedup_dataset`` may run, built without running anything."""
    rows = ds.with_row_index(ROW)
    finish = Finish(text_column, id_column, mode)
    member_hashes = rows.map_batches(
        _MemberHashes(text_column, id_column, normalize, priority_column),
        name="dedup.exact.member_hashes",
    )
    hashed = rows.map_batches(_AddDocHash(text_column, normalize), name="dedup.exact.hash")
    keys = [ROW, H0, H1] + [c for c in (id_column, priority_column) if c is not None]
    members_ds = hashed.select(*keys).map_batches(
        lambda t: t.filter(pc.is_valid(t[H0])), name="dedup.exact.members"
    )
    groups = group_keepers(members_ds, [H0, H1], id_column, priority_column)
    joined = hashed.join(groups, on=[H0, H1], how="left")
    shuffle_path = joined.map_batches(mark_keep, name="dedup.exact.keep").map_batches(
        finish, name="dedup.exact.finish"
    )
    return ExactJobPlans(member_hashes, shuffle_path, rows, finish, id_column)
