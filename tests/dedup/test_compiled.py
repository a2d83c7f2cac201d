"""The kernels compiled (numba) give exactly the integers of the same kernels run as Python
(``ZEPHYR_NO_NUMBA=1``), and MinHash equals its numpy reference. Each kernel is also checked against an
independent pure-Python reference in test_kernels.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pyarrow as pa
import pytest
from zephyr.dedup._compiled import NUMBA_ENABLED
from zephyr.dedup._graph import anchors, jaccard
from zephyr.dedup._hashing import Shingles, collapse_whitespace, fmix64, shingle_hashes, unique_sets
from zephyr.dedup._minhash import EMPTY, Permutations, make_permutations, signatures

pytestmark = pytest.mark.skipif(not NUMBA_ENABLED, reason="numba not installed or disabled")

_MERSENNE61 = np.uint64((1 << 61) - 1)
_S61 = np.uint64(61)
# shingles per work chunk: 32 Ki uint64 = 256 KiB, cache-resident
_CHUNK_SHINGLES = 1 << 15

# every whitespace character of Python's str.isspace, plus near misses that share a lead byte
SPACES = "\t\n\x0b\x0c\r\x1c\x1d\x1e\x1f \x85\xa0\u1680\u2000\u2005\u200a\u2028\u2029\u202f\u205f\u3000"
NEAR = "\xa1\u1681\u200b\u2027\u202e\u2060\u3001é😀"
TEXTS = [
    "",
    " ",
    SPACES,
    "word",
    "a" + SPACES + "b" + NEAR + "c d e f",
    "x" * 500 + " tail",
    "Ünïcödé  ÉCOLE\u2003mixed\u3000spaces and 😀 emoji " * 5,
    "a b c d e f g h i j k l m n o p",
    "ends in a wide space\u3000",
    None,
]


def _results() -> dict:
    """Every kernel's output on TEXTS, as JSON-able lists: run here (compiled) and in a child without numba."""
    arr = pa.array(TEXTS)
    out = {"collapse": collapse_whitespace(arr).to_pylist()}
    for kind, n in (("word", 5), ("word", 1), ("char", 1), ("char", 3)):
        s = shingle_hashes(arr, kind=kind, n=n)
        out[f"{kind}{n}"] = [s.offsets.tolist(), [int(h) for h in s.hashes]]
    s = shingle_hashes(arr, n=2)
    sets = unique_sets(s)
    out["sets"] = [sets.offsets.tolist(), [int(h) for h in sets.hashes]]
    pairs = np.array([[i, j] for i in range(len(TEXTS)) for j in range(i)], dtype=np.int64)
    out["jaccard"] = jaccard(sets, pairs).tolist()
    for scheme in ("affine64", "mersenne61"):
        out[scheme] = [
            [int(x) for x in row] for row in signatures(s, make_permutations(8, seed=5, scheme=scheme))
        ]
    out["anchors"] = anchors(6, np.array([[1, 0], [2, 1], [3, 2], [5, 4], [4, 0]])).tolist()
    return out


def test_compiled_kernels_equal_the_same_kernels_run_as_python():
    code = "import json, tests.dedup.test_compiled as t; print(json.dumps(t._results()))"
    env = {**os.environ, "ZEPHYR_NO_NUMBA": "1"}
    child = subprocess.run(
        [sys.executable, "-W", "error", "-c", code], capture_output=True, text=True, env=env
    )
    assert child.returncode == 0, child.stderr[-2000:]
    assert json.loads(child.stdout) == json.loads(json.dumps(_results()))


@pytest.mark.parametrize("scheme", ["affine64", "mersenne61"])
def test_signatures_equal_numpy_reference(scheme):
    perms = make_permutations(112, seed=5, scheme=scheme)
    s = shingle_hashes(pa.array([t or "" for t in TEXTS] * 4), n=3)
    got = signatures(s, perms)
    np.testing.assert_array_equal(got, signatures_numpy(s, perms))
    assert (got[0] == np.iinfo(np.uint64).max).all()  # the empty document


def _mod_mersenne61(x: np.ndarray) -> None:
    """In place ``x mod (2⁶¹−1)`` without a division: fold the top bits, then one conditional subtract."""
    folded = (x & _MERSENNE61) + (x >> _S61)
    folded -= _MERSENNE61 * (folded >= _MERSENNE61)
    x[...] = folded


def signatures_numpy(shingles: Shingles, perms: Permutations) -> np.ndarray:
    """``_minhash.signatures`` in numpy: the reference the compiled kernel is tested against.

    Work is cut into runs of whole documents of ~``_CHUNK_SHINGLES`` shingles (a 256 KiB buffer that stays
    in cache); within a run, each permutation is one contiguous multiply-add over the run's shingles and
    one ``np.minimum.reduceat`` over its document starts. Measured on the small corpus, this 1-D
    per-permutation form is ~2x faster than a broadcast ``(shingles × permutations)`` block (numpy's
    broadcast inner loop is not vectorized as well, and the 2-D block falls out of cache).
    """
    num_docs, k = len(shingles), len(perms)
    out = np.full((num_docs, k), EMPTY, dtype=np.uint64)
    docs = np.flatnonzero(shingles.counts > 0)
    if len(docs) == 0:
        return out
    values = fmix64(shingles.hashes) if perms.scheme == "affine64" else shingles.hashes
    mersenne = perms.scheme == "mersenne61"
    offsets = shingles.offsets
    doc_ends = offsets[docs + 1]
    buf = np.empty(_CHUNK_SHINGLES, dtype=np.uint64)
    a_list, b_list = list(perms.a), list(perms.b)
    i = 0
    while i < len(docs):
        lo = offsets[docs[i]]
        j = max(int(np.searchsorted(doc_ends, lo + _CHUNK_SHINGLES, "right")), i + 1)
        hi = offsets[docs[j - 1] + 1]
        chunk = values[lo:hi]
        work = buf[: hi - lo] if hi - lo <= _CHUNK_SHINGLES else np.empty(hi - lo, dtype=np.uint64)
        starts = offsets[docs[i:j]] - lo
        res = np.empty((j - i, k), dtype=np.uint64)
        for q in range(k):
            np.multiply(chunk, a_list[q], out=work)
            work += b_list[q]
            if mersenne:
                _mod_mersenne61(work)
            res[:, q] = np.minimum.reduceat(work, starts)
        out[docs[i:j]] = res
        i = j
    return out
