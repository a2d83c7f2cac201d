"""Anchored clusters: a row is a duplicate only of the kept row of its cluster, never of a chain.

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

The sweep is sequential (a node's fate depends on earlier ones): ``compiled.greedy_anchors`` does it in
one O(nodes + edges) pass; ``_anchors_by_rounds`` is the numpy reference and fallback (rounds decide every
node whose earlier neighbours are all decided; as many rounds as the longest dependency path).

>>> import numpy as np
>>> chain = np.array([[i + 1, i] for i in range(5)])  # 0~1~2~3~4~5, no other pair similar
>>> anchors(6, chain).tolist()
[0, 0, 2, 2, 4, 4]
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from zephyr.dedup import compiled

__all__ = ["Measure", "anchors", "anchored_clusters", "split_rows"]

Measure = Callable[[np.ndarray], np.ndarray]
"""``measure(pairs)`` → float64 true Jaccard of each ``(n, 2)`` node pair."""


def _earlier_csr(num_nodes: int, edges: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per node, its neighbours that come earlier in keep order (CSR offsets, neighbours)."""
    hi = np.maximum(edges[:, 0], edges[:, 1]).astype(np.int64)
    lo = np.minimum(edges[:, 0], edges[:, 1]).astype(np.int64)
    order = np.argsort(hi, kind="stable")
    offsets = np.zeros(num_nodes + 1, dtype=np.int64)
    np.cumsum(np.bincount(hi, minlength=num_nodes), out=offsets[1:])
    return offsets, lo[order]


def anchors(num_nodes: int, edges: np.ndarray) -> np.ndarray:
    """int64 anchor of each node (itself when kept) from verified ``edges`` between nodes in keep order."""
    if len(edges) == 0:
        return np.arange(num_nodes, dtype=np.int64)
    offsets, earlier = _earlier_csr(num_nodes, edges)
    if compiled.available():
        return compiled.greedy_anchors(offsets, earlier)
    return _anchors_by_rounds(num_nodes, edges)


def _anchors_by_rounds(num_nodes: int, edges: np.ndarray) -> np.ndarray:
    """The numpy twin of the sweep: each round settles the nodes whose earlier neighbours are all settled."""
    later = np.maximum(edges[:, 0], edges[:, 1]).astype(np.int64)
    early = np.minimum(edges[:, 0], edges[:, 1]).astype(np.int64)
    keep = later != early
    later, early = later[keep], early[keep]
    anchor = np.arange(num_nodes, dtype=np.int64)
    settled = np.bincount(later, minlength=num_nodes) == 0  # no earlier neighbour: an anchor
    while not settled.all():
        ready_edge = settled[early]
        open_per_node = np.bincount(later[~ready_edge], minlength=num_nodes)
        ready = ~settled & (open_per_node == 0)
        if not ready.any():  # cannot happen on a DAG ordered by node number; never loop forever
            raise RuntimeError("anchored clusters: no node could be settled (edges are not in keep order)")
        take = ready[later] & (anchor[early] == early)
        best = np.full(num_nodes, num_nodes, dtype=np.int64)
        np.minimum.at(best, later[take], early[take])
        joined = ready & (best < num_nodes)
        anchor[joined] = best[joined]
        settled |= ready
    return anchor


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
    both_node = np.concatenate((later, earlier))
    both_other = np.concatenate((earlier, later))
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
    hi = np.maximum(edges[:, 0], edges[:, 1]).astype(np.int64)
    lo = np.minimum(edges[:, 0], edges[:, 1]).astype(np.int64)
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
    known = _pair_keys(edges)
    fresh = ~np.isin(_pair_keys(pairs), known)
    return pairs[fresh]


def _pair_keys(pairs: np.ndarray) -> np.ndarray:
    """One sortable key per ``[later, earlier]`` pair (node numbers < 2³¹ in memory)."""
    return pairs[:, 0].astype(np.int64) << 31 | pairs[:, 1].astype(np.int64)


def split_rows(anchor: np.ndarray, edges: np.ndarray) -> int:
    """Rows that connected components would have merged into the cluster of their component's first row,
    but anchoring kept apart: what anchoring changed, for the stats."""
    from zephyr.dedup.components import connected_components

    if len(edges) == 0:
        return 0
    component = connected_components(len(anchor), edges)
    return int((anchor != component).sum())
