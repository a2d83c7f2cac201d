"""Dedup as engine stages: functions taking a ``zephyr.Dataset`` and returning one.

**Row identity is the engine's.** Every path numbers the input rows with ``Dataset.with_row_index`` and
addresses them by that number; user ids only order rows (the keep rule: largest priority, then smallest
id, then input order; nulls last) and name clusters. So rows that share an id, rows with null ids and
inputs without an id column (``id_column=None``) dedup like any others, and nothing is quarantined.

- exact, with ``execution``: one pass hashes every row into a small (row, hash, id, priority) table; when
  it fits the driver, groups form there and a second pass attaches the cluster columns by row number (the
  text is never shuffled). Otherwise, and without ``execution`` (lazy), the shuffle path: hash →
  keepers by aggregation (``_keepers``) → a join back on the hash.
- fuzzy: signatures and band hashes per batch → one row per (row, band) → ``group_by(band, band hash)``
  → bounded candidate pairs per bucket (``lsh.candidate_edges``' rule) → distinct pairs. One pass writes
  the endpoints' shingle sets and keys (every row's, when the pairs do not fit the driver). When pairs
  and sets fit the driver, verification and clusters (``fuzzy.cluster_labels``: anchored by default) run
  there and the result is attached by row number. Otherwise the pairs are verified on the engine
  (``verify_engine``: sets joined onto pairs, a giant bucket's first members broadcast); the verified
  graph is then clustered in the driver when it fits, else (components only) by engine rounds
  (``engine_components``).

Columns added: ``dup_cluster`` (the id of the cluster's kept row; its row number without an id column),
``dup_cluster_size``, ``dup_keep``. Null texts pass through with null cluster columns and ``dup_keep =
true``. Counters: ``dedup/duplicates``, ``dedup/null_text``, ``dedup/cluster_size=N`` (clusters of N rows:
the cluster-size histogram), ``dedup/candidate_edges``, ``dedup/verified_edges``, ``dedup/rejected_edges``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import tempfile
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from zephyr.dedup.clusters import keep_ranks
from zephyr.dedup.columns import CLUSTER, H0, H1, HELPERS, KEEP, KEEPER, ROW, SIZE
from zephyr.dedup.config import ExactDedupConfig, FuzzyDedupConfig, check_mode
from zephyr.dedup.lsh import BUCKET_LINKS
from zephyr.dedup.verify_engine import RowsIn, WithSim, shingles_of, verify_on_engine

from zephyr import budget as budget_module
from zephyr import counters
from zephyr.budget import Budget
from zephyr.errors import ConfigError, InputError, SchemaError, ZephyrError

if TYPE_CHECKING:
    from zephyr.dedup.index import IndexInfo

    from zephyr.dataset import Dataset
    from zephyr.options import ExecutionOptions

__all__ = ["exact_dedup_dataset", "fuzzy_dedup_dataset", "paragraph_dedup_dataset", "ROW"]

logger = logging.getLogger(__name__)


def _has(table: pa.Table, name: str | None, what: str) -> bool:
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


def _key_columns(table: pa.Table, id_column: str | None, priority_column: str | None) -> dict[str, Any]:
    cols: dict[str, Any] = {}
    if id_column is not None:
        cols[id_column] = table[id_column]
    if priority_column is not None:
        _has(table, priority_column, "priority")
        cols[priority_column] = table[priority_column]
    return cols


class _Finish:
    """Turns the helper columns (CLUSTER, SIZE, KEEP: null for rows in no cluster) into dup_cluster /
    dup_cluster_size / dup_keep, counts, then annotates or removes. With ``row_numbers`` (annotate mode) the
    row's number (ROW) and its kept row's (KEEPER; its own outside a cluster) stay: what an index records."""

    def __init__(self, text_column: str, id_column: str | None, mode: str, row_numbers: bool = False):
        self.text_column, self.id_column, self.mode = text_column, id_column, mode
        self.row_numbers = row_numbers

    def __call__(self, table: pa.Table) -> Any:

        if not _has(table, self.text_column, "text"):
            return table
        valid = pc.is_valid(table[self.text_column])
        own = table[self.id_column] if self.id_column is not None else table[ROW]
        lone = pc.and_(pc.is_null(table[CLUSTER]), valid)
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


class _Attach:
    """Looks each row's number up in a small (ROW, CLUSTER, SIZE, KEEP, KEEPER) table held in memory: a
    broadcast join, so the input keeps its shards and order and the text is never shuffled."""

    def __init__(self, node_info: pa.Table | None, id_column: str | None):
        self.node_info, self.id_column = node_info, id_column

    def __call__(self, table: pa.Table) -> pa.Table:
        if ROW not in table.column_names or not _has(table, self.id_column, "id"):
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


def _node_info(rows: pa.Table, labels: np.ndarray, id_column: str | None) -> pa.Table:
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
    return pc.or_(pc.fill_null(pc.equal(a, b), False), pc.and_(pc.is_null(a), pc.is_null(b)))


def _keepers(
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


def _mark_keep(table: pa.Table) -> pa.Table:
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


# -- exact ---------------------------------------------------------------------------------------------


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
        if not _has(table, self.text_column, "text"):
            return table
        h0, h1 = _hash_columns(table[self.text_column], self.normalize)
        return table.append_column(H0, h0).append_column(H1, h1)


class _MemberHashes:
    """(ROW, H0, H1[, id][, priority]) of every row with text: the small table the exact path groups."""

    def __init__(self, text_column: str, id_column: str | None, normalize: str, priority_column: str | None):
        self.text_column, self.id_column, self.normalize = text_column, id_column, normalize
        self.priority_column = priority_column

    def __call__(self, table: pa.Table) -> pa.Table:
        if not (_has(table, self.text_column, "text") and _has(table, self.id_column, "id")):
            return pa.table({ROW: pa.array([], pa.int64())})
        table = table.filter(pc.is_valid(table[self.text_column]))
        h0, h1 = _hash_columns(table[self.text_column], self.normalize)
        return pa.table(
            {ROW: table[ROW], H0: h0, H1: h1, **_key_columns(table, self.id_column, self.priority_column)}
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
    return _node_info(dup, position_of_rank[labels_by_rank], id_column)


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
    rows = ds.with_row_index(ROW)
    finish = _Finish(text_column, id_column, mode)
    info: dict[str, Any] = {"in_memory": False}
    if execution is not None:
        kw = _execution_kwargs(execution)
        limit = _in_memory_limit(kw, in_memory_rows)
        members = rows.map_batches(
            _MemberHashes(text_column, id_column, normalize, priority_column),
            name="dedup.exact.member_hashes",
        ).materialize(**kw)
        count = members.count(**kw)
        info.update(member_rows=count, in_memory_limit=limit)
        if count <= limit:
            info["in_memory"] = True
            node_info = _exact_node_info(members.to_arrow(**kw), id_column, priority_column)
            info["duplicate_rows"] = 0 if node_info is None else node_info.num_rows
            if stats is not None:
                stats.update(info)
            attach = _Attach(node_info, id_column)
            return rows.map_batches(attach, name="dedup.exact.attach").map_batches(
                finish, name="dedup.exact.finish"
            )
        info["fallback"] = f"{count} rows exceed the in-memory limit {limit}"
        logger.info("exact dedup: shuffle path (%s)", info["fallback"])
    if stats is not None:
        stats.update(info)
    hashed = rows.map_batches(_AddDocHash(text_column, normalize), name="dedup.exact.hash")
    keys = [ROW, H0, H1] + [c for c in (id_column, priority_column) if c is not None]
    members_ds = hashed.select(*keys).map_batches(
        lambda t: t.filter(pc.is_valid(t[H0])), name="dedup.exact.members"
    )
    groups = _keepers(members_ds, [H0, H1], id_column, priority_column)
    joined = hashed.join(groups, on=[H0, H1], how="left")
    return joined.map_batches(_mark_keep, name="dedup.exact.keep").map_batches(
        finish, name="dedup.exact.finish"
    )


# -- fuzzy ---------------------------------------------------------------------------------------------


class _BandRows:
    """One row (ROW, band, band hash) per document and band; documents without shingles emit none."""

    def __init__(self, config: FuzzyDedupConfig, text_column: str):
        self.config, self.text_column = config, text_column

    def __call__(self, table: pa.Table) -> pa.Table:
        from zephyr.dedup.fuzzy import compute_signatures

        empty = pa.table(
            {
                ROW: pa.array([], pa.int64()),
                "band": pa.array([], pa.int32()),
                "bhash": pa.array([], pa.int64()),
            }
        )
        if not _has(table, self.text_column, "text"):
            return empty
        shingles, bands = compute_signatures(table[self.text_column], self.config)
        has = np.flatnonzero(shingles.counts > 0)
        nb = bands.shape[1]
        return pa.table(
            {
                ROW: table[ROW].take(pa.array(np.repeat(has, nb))),
                "band": pa.array(np.tile(np.arange(nb, dtype=np.int32), len(has))),
                "bhash": pa.array(bands[has].reshape(-1).view(np.int64), type=pa.int64()),
            }
        )


class _BucketEdges:
    """Buckets (with their member lists) → candidate pairs [u later row, v earlier row], each member paired
    with the bucket's first ``links`` members before it (``lsh.candidate_edges``' rule, by row number)."""

    def __init__(self, links: int):
        self.links = links

    def __call__(self, table: pa.Table) -> pa.Table:
        from zephyr.dedup.lsh import candidate_edges

        big = table.filter(pc.greater(table["n"], 1))
        members = big["members"].combine_chunks()
        bucket = np.asarray(pc.list_parent_indices(members), dtype=np.uint64)
        rows = np.asarray(members.flatten(), dtype=np.int64)
        pairs = candidate_edges(bucket[:, None], rows, links=self.links)
        pairs = pairs[pairs[:, 0] >= 0]  # two indexed documents (negative keys): both are kept already
        counters.increment("dedup/candidate_edges", len(pairs))
        return pa.table({"u": pa.array(pairs[:, 0]), "v": pa.array(pairs[:, 1])})


class _NodeSets:
    """(ROW, sorted shingle set[, id][, priority]) of the rows whose number is in ``nodes`` (every row when
    ``nodes`` is None). Counts the sets' bytes (``dedup/set_bytes``): what holding them in the driver costs."""

    def __init__(
        self,
        nodes: pa.Array | None,
        config: FuzzyDedupConfig,
        text_column: str,
        id_column: str | None,
        priority_column: str | None,
    ):
        self.nodes, self.config, self.text_column = nodes, config, text_column
        self.id_column, self.priority_column = id_column, priority_column

    def __call__(self, table: pa.Table) -> pa.Table:
        from zephyr.dedup.shingles import shingle_hashes, unique_sets

        if not (_has(table, self.text_column, "text") and _has(table, self.id_column, "id")):
            return pa.table({ROW: pa.array([], pa.int64())})
        wanted = table if self.nodes is None else table.filter(pc.is_in(table[ROW], value_set=self.nodes))
        cfg = self.config
        sets = unique_sets(
            shingle_hashes(wanted[self.text_column], kind=cfg.shingle, n=cfg.ngram, normalize=cfg.normalize)
        )
        lists = pa.LargeListArray.from_arrays(pa.array(sets.offsets), pa.array(sets.hashes, pa.uint64()))
        counters.increment("dedup/set_bytes", lists.nbytes)
        return pa.table(
            {
                ROW: wanted[ROW],
                "shingles": lists,
                **_key_columns(wanted, self.id_column, self.priority_column),
            }
        )


