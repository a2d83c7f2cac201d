"""Dedup as engine stages: functions taking a ``zephyr.Dataset`` and returning one.

The per-batch work calls the same numpy kernels as the plain functions (``exact.document_hashes``,
``fuzzy.compute_signatures``, ``verify.jaccard``); the wide steps run on the engine's shuffle:

- exact: hash per batch → ``group_by(hash).agg(min id, count)`` → left join back → keep flag. Lazy.
- fuzzy: signatures + band hashes per batch → one row per (doc, band) → ``group_by(band, band hash)``
  with the member list → edges member → bucket minimum (linear) → distinct → verification (join both
  endpoints' texts, exact Jaccard of the shingle sets per batch) → connected components by iterative
  min-label propagation with pointer jumping, each round two joins and a group-by, materialized between
  rounds (external memory; labels are minima, so the result is deterministic) → left join to the input.
  The component rounds are actions, so ``fuzzy_dedup_dataset`` runs them eagerly with ``execution``
  and returns a lazy Dataset for the final join.

Columns added: ``dup_cluster`` (the smallest id of the cluster), ``dup_cluster_size``, ``dup_keep``.
Null texts pass through with null cluster columns and ``dup_keep = true``; rows with a null id are
quarantined (reason ``null id``). Counters: ``dedup/duplicates``, ``dedup/null_text``,
``dedup/cluster_size=N`` (clusters of N rows: the cluster-size histogram), ``dedup/candidate_edges``,
``dedup/verified_edges``, ``dedup/rejected_edges``.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from zephyr.dedup.config import ExactDedupConfig, FuzzyDedupConfig

from zephyr import counters
from zephyr.errors import ConfigError, InputError, SchemaError

if TYPE_CHECKING:
    from zephyr.dataset import Dataset
    from zephyr.options import ExecutionOptions

__all__ = ["exact_dedup_dataset", "fuzzy_dedup_dataset", "paragraph_dedup_dataset"]

logger = logging.getLogger(__name__)

H0, H1 = "__dedup_h0", "__dedup_h1"
CLUSTER, SIZE, KEEPER, MAXPRIO = "__dedup_cluster", "__dedup_size", "__dedup_keeper", "__dedup_maxprio"
NODE, LABEL = "__dedup_node", "__dedup_label"


def _check_mode(mode: str) -> None:
    if mode not in ("annotate", "remove"):
        raise ConfigError(f"mode must be 'annotate' or 'remove', got {mode!r}")


def _require(table: pa.Table, name: str, what: str) -> None:
    if name not in table.column_names:
        raise SchemaError(
            f"{what} column {name!r} not found; the input has {', '.join(table.column_names)} "
            f"(pass --{what}-column / {what}_column=)"
        )


def _split_null_ids(table: pa.Table, id_column: str) -> tuple[pa.Table, pa.Table | None]:
    null_id = pc.is_null(table[id_column])
    if not pc.any(null_id).as_py():
        return table, None
    return table.filter(pc.invert(null_id)), table.filter(null_id)


def _output(kept: pa.Table, rejected: pa.Table | None, dropped: dict[str, int] | None = None) -> Any:
    from zephyr.ops import BatchOutput

    if rejected is None and not dropped:
        return kept
    return BatchOutput(kept=kept, rejected=rejected, dropped=dropped or {}, reason="null id")


class _AddDocHash:
    """Adds the 128-bit xxh3 of the normalized text as two uint64 columns (null for null text)."""

    def __init__(self, text_column: str, id_column: str, normalize: str):
        self.text_column, self.id_column, self.normalize = text_column, id_column, normalize

    def __call__(self, table: pa.Table) -> Any:

        _require(table, self.text_column, "text")
        _require(table, self.id_column, "id")
        table, rejected = _split_null_ids(table, self.id_column)
        texts = table[self.text_column]
        counters.increment("dedup/null_text", int(texts.null_count))
        h0, h1 = _hash_columns(texts, self.normalize)
        return _output(table.append_column(H0, h0).append_column(H1, h1), rejected)


def _hash_columns(texts: pa.ChunkedArray, normalize: str) -> tuple[pa.Array, pa.Array]:
    """The two 64-bit halves of each normalized text's xxh3-128 (int64 bit patterns: the engine's shuffle keys
    are signed integers); null for null text."""
    from zephyr.dedup.exact import document_hashes

    hashes = document_hashes(texts, normalize)
    mask = ~np.asarray(pc.is_valid(texts), dtype=bool)
    return tuple(pa.array(hashes[:, k].view(np.int64), mask=mask, type=pa.int64()) for k in (0, 1))


class _Finish:
    """Turns the joined helper columns into dup_cluster / dup_cluster_size / dup_keep, then annotate/remove."""

    def __init__(
        self, id_column: str, mode: str, helpers: tuple[str, ...], singleton_when_missing: str | None
    ):
        self.id_column, self.mode, self.helpers = id_column, mode, helpers
        self.singleton_when_missing = (
            singleton_when_missing  # text column: valid text without cluster = singleton
        )

    def __call__(self, table: pa.Table) -> Any:
        cluster = table[CLUSTER]
        size = table[SIZE]
        keeper = table[KEEPER]
        if self.singleton_when_missing is not None:
            lone = pc.and_(pc.is_null(cluster), pc.is_valid(table[self.singleton_when_missing]))
            cluster = pc.if_else(lone, table[self.id_column].cast(cluster.type), cluster)
            size = pc.if_else(lone, pa.scalar(1, size.type), size)
            keeper = pc.if_else(lone, table[self.id_column].cast(keeper.type), keeper)
        keep = pc.fill_null(pc.equal(table[self.id_column].cast(keeper.type), keeper), True)
        keep = pc.or_(keep, pc.is_null(cluster))
        keep_np = np.asarray(keep, dtype=bool)
        sizes = np.asarray(size.fill_null(0), dtype=np.int64)
        members = np.asarray(pc.is_valid(cluster), dtype=bool)
        kept_sizes, per = np.unique(sizes[keep_np & members], return_counts=True)
        for s, c in zip(kept_sizes.tolist(), per.tolist()):
            counters.increment(f"dedup/cluster_size={s}", c)
        duplicates = int((~keep_np).sum())
        counters.increment("dedup/duplicates", duplicates)
        table = table.drop_columns([c for c in self.helpers if c in table.column_names])
        for name in ("dup_cluster", "dup_cluster_size", "dup_keep"):
            if name in table.column_names:
                table = table.drop_columns([name])
        if self.mode == "remove":
            return _output(table.filter(keep), None, {"duplicate": duplicates} if duplicates else None)
        table = table.append_column("dup_cluster", cluster)
        table = table.append_column("dup_cluster_size", size.cast(pa.int64()))
        return table.append_column("dup_keep", keep)


class _FilterMaxPriority:
    def __init__(self, priority_column: str):
        self.priority_column = priority_column

    def __call__(self, table: pa.Table) -> pa.Table:
        return table.filter(pc.fill_null(pc.equal(table[self.priority_column], table[MAXPRIO]), False))


def _keepers(members: Dataset, keys: list[str], id_column: str, priority_column: str | None) -> Dataset:
    """(keys..., CLUSTER = min id, SIZE, KEEPER) per cluster; keeper = min id, or max priority then min id."""
    if priority_column is None:
        return (
            members.group_by(*keys)
            .agg(**{CLUSTER: (id_column, "min"), SIZE: (id_column, "count")})
            .map_batches(lambda t: t.append_column(KEEPER, t[CLUSTER]), name="dedup.keeper")
        )
    groups = members.group_by(*keys).agg(
        **{CLUSTER: (id_column, "min"), SIZE: (id_column, "count"), MAXPRIO: (priority_column, "max")}
    )
    best = (
        members.select(*keys, id_column, priority_column)
        .join(groups.select(*keys, MAXPRIO), on=keys)
        .map_batches(_FilterMaxPriority(priority_column), name="dedup.max_priority")
        .group_by(*keys)
        .agg(**{KEEPER: (id_column, "min")})
    )
    return groups.select(*keys, CLUSTER, SIZE).join(best, on=keys)


class _MemberHashes:
    """(id, H0, H1[, priority]) of every row with an id: the small table the in-memory exact path groups.
    Null-id rows are skipped here; the final pass quarantines them (once)."""

    def __init__(self, text_column: str, id_column: str, normalize: str, priority_column: str | None):
        self.text_column, self.id_column, self.normalize = text_column, id_column, normalize
        self.priority_column = priority_column

    def __call__(self, table: pa.Table) -> pa.Table:

        _require(table, self.text_column, "text")
        _require(table, self.id_column, "id")
        table = table.filter(pc.is_valid(table[self.id_column]))
        h0, h1 = _hash_columns(table[self.text_column], self.normalize)
        cols = {self.id_column: table[self.id_column], H0: h0, H1: h1}
        if self.priority_column:
            _require(table, self.priority_column, "priority")
            cols[self.priority_column] = table[self.priority_column]
        return pa.table(cols)


class _AttachExact:
    """Final pass of the in-memory exact path: quarantine null ids, count null texts, attach the cluster
    columns of the rows that have duplicates (a broadcast lookup by id; every other row is a singleton)."""

    def __init__(self, node_info: pa.Table | None, text_column: str, id_column: str):
        self.attach = _AttachClusters(node_info, id_column) if node_info is not None else _NoClusters(id_column)
        self.text_column, self.id_column = text_column, id_column

    def __call__(self, table: pa.Table) -> Any:
        _require(table, self.text_column, "text")
        _require(table, self.id_column, "id")
        table, rejected = _split_null_ids(table, self.id_column)
        counters.increment("dedup/null_text", int(table[self.text_column].null_count))
        return _output(self.attach(table), rejected)


def exact_dedup_dataset(
    ds: Dataset,
    *,
    text_column: str = "text",
    id_column: str = "id",
    normalize: str = "default",
    mode: str = "annotate",
    priority_column: str | None = None,
    execution: ExecutionOptions | dict[str, Any] | None = None,
    in_memory_rows: int | None = None,
    stats: dict[str, Any] | None = None,
) -> Dataset:
    """Document-level exact dedup on the engine; same output columns as ``exact.exact_dedup``.

    Without ``execution`` the plan is lazy: hash → ``group_by(hash)`` → a shuffle join of every column back
    onto its group. With ``execution``, one eager pass first hashes each row into a small (id, hash) table;
    when it has at most ``in_memory_rows`` rows (default: 64 bytes a row within a quarter of the memory
    budget) and the ids are unique, the groups are formed from it in the driver and the returned plan only
    reads the input once more and attaches the cluster columns by id — no shuffle of the text, no second
    hash. Otherwise the lazy plan is returned. ``stats`` receives which path ran and why.

    >>> import zephyr
    >>> ds = zephyr.from_items([{"id": 2, "text": "A  b"}, {"id": 1, "text": "a b"}, {"id": 3, "text": "c"}])
    >>> exact_dedup_dataset(ds, mode="remove").sort("id").to_arrow(executor="inprocess")["id"].to_pylist()
    [1, 3]
    """
    ExactDedupConfig(normalize=normalize)
    _check_mode(mode)
    info: dict[str, Any] = {"in_memory": False}
    if execution is not None:
        kw = _execution_kwargs(execution)
        limit = _in_memory_limit(kw, in_memory_rows)
        members = ds.map_batches(
            _MemberHashes(text_column, id_column, normalize, priority_column), name="dedup.exact.member_hashes"
        ).materialize(**kw)
        rows = members.count(**kw)
        info.update(member_rows=rows, in_memory_limit=limit)
        table = members.to_arrow(**kw) if 0 < rows <= limit else None
        if table is not None and pc.count_distinct(table[id_column]).as_py() != table.num_rows:
            info["fallback"] = f"ids in column {id_column!r} are not unique"
            table = None
        elif table is None:
            info["fallback"] = f"{rows} rows exceed the in-memory limit {limit}" if rows else "no rows"
        if table is not None:
            info["in_memory"] = True
            node_info = _exact_node_info(table, id_column, priority_column, kw)
            if stats is not None:
                stats.update(info, duplicate_rows=0 if node_info is None else node_info.num_rows)
            attached = ds.map_batches(_AttachExact(node_info, text_column, id_column), name="dedup.exact.attach")
            return attached.map_batches(
                _Finish(id_column, mode, (CLUSTER, SIZE, KEEPER), text_column), name="dedup.exact.finish"
            )
        logger.info("exact dedup: shuffle-join path (%s)", info["fallback"])
    if stats is not None:
        stats.update(info)
    hashed = ds.map_batches(_AddDocHash(text_column, id_column, normalize), name="dedup.exact.hash")
    cols = [H0, H1, id_column] + ([priority_column] if priority_column else [])
    members_ds = hashed.select(*cols).map_batches(
        lambda t: t.filter(pc.is_valid(t[H0])), name="dedup.exact.members"
    )
    groups = _keepers(members_ds, [H0, H1], id_column, priority_column)
    joined = hashed.join(groups, on=[H0, H1], how="left")
    return joined.map_batches(
        _Finish(id_column, mode, (H0, H1, CLUSTER, SIZE, KEEPER), None), name="dedup.exact.finish"
    )


def _exact_node_info(
    members: pa.Table, id_column: str, priority_column: str | None, kw: dict[str, Any]
) -> pa.Table | None:
    """(NODE, CLUSTER, SIZE, KEEPER) of the rows whose normalized text occurs more than once; None if none."""
    import zephyr

    valid = members.filter(pc.is_valid(members[H0]))
    counts = valid.group_by([H0, H1]).aggregate([([], "count_all")])
    repeated = counts.filter(pc.greater(counts["count_all"], 1)).select([H0, H1])
    if repeated.num_rows == 0:
        return None
    dup = valid.join(repeated, keys=[H0, H1], join_type="inner")
    groups = _keepers(zephyr.from_arrow(dup), [H0, H1], id_column, priority_column).to_arrow(**kw)
    info = dup.select([H0, H1, id_column]).join(groups, keys=[H0, H1], join_type="inner")
    return pa.table(
        {NODE: info[id_column], CLUSTER: info[CLUSTER], SIZE: info[SIZE], KEEPER: info[KEEPER]}
    ).combine_chunks()


# -- fuzzy ---------------------------------------------------------------------------------------------


class _BandRows:
    """One row (id, band, band hash) per document and band; documents without shingles emit none."""

    def __init__(self, config: FuzzyDedupConfig, text_column: str, id_column: str):
        self.config, self.text_column, self.id_column = config, text_column, id_column

    def __call__(self, table: pa.Table) -> Any:
        from zephyr.dedup.fuzzy import compute_signatures

        _require(table, self.text_column, "text")
        _require(table, self.id_column, "id")
        table, rejected = _split_null_ids(table, self.id_column)
        shingles, bands = compute_signatures(table[self.text_column], self.config)
        has = np.flatnonzero(shingles.counts > 0)
        counters.increment("dedup/null_text", int(table[self.text_column].null_count))
        nb = bands.shape[1]
        ids = table[self.id_column].take(pa.array(np.repeat(has, nb)))
        out = pa.table(
            {
                NODE: ids,
                "band": pa.array(np.tile(np.arange(nb, dtype=np.int32), len(has))),
                "bhash": pa.array(bands[has].reshape(-1).view(np.int64), type=pa.int64()),
            }
        )
        if rejected is not None:
            from zephyr.ops import BatchOutput

            return BatchOutput(kept=out, rejected=rejected, reason="null id")
        return out


def _bucket_edges(table: pa.Table) -> pa.Table:
    """Buckets (with their member lists) → edges member → bucket minimum, vectorized."""
    big = table.filter(pc.greater(table["n"], 1))
    members = big["members"].combine_chunks()
    parent = pc.list_parent_indices(members)
    values = members.flatten()
    flat = pa.table({"p": parent, "u": values})
    mins = flat.group_by("p").aggregate([("u", "min")])
    order = np.argsort(np.asarray(mins["p"]))
    bucket_min = mins["u_min"].take(pa.array(order))
    v = bucket_min.take(parent)
    edges = pa.table({"u": values, "v": v}).filter(pc.not_equal(values, v))
    counters.increment("dedup/candidate_edges", edges.num_rows)
    return edges


class _VerifyEdges:
    """Keeps the edges whose two texts reach the Jaccard threshold (exact, on the shingle-hash sets)."""

    def __init__(self, config: FuzzyDedupConfig, text_u: str, text_v: str):
        self.config, self.text_u, self.text_v = config, text_u, text_v

    def __call__(self, table: pa.Table) -> pa.Table:
        from zephyr.dedup.shingles import shingle_hashes
        from zephyr.dedup.verify import jaccard

        m = table.num_rows
        cfg = self.config
        texts = pa.chunked_array(table[self.text_u].chunks + table[self.text_v].chunks).cast(
            pa.large_string()
        )
        s = shingle_hashes(texts, kind=cfg.shingle, n=cfg.ngram, normalize=cfg.normalize)
        sims = jaccard(s, np.stack((np.arange(m), np.arange(m) + m), axis=1)) if m else np.zeros(0)
        keep = sims >= cfg.threshold
        counters.increment("dedup/verified_edges", int(keep.sum()))
        counters.increment("dedup/rejected_edges", int((~keep).sum()))
        return table.select(["u", "v"]).filter(pa.array(keep))


def _hook(table: pa.Table) -> pa.Table:
    """Edge (u, v, label u, label v) → candidate labels min(lu, lv) for both endpoints."""
    m = pc.min_element_wise(table["lu"], table["lv"])
    return pa.table(
        {
            NODE: pa.concat_arrays([_arr(table["u"]), _arr(table["v"])]),
            LABEL: pa.concat_arrays([_arr(m), _arr(m)]),
        }
    )


def _arr(col: pa.ChunkedArray | pa.Array) -> pa.Array:
    return col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col


def _jump(table: pa.Table) -> pa.Table:
    """(node, label, label of label) → (node, min of the two)."""
    return pa.table({NODE: table[NODE], LABEL: pc.min_element_wise(table[LABEL], table["ll"])})


def _changed(table: pa.Table) -> pa.Table:
    return table.filter(pc.not_equal(table[LABEL], table["old"]))


def _execution_kwargs(execution: ExecutionOptions | dict[str, Any] | None) -> dict[str, Any]:
    if execution is None:
        return {}
    if isinstance(execution, dict):
        return dict(execution)
    return {f.name: getattr(execution, f.name) for f in dataclasses.fields(execution)}


def connected_components_dataset(
    edges: Dataset, *, execution: ExecutionOptions | dict[str, Any] | None = None, max_rounds: int = 64
) -> Dataset:
    """(NODE, LABEL = smallest node of its component) for every node in ``edges`` (columns u, v).

    Min-label propagation: each round joins the labels onto both endpoints, hooks both to the smaller
    label (group-by min), then jumps pointers once (label ← label of label); rounds run until no label
    changes. Labels only decrease and are bounded by the component minimum, so the fixpoint is unique.
    """
    kw = _execution_kwargs(execution)
    edges = edges.materialize(**kw)
    labels = (
        edges.map_batches(
            lambda t: pa.table(
                {
                    NODE: pa.concat_arrays([_arr(t["u"]), _arr(t["v"])]),
                    LABEL: pa.concat_arrays([_arr(pc.min_element_wise(t["u"], t["v"]))] * 2),
                }
            ),
            name="dedup.cc.init",
        )
        .group_by(NODE)
        .agg(**{LABEL: (LABEL, "min")})
        .materialize(**kw)
    )
    for round_no in range(1, max_rounds + 1):
        lab_u = labels.map_batches(lambda t: t.rename_columns(["u", "lu"]), name="dedup.cc.lu")
        lab_v = labels.map_batches(lambda t: t.rename_columns(["v", "lv"]), name="dedup.cc.lv")
        hooked = (
            edges.join(lab_u, on="u")
            .join(lab_v, on="v")
            .map_batches(_hook, name="dedup.cc.hook")
            .group_by(NODE)
            .agg(**{LABEL: (LABEL, "min")})
        )
        parent = hooked.map_batches(lambda t: t.rename_columns([LABEL, "ll"]), name="dedup.cc.parent")
        new = hooked.join(parent, on=LABEL).map_batches(_jump, name="dedup.cc.jump").materialize(**kw)
        old = labels.map_batches(lambda t: t.rename_columns([NODE, "old"]), name="dedup.cc.old")
        changed = new.join(old, on=NODE).map_batches(_changed, name="dedup.cc.changed").count(**kw)
        logger.info("connected components: round %d, %d labels changed", round_no, changed)
        labels = new
        if changed == 0:
            return labels
    raise ConfigError(f"connected components did not converge in {max_rounds} rounds; raise max_rounds")


class _NoClusters:
    """No verified edge at all: null cluster columns (typed like the ids), which ``_Finish`` makes singletons."""

    def __init__(self, id_column: str):
        self.id_column = id_column

    def __call__(self, table: pa.Table) -> pa.Table:
        id_type = table.schema.field(self.id_column).type
        for name, kind in ((CLUSTER, id_type), (SIZE, pa.int64()), (KEEPER, id_type)):
            table = table.append_column(name, pa.nulls(table.num_rows, kind))
        return table


def _in_memory_limit(kw: dict[str, Any], given: int | None) -> int:
    """Row (edge) count up to which the work runs in the driver: ``given``, or 64 bytes a row within a quarter
    of the memory budget."""
    from zephyr.options import ExecutionOptions

    if given is not None:
        return given
    return ExecutionOptions.from_kwargs(**kw).memory_budget_bytes // 4 // 64


def _components(edges: Dataset, kw: dict[str, Any], limit: int) -> Dataset | None:
    """Labels (NODE, LABEL) of the verified-edge graph: in memory when it is small, else engine rounds."""
    edges = edges.materialize(**kw)
    count = edges.count(**kw)
    if count == 0:  # no verified edge: the caller marks every document a singleton (empty joins lose schema)
        return None
    logger.info(
        "connected components: %d verified edges, in-memory limit %d -> %s",
        count,
        limit,
        "numpy in the driver" if count <= limit else "engine rounds",
    )
    if count > limit:
        return connected_components_dataset(edges, execution=kw)
    return _labels_in_memory(edges.to_arrow(**kw))


def _labels_in_memory(table: pa.Table) -> Dataset:
    """(NODE, LABEL = smallest id of its component) from an in-memory edge table (u, v), with numpy."""
    from zephyr.dedup.components import connected_components

    import zephyr

    ids = pa.chunked_array(table["u"].chunks + table["v"].chunks).combine_chunks()
    nodes = pc.unique(ids)
    nodes = nodes.take(pc.sort_indices(nodes))  # code order = id order, so the min code is the min id
    u = np.asarray(pc.index_in(table["u"], value_set=nodes), dtype=np.int64)
    v = np.asarray(pc.index_in(table["v"], value_set=nodes), dtype=np.int64)
    labels = connected_components(len(nodes), np.stack((u, v), axis=1))
    return zephyr.from_arrow(pa.table({NODE: nodes, LABEL: nodes.take(pa.array(labels))}))


class _ShingleSetsOf:
    """(id, sorted shingle set) of the rows whose id is in ``nodes``: the texts verification needs."""

    def __init__(self, nodes: pa.Array, config: FuzzyDedupConfig, text_column: str, id_column: str):
        self.nodes, self.config, self.text_column, self.id_column = nodes, config, text_column, id_column

    def __call__(self, table: pa.Table) -> pa.Table:
        from zephyr.dedup.shingles import shingle_hashes, unique_sets

        wanted = table.filter(pc.is_in(table[self.id_column], value_set=self.nodes))
        cfg = self.config
        sets = unique_sets(
            shingle_hashes(wanted[self.text_column], kind=cfg.shingle, n=cfg.ngram, normalize=cfg.normalize)
        )
        lists = pa.LargeListArray.from_arrays(pa.array(sets.offsets), pa.array(sets.hashes, pa.uint64()))
        return pa.table({NODE: wanted[self.id_column], "shingles": lists})


def _verify_in_memory(
    ds: Dataset, edges: pa.Table, config: FuzzyDedupConfig, text_column: str, id_column: str, kw: dict[str, Any]
) -> pa.Table:
    """Exact-Jaccard check of a driver-sized edge table: one pass over the input collects the shingle sets of
    the edges' endpoints only (no join of the whole text column), then a merge count per edge."""
    from zephyr.dedup.shingles import Shingles
    from zephyr.dedup.verify import jaccard

    nodes = pc.unique(pa.chunked_array(edges["u"].chunks + edges["v"].chunks).combine_chunks())
    sets = (
        ds.select(id_column, text_column)
        .map_batches(_ShingleSetsOf(nodes, config, text_column, id_column), name="dedup.fuzzy.verify_sets")
        .to_arrow(**kw)
    )
    lists = sets["shingles"].combine_chunks()
    shingles = Shingles(
        hashes=np.asarray(lists.flatten(), dtype=np.uint64),
        offsets=np.asarray(lists.offsets, dtype=np.int64) - lists.offsets[0].as_py(),
    )
    owners = sets[NODE].combine_chunks()
    positions = [pc.index_in(edges[end], value_set=owners) for end in ("u", "v")]
    if any(p.null_count for p in positions):  # the input changed between passes: never index garbage
        raise InputError(
            f"{sum(p.null_count for p in positions)} candidate-edge endpoints have no row on the second read of "
            f"the input (column {id_column!r}); the input must not change while the job runs"
        )
    pairs = np.stack([np.asarray(p, dtype=np.int64) for p in positions], axis=1)
    keep = jaccard(shingles, pairs, sets=True) >= config.threshold
    return edges.filter(pa.array(keep))


