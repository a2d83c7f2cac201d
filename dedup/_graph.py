"""The fuzzy dedup graph: verification of candidate pairs (driver and engine), connected components (numpy and
engine rounds), anchored clusters, and where each runs.

Exact Jaccard of candidate pairs on their shingle-hash sets, vectorized over many pairs at once.

``J(A, B) = |A ∩ B| / |A ∪ B|`` on the sets of 64-bit shingle hashes (duplicates within a document are
removed first). Two empty sets have J = 1. This is the check that keeps MinHash-LSH false positives (and
the transitive chains they would build) out of the clusters.

>>> import pyarrow as pa
>>> from zephyr.dedup._hashing import shingle_hashes
>>> s = unique_sets(shingle_hashes(pa.array(["a b c d", "a b c e", "a b c d"]), n=2))
>>> jaccard(s, np.array([[1, 0], [2, 0]])).round(3).tolist()
[0.5, 1.0]

Connected components of an edge list in memory: min-label propagation with pointer jumping (numpy).

Every node ends with the smallest node index of its component as its label, so the result does not
depend on edge order. Each round hooks both endpoints (and their current labels) to the smaller label,
then jumps pointers ``label = label[label]`` until stable; rounds repeat until no label changes. The
number of rounds grows with the logarithm of the component diameter in practice.

The engine version of the same algorithm (external memory, joins and group-bys) is
``connected_components_dataset``.

>>> connected_components(5, np.array([[1, 0], [4, 3], [3, 1]])).tolist()
[0, 0, 2, 0, 0]

Anchored clusters: a row is a duplicate only of the kept row of its cluster, never of a chain.

Connected components join A–B–C when A~B and B~C even if A and C share nothing: a chain of 30 documents,
each J = 0.9 to the next and J < 0.2 first to last, becomes one cluster of 30, and a templated source whose
pages all overlap a little collapses into one cluster (Marin #6854: 859,092 documents → 2). Anchoring
removes a row only if its own verified Jaccard to the row that is kept reaches the threshold:

1. Nodes are numbered in *keep order* (node 0 is the row every rule prefers: highest priority, then
   smallest id, then input position), so "earlier" means "would be kept first".
2. One sweep in that order: a node is an **anchor** (kept) unless it has a verified edge to an earlier
   anchor. A removed node never anchors anyone, so in the chain doc 1 is kept, doc 2 joins it, doc 3
   (not near doc 1) is kept, doc 4 joins doc 3, and so on. A removed node near several earlier anchors
   joins the one whose cluster holds most of its verified neighbours (then the most similar, then the
   earliest): which kept row it joins is free under the rule, and this keeps the most true pairs together.
3. LSH only proposes some pairs (each bucket member to the bucket's first members), so a node may be
   near the anchor that took its earlier neighbour without a candidate edge to it. Each refinement round
   proposes ``(node, anchor of a verified earlier neighbour)`` for every verified edge whose ends have
   different anchors, verifies those pairs, and sweeps again; it stops when a round finds nothing new (at
   most ``max_rounds``). Every proposal is checked by true Jaccard, so no round can chain. Only earlier
   neighbours propose, so a node's fate depends on the nodes before it alone (causal): rows that come
   later in keep order, in this run or a later one against an index, never change it.

The sweep is sequential (a node's fate depends on earlier ones): ``_compiled.greedy_anchors`` does it in
one O(nodes + edges) pass.

>>> import numpy as np
>>> chain = np.array([[i + 1, i] for i in range(5)])  # 0~1~2~3~4~5, no other pair similar
>>> anchors(6, chain).tolist()
[0, 0, 2, 2, 4, 4]

Connected components of an edge Dataset on the engine (external memory), for graphs beyond the driver.

Min-label propagation: each round joins the labels onto both endpoints, hooks both to the smaller label
(group-by min), then jumps pointers once (label ← label of label); rounds run until no label changes.
Labels only decrease and are bounded by the component minimum, so the fixpoint is unique and the result
does not depend on worker count. Each round is materialized (joins + group-bys over the edge files).

Verifying candidate pairs on the engine: shingle sets joined onto the pairs, a giant bucket's first
members broadcast.

A templated source puts most rows in the same LSH buckets, and each bucket member is paired with the bucket's
first few members (``_minhash.candidate_pairs``), so those few rows are the earlier end (v) of most pairs. Joined
row by row, each of their sets would be copied once per pair into a single partition: quadratic bytes and
one straggler task. Instead the pairs of such *hot* rows are grouped by their other end u, joined with u's
set once, and checked against the hot rows' sets, which travel with the stage (a broadcast). The remaining
*cold* pairs join both sets, at most ``_HOT_FAN`` copies of a set each. Sets, not texts, are joined: every
row is shingled once (``node_sets``), never once per pair.

The fuzzy dedup graph in the driver: verify a driver-sized candidate-pair table against the endpoints'
shingle sets, number the nodes in keep order (indexed documents first), and cluster them
(``cluster_labels``); the result is the node info ``_rows.Attach`` looks rows up in.

Verification and clustering of the fuzzy dedup candidate pairs, choosing where each runs.

The endpoints' shingle sets are written once (``node_sets``). When the pairs and the sets fit the driver,
verification and clusters run there (``graph_in_driver``). Otherwise the pairs are verified on
the engine (``verify_on_engine``); the verified graph is then clustered in the driver when it
fits, else (components only) by engine rounds (``connected_components_dataset``).
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from dataclasses import astuple, dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import zephyr.dedup._compiled as compiled
from zephyr.dedup._hashing import Shingles, as_array, shingle_hashes, unique_sets
from zephyr.dedup._rows import (
    CLUSTER,
    KEEPER,
    ROW,
    SIZE,
    budget_of,
    cluster_node_info,
    group_keepers,
    has_column,
    keep_ranks,
)
from zephyr.dedup.config import COLUMNS, DedupColumns, FuzzyDedupConfig

import zephyr
from zephyr import budget as budget_module
from zephyr import counters
from zephyr.budget import Budget
from zephyr.errors import ConfigError, InputError, ZephyrError

if TYPE_CHECKING:
    from zephyr.dedup.index import IndexInfo

    from zephyr.dataset import Dataset


def jaccard(sets: Shingles, edges: np.ndarray) -> np.ndarray:
    """float64 Jaccard of each ``edges[i] = [doc_u, doc_v]`` (row indices into ``sets``: sorted,
    de-duplicated shingle hashes, ``_hashing.unique_sets``): an exact merge of the two sorted sets
    (``_compiled.intersections``)."""
    inter = compiled.intersections(sets.hashes, sets.offsets, edges[:, 0], edges[:, 1])
    union = sets.counts[edges[:, 0]] + sets.counts[edges[:, 1]] - inter
    return np.where(union > 0, inter / np.maximum(union, 1), 1.0)  # two empty sets: J = 1


def connected_components(num_nodes: int, edges: np.ndarray) -> np.ndarray:
    """int64 label per node: the minimum node index of its component."""
    labels = np.arange(num_nodes, dtype=np.int64)
    if len(edges) == 0:
        return labels
    u, v = edges[:, 0].astype(np.int64), edges[:, 1].astype(np.int64)
    while True:
        lu, lv = labels[u], labels[v]
        m = np.minimum(lu, lv)
        new = labels.copy()
        for ends in (u, v, lu, lv):  # both endpoints and their labels hook to the smaller label
            np.minimum.at(new, ends, m)
        while True:
            jumped = new[new]
            if np.array_equal(jumped, new):
                break
            new = jumped
        if np.array_equal(new, labels):
            return labels
        labels = new


Measure = Callable[[np.ndarray], np.ndarray]
"""``measure(pairs)`` → float64 true Jaccard of each ``(n, 2)`` node pair."""


def _earlier_csr(num_nodes: int, edges: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per node, its neighbours that come earlier in keep order (CSR offsets, neighbours)."""
    hi, lo = edges.max(axis=1).astype(np.int64), edges.min(axis=1).astype(np.int64)
    order = np.argsort(hi, kind="stable")
    offsets = np.zeros(num_nodes + 1, dtype=np.int64)
    np.cumsum(np.bincount(hi, minlength=num_nodes), out=offsets[1:])
    return offsets, lo[order]