def _graph_in_driver(
    collect_sets: Callable[[pa.Array], pa.Table],
    pairs: pa.Table,
    config: FuzzyDedupConfig,
    id_column: str | None,
    priority_column: str | None,
    kw: dict[str, Any],
    info: dict[str, Any],
    index: IndexInfo | None = None,
) -> pa.Table | None:
    """Verify (unless ``pairs`` has a ``sim`` column already) and cluster a driver-sized pair table; returns
    the node info of the rows in clusters of 2 or more. ``collect_sets(rows)`` gives the ``_NodeSets`` rows of
    the endpoints (one filtered pass); the index's docs give those of indexed endpoints."""
    from zephyr.dedup.fuzzy import cluster_labels
    from zephyr.dedup.verify import jaccard

    nodes = pc.unique(pa.chunked_array(pairs["u"].chunks + pairs["v"].chunks).combine_chunks())
    new_nodes = nodes.filter(pc.greater_equal(nodes, 0))
    sets = collect_sets(new_nodes)
    if sets.num_rows != len(new_nodes):  # the input changed between passes: never index garbage
        raise InputError(
            f"{len(new_nodes) - sets.num_rows} candidate-pair rows were not found on the second read of the input; "
            "the input must not change while the job runs"
        )
    indexed, anchor = 0, np.zeros(0, dtype=np.int64)
    if len(new_nodes) < len(nodes):
        found, anchor = _indexed_sets(
            index, nodes.filter(pc.less(nodes, 0)), sets.schema, id_column, priority_column, kw
        )
        sets, indexed = pa.concat_tables([found, sets]), found.num_rows
    # The sets stay where they arrived (no copy of the big column); nodes are numbered in keep order
    # (rank), with input order (row number) as the last tie-break. Indexed documents (negative keys, the
    # first ``indexed`` positions) rank first, those an earlier run kept before those it removed: they are
    # in the corpus already (or were removed for a document that is), so no new row can change them.
    keys = sets.drop_columns(["shingles"])
    by_row = np.asarray(pc.sort_indices(keys[ROW]), dtype=np.int64)
    node_of_pos = np.empty(len(by_row), dtype=np.int64)
    index_keys = np.asarray(keys[ROW].slice(0, indexed), dtype=np.int64)
    kept_first = by_row[:indexed][
        np.argsort(anchor[by_row[:indexed]] != index_keys[by_row[:indexed]], kind="stable")
    ]
    node_of_pos[kept_first] = np.arange(indexed)
    node_of_pos[by_row[indexed:]] = indexed + keep_ranks(
        keys.take(pa.array(by_row[indexed:])), id_column, priority_column
    )
    pos_of_node = np.empty_like(node_of_pos)
    pos_of_node[node_of_pos] = np.arange(len(node_of_pos), dtype=np.int64)
    shingles = shingles_of(sets["shingles"])
    owners = keys[ROW].combine_chunks()
    edges = np.stack(
        [
            node_of_pos[np.asarray(pc.index_in(pairs[end], value_set=owners), dtype=np.int64)]
            for end in ("u", "v")
        ],
        axis=1,
    )

    def measure(node_pairs: np.ndarray) -> np.ndarray:
        sims = jaccard(shingles, pos_of_node[node_pairs], sets=True)
        sims[node_pairs.max(axis=1, initial=0) < indexed] = 0.0  # two indexed documents: both stay kept
        return sims

    if "sim" in pairs.column_names:
        sims = np.asarray(pairs["sim"], dtype=np.float64)
    elif config.verify:
        sims = measure(edges)
        similar = sims >= config.threshold
        edges, sims = edges[similar], sims[similar]
    else:
        sims = None
    info["verified_edges"] = len(edges)
    removed = np.flatnonzero(anchor != index_keys)
    if len(removed):  # each indexed document an earlier run removed stays tied to the document it kept
        owner = np.asarray(pc.index_in(pa.array(anchor[removed]), value_set=owners), dtype=np.int64)
        tied = np.stack((node_of_pos[removed], node_of_pos[owner]), axis=1)
        edges = np.concatenate((edges, tied))
        if sims is not None:
            sims = np.concatenate((sims, jaccard(shingles, np.stack((removed, owner), axis=1), sets=True)))
    labels, graph = cluster_labels(len(keys), edges, sims, config, measure if config.verify else None)
    info.update(graph)
    if index is not None:
        info["indexed_nodes"] = indexed
        info["matched_index"] = int(np.count_nonzero(labels[indexed:] < indexed))
    return _node_info(keys.take(pa.array(pos_of_node)), labels, id_column)


