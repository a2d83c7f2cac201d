"""Seeded near-duplicate corpora with ground truth, for testing and benchmarking fuzzy dedup.

Jaccard is the scoring definition (``dedup_evaluate.reference_jaccard``): ``words = text.lower().split()``,
shingles = the set of word 5-grams ``" ".join(words[i:i + 5])`` (fewer than 5 words: one shingle of all of
them), ``J = |A ∩ B| / |A ∪ B|``. Texts are lower-case ASCII letters separated by spaces and newlines, so
every normalization (``default``, ``none``, ``simplify``) gives the same words.

Both generators state every Jaccard they claim *by construction*: the words are chosen so that no 5-gram
repeats (chain: all words distinct; templated source: distinct boilerplate words, fresh words for edits,
body words from 32,768 — a repeated 5-gram has probability ~1e-12 over a 160k-document corpus), so each
Jaccard is a ratio of counted shingles. ``tests/dedup/test_synthetic.py`` checks them with the reference.

- ``chain(n, neighbour_jaccard)``: sliding windows over one word sequence. Neighbours have
  ``J ≈ neighbour_jaccard``, the ends share nothing. Connected components make one cluster of all ``n``;
  the truth's ``cluster`` is what *anchored* clustering must give instead (a row is removed only if its own
  Jaccard to the kept row of its cluster reaches the threshold; keep order = id order).
- ``templated_source(num_docs)``: one web source whose pages share a boilerplate header and footer, so
  unrelated pages have J in ~0.4–0.7 (every page lands in the same LSH buckets: the "giant bucket"), plus
  planted near-duplicates (J ≥ 0.9 to their original). The planted variants are the only pairs at J ≥ 0.8.
- ``score(pred, truth)``: precision/recall of the *removed rows* against the truth's clusters, and the
  collapse check (removed rows ≤ 1.02 × planted duplicates).

>>> table, truth = chain(30, 0.9)
>>> truth["jaccard_to_previous"][1].as_py(), truth["cluster"].to_pylist()[:7]
(0.9, ['c/000', 'c/000', 'c/000', 'c/003', 'c/003', 'c/003', 'c/006'])
>>> table, truth = templated_source(1_000, seed=1)
>>> table.num_rows, table.column_names, truth.column_names
(1000, ['id', 'text'], ['id', 'cluster', 'jaccard_to_seed'])
>>> kept = table.filter(pc.equal(truth["id"], truth["cluster"]))  # a perfect dedup keeps the originals
>>> s = score(kept, truth)
>>> s["precision"], s["recall"], s["removed_rows"] == s["planted_duplicates"], s["collapsed"]
(1.0, 1.0, True, False)
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from zephyr.errors import ConfigError

__all__ = ["chain", "templated_source", "score"]

_NGRAM = 5
_BODY_VOCABULARY = 1 << 15
_SLOT_WORDS = 8  # edits sit in separate 8-word slots, ≥ 6 words apart: their changed 5-grams never overlap
_EDIT_OFFSETS = 3  # an edit's offset within its slot: 0, 1 or 2


def _vocabulary(size: int, rng: np.random.Generator) -> pa.StringArray:
    """``size`` distinct random lower-case words of 3–9 letters, in random order."""
    words = np.empty(0, dtype="S9")
    draw = size + size // 4 + 64
    while len(words) < size:
        letters = rng.integers(ord("a"), ord("z") + 1, size=(draw, 9), dtype=np.uint8)
        letters[np.arange(9) >= rng.integers(3, 10, size=draw)[:, None]] = 0  # 'S9' drops trailing NULs
        words = np.unique(np.concatenate((words, letters.view("S9").ravel())))
        draw *= 2
    return pa.array(words[rng.permutation(len(words))[:size]]).cast(pa.string())


def _join_words(vocabulary: pa.StringArray, word_ids: np.ndarray, offsets: np.ndarray) -> pa.Array:
    """One string per document: the words ``word_ids[offsets[i]:offsets[i + 1]]`` joined by spaces."""
    words = vocabulary.take(pa.array(word_ids, type=pa.int64()))
    return pc.binary_join(pa.LargeListArray.from_arrays(pa.array(offsets, type=pa.int64()), words), " ")


def _ids(prefix: str, count: int) -> pa.Array:
    width = max(3, len(str(max(count - 1, 0))))
    return pa.array([f"{prefix}/{i:0{width}d}" for i in range(count)], type=pa.string())


def _chain_shape(neighbour_jaccard: float) -> tuple[int, int]:
    """(shingles per document m, step s in words) with (m − s)/(m + s) within 0.005 of the target, m ≥ 100."""
    best = None
    for step in range(1, 257):
        m = round(step * (1 + neighbour_jaccard) / (1 - neighbour_jaccard))
        if m < 100:
            continue
        err = abs((m - step) / (m + step) - neighbour_jaccard)
        if best is None or err < best[0]:
            best = (err, m, step)
        if err <= 0.005:
            break
    assert best is not None  # m grows with step, so some step reaches 100
    return best[1], best[2]


def chain(n: int = 30, neighbour_jaccard: float = 0.9, seed: int = 0, *, threshold: float = 0.8):
    """``n`` documents, each a window of one sequence of distinct words, shifted by ``s`` words per document.

    With ``m`` shingles per document, ``J(i, j) = max(0, m − |i − j|·s) / (m + |i − j|·s)``: neighbours are
    within 0.005 of ``neighbour_jaccard`` and the first and last documents have J < 0.2 (a ``ConfigError``
    names the smallest ``n`` for which that holds).

    Returns ``(table, truth)``. ``table``: ``id`` (``c/000``, … in chain order, so the keep rule "minimum
    id" keeps the first document first) and ``text``. ``truth``: ``id``, ``position``, ``jaccard_to_previous``,
    and the correct *anchored* result at ``threshold``: ``cluster`` is the id of the kept row the document
    joins (itself when kept), ``jaccard_to_seed`` its Jaccard to that row. Every document is an original;
    connected components remove all but one of them, anchored clustering far fewer.

    NOTE: Jaccard distance is a metric, so ``J(i, i + 2) ≥ 2·J(i, i + 1) − 1``: at ``neighbour_jaccard = 0.9``
    the document two steps on is at J ≥ 0.8 whatever the construction (windows give 0.81), so at threshold
    0.8 it joins the first document's cluster and every third document is kept. For the alternating
    pattern (doc 1 kept, 2 removed, 3 kept, …) use ``neighbour_jaccard ≤ 0.88`` (windows: J(i, i + 2) = 0.77).

    >>> table, truth = chain(20, 0.85)
    >>> truth["cluster"].to_pylist()[:5], round(truth["jaccard_to_seed"][2].as_py(), 3)
    (['c/000', 'c/000', 'c/002', 'c/002', 'c/004'], 1.0)
    """
    if not 0 < neighbour_jaccard < 1:
        raise ConfigError(f"chain: neighbour_jaccard must be in (0, 1), got {neighbour_jaccard}")
    m, step = _chain_shape(neighbour_jaccard)

    def jac(d: int) -> float:
        return max(0, m - d * step) / (m + d * step)

    far = next(d for d in range(1, m + 1) if jac(d) < 0.2)
    if n < far + 1:
        raise ConfigError(
            f"chain: n={n} is too short for J(first, last) < 0.2 at neighbour_jaccard {neighbour_jaccard} "
            f"({m} shingles per document, step {step} words); use n >= {far + 1}"
        )
    rng = np.random.default_rng(seed)
    total_words = m + _NGRAM - 1 + (n - 1) * step
    vocabulary = _vocabulary(total_words, rng)  # distinct words: every 5-gram of the sequence is distinct
    starts = np.arange(n, dtype=np.int64) * step
    word_ids = (starts[:, None] + np.arange(m + _NGRAM - 1)).ravel()
    offsets = np.arange(n + 1, dtype=np.int64) * (m + _NGRAM - 1)
    ids = _ids("c", n)
    table = pa.table({"id": ids, "text": _join_words(vocabulary, word_ids, offsets)})
    # the reference sweep of anchored clustering over the exact Jaccards (keep order = chain order)
    anchor = list(range(n))
    to_anchor = [1.0] * n
    kept: list[int] = []
    for i in range(n):
        near = [(jac(i - a), -a) for a in kept if jac(i - a) >= threshold]
        if near:
            best_j, neg_a = max(near)  # most similar anchor; ties: the earliest
            anchor[i], to_anchor[i] = -neg_a, best_j
        else:
            kept.append(i)
    truth = pa.table(
        {
            "id": ids,
            "position": pa.array(np.arange(n), type=pa.int64()),
            "jaccard_to_previous": pa.array([1.0] + [jac(1)] * (n - 1), type=pa.float64()),
            "cluster": ids.take(pa.array(anchor)),
            "jaccard_to_seed": pa.array(to_anchor, type=pa.float64()),
        }
    )
    return table, truth


def templated_source(
    num_docs: int,
    seed: int = 0,
    *,
    boilerplate_words: int = 200,
    unrelated_jaccard: tuple[float, float] = (0.4, 0.7),
    duplicate_fraction: float = 0.05,
    variants: tuple[int, int] = (1, 3),
    variant_jaccard: tuple[float, float] = (0.9, 0.98),
) -> tuple[pa.Table, pa.Table]:
    """One templated web source of ``num_docs`` rows: shared boilerplate, distinct bodies, planted variants.

    Every page is ``header \\n body \\n footer``; header and footer (``boilerplate_words`` distinct words, 3/5
    before the body) are the same on every page and give ``T = boilerplate_words − 8`` shared shingles. A body
    of ``B`` words adds ``u = B + 4`` shingles of its own, so unrelated pages have ``J = T / (T + u_a + u_b)``;
    ``u`` is uniform on the range that puts J in ``unrelated_jaccard`` (defaults: ``u`` 42–144, bodies of
    38–140 words, J 0.40–0.70, mean ≈ 0.52).

    ``duplicate_fraction`` of the originals get ``variants`` (inclusive range, uniform) copies with body edits
    — substitutions (½), deletions (¼) and insertions (¼) of single words, 6+ words apart, fresh words for
    substitutions and insertions — as many as keep ``J(variant, original)`` at or above a target drawn from
    ``variant_jaccard`` (at least one edit; each edit changes at most 5 shingles out and 5 in). With
    ``variant_jaccard[0] ≥ 0.9`` every pair inside a cluster is at J ≥ 0.8 (Jaccard distance is a metric), so
    whichever member a dedup keeps, the other members are its duplicates at threshold 0.8.

    Returns ``(table, truth)``, both in one shuffled row order. ``table``: ``id`` (opaque, ``t/000123``,
    unrelated to row order and to which row is the original) and ``text``. ``truth``: ``id``, ``cluster``
    (id of the original; an original names itself) and ``jaccard_to_seed`` (1.0 for originals).
    """
    header_words = boilerplate_words * 3 // 5
    _check_templated(
        num_docs, boilerplate_words, unrelated_jaccard, duplicate_fraction, variants, variant_jaccard
    )
    rng = np.random.default_rng(seed)
    shared = boilerplate_words - 2 * (_NGRAM - 1)  # T: 5-grams inside the header or inside the footer
    u_lo = math.ceil(shared * (1 / unrelated_jaccard[1] - 1) / 2)
    u_hi = max(u_lo, math.floor(shared * (1 / unrelated_jaccard[0] - 1) / 2))
    u_lo = max(u_lo, _NGRAM + _SLOT_WORDS)  # a body of ≥ 9 words: room for one edit slot

    per_cluster = _variants_per_cluster(rng, num_docs, duplicate_fraction, variants)
    num_clusters = len(per_cluster)
    num_variants = int(per_cluster.sum())
    num_originals = num_docs - num_variants

    # originals: body lengths and words
    own = rng.integers(u_lo, u_hi + 1, size=num_originals)  # u: shingles of a page not in the boilerplate
    body_len = own - (_NGRAM - 1)
    body_off = np.zeros(num_originals + 1, dtype=np.int64)
    np.cumsum(body_len, out=body_off[1:])
    body_words = rng.integers(boilerplate_words, boilerplate_words + _BODY_VOCABULARY, size=int(body_off[-1]))

    # variants: copy the source body, then edit it
    source = np.repeat(rng.choice(num_originals, size=num_clusters, replace=False), per_cluster)
    src_len = body_len[source]
    shingles = shared + own[source]  # S of the original
    merged, new_len, jaccard, fresh_needed = _edit_variants(
        rng, variant_jaccard, shingles, src_len, body_words, body_off, source, boilerplate_words
    )

    # all pages: originals then variants, then one shuffle of rows and an independent shuffle of ids
    lengths = np.concatenate((body_len, new_len))
    words = np.concatenate((body_words, merged))
    text, row_order = _shuffled_pages(rng, lengths, words, boilerplate_words, header_words, fresh_needed)

    ids = _ids("t", num_docs).take(pa.array(rng.permutation(num_docs)))  # id of the k-th page made
    seed_of = np.concatenate((np.arange(num_originals), source))  # page → page index of its original
    table = pa.table({"id": ids.take(pa.array(row_order)), "text": text})
    truth = pa.table(
        {
            "id": table["id"],
            "cluster": ids.take(pa.array(seed_of[row_order])),
            "jaccard_to_seed": pa.array(np.concatenate((np.ones(num_originals), jaccard))[row_order]),
        }
    )
    return table, truth


def _variants_per_cluster(
    rng: np.random.Generator, num_docs: int, duplicate_fraction: float, variants: tuple[int, int]
) -> np.ndarray:
    """How many variants each duplicated original gets, one entry per cluster: originals and variants
    together make exactly ``num_docs`` rows."""
    lo_v, hi_v = variants
    mean_variants = (lo_v + hi_v) / 2
    num_clusters = round(num_docs * duplicate_fraction / (1 + duplicate_fraction * mean_variants))
    per_cluster = rng.integers(lo_v, hi_v + 1, size=num_clusters)
    while num_clusters and per_cluster.sum() + num_clusters > num_docs:  # tiny corpora only
        num_clusters -= 1
        per_cluster = per_cluster[:num_clusters]
    return per_cluster


def _check_templated(
    num_docs: int,
    boilerplate_words: int,
    unrelated_jaccard: tuple[float, float],
    duplicate_fraction: float,
    variants: tuple[int, int],
    variant_jaccard: tuple[float, float],
) -> None:
    """Refuse ``templated_source`` arguments it cannot honour, naming them and the values given."""
    header_words = boilerplate_words * 3 // 5
    footer_words = boilerplate_words - header_words
    lo_v, hi_v = variants
    if num_docs < 1:
        raise ConfigError(f"templated_source: num_docs must be ≥ 1, got {num_docs}")
    if header_words < _NGRAM or footer_words < _NGRAM:
        raise ConfigError(f"templated_source: boilerplate_words must be ≥ 13, got {boilerplate_words}")
    if not 0 < unrelated_jaccard[0] <= unrelated_jaccard[1] < variant_jaccard[0] <= variant_jaccard[1] < 1:
        raise ConfigError(
            "templated_source: need 0 < unrelated_jaccard[0] <= unrelated_jaccard[1] < variant_jaccard[0] "
            f"<= variant_jaccard[1] < 1, got unrelated_jaccard={unrelated_jaccard}, "
            f"variant_jaccard={variant_jaccard}"
        )
    if not (1 <= lo_v <= hi_v and 0 <= duplicate_fraction <= 1):
        raise ConfigError(
            f"templated_source: need 1 <= variants[0] <= variants[1] and 0 <= duplicate_fraction <= 1, "
            f"got variants={variants}, duplicate_fraction={duplicate_fraction}"
        )


def _edit_variants(
    rng: np.random.Generator,
    variant_jaccard: tuple[float, float],
    shingles: np.ndarray,
    src_len: np.ndarray,
    body_words: np.ndarray,
    body_off: np.ndarray,
    source: np.ndarray,
    boilerplate_words: int,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """(the variants' body words back to back, their lengths, their Jaccard to the original, fresh words
    used): each variant copies its original's body (``source``) and gets as many single-word edits, 6+ words
    apart, as keep it at its target Jaccard (see ``templated_source``)."""
    num_variants = len(src_len)
    target = rng.uniform(variant_jaccard[0], variant_jaccard[1], size=num_variants)
    slots = src_len // _SLOT_WORDS
    # (S − R)/(S + A) ≥ (S − 5e)/(S + 5e) ≥ target  ⇔  e ≤ S(1 − target) / (5(1 + target))
    edits = np.clip(np.floor(shingles * (1 - target) / (_NGRAM * (1 + target))), 1, slots).astype(np.int64)
    keys = rng.random((num_variants, int(slots.max()) if num_variants else 0))
    keys[np.arange(keys.shape[1]) >= slots[:, None]] = np.inf
    chosen = np.argsort(keys, axis=1)
    take = np.arange(keys.shape[1]) < edits[:, None]
    edit_variant = np.nonzero(take)[0]  # row-major: variants in order
    edit_pos = chosen[take] * _SLOT_WORDS + rng.integers(0, _EDIT_OFFSETS, size=int(take.sum()))
    kind = rng.choice(3, size=len(edit_pos), p=[0.5, 0.25, 0.25])  # 0 substitute, 1 delete, 2 insert
    var_off = np.zeros(num_variants + 1, dtype=np.int64)
    np.cumsum(src_len, out=var_off[1:])
    within = np.arange(int(var_off[-1])) - np.repeat(var_off[:-1], src_len)
    var_words = body_words[np.repeat(body_off[source], src_len) + within]
    flat_pos = var_off[edit_variant] + edit_pos
    fresh_needed = int((kind != 1).sum())
    fresh = boilerplate_words + _BODY_VOCABULARY + np.arange(fresh_needed)
    subst = kind == 0
    var_words[flat_pos[subst]] = fresh[: int(subst.sum())]
    keep = np.ones(len(var_words), dtype=bool)
    keep[flat_pos[kind == 1]] = False
    ins = kind == 2
    # order: original word g at key 2g, a word inserted before g at 2g − 1; deleted words dropped
    order_key = np.concatenate((2 * np.flatnonzero(keep), 2 * flat_pos[ins] - 1))
    merged = np.concatenate((var_words[keep], fresh[int(subst.sum()) : fresh_needed]))[
        np.argsort(order_key, kind="stable")
    ]
    n_sub = np.bincount(edit_variant[kind == 0], minlength=num_variants)
    n_del = np.bincount(edit_variant[kind == 1], minlength=num_variants)
    n_ins = np.bincount(edit_variant[kind == 2], minlength=num_variants)
    removed = _NGRAM * (n_sub + n_del) + (_NGRAM - 1) * n_ins
    added = _NGRAM * (n_sub + n_ins) + (_NGRAM - 1) * n_del
    jaccard = (shingles - removed) / (shingles + added)
    new_len = src_len - n_del + n_ins
    return merged, new_len, jaccard, fresh_needed


def _shuffled_pages(
    rng: np.random.Generator,
    lengths: np.ndarray,
    words: np.ndarray,
    boilerplate_words: int,
    header_words: int,
    fresh_needed: int,
) -> tuple[pa.Array, np.ndarray]:
    """(page texts in shuffled row order, that order): header, body and footer joined by newlines, the
    bodies cut from ``words`` by ``lengths`` (originals then variants) and the word ids turned into words."""
    num_docs = len(lengths)
    boiler_ids = np.arange(boilerplate_words)  # vocabulary ids: boilerplate, then body words, then fresh
    offsets = np.zeros(num_docs + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    row_order = rng.permutation(num_docs)
    perm_len = lengths[row_order]
    perm_off = np.zeros(num_docs + 1, dtype=np.int64)
    np.cumsum(perm_len, out=perm_off[1:])
    gather = np.repeat(offsets[:-1][row_order] - perm_off[:-1], perm_len) + np.arange(int(perm_off[-1]))
    vocabulary = _vocabulary(boilerplate_words + _BODY_VOCABULARY + fresh_needed, rng)
    bodies = _join_words(vocabulary, words[gather], perm_off)
    header = " ".join(vocabulary.take(pa.array(boiler_ids[:header_words])).to_pylist())
    footer = " ".join(vocabulary.take(pa.array(boiler_ids[header_words:])).to_pylist())
    text = pc.binary_join_element_wise(header, bodies, footer, "\n")
    return text, row_order


def score(pred: pa.Table, truth: pa.Table, *, collapse_factor: float = 1.02) -> dict[str, Any]:
    """Precision/recall/F1 of the rows a dedup removed, against the truth's clusters.

    ``pred`` is a dedup output with an ``id`` column: in ``remove`` mode, the rows missing from it are the
    removed ones; with a ``dup_keep`` column (``annotate`` mode), the rows where it is false. A cluster of
    ``k`` rows in ``truth`` (``id``, ``cluster``) allows ``k − 1`` removals, whichever of its rows is kept:
    removals beyond that, and every removal of a singleton, are false positives. ``collapsed`` is true when
    more than ``collapse_factor`` × the planted duplicates were removed (a chained giant cluster).
    """
    truth_ids = truth["id"].combine_chunks()
    pred_ids = pred["id"].combine_chunks()
    pos = np.asarray(pc.index_in(pred_ids, value_set=truth_ids).fill_null(-1), dtype=np.int64)
    if (pos < 0).any():
        raise ConfigError(
            f"score: {int((pos < 0).sum())} ids of pred are not in truth (first: "
            f"{pred_ids[int(np.argmax(pos < 0))]}); score the output of the same corpus"
        )
    kept = np.zeros(len(truth_ids), dtype=bool)
    if "dup_keep" in pred.column_names:
        kept[pos[np.asarray(pred["dup_keep"].fill_null(True), dtype=bool)]] = True
    else:
        kept[pos] = True
    code = np.asarray(pc.dictionary_encode(truth["cluster"].combine_chunks()).indices, dtype=np.int64)
    size = np.bincount(code)
    removed_per = np.bincount(code[~kept], minlength=len(size))
    planted = int((size - 1).sum())
    removed = int(removed_per.sum())
    tp = int(np.minimum(removed_per, size - 1).sum())
    precision = tp / removed if removed else 1.0
    recall = tp / planted if planted else 1.0
    return {
        "removed_rows": removed,
        "planted_duplicates": planted,
        "true_positives": tp,
        "false_positives": removed - tp,
        "precision": precision,
        "recall": recall,
        "f1": 2 * precision * recall / (precision + recall) if precision + recall else 0.0,
        "collapsed": removed > collapse_factor * planted,
    }