def anchors(num_nodes: int, edges: np.ndarray) -> np.ndarray:
    """int64 anchor of each node (itself when kept) from verified ``edges`` between nodes in keep order."""
    if len(edges) == 0:
        return np.arange(num_nodes, dtype=np.int64)
    return compiled.greedy_anchors(*_earlier_csr(num_nodes, edges))


def anchored_clusters(
    num_nodes: int,
    edges: np.ndarray,
    similarity: np.ndarray | None = None,
    *,
    measure: Measure | None = None,
    threshold: float = 0.0,
    max_rounds: int = 3,
) -> tuple[np.ndarray, np.ndarray, dict[str, int]]:
    """(cluster label per node: its kept node, all verified edges, stats) from verified ``edges`` between
    nodes in keep order and their ``similarity`` (None: all equal, as without verification).

    Which nodes are kept is decided by the sweep (``anchors``); a removed node then joins the adjacent
    earlier kept node it is most similar to (ties: the earliest). ``measure`` gives the Jaccard of the
    pairs that refinement rounds propose (None: no refinement); those reaching ``threshold`` become edges.
    Stats: ``refine_rounds``, ``refine_candidates`` (pairs proposed), ``refine_verified`` (of those, similar).
    """
    edges, similarity = _canonical(edges, similarity)
    anchor = anchors(num_nodes, edges)
    stats = {"refine_rounds": 0, "refine_candidates": 0, "refine_verified": 0}
    for _ in range(max_rounds if measure is not None else 0):
        proposed = _proposals(anchor, edges)
        if len(proposed) == 0:
            break
        stats["refine_rounds"] += 1
        stats["refine_candidates"] += len(proposed)
        sims = measure(proposed)
        similar = sims >= threshold
        stats["refine_verified"] += int(similar.sum())
        if not similar.any():
            break
        edges, similarity = _canonical(
            np.concatenate((edges, proposed[similar])), np.concatenate((similarity, sims[similar]))
        )
        anchor = anchors(num_nodes, edges)
    return _most_similar_anchor(anchor, edges, similarity), edges, stats


def _most_similar_anchor(
    anchor: np.ndarray, edges: np.ndarray, similarity: np.ndarray, rounds: int = 3
) -> np.ndarray:
    """Relabel each removed node with one of the earlier kept nodes it has a verified edge to: the one whose
    cluster holds most of its verified neighbours, then the most similar, then the earliest. Repeated a few
    times, since moving one node changes its neighbours' counts (stops when nothing moves)."""
    n = len(anchor)
    kept = anchor == np.arange(n)
    later, earlier = edges[:, 0], edges[:, 1]
    usable = kept[earlier] & ~kept[later]
    opt_node, opt_anchor, opt_sim = later[usable], earlier[usable], similarity[usable]
    if len(opt_node) == 0:
        return anchor
    both_node, both_other = np.concatenate((later, earlier)), np.concatenate((earlier, later))
    opt_key = opt_node * n + opt_anchor
    label = anchor.copy()
    for _ in range(rounds):
        votes_key, votes = np.unique(both_node * n + label[both_other], return_counts=True)
        at = np.searchsorted(votes_key, opt_key)
        found = (at < len(votes_key)) & (votes_key[np.minimum(at, len(votes_key) - 1)] == opt_key)
        score = np.where(found, votes[np.minimum(at, len(votes) - 1)], 0)
        order = np.lexsort((opt_anchor, -opt_sim, -score, opt_node))
        first = np.ones(len(order), dtype=bool)
        first[1:] = opt_node[order][1:] != opt_node[order][:-1]
        new = label.copy()
        new[opt_node[order][first]] = opt_anchor[order][first]
        if np.array_equal(new, label):
            break
        label = new
    return label