def _indexed_sets(
    index: IndexInfo,
    keys: pa.Array,
    like: pa.Schema,
    id_column: str | None,
    priority_column: str | None,
    kw: dict[str, Any],
) -> tuple[pa.Table, np.ndarray]:
    """The node-set rows (``like``'s schema) of the indexed documents in ``keys`` and of the documents their
    removed ones were removed for, with each one's anchor (the key of the document kept for it; its own
    key when kept). ROW is the (negative) key, the id the indexed one cast to this input's id type, the
    priority null (indexed rows rank first)."""
    from zephyr.dedup.index import KEY

    found = index.node_sets(keys, kw)
    missing = pc.filter(found["anchor"], pc.invert(pc.is_in(found["anchor"], value_set=found[KEY])))
    if len(missing):  # a second filtered pass: the kept documents of removed ones, when not yet found
        found = pa.concat_tables([found, index.node_sets(pc.unique(missing), kw)])
    wanted = len(keys) + len(pc.unique(missing)) if len(missing) else len(keys)
    if found.num_rows != wanted:
        raise InputError(
            f"{wanted - found.num_rows} indexed documents named by band rows are missing from the index's "
            "docs parts; the index was changed by hand or a run is writing to it",
            path=index.path,
        )
    columns: dict[str, Any] = {ROW: found[KEY], "shingles": found["shingles"]}
    if id_column is not None:
        want = like.field(id_column).type
        try:
            columns[id_column] = found["id"].cast(want)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
            raise ConfigError(
                f"the index's ids are {found.schema.field('id').type}, this input's {id_column!r} is {want}, and "
                f"one cannot become the other ({exc}); index and dedup with the same id column"
            ) from None
    if priority_column is not None:
        columns[priority_column] = pa.nulls(found.num_rows, like.field(priority_column).type)
    table = pa.table(columns).select(like.names).cast(like)
    return table, np.asarray(found["anchor"], dtype=np.int64)


