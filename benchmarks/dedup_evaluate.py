"""Score predicted duplicate clusters against ground-truth pairs (the benchmark corpus' rule).

Rule (``dupes`` corpus README, threshold ``t``): positives are the true pairs with Jaccard ≥ t. A
predicted pair (two documents in one predicted cluster) is a true positive if it is a positive; neutral
if it is a listed true pair with J < t (same true cluster, reachable through a third document); a false
positive otherwise. Counts are computed from cluster sizes and the listed pairs, never by enumerating
predicted pairs, so a collapsed giant cluster is scored in linear time.

>>> import pyarrow as pa
>>> pred = pa.table({"id": ["a", "b", "c", "d"], "cluster": ["a", "a", "a", "d"]})
>>> pairs = pa.table({"id_a": ["a", "a"], "id_b": ["b", "d"], "jaccard": [0.9, 0.85]})
>>> s = pair_scores(pred, pairs)
>>> s["true_positives"], s["false_positives"], s["false_negatives"], s["precision"]
(1, 2, 1, 0.3333333333333333)
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc


def _cluster_codes(pred: pa.Table, ids: pa.Array) -> np.ndarray:
    """Predicted-cluster code of each id (-1 when the id was not predicted)."""
    clusters = pc.dictionary_encode(pred["cluster"].combine_chunks().cast(pa.large_string()))
    codes = np.asarray(clusters.indices, dtype=np.int64)
    pos = pc.index_in(
        ids.cast(pa.large_string()), value_set=pred["id"].combine_chunks().cast(pa.large_string())
    )
    pos = np.asarray(pos.fill_null(-1), dtype=np.int64)
    return np.where(pos >= 0, codes[np.maximum(pos, 0)], -1)


def reference_jaccard(a: str, b: str) -> float:
    """The corpus definition: word 5-grams of ``text.lower().split()`` (fewer words: one shingle)."""

    def shingles(text: str) -> set[str]:
        words = text.lower().split()
        return {" ".join(words[i : i + 5]) for i in range(max(1, len(words) - 4))}

    sa, sb = shingles(a), shingles(b)
    return len(sa & sb) / len(sa | sb) if sa | sb else 1.0


def _unlisted_similar(
    pred: pa.Table, pairs: pa.Table, texts: pa.Table, threshold: float, max_cluster: int
) -> int:
    """Predicted pairs absent from ``pairs`` whose reference Jaccard still reaches ``threshold``
    (the README: such a pair is not a false positive). Clusters above ``max_cluster`` are not enumerated."""
    import itertools

    listed = set(zip(pairs["id_a"].to_pylist(), pairs["id_b"].to_pylist()))
    listed |= {(b, a) for a, b in listed}
    text_of = dict(zip(texts["id"].to_pylist(), texts["text"].to_pylist()))
    members: dict[Any, list] = {}
    for i, c in zip(pred["id"].to_pylist(), pred["cluster"].to_pylist()):
        if c is not None:
            members.setdefault(c, []).append(i)
    count = 0
    for ids in members.values():
        if len(ids) < 2 or len(ids) > max_cluster:
            continue
        for a, b in itertools.combinations(ids, 2):
            if (a, b) not in listed and text_of.get(a) is not None and text_of.get(b) is not None:
                count += reference_jaccard(text_of[a], text_of[b]) >= threshold
    return count


def pair_scores(
    pred: pa.Table,
    pairs: pa.Table,
    *,
    threshold: float = 0.8,
    texts: pa.Table | None = None,
    max_cluster: int = 1000,
) -> dict[str, Any]:
    """Pair precision/recall/F1 of ``pred`` (columns ``id``, ``cluster``) against ``pairs`` (id_a, id_b, jaccard).

    With ``texts`` (columns ``id``, ``text``), predicted pairs missing from ``pairs`` whose reference Jaccard
    reaches ``threshold`` are counted as neutral (``unlisted_similar``) instead of false positives, as the
    corpus rule says; without it they count as false positives (a lower bound on precision)."""
    clusters = pc.dictionary_encode(pred["cluster"].combine_chunks().cast(pa.large_string()))
    sizes = np.bincount(np.asarray(clusters.indices, dtype=np.int64))
    predicted = int((sizes * (sizes - 1) // 2).sum())
    ca = _cluster_codes(pred, pairs["id_a"].combine_chunks())
    cb = _cluster_codes(pred, pairs["id_b"].combine_chunks())
    together = (ca >= 0) & (ca == cb)
    positive = np.asarray(pairs["jaccard"], dtype=np.float64) >= threshold
    tp = int((together & positive).sum())
    neutral = int((together & ~positive).sum())
    unlisted = _unlisted_similar(pred, pairs, texts, threshold, max_cluster) if texts is not None else 0
    neutral += unlisted
    fp = predicted - tp - neutral
    fn = int((positive & ~together).sum())
    precision = tp / (tp + fp) if tp + fp else 1.0
    recall = tp / (tp + fn) if tp + fn else 1.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return {
        "true_positives": tp,
        "false_positives": fp,
        "false_negatives": fn,
        "neutral": neutral,
        "unlisted_similar": unlisted,
        "precision": precision,
        "recall": recall,
        "f1": f1,
        "max_predicted_cluster": int(sizes.max()) if len(sizes) else 0,
    }


def oversized_clusters(
    pred: pa.Table,
    truth: pa.Table,
    *,
    factor: float = 1.1,
    texts: pa.Table | None = None,
    threshold: float = 0.8,
) -> list[dict[str, Any]]:
    """Predicted clusters larger than ``factor`` × the true cluster most of their members belong to.

    With ``texts`` (``id``, ``text``) the corpus rule applies as in ``pair_scores``: a member outside that
    true cluster whose reference Jaccard to the cluster's kept row (the row ``cluster`` names) reaches
    ``threshold`` is not wrong (the truth missed the pair), so it counts towards the true size
    (``reference_supported``)."""
    true_code = pc.dictionary_encode(truth["cluster"].combine_chunks().cast(pa.large_string()))
    true_sizes = np.bincount(np.asarray(true_code.indices, dtype=np.int64))
    pred_ids = pred["id"].combine_chunks().cast(pa.large_string())
    pos = np.asarray(
        pc.index_in(pred_ids, value_set=truth["id"].combine_chunks().cast(pa.large_string())).fill_null(-1)
    )
    tc = np.where(pos >= 0, np.asarray(true_code.indices, dtype=np.int64)[np.maximum(pos, 0)], -1)
    pc_codes = pc.dictionary_encode(pred["cluster"].combine_chunks().cast(pa.large_string()))
    pcode = np.asarray(pc_codes.indices, dtype=np.int64)
    pred_sizes = np.bincount(pcode)
    text_of = dict(zip(texts["id"].to_pylist(), texts["text"].to_pylist())) if texts is not None else None
    out = []
    for c in np.flatnonzero(pred_sizes > 1):
        rows = np.flatnonzero(pcode == c)
        members = tc[rows]
        majority = np.bincount(members[members >= 0]).argmax() if (members >= 0).any() else -1
        true_size = int(true_sizes[majority]) if majority >= 0 else 1
        if pred_sizes[c] <= factor * true_size:
            continue
        supported = 0
        if text_of is not None:
            kept = text_of.get(pc_codes.dictionary[c].as_py())
            outsiders = [pred_ids[int(r)].as_py() for r in rows[members != majority]]
            supported = sum(
                kept is not None and reference_jaccard(kept, text_of[o]) >= threshold for o in outsiders
            )
        if pred_sizes[c] > factor * (true_size + supported):
            out.append(
                {
                    "cluster": pc_codes.dictionary[c].as_py(),
                    "size": int(pred_sizes[c]),
                    "true_size": true_size,
                    "reference_supported": supported,
                }
            )
    return out
