"""Kernels against independent references: Python strings/sets, datasketch, big-int arithmetic, torch."""

from __future__ import annotations

import sys

import datasketch
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest
import xxhash
from hypothesis import given, settings
from hypothesis import strategies as st
from zephyr.dedup._graph import connected_components, jaccard
from zephyr.dedup._hashing import (
    collapse_whitespace,
    normalize_text,
    poly_hash_bytes,
    shingle_hashes,
    unique_sets,
    xxh3_128_array,
)
from zephyr.dedup._minhash import (
    band_hashes,
    candidate_pairs,
    make_permutations,
    signatures,
    signatures_torch,
)
from zephyr.dedup.config import collision_probability, lsh_threshold, optimal_bands
from zephyr.dedup.exact import document_hashes

from zephyr.errors import ConfigError

EDGE_TEXTS = [
    "",
    " ",
    "\t\n  \u00a0",
    "word",
    "!!! ??? ...",
    "x" * 1000 + " tail",
    "Ünïcödé  ÉCOLE\u2003mixed\u3000spaces and 😀 emoji",
    "The quick brown fox jumps over the lazy dog. The quick brown fox!",
    "a b c d e f g h i j k l m n o p",
]


def _ref_shingles(text: str, kind: str, n: int) -> set[bytes]:
    toks = text.lower().split() if kind == "word" else list(" ".join(text.lower().split()))
    if not toks:
        return set()
    sep = " " if kind == "word" else ""
    grams = (
        [sep.join(toks[i : i + n]) for i in range(len(toks) - n + 1)] if len(toks) >= n else [sep.join(toks)]
    )
    return {g.encode() for g in grams}


def test_normalize_matches_python_lower_split():
    out = normalize_text(pa.array(EDGE_TEXTS + [None]), "default").to_pylist()
    assert out[-1] is None
    for text, got in zip(EDGE_TEXTS, out):
        assert got == " ".join(text.lower().split())


@pytest.mark.parametrize(("kind", "n"), [("word", 5), ("word", 1), ("char", 3), ("char", 24)])
def test_shingle_hashes_equal_reference(kind, n):
    s = shingle_hashes(pa.array(EDGE_TEXTS + [None]), kind=kind, n=n)
    assert len(s) == len(EDGE_TEXTS) + 1
    assert s.counts[-1] == 0
    for i, text in enumerate(EDGE_TEXTS):
        got = {int(h) for h in s.hashes[s.offsets[i] : s.offsets[i + 1]]}
        assert got == {poly_hash_bytes(g) for g in _ref_shingles(text, kind, n)}, text


@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.text(alphabet=st.sampled_from("ab c\n\u00e9\u00a0X"), max_size=40), min_size=1, max_size=8)
)
def test_shingles_property(texts):
    s = shingle_hashes(pa.array(texts), kind="word", n=3)
    for i, text in enumerate(texts):
        got = {int(h) for h in s.hashes[s.offsets[i] : s.offsets[i + 1]]}
        assert got == {poly_hash_bytes(g) for g in _ref_shingles(text, "word", 3)}


def test_xxh3_128_array_matches_xxhash():
    texts = ["", "a", "héllo", "x" * 10000]
    d = xxh3_128_array(pa.array(texts, pa.large_string()).slice(0))
    for i, text in enumerate(texts):
        assert bytes(d[i]) == xxhash.xxh3_128_digest(text.encode())
    sliced = xxh3_128_array(pa.array(texts).slice(1, 2))
    assert bytes(sliced[0]) == xxhash.xxh3_128_digest(b"a")


def test_signatures_equal_datasketch_affine64():
    texts = [t for t in EDGE_TEXTS if t.split()]
    perms = make_permutations(64, seed=7)
    s = shingle_hashes(pa.array(texts), n=3)
    sig = signatures(s, perms)
    for i, text in enumerate(texts):
        mh = datasketch.MinHash(
            num_perm=64, hashfunc=poly_hash_bytes, permutations=(perms.a, perms.b), scheme="affine64"
        )
        mh.update_batch(sorted(_ref_shingles(text, "word", 3)))
        np.testing.assert_array_equal(mh.hashvalues, sig[i])