def fuzzy_dedup_dataset(
    ds: Dataset,
    config: FuzzyDedupConfig | None = None,
    *,
    text_column: str = "text",
    id_column: str | None = "id",
    mode: str = "annotate",
    priority_column: str | None = None,
    execution: ExecutionOptions | dict[str, Any] | None = None,
    in_memory_edges: int | None = None,
    stats: dict[str, Any] | None = None,
    index: IndexInfo | str | None = None,
    row_numbers: bool = False,
) -> Dataset:
    """MinHash-LSH dedup on the engine. Runs candidates, verification and clustering eagerly with
    ``execution``; returns a lazy Dataset with the input columns plus the dup columns.

    ``in_memory_edges``: candidate-pair count up to which verification can run in the driver; ``None``
    derives it from the memory budget (64 bytes per pair within a quarter of it); 0 forces verification on
    the engine. The driver also needs the endpoints' shingle sets to fit a sixteenth of the budget. The
    verified graph is clustered in the driver when it fits (48 bytes per edge within the budget), else by engine rounds (``clusters="components"`` only). ``stats``, when given, receives the
    eager phase's figures (candidate, verified and rejected pairs, rows split from components, the path).

    ``index`` (an ``IndexInfo`` or a path; ``zephyr.dedup.index``): earlier runs' kept documents. Their band
    rows join the bucket shuffle (read from the index's Parquet parts, never whole into RAM) and rank before
    every row of ``ds``; rows near an indexed document are removed like rows near an earlier kept row. Index
    documents are never in the output. Needs the verified graph to fit the driver. ``row_numbers``
    (annotate mode) keeps each row's number and its kept row's (``__dedup_row``, ``__dedup_keeper``; the
    kept row may be an indexed document): ``index.write_generation`` records them, ``StripRowNumbers``
    turns the result into the output of either mode.

    >>> import zephyr
    >>> base = "the quick brown fox jumps over the lazy dog and runs far away into the green forest today"
    >>> ds = zephyr.from_items([{"id": "a", "text": base}, {"id": "b", "text": base + " again"},
    ...                         {"id": "c", "text": "something else"}])
    >>> out = fuzzy_dedup_dataset(ds, FuzzyDedupConfig(threshold=0.7, ngram=3), execution={"executor": "inprocess"})
    >>> out.to_arrow(executor="inprocess").select(["id", "dup_cluster", "dup_keep"]).to_pylist()[1]
    {'id': 'b', 'dup_cluster': 'a', 'dup_keep': False}
    """
    config = config or FuzzyDedupConfig()
    check_mode(mode)
    kw = _execution_kwargs(execution)
    limit = _in_memory_limit(kw, in_memory_edges)
    if config.verify:  # the driver checks small pair sets itself: load its kernels while the workers hash
        from zephyr.dedup import compiled

        compiled.warm_up_in_background()
    if isinstance(index, str):
        from zephyr.dedup.index import open_index

        index = open_index(index, config)
    if row_numbers and mode != "annotate":
        raise ConfigError("row_numbers needs mode='annotate' (removed rows are what an index links through)")
    rows = ds.with_row_index(ROW)
    finish = _Finish(text_column, id_column, mode, row_numbers)
    band_rows = rows.map_batches(_BandRows(config, text_column), name="dedup.fuzzy.signatures")
    with _scratch(kw) as scratch:
        with _with_index_bands(band_rows, index, scratch, kw) as band_rows:
            edges = (
                band_rows.group_by("band", "bhash")
                .agg(members=(ROW, "list"), n=(ROW, "count"))
                .map_batches(
                    _BucketEdges(config.bucket_links or BUCKET_LINKS), name="dedup.fuzzy.bucket_edges"
                )
                .deduplicate("u", "v")
                .materialize(**kw)
            )
        candidates = edges.count(**kw)
        info: dict[str, Any] = {"candidate_edges": candidates, "in_memory_limit": limit}
        info["cluster_rule"] = config.clusters
        if index is not None:
            info["index"] = {"path": index.path, "docs": index.docs, "generations": len(index.generations)}
        logger.info("fuzzy dedup: %d candidate pairs, in-memory limit %d", candidates, limit)
        node_info, labels_ds = _cluster(
            rows, edges, candidates, config, text_column, id_column, priority_column, kw, info, index, scratch
        )
    info["rejected_edges"] = candidates - info["verified_edges"] if config.verify else 0
    if stats is not None:
        stats.update(info)
    if labels_ds is not None:
        joined = rows.join(labels_ds, on=ROW, how="left")
        return joined.map_batches(_mark_keep, name="dedup.fuzzy.keep").map_batches(
            finish, name="dedup.fuzzy.finish"
        )
    attach = _Attach(node_info, id_column)
    return rows.map_batches(attach, name="dedup.fuzzy.attach").map_batches(finish, name="dedup.fuzzy.finish")


