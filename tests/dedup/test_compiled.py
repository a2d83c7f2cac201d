"""The numba kernels give exactly the integers of their numpy twins (the reference path)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
import zephyr.dedup._compiled as compiled
from hypothesis import given, settings
from hypothesis import strategies as st
from zephyr.dedup._graph import jaccard
from zephyr.dedup._hashing import collapse_whitespace, shingle_hashes, unique_sets
from zephyr.dedup._minhash import make_permutations, signatures

pytestmark = pytest.mark.skipif(not compiled.available(), reason="numba not installed or disabled")

# every whitespace character of Python's str.isspace, plus near misses that share a lead byte
SPACES = "\t\n\x0b\x0c\r\x1c\x1d\x1e\x1f \x85\xa0\u1680\u2000\u2005\u200a\u2028\u2029\u202f\u205f\u3000"
NEAR = "\xa1\u1681\u200b\u2027\u202e\u2060\u3001é😀"
TEXTS = [
    "",
    " ",
    SPACES,
    "word",
    "a" + SPACES + "b" + NEAR + "c d e f",
    "x" * 5000 + " tail",
    "Ünïcödé  ÉCOLE\u2003mixed\u3000spaces and 😀 emoji " * 20,
    "a b c d e f g h i j k l m n o p",
    "ends in a wide space\u3000",
]


def _both(fn):
    """(compiled result, numpy result) of ``fn()``."""
    got = fn()
    compiled._NUMBA = False
    try:
        want = fn()
    finally:
        compiled._NUMBA = True
    return got, want


@pytest.mark.parametrize(("kind", "n"), [("word", 5), ("word", 1), ("char", 1), ("char", 3), ("char", 24)])
def test_shingles_equal_numpy(kind, n):
    arr = pa.array(TEXTS + [None] + TEXTS[::-1])
    got, want = _both(lambda: shingle_hashes(arr, kind=kind, n=n))
    np.testing.assert_array_equal(got.offsets, want.offsets)
    np.testing.assert_array_equal(got.hashes, want.hashes)


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.text(alphabet=st.sampled_from("ab c" + SPACES + NEAR), max_size=60), min_size=1, max_size=10),
    st.integers(1, 6),
    st.sampled_from(["word", "char"]),
)
def test_shingles_property(texts, n, kind):
    arr = pa.array(texts)
    got, want = _both(lambda: shingle_hashes(arr, kind=kind, n=n, normalize="none"))
    np.testing.assert_array_equal(got.offsets, want.offsets)
    np.testing.assert_array_equal(got.hashes, want.hashes)


@pytest.mark.parametrize("scheme", ["affine64", "mersenne61"])
def test_signatures_equal_numpy(scheme):
    perms = make_permutations(112, seed=5, scheme=scheme)
    s = shingle_hashes(pa.array(TEXTS * 4), n=3)
    got, want = _both(lambda: signatures(s, perms))
    np.testing.assert_array_equal(got, want)
    assert (got[0] == np.iinfo(np.uint64).max).all()  # the empty document


def test_sets_and_jaccard_equal_numpy():
    rng = np.random.default_rng(0)
    words = [f"w{i}" for i in range(40)]
    texts = [" ".join(rng.choice(words, size=int(rng.integers(0, 60)))) for _ in range(80)]
    s = shingle_hashes(pa.array(texts), n=2)
    got, want = _both(lambda: unique_sets(s))
    np.testing.assert_array_equal(got.offsets, want.offsets)
    np.testing.assert_array_equal(got.hashes, want.hashes)
    edges = rng.integers(0, len(texts), size=(500, 2))
    got, want = _both(lambda: jaccard(s, edges))
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(jaccard(unique_sets(s), edges, sets=True), want)


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.none() | st.text(alphabet=st.sampled_from("ab c" + SPACES + NEAR), max_size=60), max_size=10)
)
def test_collapse_whitespace_equals_polars(texts):
    for typ in (pa.string(), pa.large_string()):
        arr = pa.array(texts, typ)
        arr = arr.slice(1) if len(arr) else arr  # a non-zero offset
        got, want = _both(lambda arr=arr: collapse_whitespace(arr))
        assert got.type == typ and got.equals(want)
        assert got.to_pylist() == [None if t is None else " ".join(t.split()) for t in texts[1:]]
