"""The vectorized n-gram statistics against a slow per-document reference."""

from collections import Counter

import numpy as np
import polars as pl
import pytest
from zephyr.pipelines.quality.ngrams import (
    NgramCounts,
    duplicate_ngram_char_fraction,
    flat_words,
    top_ngram_char_fraction,
)


def _ref_top(words, n):
    grams = [tuple(words[i : i + n]) for i in range(len(words) - n + 1)]
    total = sum(map(len, words))
    if not grams or not total:
        return 0.0
    counts = Counter(grams)
    best = max(counts.values())
    if best < 2:
        return 0.0
    return min(max(best * sum(map(len, g)) for g, c in counts.items() if c == best) / total, 1.0)


def _ref_dup(words, n):
    grams = [tuple(words[i : i + n]) for i in range(len(words) - n + 1)]
    counts = Counter(grams)
    covered = np.zeros(len(words), bool)
    for i, g in enumerate(grams):
        if counts[g] >= 2:
            covered[i : i + n] = True
    total = sum(map(len, words))
    return sum(len(w) for w, c in zip(words, covered) if c) / total if total else 0.0


@pytest.mark.parametrize("seed", range(5))
def test_matches_reference_on_random_documents(seed):
    rng = np.random.default_rng(seed)
    vocab = ["a", "bb", "ccc", "the", "of", "x" * 12]
    docs = [" ".join(rng.choice(vocab, size=rng.integers(0, 40))) for _ in range(60)] + ["", "one"]
    words = pl.Series(docs).str.extract_all(r"\S+")
    fw = flat_words(words.to_arrow())
    counter = NgramCounts(fw)
    for n in (2, 3, 4):
        got = top_ngram_char_fraction(fw, n, counter)
        want = [_ref_top(d.split(), n) for d in docs]
        np.testing.assert_allclose(got, want)
    for n in (5, 7, 10):
        got = duplicate_ngram_char_fraction(fw, n, counter)
        want = [_ref_dup(d.split(), n) for d in docs]
        np.testing.assert_allclose(got, want)


def test_ngrams_never_span_documents():
    # the end of doc 0 followed by the start of doc 1 repeats "a b", but not inside either document
    fw = flat_words(pl.Series(["x a", "b a b"]).str.extract_all(r"\S+").to_arrow())
    np.testing.assert_allclose(duplicate_ngram_char_fraction(fw, 2), [0.0, 0.0])