def _canonical(edges: np.ndarray, similarity: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
    """Distinct ``[later, earlier]`` pairs, sorted (so results never depend on edge order), with their
    similarity (1.0 when none is known)."""
    if similarity is None:
        similarity = np.ones(len(edges), dtype=np.float64)
    if len(edges) == 0:
        return np.zeros((0, 2), dtype=np.int64), np.zeros(0, dtype=np.float64)
    hi, lo = edges.max(axis=1).astype(np.int64), edges.min(axis=1).astype(np.int64)
    keep = hi != lo
    pairs, first = np.unique(np.stack((hi[keep], lo[keep]), axis=1), axis=0, return_index=True)
    return pairs, np.asarray(similarity, dtype=np.float64)[keep][first]


def _proposals(anchor: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """New pairs (node, anchor of a verified *earlier* neighbour) that are not edges yet. Only earlier
    neighbours: a node's fate then depends on the nodes before it in keep order alone, so rows added later
    (a later corpus, deduped against an index) never change an earlier row's fate."""
    u, v = edges[:, 0], edges[:, 1]  # canonical: u later than v
    pairs = np.stack((u, anchor[v]), axis=1)
    pairs = pairs[(pairs[:, 1] < pairs[:, 0]) & (anchor[pairs[:, 0]] != pairs[:, 1])]
    if len(pairs) == 0:
        return pairs
    pairs = np.unique(pairs, axis=0)
    return pairs[~np.isin(_pair_keys(pairs), _pair_keys(edges))]


def _pair_keys(pairs: np.ndarray) -> np.ndarray:
    """One sortable key per ``[later, earlier]`` pair (node numbers < 2³¹ in memory)."""
    return pairs[:, 0].astype(np.int64) << 31 | pairs[:, 1].astype(np.int64)


def cluster_labels(
    num_nodes: int,
    verified: np.ndarray,
    similarity: np.ndarray | None,
    config: FuzzyDedupConfig,
    measure: Measure | None,
) -> tuple[np.ndarray, dict[str, int]]:
    """Label (the kept node) of every node, nodes numbered in keep order, by ``config.clusters``; and the
    graph stats (``split_rows``: rows anchoring kept out of their component's cluster; refinement figures)."""
    if config.clusters == "components":
        labels = connected_components(num_nodes, verified)
        return labels, {"split_rows": 0, "refine_rounds": 0, "refine_candidates": 0, "refine_verified": 0}
    labels, edges, stats = anchored_clusters(
        num_nodes, verified, similarity, measure=measure, threshold=config.threshold
    )
    split = int((labels != connected_components(num_nodes, edges)).sum())  # what anchoring kept apart
    return labels, {"split_rows": split, **stats}


logger = logging.getLogger(__name__)

NODE, LABEL = "__dedup_node", "__dedup_label"


def _hook(table: pa.Table) -> pa.Table:
    """Edge (u, v, label u, label v) → candidate labels min(lu, lv) for both endpoints."""
    m = pc.min_element_wise(table["lu"], table["lv"])
    both = pa.table({NODE: table["u"], LABEL: m}), pa.table({NODE: table["v"], LABEL: m})
    return pa.concat_tables(both).combine_chunks()


def _jump(table: pa.Table) -> pa.Table:
    """(node, label, label of label) → (node, min of the two)."""
    return pa.table({NODE: table[NODE], LABEL: pc.min_element_wise(table[LABEL], table["ll"])})


def _changed(table: pa.Table) -> pa.Table:
    return table.filter(pc.not_equal(table[LABEL], table["old"]))


def connected_components_dataset(
    edges: Dataset, *, execution: dict[str, Any] | None = None, max_rounds: int = 64
) -> Dataset:
    """(NODE, LABEL = smallest node of its component) for every node in ``edges`` (columns u, v).

    Min-label propagation: each round joins the labels onto both endpoints, hooks both to the smaller
    label (group-by min), then jumps pointers once (label ← label of label); rounds run until no label
    changes. Labels only decrease and are bounded by the component minimum, so the fixpoint is unique.
    """
    kw = dict(execution or {})
    edges = edges.materialize(**kw)
    labels = (
        edges.map_batches(
            lambda t: _hook(t.append_column("lu", t["u"]).append_column("lv", t["v"])), name="dedup.cc.init"
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


_VERIFY_BATCH_ROWS = 2048
"""Pairs (or u rows, on the hot path) verified per batch on the engine path."""
_HOT_FAN = 32
"""A row that is the earlier end (v) of more candidate pairs than this is *hot* on the engine path."""
_PAIR_BYTES = 16
"""Bytes of one (u, v) pair held in memory: the hot pairs broadcast when they fit ``Budget.broadcast_bytes``."""


class RowsIn:
    """The rows whose ``column`` value is in ``keys`` (not in it, with ``keep=False``; every row when ``keys``
    is None), with ``rename`` applied to the column names."""

    def __init__(
        self, column: str, keys: pa.Array | None, rename: dict[str, str] | None = None, *, keep: bool = True
    ):
        self.column, self.keys, self.rename, self.keep = column, keys, rename or {}, keep

    def __call__(self, table: pa.Table) -> pa.Table:
        if self.keys is not None:
            inside = pc.is_in(table[self.column], value_set=self.keys)
            table = table.filter(inside if self.keep else pc.invert(inside))
        return table.rename_columns([self.rename.get(c, c) for c in table.column_names])


def shingles_of(lists: pa.Array | pa.ChunkedArray) -> Shingles:
    """A list<uint64> column of sorted sets as ``Shingles`` (no copy of the hashes when in one chunk)."""
    lists = as_array(lists)
    offsets = np.asarray(lists.offsets, dtype=np.int64)
    return Shingles(hashes=np.asarray(lists.flatten(), dtype=np.uint64), offsets=offsets - offsets[0])


def _joined(a: Shingles, b: Shingles) -> Shingles:
    """``a``'s documents then ``b``'s, as one ``Shingles``."""
    return Shingles(
        hashes=np.concatenate((a.hashes, b.hashes)),
        offsets=np.concatenate((a.offsets, a.offsets[-1] + b.offsets[1:])),
    )


def _set_pairs(threshold: float | None, table: pa.Table) -> pa.Table:
    """Keeps the pairs (u, v, shingles_u, shingles_v) whose two sets reach ``threshold``; None: the (position,
    sim) of every pair (position, u, v, shingles_u, shingles_v), none dropped."""
    m, sims = table.num_rows, np.zeros(0)
    if m:  # the Jaccard of each row's two sets
        both = _joined(shingles_of(table["shingles_u"]), shingles_of(table["shingles_v"]))
        sims = jaccard(both, np.stack((np.arange(m), np.arange(m) + m), axis=1))
    if threshold is not None:
        return similar_pairs(table, sims, threshold)
    return pa.table({"position": table["position"], "sim": pa.array(sims, pa.float64())})


def _side(sets: Dataset, end: str, keys: pa.Array | None, key: str = ROW, name: str = "sets") -> Dataset:
    """The (key, shingles) rows of ``sets`` whose key is in ``keys`` (all when None), as pair end ``end``."""
    rename = {key: end, "shingles": f"shingles_{end}"}
    return sets.map_batches(RowsIn(key, keys, rename), name=f"dedup.fuzzy.{name}_{end}")


class _VerifyHotPairs:
    """Keeps the pairs of (u, vs: the hot rows u is paired with, shingles_u) that reach the threshold. The
    hot rows' sets (``hot``: ROW, shingles) come with the stage, loaded once per worker process: a broadcast,
    so a giant bucket's first members are never copied once per pair nor gathered into one partition.

    With ``grouped`` (u, vs), the pairs come with the stage too and the batches are (ROW, shingles) rows of
    the sets themselves: no shuffle at all, a map over the sets that keeps the rows named as u."""

    def __init__(self, hot: pa.Table, config: FuzzyDedupConfig, grouped: pa.Table | None = None):
        self.hot, self.config = hot.combine_chunks(), config
        self.grouped = None if grouped is None else grouped.combine_chunks()
        self._sets: Shingles | None = None

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_sets": None}

    def __call__(self, table: pa.Table) -> pa.Table:

        if self._sets is None:
            self._sets = shingles_of(self.hot["shingles"])
        if self.grouped is not None:  # (u, vs, shingles_u) of the set rows named as u by ``grouped``
            at = pc.index_in(table[ROW], value_set=self.grouped["u"].chunk(0))
            named, vs = table.filter(pc.is_valid(at)), self.grouped["vs"].take(at.drop_null())
            table = pa.table({"u": named[ROW], "vs": vs, "shingles_u": named["shingles"]})
        m = table.num_rows
        vs = table["vs"].combine_chunks()
        lengths = np.asarray(pc.list_value_length(vs).fill_null(0), dtype=np.int64)
        owner = np.repeat(np.arange(m, dtype=np.int64), lengths)
        partner = vs.flatten()
        hot_pos = np.asarray(pc.index_in(partner, value_set=self.hot[ROW].chunk(0)), dtype=np.int64)
        pairs = pa.table({"u": table["u"].take(pa.array(owner)), "v": partner})
        if not len(owner):
            return similar_pairs(pairs, np.zeros(0), self.config.threshold)
        both = _joined(shingles_of(table["shingles_u"]), self._sets)
        sims = jaccard(both, np.stack((owner, m + hot_pos), axis=1))
        return similar_pairs(pairs, sims, self.config.threshold)


def _fan_above(table: pa.Table) -> pa.Table:
    """The (v, n) rows with n above ``_HOT_FAN``."""
    return table.filter(pc.greater(table["n"], _HOT_FAN))


@dataclass(frozen=True)
class PairSimilarity:
    """The Jaccard of row-number pairs, measured beyond the driver's copy of the sets: what the driver's
    refinement rounds use when the verified graph's sets exceed its share (the driver then holds the graph
    and its keys, never every set).

    A round asks about few pairs: when their rows' sets fit ``limit`` bytes (at ``per_set`` bytes a set, the
    average of the written ``node_sets``) they come to the driver in one filtered pass over ``sets`` and are
    measured there; otherwise the pairs are joined with both ends' sets on the engine and only (position,
    sim) comes back. Either way the figure is the same exact Jaccard."""

    sets: Dataset
    kw: dict[str, Any]
    per_set: int = 1
    limit: int = 0

    def __call__(self, row_pairs: np.ndarray) -> np.ndarray:
        sims = np.zeros(len(row_pairs))
        if not len(row_pairs):
            return sims
        rows = np.unique(row_pairs)
        if len(rows) * self.per_set <= self.limit:
            found = self.sets.map_batches(RowsIn(ROW, pa.array(rows)), name="dedup.fuzzy.refine_sets")
            table = found.to_arrow(**self.kw)
            if table.num_rows != len(rows):  # the sets changed between passes: never index garbage
                raise InputError(f"{len(rows) - table.num_rows} refinement rows are missing from the sets")
            at = np.asarray(pc.index_in(pa.array(row_pairs.ravel()), value_set=table[ROW]), dtype=np.int64)
            return jaccard(shingles_of(table["shingles"]), at.reshape(-1, 2))
        u, v = pa.array(row_pairs[:, 0], pa.int64()), pa.array(row_pairs[:, 1], pa.int64())
        pairs = pa.table({"position": pa.array(np.arange(len(row_pairs))), "u": u, "v": v})

        measured = (
            zephyr.from_arrow(pairs)
            .join(_side(self.sets, "u", pc.unique(u), name="refine"), on="u")
            .join(_side(self.sets, "v", pc.unique(v), name="refine"), on="v")
            .map_batches(
                functools.partial(_set_pairs, None),
                batch_rows=_VERIFY_BATCH_ROWS,
                name="dedup.fuzzy.refine_verify",
            )
            .to_arrow(**self.kw)
        )
        sims[np.asarray(measured["position"], dtype=np.int64)] = np.asarray(measured["sim"], dtype=np.float64)
        return sims


def _route_sets(rows: np.ndarray, groups: np.ndarray, table: pa.Table) -> pa.Table:
    """Each set row named in ``rows`` (sorted, a row once per group that needs it), with its ``group``."""
    keys = np.asarray(table[ROW], dtype=np.int64)
    first = np.searchsorted(rows, keys)
    counts = np.searchsorted(rows, keys, side="right") - first
    at = np.repeat(first - np.cumsum(counts) + counts, counts) + np.arange(counts.sum())
    routed = table.take(pa.array(np.repeat(np.arange(len(keys)), counts)))
    return routed.append_column("group", pa.array(groups[at]))


def _verify_group(pairs: np.ndarray, starts: np.ndarray, threshold: float, table: pa.Table) -> pa.Table:
    """The verified pairs of one group (its rows' sets, ``_route_sets``): ``pairs[starts[g]:starts[g + 1]]``."""
    group = table["group"][0].as_py()
    pairs = pairs[starts[group] : starts[group + 1]]
    at = pc.fill_null(pc.index_in(pa.array(pairs.ravel()), value_set=table[ROW]), -1)
    at = np.asarray(at, dtype=np.int64).reshape(-1, 2)
    found = (at >= 0).all(axis=1)  # a row without a set: no pair, as a join has it
    pairs = pairs[found]
    sims = jaccard(shingles_of(table["shingles"]), at[found])
    return similar_pairs(pa.table({"u": pairs[:, 0], "v": pairs[:, 1]}), sims, threshold)


def _grouped(
    pairs: pa.Table, per_set: int, budget: Budget, threshold: float
) -> tuple[Callable, Callable] | None:
    """Verification of driver-held ``pairs`` in one scan of the sets and one shuffle: the pairs go to groups
    (a connected component whole, or by u when its sets pass a group's share, ``partition_target_bytes``),
    each set to the groups that need it, and each group verifies its pairs. None when the route (56 bytes a
    pair at most) would pass ``broadcast_bytes``: the pairs are then joined to their sets."""
    if len(pairs) * (_PAIR_BYTES + 40) > budget.broadcast_bytes:
        return None
    ends = np.stack([np.asarray(pairs["u"], np.int64), np.asarray(pairs["v"], np.int64)], axis=1)
    nodes, at = np.unique(ends, return_inverse=True)
    at = at.reshape(-1, 2)
    label = connected_components(len(nodes), at)
    share = max(2, budget.partition_target_bytes // max(1, per_set))  # the nodes whose sets fill a group
    count = max(8, -(-len(nodes) // share))
    whole = np.bincount(label, minlength=len(nodes))[label[at[:, 0]]] <= share
    group = np.where(whole, label[at[:, 0]], at[:, 0]) % count
    order = np.argsort(group, kind="stable")
    needs = np.unique(np.concatenate([at[:, 0] * count + group, at[:, 1] * count + group]))
    route = functools.partial(_route_sets, nodes[needs // count], needs % count)
    starts = np.searchsorted(group[order], np.arange(count + 1))
    return route, functools.partial(_verify_group, ends[order], starts, threshold)


def similar_pairs(table: pa.Table, sims: np.ndarray, threshold: float) -> pa.Table:
    """(u, v, sim) of the pairs whose Jaccard reaches ``threshold``; counts verified and rejected pairs."""
    keep = sims >= threshold
    counters.increment("dedup/verified_pairs", int(keep.sum()))
    counters.increment("dedup/rejected_pairs", int((~keep).sum()))
    return pa.table({"u": table["u"], "v": table["v"], "sim": pa.array(sims)}).filter(pa.array(keep))


@dataclass(frozen=True)
class FuzzyRun:
    """What the graph functions of one fuzzy dedup share: its config, the columns it reads, the engine
    options, the figures it records as it goes (``info``: ``driver_rows`` given), the index it reads and its
    scratch folder."""

    config: FuzzyDedupConfig
    columns: DedupColumns = COLUMNS
    kw: dict[str, Any] = field(default_factory=dict)
    info: dict[str, Any] = field(default_factory=dict)
    index: IndexInfo | None = None
    scratch: str = ""

    @property
    def key_names(self) -> list[str]:
        """ROW and the id and priority columns there are: what keep order needs of a row."""
        return [ROW, *(c for c in (self.columns.id_column, self.columns.priority_column) if c is not None)]

    @property
    def budget(self) -> Budget:
        return budget_of(self.kw)


def verify_on_engine(
    edges: Dataset, pairs: pa.Table | None, sets: Dataset, set_rows: int, run: FuzzyRun
) -> tuple[list[Dataset], dict[str, Any]]:
    """The verified pairs (u, v, sim) and figures (``hot_rows``, ``hot_pairs``, ``hot_broadcast``,
    ``grouped``) of the pairs ``edges``, measured on the shingle sets ``sets`` (every endpoint's ``node_sets``
    row; the index's docs for indexed endpoints, v < 0).

    Pairs whose earlier row v is *hot* (the end of more than ``_HOT_FAN`` pairs: a giant bucket's first
    members) are grouped by u, joined with u's set once and checked against the hot rows' sets broadcast
    with the stage. When the driver holds the pairs (or the cold ones) and no index is read, they are
    verified in groups instead (``_grouped``: one scan of the sets, one shuffle, a set copied only to the
    groups that need it; a hot row once per group, so every pair goes this way). Otherwise cold pairs join both sets, one per pair (bounded copies: a cold row is in at most ``_HOT_FAN`` pairs
    as v); when the cold pairs fit the driver (``driver_rows``), each join reads only the sets it needs (a
    semi-join by a broadcast key list), not every set."""
    config, index, kw, set_bytes = run.config, run.index, run.kw, run.info["set_bytes"]
    sets = sets.select(ROW, "shingles")
    per_set = max(1, set_bytes // max(1, set_rows))
    indexed = index is not None and bool(index.docs)

    def routed(pairs: pa.Table | None) -> Dataset | None:  # ``_grouped``'s verification, when it applies
        found = None if pairs is None or indexed else _grouped(pairs, per_set, run.budget, config.threshold)
        if found is None:
            return None
        return sets.map_batches(found[0], name="dedup.fuzzy.route_sets").group_by("group").reduce(found[1])

    if (every := routed(pairs)) is not None:  # a hot row's set goes to each group once: no hot path
        return [every], {"hot_rows": 0, "hot_pairs": 0, "hot_broadcast": False, "grouped": True}
    hot, hot_pairs = _hot_rows(edges, per_set, run.budget, kw)
    hot_sets = _sets_of(hot, sets, index, kw)

    def ends(table: pa.Table | None, end: str) -> pa.Array | None:
        return None if table is None else pc.unique(table[end].combine_chunks())

    def checked(joined: Dataset, name: str, verify: Any = None) -> Dataset:
        verify = verify or functools.partial(_set_pairs, config.threshold)
        return joined.map_batches(verify, batch_rows=_VERIFY_BATCH_ROWS, name=f"dedup.fuzzy.{name}")

    parts = []
    broadcast = bool(len(hot)) and hot_pairs * _PAIR_BYTES <= run.budget.broadcast_bytes
    if len(hot):
        grouped = (
            edges.map_batches(RowsIn("v", hot), name="dedup.fuzzy.hot_pairs")
            .group_by("u")
            .agg(vs=("v", "list"))
        )
        if broadcast:
            # the hot pairs travel with the stage (u → its hot partners): a map over the sets, no shuffle
            verify = _VerifyHotPairs(hot_sets, config, grouped.to_arrow(**kw))
            parts.append(sets.map_batches(verify, name="dedup.fuzzy.verify_hot"))
        else:
            verify = _VerifyHotPairs(hot_sets, config)
            hot_u = None if pairs is None else ends(pairs.filter(pc.is_in(pairs["v"], value_set=hot)), "u")
            parts.append(checked(grouped.join(_side(sets, "u", hot_u), on="u"), "verify_hot", verify))
    cold = edges.map_batches(RowsIn("v", hot, keep=False), name="dedup.fuzzy.cold_pairs")
    if pairs is not None:
        cold_pairs = pairs.filter(pc.invert(pc.is_in(pairs["v"], value_set=hot)))
    else:  # a giant bucket's pairs are mostly hot: the cold rest may fit the driver
        cold = cold.materialize(**kw)
        cold_pairs = cold.to_arrow(**kw) if cold.count(**kw) <= run.info["driver_rows"] else None
    figures = {"hot_rows": len(hot), "hot_pairs": hot_pairs, "hot_broadcast": broadcast, "grouped": False}
    if (cold_routed := routed(cold_pairs)) is not None:
        return [*parts, cold_routed], {**figures, "grouped": True}
    # materialized before the second join: its partitions are then sized from the real bytes of
    # (pair, set) rows, one set per pair, not from the pair files' few bytes
    cold_u = cold.join(_side(sets, "u", ends(cold_pairs, "u")), on="u").materialize(**kw)
    cold_v = ends(cold_pairs, "v")
    parts.append(checked(cold_u.join(_side(sets, "v", cold_v), on="v"), "verify"))
    if indexed:
        index_sets = zephyr.read_parquet(index.files("docs"), columns=["key", "shingles"])
        parts.append(checked(cold_u.join(_side(index_sets, "v", cold_v, "key"), on="v"), "verify_indexed"))
    return parts, figures


def _hot_rows(edges: Dataset, per_set: int, budget: Budget, kw: dict[str, Any]) -> tuple[pa.Array, int]:
    """The v ends of more than ``_HOT_FAN`` pairs (a group-by), most-paired first, as many as
    ``Budget.broadcast_bytes`` holds at ``per_set`` bytes each (the rest stay cold: correct, only slower),
    and how many pairs they end."""
    fan = edges.group_by("v").count("n").map_batches(_fan_above, name="dedup.fuzzy.hot_rows").to_arrow(**kw)
    cap = max(1, budget.broadcast_bytes // per_set)
    if fan.num_rows > cap:
        fan = fan.sort_by([("n", "descending"), ("v", "ascending")]).slice(0, cap)
    if not fan.num_rows:
        return pa.array([], pa.int64()), 0
    return fan["v"].combine_chunks().cast(pa.int64()), int(pc.sum(fan["n"]).as_py())


def _sets_of(keys: pa.Array, sets: Dataset, index: IndexInfo | None, kw: dict[str, Any]) -> pa.Table:
    """(ROW, shingles) of the rows in ``keys``: new rows' from ``sets``, indexed documents' (keys < 0) from
    the index's docs."""

    if not len(keys):
        return pa.table({ROW: pa.array([], pa.int64()), "shingles": pa.array([], pa.large_list(pa.uint64()))})
    found = (
        sets.map_batches(RowsIn(ROW, keys), name="dedup.fuzzy.hot_sets")
        .to_arrow(**kw)
        .select([ROW, "shingles"])
    )
    if index is not None and index.docs and pc.any(pc.less(keys, 0)).as_py():
        indexed = index.node_sets(keys, kw).select(["key", "shingles"]).rename_columns([ROW, "shingles"])
        found = pa.concat_tables([found, indexed])
    return found.combine_chunks()


def graph_in_driver(
    collect_sets: Callable[[pa.Array], pa.Table],
    pairs: pa.Table,
    run: FuzzyRun,
    measure_rows: Callable[[np.ndarray], np.ndarray] | None = None,
) -> pa.Table | None:
    """Verify (unless ``pairs`` has a ``sim`` column already) and cluster a driver-sized pair table; returns
    the node info of the rows in clusters of 2 or more. ``collect_sets(rows)`` gives the ``node_sets`` rows of
    the endpoints (one filtered pass); the index's docs give those of indexed endpoints.

    With ``measure_rows`` (the pairs verified already, their sets beyond the driver's share), ``collect_sets``
    gives the endpoints' keys without their sets, and the pairs the refinement rounds propose are measured by
    ``measure_rows`` (row-number pairs → Jaccard; ``PairSimilarity``: on the engine)."""
    config, info, index, id_column = run.config, run.info, run.index, run.columns.id_column
    nodes = _nodes(pairs)
    new_nodes = nodes.filter(pc.greater_equal(nodes, 0))
    sets = collect_sets(new_nodes)
    if sets.num_rows != len(new_nodes):  # the input changed between passes: never index garbage
        raise InputError(
            f"{len(new_nodes) - sets.num_rows} candidate-pair rows were not found on the second read of the input; "
            "the input must not change while the job runs"
        )
    indexed, anchor = 0, np.zeros(0, dtype=np.int64)
    if len(new_nodes) < len(nodes):
        found, anchor = _indexed_sets(run, nodes.filter(pc.less(nodes, 0)), sets.schema)
        sets, indexed = pa.concat_tables([found, sets]), found.num_rows
    keys = sets.drop_columns(["shingles"]) if "shingles" in sets.column_names else sets
    index_keys = np.asarray(keys[ROW].slice(0, indexed), dtype=np.int64)
    node_of_pos, pos_of_node = _keep_order(keys, indexed, anchor, index_keys, run.columns)
    owners = keys[ROW].combine_chunks()
    if measure_rows is None:  # the sets as flat hashes; the table they came in is freed
        similarity = functools.partial(jaccard, shingles_of(sets["shingles"]))
        del sets
    else:
        rows = np.asarray(owners, dtype=np.int64)

        def similarity(positions: np.ndarray) -> np.ndarray:
            return measure_rows(rows[positions])

    def node(end: str) -> np.ndarray:  # the node of each pair's ``end``
        return node_of_pos[np.asarray(pc.index_in(pairs[end], value_set=owners), dtype=np.int64)]

    edges = np.stack((node("u"), node("v")), axis=1)

    def measure(node_pairs: np.ndarray) -> np.ndarray:
        sims = similarity(pos_of_node[node_pairs])
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
    info["verified_pairs"] = len(edges)
    removed = np.flatnonzero(anchor != index_keys)
    if len(removed):  # each indexed document an earlier run removed stays tied to the document it kept
        owner = np.asarray(pc.index_in(pa.array(anchor[removed]), value_set=owners), dtype=np.int64)
        tied = np.stack((node_of_pos[removed], node_of_pos[owner]), axis=1)
        edges = np.concatenate((edges, tied))
        if sims is not None:
            sims = np.concatenate((sims, similarity(np.stack((removed, owner), axis=1))))
    labels, graph = cluster_labels(len(keys), edges, sims, config, measure if config.verify else None)
    info.update(graph)
    if index is not None:
        info["indexed_nodes"] = indexed
        info["matched_index"] = int(np.count_nonzero(labels[indexed:] < indexed))
    return cluster_node_info(keys.take(pa.array(pos_of_node)), labels, id_column)


def _keep_order(
    keys: pa.Table, indexed: int, anchor: np.ndarray, index_keys: np.ndarray, columns: DedupColumns
) -> tuple[np.ndarray, np.ndarray]:
    """(node of each position in ``keys``, position of each node): nodes numbered in keep order.

    The sets stay where they arrived (no copy of the big column); nodes are numbered in keep order
    (rank), with input order (row number) as the last tie-break. Indexed documents (negative keys, the
    first ``indexed`` positions) rank first, those an earlier run kept before those it removed: they are
    in the corpus already (or were removed for a document that is), so no new row can change them."""
    by_row = np.asarray(pc.sort_indices(keys[ROW]), dtype=np.int64)
    node_of_pos = np.empty(len(by_row), dtype=np.int64)
    kept_first = by_row[:indexed][
        np.argsort(anchor[by_row[:indexed]] != index_keys[by_row[:indexed]], kind="stable")
    ]
    node_of_pos[kept_first] = np.arange(indexed)
    node_of_pos[by_row[indexed:]] = indexed + keep_ranks(
        keys.take(pa.array(by_row[indexed:])), columns.id_column, columns.priority_column
    )
    pos_of_node = np.empty_like(node_of_pos)
    pos_of_node[node_of_pos] = np.arange(len(node_of_pos), dtype=np.int64)
    return node_of_pos, pos_of_node


def _indexed_sets(run: FuzzyRun, keys: pa.Array, like: pa.Schema) -> tuple[pa.Table, np.ndarray]:
    """The node-set rows (``like``'s schema) of the indexed documents in ``keys`` and of the documents their
    removed ones were removed for, with each one's anchor (the key of the document kept for it; its own
    key when kept). ROW is the (negative) key, the id the indexed one cast to this input's id type, the
    priority null (indexed rows rank first)."""
    from zephyr.dedup.index import KEY

    index, kw, id_column, priority_column = run.index, run.kw, *astuple(run.columns)[1:]
    assert index is not None
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


def node_sets(
    nodes: pa.Array | None, cfg: FuzzyDedupConfig, columns: DedupColumns, table: pa.Table
) -> pa.Table:
    """(ROW, sorted shingle set[, id][, priority]) of the rows whose number is in ``nodes`` (every row when
    ``nodes`` is None). Counts the sets' bytes (``dedup/set_bytes``): what holding them in the driver costs."""
    text, id_column, priority_column = astuple(columns)
    checks = ((text, "text"), (id_column, "id"), (priority_column, "priority"))
    if not all(has_column(table, name, what) for name, what in checks):
        return pa.table({ROW: pa.array([], pa.int64())})
    wanted = table if nodes is None else table.filter(pc.is_in(table[ROW], value_set=nodes))
    sets = unique_sets(shingle_hashes(wanted[text], kind=cfg.shingle, n=cfg.ngram, normalize=cfg.normalize))
    lists = pa.LargeListArray.from_arrays(pa.array(sets.offsets), pa.array(sets.hashes, pa.uint64()))
    counters.increment("dedup/set_bytes", lists.nbytes)
    keys = {c: wanted[c] for c in (id_column, priority_column) if c is not None}
    return pa.table({ROW: wanted[ROW], "shingles": lists, **keys})


def _nodes(pairs: pa.Table) -> pa.Array:
    """The distinct rows a pair table names (either end)."""
    return pc.unique(pa.chunked_array(pairs["u"].chunks + pairs["v"].chunks).combine_chunks())


def verify_and_cluster(
    rows: Dataset, edges: Dataset, candidates: int, run: FuzzyRun
) -> tuple[pa.Table | None, Dataset | None]:
    """Verify and cluster the candidate pairs: (node info for ``Attach``, None) when the verified graph is
    clustered in the driver, (None, labels) when by engine rounds.

    The driver verifies when both the pairs (``driver_rows``) and the endpoints' shingle sets (an
    sixteenth of the memory budget) fit; the sets are written once to ``scratch`` either way, so the engine
    path joins sets, never texts, and nothing is shingled twice. Otherwise the pairs are verified on the
    engine (``verify_on_engine``) and only the verified graph comes to the driver."""
    config, kw, info, index = run.config, run.kw, run.info, run.index
    new_nodes, pairs = None, None
    if candidates <= info["driver_rows"]:
        pairs = edges.to_arrow(**kw)
        if not pairs.num_rows:
            info.update(in_memory=True, verified_pairs=0)
            return None, None
        nodes = _nodes(pairs)
        new_nodes = nodes.filter(pc.greater_equal(nodes, 0))
    sets_of = functools.partial(node_sets, new_nodes, config, run.columns)
    written = rows.map_batches(sets_of, name="dedup.fuzzy.node_sets").write_parquet(
        f"{run.scratch}/sets", **kw
    )
    set_bytes = sum(stage["counters"].get("dedup/set_bytes", 0) for stage in written.stats["stages"])
    info["set_bytes"] = set_bytes

    if not written.files:  # no row has a set: nothing can pair
        info.update(in_memory=pairs is not None, verified_pairs=0)
        return None, None
    sets = zephyr.read_parquet(written.files)

    def collector(source: Dataset, name: str) -> Callable[[pa.Array], pa.Table]:
        return lambda keys: source.map_batches(RowsIn(ROW, keys), name=f"dedup.fuzzy.{name}").to_arrow(**kw)

    collect_sets = collector(sets, "endpoint_sets")

    info["in_memory"] = pairs is not None and (not config.verify or set_bytes <= run.budget.driver_set_bytes)
    if info["in_memory"]:
        return graph_in_driver(collect_sets, pairs, run), None
    # the verified pairs (u, v, sim) beyond the driver, written to scratch: verified on the engine, or every
    # candidate (without sim) when verification is off
    set_rows = written.stats["stages"][-1]["rows_out"]
    parts = [edges]
    if config.verify:
        parts, figures = verify_on_engine(edges, pairs, sets, set_rows, run)
        info.update(figures)
    files = [
        f
        for i, part in enumerate(parts)
        for f in part.write_parquet(f"{run.scratch}/verified-{i}", **kw).files
    ]
    verified = zephyr.read_parquet(files) if files else None
    count = info["verified_pairs"] = verified.count(**kw) if verified is not None else 0
    graph_limit = run.budget.driver_graph_edges
    if not count:
        return None, None
    if count <= graph_limit:
        pairs = verified.to_arrow(**kw)
        per_set = set_bytes // max(1, set_rows)
        collect, measure = collect_sets, None
        if index is None and per_set * len(_nodes(pairs)) > run.budget.driver_set_bytes:  # the graph's sets
            info["sets_in_driver"] = False
            collect = collector(zephyr.read_parquet(written.files, columns=run.key_names), "endpoint_keys")
            measure = PairSimilarity(sets.select(ROW, "shingles"), kw, per_set, run.budget.driver_set_bytes)
        return graph_in_driver(collect, pairs, run, measure), None
    if index is not None or config.clusters != "components":  # only the driver can cluster it: refused
        what, fix = (
            ("dedup against an index", "dedup the input in parts")
            if index is not None
            else ("anchored clusters", "pass --clusters components (engine rounds, transitive clusters)")
        )
        raise ZephyrError(
            f"{what}: clusters are formed in the driver, but {count} verified pairs exceed its share of the memory "
            f"budget ({graph_limit} pairs at {budget_module.GRAPH_BYTES_PER_EDGE} bytes each); raise "
            f"--memory-budget, or {fix}"
        )
    # (ROW, KEEPER, CLUSTER, SIZE) of every row in a component, for graphs beyond the driver
    labels = connected_components_dataset(verified.select("u", "v"), execution=kw)
    members = labels.map_batches(lambda t: t.rename_columns([ROW, LABEL]), name="dedup.cc.members")
    members = members.join(rows.select(*run.key_names), on=ROW)
    groups = group_keepers(members, [LABEL], run.columns)
    labelled = members.select(ROW, LABEL).join(groups, on=LABEL).select(ROW, KEEPER, CLUSTER, SIZE)
    return None, labelled.materialize(**kw)