def _cluster(
    rows: Dataset,
    edges: Dataset,
    candidates: int,
    config: FuzzyDedupConfig,
    text_column: str,
    id_column: str | None,
    priority_column: str | None,
    kw: dict[str, Any],
    info: dict[str, Any],
    index: IndexInfo | None,
    scratch: str,
) -> tuple[pa.Table | None, Dataset | None]:
    """Verify and cluster the candidate pairs: (node info for ``_Attach``, None) when the verified graph is
    clustered in the driver, (None, labels) when by engine rounds.

    The driver verifies when both the pairs (``in_memory_limit``) and the endpoints' shingle sets (an
    sixteenth of the memory budget) fit; the sets are written once to ``scratch`` either way, so the engine
    path joins sets, never texts, and nothing is shingled twice. Otherwise the pairs are verified on the
    engine (``verify_on_engine``) and only the verified graph comes to the driver."""
    budget = _memory_budget_bytes(kw)
    new_nodes: pa.Array | None = None
    pairs: pa.Table | None = None
    if candidates <= info["in_memory_limit"]:
        pairs = edges.to_arrow(**kw)
        if not pairs.num_rows:
            info.update(in_memory=True, verified_edges=0)
            return None, None
        nodes = pc.unique(pa.chunked_array(pairs["u"].chunks + pairs["v"].chunks).combine_chunks())
        new_nodes = nodes.filter(pc.greater_equal(nodes, 0))
    written = rows.map_batches(
        _NodeSets(new_nodes, config, text_column, id_column, priority_column), name="dedup.fuzzy.node_sets"
    ).write_parquet(f"{scratch}/sets", **kw)
    set_bytes = sum(stage["counters"].get("dedup/set_bytes", 0) for stage in written.stats["stages"])
    info["set_bytes"] = set_bytes
    import zephyr

    if not written.files:  # no row has a set: nothing can pair
        info.update(in_memory=pairs is not None, verified_edges=0)
        return None, None
    sets = zephyr.read_parquet(written.files)

    def collect_sets(keys: pa.Array) -> pa.Table:
        return sets.map_batches(RowsIn(ROW, keys), name="dedup.fuzzy.endpoint_sets").to_arrow(**kw)

    in_memory = pairs is not None and (not config.verify or set_bytes <= Budget(budget).driver_set_bytes)
    info["in_memory"] = in_memory
    if in_memory:
        return _graph_in_driver(
            collect_sets, pairs, config, id_column, priority_column, kw, info, index
        ), None
    if config.verify:
        set_rows = written.stats["stages"][-1]["rows_out"]
        parts, figures = verify_on_engine(
            edges, pairs, sets, set_rows, set_bytes, info["in_memory_limit"], budget, config, index, kw
        )
        info.update(figures)
    else:
        parts = [edges.map_batches(WithSim(), name="dedup.fuzzy.unverified")]
    files = [
        f for i, part in enumerate(parts) for f in part.write_parquet(f"{scratch}/verified-{i}", **kw).files
    ]
    verified = zephyr.read_parquet(files) if files else None
    count = verified.count(**kw) if verified is not None else 0
    info["verified_edges"] = count
    graph_limit = Budget(budget).driver_graph_edges
    if not count:
        return None, None
    if count <= graph_limit:
        pairs = verified.to_arrow(**kw)
        if not config.verify:
            pairs = pairs.drop_columns(["sim"])
        node_info = _graph_in_driver(collect_sets, pairs, config, id_column, priority_column, kw, info, index)
        return node_info, None
    if index is not None:
        raise ZephyrError(
            f"dedup against an index clusters in the driver, but {count} verified pairs exceed its share "
            f"of the memory budget ({graph_limit} pairs at {budget_module.GRAPH_BYTES_PER_EDGE} bytes each); raise "
            "--memory-budget, or dedup the input in parts"
        )
    if config.clusters != "components":
        raise ZephyrError(
            f"anchored clusters are formed in the driver, but {count} verified pairs exceed its share of the "
            f"memory budget ({graph_limit} pairs at {budget_module.GRAPH_BYTES_PER_EDGE} bytes each); raise "
            "--memory-budget, or pass --clusters components (engine rounds, transitive clusters)"
        )
    return None, _components_on_engine(rows, verified, id_column, priority_column, kw).materialize(**kw)


