"""LSH banding: threshold arithmetic and candidate edges from band buckets.

A pair with Jaccard ``s`` shares at least one of ``b`` bands of ``r`` rows with probability
``1 − (1 − s^r)^b``; the S-curve's midpoint is ``t ≈ (1/b)^(1/r)`` (Leskovec, Rajaraman & Ullman,
*Mining of Massive Datasets*, §3.4.2; the same approximation is printed by datatrove's
``dedup/minhash.py``). ``optimal_bands`` picks ``(b, r)`` by minimizing weighted false-positive and
false-negative areas under that curve (the approach of datasketch's ``lsh._optimal_param``, integrated
here with numpy).

Candidate edges: documents are grouped by ``(band, band hash)``; every member of a bucket is paired with
the bucket's first ``BUCKET_LINKS`` members before it, so a small bucket gives all its pairs and a giant
one (a templated source, boilerplate pages) costs ``m · BUCKET_LINKS`` pairs, never ``m²``. A true pair
missed this way must share no small bucket; the refinement rounds of ``anchored`` recover most of those.

>>> round(lsh_threshold(14, 8), 3)
0.719
>>> import numpy as np
>>> candidate_edges(np.array([[5], [5], [7], [5]], dtype=np.uint64), np.arange(4)).tolist()
[[1, 0], [3, 0], [3, 1]]
>>> len(candidate_edges(np.zeros((1000, 1), dtype=np.uint64), np.arange(1000), links=2))  # not 499,500
1997
"""

from __future__ import annotations

import numpy as np

from zephyr.errors import ConfigError

__all__ = [
    "BUCKET_LINKS",
    "lsh_threshold",
    "collision_probability",
    "optimal_bands",
    "candidate_edges",
    "unique_edges",
]

BUCKET_LINKS = 8
"""Earlier bucket members each member is paired with (see ``candidate_edges``)."""


def lsh_threshold(bands: int, rows: int) -> float:
    """Approximate Jaccard at which a pair becomes a candidate with probability ~1/2: ``(1/b)^(1/r)``."""
    return (1.0 / bands) ** (1.0 / rows)


def collision_probability(similarity: float | np.ndarray, bands: int, rows: int) -> float | np.ndarray:
    """Probability that a pair of Jaccard ``similarity`` shares a bucket in at least one band."""
    return 1.0 - (1.0 - np.asarray(similarity, dtype=np.float64) ** rows) ** bands


def optimal_bands(
    threshold: float, num_perm: int, *, false_positive_weight: float = 0.5, false_negative_weight: float = 0.5
) -> tuple[int, int]:
    """``(bands, rows)`` with ``bands * rows <= num_perm`` minimizing the weighted FP + FN areas."""
    if not 0.0 < threshold < 1.0:
        raise ConfigError(f"threshold must be in (0, 1), got {threshold}")
    lo = np.linspace(0.0, threshold, 201)
    hi = np.linspace(threshold, 1.0, 201)
    best: tuple[float, int, int] | None = None
    for b in range(1, num_perm + 1):
        for r in range(1, num_perm // b + 1):
            fp = np.trapezoid(collision_probability(lo, b, r), lo)
            fn = np.trapezoid(1.0 - collision_probability(hi, b, r), hi)
            err = false_positive_weight * fp + false_negative_weight * fn
            if best is None or err < best[0] - 1e-15:
                best = (err, b, r)
    assert best is not None
    return best[1], best[2]


def candidate_edges(bands: np.ndarray, ranks: np.ndarray, *, links: int = BUCKET_LINKS) -> np.ndarray:
    """``(m, 2)`` int64 edges ``[rank, earlier rank]`` from ``(num_docs, num_bands)`` band hashes.

    Each bucket member is paired with the bucket's first ``links`` members (by rank) that precede it, so a
    bucket of ``m`` members costs at most ``m · links`` pairs (all ``m(m−1)/2`` when ``m ≤ links + 1``).
    ``ranks`` orders the documents; rows whose band hashes should not take part must be left out by the
    caller. Duplicate edges across bands are kept; see ``unique_edges``.
    """
    parts = []
    ranks = np.asarray(ranks, dtype=np.int64)
    for band in range(bands.shape[1]):
        order = np.lexsort((ranks, bands[:, band]))
        parts.extend(_bucket_links(bands[order, band], ranks[order], links))
    if not parts:
        return np.zeros((0, 2), dtype=np.int64)
    return np.concatenate(parts)


def _bucket_links(keys: np.ndarray, ranks: np.ndarray, links: int) -> list[np.ndarray]:
    """Edges member → each of the first ``links`` earlier members of its bucket; ``keys`` sorted, ``ranks``
    ascending within equal keys."""
    n = len(keys)
    if n < 2:
        return []
    new_group = np.ones(n, dtype=bool)
    new_group[1:] = keys[1:] != keys[:-1]
    start = np.flatnonzero(new_group)[np.cumsum(new_group) - 1]
    position = np.arange(n, dtype=np.int64) - start
    out = []
    for j in range(links):
        member = np.flatnonzero(position > j)
        if len(member) == 0:
            break
        out.append(np.stack((ranks[member], ranks[start[member] + j]), axis=1))
    return out


def unique_edges(edges: np.ndarray) -> np.ndarray:
    """Distinct edges, each as ``[larger, smaller]``, sorted (deterministic order)."""
    if len(edges) == 0:
        return np.zeros((0, 2), dtype=np.int64)
    hi = np.maximum(edges[:, 0], edges[:, 1])
    lo = np.minimum(edges[:, 0], edges[:, 1])
    keep = hi != lo
    pairs = np.unique(np.stack((hi[keep], lo[keep]), axis=1), axis=0)
    return pairs.astype(np.int64, copy=False)