class _AttachClusters:
    """Looks each row's id up in a small (NODE, CLUSTER, SIZE, KEEPER) table held in memory (a broadcast
    join: the input keeps its shards and order, no shuffle of the text)."""

    def __init__(self, node_info: pa.Table, id_column: str):
        self.node_info, self.id_column = node_info, id_column

    def __call__(self, table: pa.Table) -> pa.Table:
        idx = pc.index_in(table[self.id_column], value_set=self.node_info[NODE].combine_chunks())
        for name in (CLUSTER, SIZE, KEEPER):
            table = table.append_column(name, self.node_info[name].take(idx))
        return table


def fuzzy_dedup_dataset(
    ds: Dataset,
    config: FuzzyDedupConfig | None = None,
    *,
    text_column: str = "text",
    id_column: str = "id",
    mode: str = "annotate",
    priority_column: str | None = None,
    execution: ExecutionOptions | dict[str, Any] | None = None,
    in_memory_edges: int | None = None,
    stats: dict[str, Any] | None = None,
) -> Dataset:
    """MinHash-LSH dedup on the engine. Runs candidates, verification and components eagerly (they are
    iterative) with ``execution``; returns a lazy Dataset with the input columns plus the dup columns.

    ``in_memory_edges``: candidate-edge count up to which the graph work runs in the driver: verification
    collects only the endpoints' shingle sets (one filtered pass over the input), components use numpy,
    and the cluster columns are attached to the input by a broadcast lookup instead of a shuffle join.
    ``None`` derives it from the memory budget (64 bytes per edge within a quarter of it); 0 forces the
    external-memory path (join-based verification, component rounds, shuffle join). ``stats``, when
    given, receives the eager phase's figures (candidate, verified and rejected edges, which path ran).

    >>> import zephyr
    >>> base = "the quick brown fox jumps over the lazy dog and runs far away into the green forest today"
    >>> ds = zephyr.from_items([{"id": "a", "text": base}, {"id": "b", "text": base + " again"},
    ...                         {"id": "c", "text": "something else"}])
    >>> out = fuzzy_dedup_dataset(ds, FuzzyDedupConfig(threshold=0.7, ngram=3), execution={"executor": "inprocess"})
    >>> out.sort("id").to_arrow(executor="inprocess").select(["id", "dup_cluster", "dup_keep"]).to_pylist()[1]
    {'id': 'b', 'dup_cluster': 'a', 'dup_keep': False}
    """
    import zephyr

    config = config or FuzzyDedupConfig()
    _check_mode(mode)
    kw = _execution_kwargs(execution)
    limit = _in_memory_limit(kw, in_memory_edges)
    if config.verify:  # the driver checks small edge sets itself: load its kernels while the workers hash
        from zephyr.dedup import compiled

        compiled.warm_up_in_background()
    band_rows = ds.map_batches(_BandRows(config, text_column, id_column), name="dedup.fuzzy.signatures")
    edges = (
        band_rows.group_by("band", "bhash")
        .agg(members=(NODE, "list"), n=(NODE, "count"))
        .map_batches(_bucket_edges, name="dedup.fuzzy.bucket_edges")
        .deduplicate("u", "v")
        .materialize(**kw)
    )
    candidates = edges.count(**kw)
    in_memory = candidates <= limit
    info: dict[str, Any] = {"candidate_edges": candidates, "in_memory": in_memory, "in_memory_limit": limit}
    logger.info("fuzzy dedup: %d candidate edges, in-memory limit %d", candidates, limit)
    if in_memory:
        edge_table = edges.to_arrow(**kw)
        if config.verify and edge_table.num_rows:
            edge_table = _verify_in_memory(ds, edge_table, config, text_column, id_column, kw)
        info["verified_edges"] = edge_table.num_rows
        labels = _labels_in_memory(edge_table) if edge_table.num_rows else None
    else:
        if config.verify:
            texts = ds.select(id_column, text_column)
            text_u = texts.map_batches(lambda t: t.rename_columns(["u", "text_u"]), name="dedup.fuzzy.text_u")
            text_v = texts.map_batches(lambda t: t.rename_columns(["v", "text_v"]), name="dedup.fuzzy.text_v")
            edges = (
                edges.join(text_u, on="u")
                .join(text_v, on="v")
                .map_batches(_VerifyEdges(config, "text_u", "text_v"), name="dedup.fuzzy.verify")
            )
        edges = edges.materialize(**kw)
        info["verified_edges"] = edges.count(**kw)
        labels = _components(edges, kw, limit)
    info["rejected_edges"] = candidates - info["verified_edges"]
    if stats is not None:
        stats.update(info)
    if labels is None:
        return ds.map_batches(_NoClusters(id_column), name="dedup.fuzzy.no_clusters").map_batches(
            _Finish(id_column, mode, (CLUSTER, SIZE, KEEPER), text_column), name="dedup.fuzzy.finish"
        )
    if in_memory and priority_column is None:
        nodes = labels.to_arrow(**kw)
        members = zephyr.from_arrow(nodes.rename_columns([id_column, LABEL]))
    else:
        members = ds.select(id_column, *([priority_column] if priority_column else [])).join(
            labels, left_on=id_column, right_on=NODE
        )
    groups = _keepers(members, [LABEL], id_column, priority_column)
    node_info = labels.join(groups, on=LABEL).select(NODE, CLUSTER, SIZE, KEEPER)
    finish = _Finish(id_column, mode, (NODE, CLUSTER, SIZE, KEEPER), text_column)
    if in_memory:
        attached = ds.map_batches(_AttachClusters(node_info.to_arrow(**kw), id_column), name="dedup.fuzzy.attach")
        return attached.map_batches(finish, name="dedup.fuzzy.finish")
    joined = ds.join(node_info, left_on=id_column, right_on=NODE, how="left")
    return joined.map_batches(finish, name="dedup.fuzzy.finish")


def paragraph_dedup_dataset(ds: Dataset, **kwargs: Any) -> Dataset:
    """Paragraph-level dedup needs a global "seen earlier" order; on the engine it is one shuffle-free
    pass after ``reshard(1)``, running ``exact.paragraph_dedup`` on the whole stream in id order.

    Memory: the paragraph hashes of the corpus (16 bytes each plus the text of one batch). Keyword
    arguments are those of ``exact.paragraph_dedup``.
    """
    from zephyr.dedup.exact import paragraph_dedup

    id_column = kwargs.get("id_column", "id")

    def run(table: pa.Table) -> pa.Table:
        result = paragraph_dedup(table, **kwargs)
        counters.increment("dedup/paragraphs_removed", result.stats["paragraphs_removed"])
        counters.increment("dedup/paragraph_bytes_removed", result.stats["bytes_removed"])
        return result.table

    ordered = ds.sort(id_column, num_partitions=1) if id_column else ds.reshard(1)
    return ordered.map_batches(run, batch_rows=1 << 62, name="dedup.paragraph")