@contextlib.contextmanager
def _scratch(kw: dict[str, Any]) -> Iterator[str]:
    """A folder for the eager phase's intermediate Parquet, removed when the block ends: under ``work_dir``
    when one is given (remote workers see it), else a local temporary folder."""
    import uuid

    import fsspec

    work_dir = kw.get("work_dir")
    if work_dir:
        url = f"{str(work_dir).rstrip('/')}/dedup-scratch-{uuid.uuid4().hex[:12]}"
    else:
        url = tempfile.mkdtemp(prefix="zephyr-dedup-")
    try:
        yield url
    finally:
        fs, path = fsspec.core.url_to_fs(url)
        with contextlib.suppress(FileNotFoundError):
            fs.rm(path, recursive=True)


@contextlib.contextmanager
def _with_index_bands(
    band_rows: Dataset, index: IndexInfo | None, scratch: str, kw: dict[str, Any]
) -> Iterator[Dataset]:
    """``band_rows`` plus the index's band rows: the new rows' are written to ``scratch`` first, so that one
    Parquet read of both (same schema) feeds the bucket shuffle."""
    if index is None or not index.docs:
        yield band_rows
        return
    import zephyr

    new = band_rows.write_parquet(f"{scratch}/bands", **kw).files
    yield zephyr.read_parquet([*new, *index.band_files()])


