"""The synthetic corpora's Jaccard claims, checked with the pure-Python reference of the scoring rule."""

from __future__ import annotations

import doctest
import itertools

import dupes_synthetic as synthetic
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from dedup_evaluate import reference_jaccard
from dupes_synthetic import chain, score, templated_source

from zephyr.errors import ConfigError


def _shingles(text: str) -> frozenset[str]:
    words = text.lower().split()
    return frozenset(" ".join(words[i : i + 5]) for i in range(max(1, len(words) - 4)))


def _jaccard(a: frozenset[str], b: frozenset[str]) -> float:
    return len(a & b) / len(a | b)


def _anchored(texts: list[str], threshold: float) -> list[int]:
    """The anchored rule by brute force: in order, join the most similar earlier kept row at J ≥ threshold."""
    sets = [_shingles(t) for t in texts]
    anchor, kept = [], []
    for i, s in enumerate(sets):
        near = [(_jaccard(sets[a], s), -a) for a in kept]
        near = [x for x in near if x[0] >= threshold]
        if near:
            anchor.append(-max(near)[1])
        else:
            anchor.append(i)
            kept.append(i)
    return anchor


def test_doctests():
    result = doctest.testmod(synthetic, optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0 and result.failed == 0


@pytest.mark.parametrize("neighbour", [0.9, 0.85, 0.8, 0.95])
def test_chain_jaccard_and_anchored_truth(neighbour):
    n = 30
    table, truth = chain(n, neighbour, seed=3)
    texts = table["text"].to_pylist()
    assert table["id"].to_pylist() == sorted(table["id"].to_pylist())  # id order = chain order
    for i in range(1, n):
        j = reference_jaccard(texts[i - 1], texts[i])
        assert abs(j - neighbour) <= 0.02
        assert j == truth["jaccard_to_previous"][i].as_py()
    assert reference_jaccard(texts[0], texts[-1]) < 0.2
    anchor = _anchored(texts, 0.8)
    ids = table["id"].to_pylist()
    assert truth["cluster"].to_pylist() == [ids[a] for a in anchor]
    for i, a in enumerate(anchor):
        assert truth["jaccard_to_seed"][i].as_py() == reference_jaccard(texts[a], texts[i])
    assert len(set(anchor)) > 1  # connected components would make one cluster of all n


def test_chain_patterns():
    # 0.85: J(i, i+2) = 0.72 < 0.8, so doc 1 kept, 2 removed, 3 kept, ... (the anchored.py example)
    _, truth = chain(30, 0.85)
    assert truth["cluster"].to_pylist() == [f"c/{2 * (i // 2):03d}" for i in range(30)]
    # 0.9: J(i, i+2) ≥ 0.8 by the triangle inequality of Jaccard distance, so one row in three is kept
    _, truth = chain(30, 0.9)
    assert truth["cluster"].to_pylist() == [f"c/{3 * (i // 3):03d}" for i in range(30)]


def test_chain_too_short_names_the_minimum():
    with pytest.raises(ConfigError, match="use n >= 14"):
        chain(10, 0.9)
    chain(14, 0.9)


def test_chain_is_seeded():
    assert chain(20, seed=1)[0].equals(chain(20, seed=1)[0])
    assert not chain(20, seed=1)[0].equals(chain(20, seed=2)[0])


def test_templated_source_every_pair():
    table, truth = templated_source(300, seed=7)
    assert table.num_rows == truth.num_rows == 300
    assert table.schema == pa.schema([("id", pa.string()), ("text", pa.string())])
    assert table["id"].equals(truth["id"]) and len(set(table["id"].to_pylist())) == 300
    sets = [_shingles(t) for t in table["text"].to_pylist()]
    cluster = truth["cluster"].to_pylist()
    ids = table["id"].to_pylist()
    row_of = {i: r for r, i in enumerate(ids)}
    for r, (c, j) in enumerate(zip(cluster, truth["jaccard_to_seed"].to_pylist())):
        assert j == _jaccard(sets[r], sets[row_of[c]])  # exact, not approximately
        assert (c == ids[r]) == (j == 1.0)
        if c != ids[r]:
            assert 0.9 <= j <= 0.98 + 1e-9
    unrelated = []
    for a, b in itertools.combinations(range(300), 2):
        j = _jaccard(sets[a], sets[b])
        if cluster[a] == cluster[b]:
            assert j >= 0.8  # every pair in a planted cluster, not only pairs with the original
        else:
            assert j < 0.8
            unrelated.append(j)
    unrelated = np.array(unrelated)
    assert unrelated.min() >= 0.39 and unrelated.max() <= 0.71
    assert unrelated.min() < 0.45 and unrelated.max() > 0.65  # spread over the range
    originals = pc.sum(pc.equal(truth["id"], truth["cluster"])).as_py()
    sizes = np.unique(cluster, return_counts=True)[1]
    assert set(sizes) <= {1, 2, 3, 4} and (sizes > 1).sum() == round(300 * 0.05 / 1.1)
    assert originals == len(sizes)


def test_templated_source_large_sample():
    """At 20k rows (the vectorized path at scale) the claims hold on a sample of planted and random pairs."""
    table, truth = templated_source(20_000, seed=11)
    assert table.num_rows == 20_000 and len(set(table["id"].to_pylist())) == 20_000
    texts = table["text"].to_pylist()
    ids = table["id"].to_pylist()
    cluster = truth["cluster"].to_pylist()
    row_of = {i: r for r, i in enumerate(ids)}
    variants = [r for r in range(len(ids)) if cluster[r] != ids[r]]
    assert 0.08 < len(variants) / len(ids) < 0.11  # 5% of originals × 2 variants on average
    rng = np.random.default_rng(0)
    for r in rng.choice(variants, size=200, replace=False):
        assert truth["jaccard_to_seed"][int(r)].as_py() == reference_jaccard(
            texts[r], texts[row_of[cluster[r]]]
        )
    a, b = rng.integers(0, len(ids), size=(2, 2000))
    for x, y in zip(a, b):
        if cluster[x] != cluster[y]:
            assert 0.39 <= reference_jaccard(texts[x], texts[y]) < 0.71
    assert (np.array(variants) < len(ids) // 2).mean() < 0.6  # rows are shuffled, variants not all last


def test_templated_source_is_seeded_and_checks_arguments():
    assert templated_source(500, seed=4)[0].equals(templated_source(500, seed=4)[0])
    assert not templated_source(500, seed=4)[0].equals(templated_source(500, seed=5)[0])
    with pytest.raises(ConfigError, match="variant_jaccard"):
        templated_source(100, unrelated_jaccard=(0.4, 0.9))
    assert templated_source(1)[0].num_rows == 1


def test_score_counts_removed_rows_per_cluster():
    truth = pa.table({"id": list("abcdef"), "cluster": ["a", "a", "a", "d", "e", "e"]})
    # remove mode: rows missing from pred are removed; b and f are correct, d is a false positive
    s = score(pa.table({"id": list("ace")}), truth)
    assert (s["removed_rows"], s["planted_duplicates"], s["true_positives"]) == (3, 3, 2)
    assert s["precision"] == pytest.approx(2 / 3) and s["recall"] == pytest.approx(2 / 3)
    assert not s["collapsed"]
    # whichever member is kept does not matter; removing every member of a cluster costs one false positive
    s = score(pa.table({"id": list("cdf")}), truth)
    assert (s["true_positives"], s["false_positives"]) == (3, 0)
    s = score(pa.table({"id": list("d")}), truth)
    assert (s["true_positives"], s["false_positives"], s["collapsed"]) == (3, 2, True)
    # annotate mode: dup_keep says what was removed
    s = score(pa.table({"id": list("fedcba"), "dup_keep": [False, True, True, True, False, True]}), truth)
    assert (s["precision"], s["recall"]) == (1.0, 2 / 3)
    with pytest.raises(ConfigError, match="not in truth"):
        score(pa.table({"id": ["zz"]}), truth)


def test_score_on_a_chain_flags_connected_components():
    table, truth = chain(30, 0.85)
    components = table.slice(0, 1)  # connected components keep only the first row of the chain
    s = score(components, truth)
    assert s["collapsed"] and s["removed_rows"] == 29 and s["planted_duplicates"] == 15
