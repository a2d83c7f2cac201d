"""Exact Jaccard of candidate pairs on their shingle-hash sets, vectorized over many pairs at once.

``J(A, B) = |A ∩ B| / |A ∪ B|`` on the sets of 64-bit shingle hashes (duplicates within a document are
removed first). Two empty sets have J = 1. This is the check that keeps MinHash-LSH false positives (and
the transitive chains they would build) out of the clusters.

>>> import pyarrow as pa
>>> from zephyr.dedup.shingles import shingle_hashes
>>> s = shingle_hashes(pa.array(["a b c d", "a b c e", "a b c d"]), n=2)
>>> jaccard(s, np.array([[1, 0], [2, 0]])).round(3).tolist()
[0.5, 1.0]
"""

from __future__ import annotations

import numpy as np
from zephyr.dedup import compiled
from zephyr.dedup.shingles import Shingles

__all__ = ["jaccard", "gather_sets"]

_EDGES_PER_BATCH = 1 << 14


def gather_sets(shingles: Shingles, docs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Concatenate the shingle hashes of ``docs`` (with repeats); returns (hashes, owner index into docs)."""
    starts = shingles.offsets[docs]
    lengths = shingles.offsets[docs + 1] - starts
    owner = np.repeat(np.arange(len(docs), dtype=np.int64), lengths)
    seg_start = np.concatenate(([0], np.cumsum(lengths)[:-1]))
    pos = np.arange(int(lengths.sum()), dtype=np.int64) - seg_start[owner] + starts[owner]
    return shingles.hashes[pos], owner


# NOTE: must not be related to the polynomial base of the shingle hashes: with C = P, shingles whose
# hashes differ by a multiple of P (e.g. one byte apart) collided across neighbouring edges.
_EDGE_MIX = np.uint64(0xD6E8FEB86659FD93)


def jaccard(shingles: Shingles, edges: np.ndarray, *, sets: bool = False) -> np.ndarray:
    """float64 Jaccard of each ``edges[i] = [doc_u, doc_v]`` (row indices into ``shingles``).

    The sets of all documents named by an edge are made once (sorted, de-duplicated); then, per batch of
    edges, both endpoints' sets are keyed by ``fmix64(fmix64(hash) ^ edge·C)`` — one 1-D key per (edge, shingle) —
    and an argsort puts each shared shingle of an edge next to itself. Keys of distinct (edge, shingle)
    pairs collide with probability ~n²/2⁶⁴, the same order as the shingle hashes themselves. With numba,
    the count is instead an exact merge of the two sorted sets per edge (``compiled.intersections``);
    ``sets=True`` says ``shingles`` already holds sorted, de-duplicated sets, so that step is skipped.
    """
    from zephyr.dedup.hashing import fmix64
    from zephyr.dedup.shingles import unique_sets

    out = np.empty(len(edges), dtype=np.float64)
    if len(edges) == 0:
        return out
    if sets:  # already sorted and de-duplicated per document
        uniq, pos = shingles, edges
    else:  # the sets of the documents the edges name, made once
        docs, pos = np.unique(edges.reshape(-1), return_inverse=True)
        pos = pos.reshape(-1, 2)
        offsets = np.zeros(len(docs) + 1, dtype=np.int64)
        np.cumsum(shingles.counts[docs], out=offsets[1:])
        hashes, _ = gather_sets(shingles, docs)
        uniq = unique_sets(Shingles(hashes=hashes, offsets=offsets))
    sizes = uniq.counts
    if compiled.available():  # a merge count per edge on the sorted sets
        inter = compiled.intersections(uniq.hashes, uniq.offsets, pos[:, 0], pos[:, 1])
        return _ratio(inter, sizes[pos[:, 0]] + sizes[pos[:, 1]])
    for lo in range(0, len(edges), _EDGES_PER_BATCH):
        batch = pos[lo : lo + _EDGES_PER_BATCH]
        m = len(batch)
        hu, ou = gather_sets(uniq, batch[:, 0])
        hv, ov = gather_sets(uniq, batch[:, 1])
        owner = np.concatenate((ou, ov))
        keys = fmix64(fmix64(np.concatenate((hu, hv))) ^ (owner.astype(np.uint64) * _EDGE_MIX))
        order = np.argsort(keys)
        ks = keys[order]
        dup = np.flatnonzero(ks[1:] == ks[:-1])
        inter = np.bincount(owner[order[dup]], minlength=m)
        out[lo : lo + m] = _ratio(inter, sizes[batch[:, 0]] + sizes[batch[:, 1]])
    return out


def _ratio(inter: np.ndarray, total: np.ndarray) -> np.ndarray:
    """|A ∩ B| / |A ∪ B| from the intersection and |A| + |B|; two empty sets have J = 1."""
    union = total - inter
    return np.where(union > 0, inter / np.maximum(union, 1), 1.0)