def _components_on_engine(
    rows: Dataset, verified: Dataset, id_column: str | None, priority_column: str | None, kw: dict[str, Any]
) -> Dataset:
    """(ROW, KEEPER, CLUSTER, SIZE) of every row in a component, for graphs beyond the driver."""
    from zephyr.dedup.engine_components import LABEL, connected_components_dataset

    labels = connected_components_dataset(verified.select("u", "v"), execution=kw)
    keys = rows.select(ROW, *[c for c in (id_column, priority_column) if c is not None])
    members = labels.map_batches(lambda t: t.rename_columns([ROW, LABEL]), name="dedup.cc.members").join(
        keys, on=ROW
    )
    groups = _keepers(members, [LABEL], id_column, priority_column)
    return (
        members.select(ROW, LABEL).join(groups, on=LABEL).select(ROW, KEEPER, CLUSTER, SIZE).materialize(**kw)
    )


def paragraph_dedup_dataset(ds: Dataset, **kwargs: Any) -> Dataset:
    """Paragraph-level dedup needs a global "seen earlier" order; on the engine it is one shuffle-free
    pass after a stable sort by id into one partition (ties and null ids keep input order; without an id
    column, ``reshard(1)`` keeps input order), running ``exact.paragraph_dedup`` on the whole stream.

    Memory: the paragraph hashes of the corpus (16 bytes each plus the text of one batch). Keyword
    arguments are those of ``exact.paragraph_dedup``.
    """
    from zephyr.dedup.exact import paragraph_dedup

    id_column = kwargs.get("id_column", "id")
    text_column = kwargs.get("text_column", "text")

    def run(table: pa.Table) -> pa.Table:
        if not _has(table, text_column, "text"):
            return table
        result = paragraph_dedup(table, **kwargs)
        counters.increment("dedup/paragraphs_removed", result.stats["paragraphs_removed"])
        counters.increment("dedup/paragraph_bytes_removed", result.stats["bytes_removed"])
        return result.table

    ordered = ds.sort(id_column, num_partitions=1) if id_column else ds.reshard(1)
    return ordered.map_batches(run, batch_rows=1 << 62, name="dedup.paragraph")


def _execution_kwargs(execution: ExecutionOptions | dict[str, Any] | None) -> dict[str, Any]:
    if execution is None:
        return {}
    if isinstance(execution, dict):
        return dict(execution)
    return {f.name: getattr(execution, f.name) for f in dataclasses.fields(execution)}


def _memory_budget_bytes(kw: dict[str, Any]) -> int:
    from zephyr.options import ExecutionOptions

    return ExecutionOptions.from_kwargs(**kw).memory_budget_bytes


def _in_memory_limit(kw: dict[str, Any], given: int | None) -> int:
    """Row (pair) count up to which the work runs in the driver: ``given``, or 64 bytes a row within a
    quarter of the memory budget."""
    if given is not None:
        return given
    return Budget(_memory_budget_bytes(kw)).driver_pair_rows