def test_signatures_mersenne61_equal_bigint_reference():
    perms = make_permutations(16, seed=3, scheme="mersenne61")
    text = EDGE_TEXTS[-1]
    s = shingle_hashes(pa.array([text]), n=2)
    sig = signatures(s, perms)
    p = (1 << 61) - 1
    for k in range(16):
        a, b = int(perms.a[k]), int(perms.b[k])
        ref = min(((a * poly_hash_bytes(g) + b) % (1 << 64)) % p for g in _ref_shingles(text, "word", 2))
        assert int(sig[0, k]) == ref


@pytest.mark.parametrize("scheme", ["affine64", "mersenne61"])
def test_torch_signatures_equal_numpy_on_cpu(scheme):
    perms = make_permutations(40, scheme=scheme)
    s = shingle_hashes(pa.array(EDGE_TEXTS * 3), n=2)
    np.testing.assert_array_equal(signatures_torch(s, perms, device="cpu"), signatures(s, perms))


@pytest.mark.gpu
@pytest.mark.parametrize("scheme", ["affine64", "mersenne61"])
def test_torch_signatures_equal_numpy_on_cuda(scheme):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    perms = make_permutations(112, scheme=scheme)
    s = shingle_hashes(pa.array(EDGE_TEXTS * 50), n=5)
    np.testing.assert_array_equal(signatures_torch(s, perms, device="cuda"), signatures(s, perms))


def test_empty_docs_get_empty_signature_and_equal_docs_equal_bands():
    perms = make_permutations(16)
    s = shingle_hashes(pa.array(["", "same words here", "same words here"]), n=2)
    sig = signatures(s, perms)
    assert (sig[0] == np.iinfo(np.uint64).max).all()
    bands = band_hashes(sig, 4, 4)
    np.testing.assert_array_equal(bands[1], bands[2])


def test_lsh_threshold_and_optimal_bands():
    assert lsh_threshold(14, 8) == pytest.approx((1 / 14) ** (1 / 8))
    assert optimal_bands(0.8, 128) == (9, 13)  # RedPajama-v2's choice at 0.8
    assert collision_probability(0.9, 14, 8) > 0.99
    assert collision_probability(0.3, 14, 8) < 0.01


def test_candidate_pairs_are_bounded_per_bucket_member():
    # one bucket of 50 docs: each member is paired with the first `links` members before it (by rank),
    # so 0+1+...+7 + 8*42 = 364 pairs at links=8, not the 1225 of all pairs
    bands = np.zeros((50, 1), dtype=np.uint64)
    ranks = np.arange(50)[::-1].copy()
    edges = candidate_pairs(bands, ranks, links=8)
    assert len(edges) == 364
    assert set(edges[:, 1].tolist()) == set(range(8))
    assert (edges[:, 0] > edges[:, 1]).all()
    # a bucket no larger than links + 1 gives every pair
    small = candidate_pairs(np.zeros((6, 1), dtype=np.uint64), np.arange(6), links=8)
    assert sorted(map(tuple, small.tolist())) == [(i, j) for i in range(6) for j in range(i)]
    # separate buckets never pair
    two = candidate_pairs(np.array([[1], [2], [1], [2]], dtype=np.uint64), np.arange(4))
    assert sorted(map(tuple, two.tolist())) == [(2, 0), (3, 1)]


def test_jaccard_equals_python_sets():
    texts = ["a b c d e f", "a b c d x y", "", "", "q r s"]
    s = shingle_hashes(pa.array(texts), n=2)
    edges = np.array([[0, 1], [2, 3], [0, 4], [1, 1]])
    got = jaccard(unique_sets(s), edges)
    for (u, v), j in zip(edges, got):
        a, b = _ref_shingles(texts[u], "word", 2), _ref_shingles(texts[v], "word", 2)
        ref = len(a & b) / len(a | b) if a | b else 1.0
        assert j == pytest.approx(ref)


@settings(max_examples=30, deadline=None)
@given(st.integers(1, 60), st.lists(st.tuples(st.integers(0, 59), st.integers(0, 59)), max_size=80))
def test_connected_components_equal_union_find(n, pairs):
    edges = np.array([(u % n, v % n) for u, v in pairs], dtype=np.int64).reshape(-1, 2)
    parent = list(range(n))

    def find(x):
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for u, v in edges.tolist():
        ru, rv = find(u), find(v)
        if ru != rv:
            parent[max(ru, rv)] = min(ru, rv)
    ref = [min(i for i in range(n) if find(i) == find(x)) for x in range(n)]
    assert connected_components(n, edges).tolist() == ref


def test_jaccard_exact_on_structured_near_identical_texts():
    # shingles one byte apart have polynomial hashes differing by multiples of the base: the batched
    # (edge, shingle) keys must not collide across neighbouring edges (a bug once found on the corpus)
    words = [f"tok{i}" for i in range(60)]
    texts = []
    for k in range(12):
        w = list(words)
        w[k * 4] = f"tok{k * 4}x"
        texts.append(" ".join(w))
    s = shingle_hashes(pa.array(texts), n=5)
    edges = np.array([(i, j) for i in range(12) for j in range(i)], dtype=np.int64)
    got = jaccard(unique_sets(s), edges)
    for (u, v), j in zip(edges, got):
        a, b = _ref_shingles(texts[u], "word", 5), _ref_shingles(texts[v], "word", 5)
        assert j == len(a & b) / len(a | b)


# The pre-2026-11-22 whitespace collapse (one RE2 regex over Python's str.isspace() set), kept as an
# independent reference for the polars implementation that replaced it.
_OLD_WHITESPACE_RUN = r"[\t\n\x{0b}\x{0c}\r\x{1c}-\x{1f} \x{85}\p{Z}]+"
_ALL_PY_SPACES = [chr(c) for c in range(sys.maxunicode + 1) if chr(c).isspace()]


def _old_collapse(values: pa.Array) -> pa.Array:
    return pc.utf8_trim(pc.replace_substring_regex(values, _OLD_WHITESPACE_RUN, " "), " ")


@pytest.mark.parametrize("typ", [pa.string(), pa.large_string()])
def test_collapse_whitespace_equals_old_regex_and_python(typ):
    texts = (
        [f"a{c}b" for c in _ALL_PY_SPACES]
        + [f"{c}a{c}{c}b{c}" for c in _ALL_PY_SPACES]
        + ["", " ", "  x  ", "\t\ttabs\tand\nnewlines\r\n", "\u00a0nbsp\u00a0\u00a0", "\u2003em\u3000ideo "]
        + ["zero\u200bwidth\ufeffnot\u180espace", "x" * 300 + "\n\n" + "y", None, "\x1c\x1d\x1e\x1fseps"]
    )
    arr = pa.array(texts, typ)
    new = collapse_whitespace(arr)
    assert new.type == typ
    assert new.equals(_old_collapse(arr))
    assert new.to_pylist() == [None if t is None else " ".join(t.split()) for t in texts]
    # sliced and chunked inputs take the same path
    assert collapse_whitespace(arr.slice(3, 40)).equals(_old_collapse(arr.slice(3, 40)))
    chunked = pa.chunked_array([arr.slice(0, 10), arr.slice(10)])
    assert collapse_whitespace(chunked).combine_chunks().equals(new)
    assert len(collapse_whitespace(pa.array([], typ))) == 0
    assert collapse_whitespace(pa.array([None, None], pa.null())).null_count == 2


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.text(alphabet=st.sampled_from(["a", "B", "é", " ", "\t", "\n", *_ALL_PY_SPACES[5:]])), max_size=10
    )
)
def test_collapse_whitespace_property(texts):
    arr = pa.array(texts, pa.large_string())
    assert collapse_whitespace(arr).equals(_old_collapse(arr))


@pytest.mark.parametrize(
    "call",
    [
        lambda: document_hashes(pa.array(["A b"]), "bogus"),
        lambda: shingle_hashes(pa.array(["abc"]), kind="char", n=0),
        lambda: shingle_hashes(pa.array(["abc"]), kind="chars"),
        lambda: make_permutations(2, scheme="affine"),
    ],
)
def test_a_kernel_called_without_a_config_refuses_a_bad_setting(call):
    with pytest.raises(ConfigError):
        call()
