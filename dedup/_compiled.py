"""The numba kernels of dedup, compiled on first use, and the lazy compilation substring's kernels share.

Contract: a module lists its kernels by name and enters ``LazyKernels.compile()`` at each entry point. The
first call imports numba (~0.5 s, so never at import time) and replaces each named function in the module's
globals by ``numba.njit(cache=True, nogil=True, boundscheck=False)`` of it, callees first, so that a compiled
caller resolves its callees as compiled; numba caches the machine code on disk beside the module. Later calls
return at once, and threads racing the first call compile once (a lock). ``NUMBA_ENABLED`` is whether numba
is installed and not turned off by ``ZEPHYR_NO_NUMBA=1``; without it the same kernels run as Python on numpy
scalars (slow, for checking: tests/dedup/test_compiled.py runs them both ways).

Why compiled code here: vectorized numpy makes many passes over arrays 8–24× the size of the text (a uint64
prefix sum per byte, one multiply-add pass per permutation, a lexsort per verification batch). One pass per
document that keeps its state in registers/L1 is what the hardware wants, and numpy cannot express it.
numba (a maintained LLVM JIT, cached on disk after the first compile) can, with no C toolchain. The tests
compare every kernel with an independent pure-Python reference (tests/dedup/test_kernels.py) and MinHash
with a numpy reference (``signatures_numpy`` in tests/dedup/test_compiled.py).

- ``word_shingles``/``char_shingles``: the polynomial hash (``_hashing.poly_hash_bytes``) of every word
  n-gram (tokens are runs of non-whitespace bytes, Python's ``str.isspace`` set, joined by one space) or
  character n-gram (code points); documents shorter than ``n`` give one shingle of everything they have.
- ``collapse_whitespace``: every whitespace run one ASCII space, trimmed, in one copy of the bytes.
- ``minhash``: ``min_k (a_k · fmix64(h) + b_k)`` mod 2⁶⁴ (``affine64``) or datatrove's
  ``((a_k · h + b_k) mod 2⁶⁴) mod (2⁶¹ − 1)`` (``mersenne61``) per document.
- ``sorted_sets`` + ``intersections``: per-document sorted unique shingle sets, then a merge count of
  each pair's two sets (exact Jaccard without hashing pairs together).
- ``greedy_anchors``: the anchored-cluster sweep of ``_graph.anchors`` (one pass in keep order).
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import threading
from collections.abc import Callable
from typing import Any

import numpy as np

NUMBA_ENABLED = importlib.util.find_spec("numba") is not None and os.environ.get("ZEPHYR_NO_NUMBA", "") in (
    "",
    "0",
)


class LazyKernels:
    """The kernels of the module whose ``globals()`` is ``namespace``: its functions decorated ``@kernel``."""

    def __init__(self, namespace: dict[str, Any]) -> None:
        self._namespace = namespace
        self._names: list[str] = []
        self._lock = threading.Lock()
        self.compiled = False
        """True once every kernel in the namespace is a numba dispatcher."""

    def compile(self) -> contextlib.AbstractContextManager:
        """Replace the kernels by numba dispatchers, once (loaded from numba's disk cache after the first run),
        and return the context to call them in: without numba they run as Python on numpy scalars, whose
        uint64 arithmetic wraps as numba's does (the hashes rely on it) but warns on overflow."""
        if not NUMBA_ENABLED:
            return np.errstate(over="ignore")
        if not self.compiled:
            with self._lock:
                if not self.compiled:
                    import numba

                    for name in self._names:
                        self._namespace[name] = numba.njit(cache=True, nogil=True, boundscheck=False)(
                            self._namespace[name]
                        )
                    self.compiled = True
        return contextlib.nullcontext()

    def kernel(self, function: Callable) -> Callable:
        """Mark ``function`` a kernel (compiled with the others on first use); returned as it is."""
        self._names.append(function.__name__)
        return function


# numba is a dependency, but importing it costs ~0.5 s and its first kernel load ~0.7 s more, so it is
# imported on the first kernel call only
_kernels = LazyKernels(globals())  # the functions are looked up when first compiled


def _ro(array: np.ndarray, dtype: type) -> np.ndarray:
    """A contiguous read-only view (a copy only if the dtype or layout differs). Kernels never write their
    inputs; passing every input read-only gives each kernel one compiled signature, whether the array came
    from an Arrow buffer (read-only) or from numpy — so one ``warm_up`` compiles everything a job needs."""
    view = np.ascontiguousarray(array, dtype=dtype).view()
    view.flags.writeable = False
    return view


def warm_up() -> None:
    """Import numba and load every kernel (from the disk cache, or compile it) on tiny inputs."""
    data = np.frombuffer(b"a b c", dtype=np.uint8)
    offsets = np.array([0, len(data)], dtype=np.int64)
    hashes, counts = word_shingles(data, offsets, 2)
    char_shingles(data, offsets, 2)
    collapse_whitespace(data, offsets)
    sh_offsets = np.array([0, len(hashes)], dtype=np.int64)
    minhash(hashes, sh_offsets, np.ones(2, np.uint64), np.ones(2, np.uint64), False)
    minhash(hashes, sh_offsets, np.ones(2, np.uint64), np.ones(2, np.uint64), True)
    sets, set_counts = sorted_sets(hashes, sh_offsets)
    intersections(sets, sh_offsets, np.zeros(1, np.int64), np.zeros(1, np.int64))
    greedy_anchors(np.zeros(2, np.int64), np.zeros(0, np.int64))


def _warm_up_niced() -> None:
    # Linux nice values are per thread: at 19 this thread only takes CPU the workers leave idle
    with contextlib.suppress(OSError, AttributeError):
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 19)
    warm_up()


def warm_up_in_background() -> threading.Thread | None:
    """Start ``warm_up`` on a low-priority daemon thread (a driver that will need the kernels later hides the
    cost behind work it is waiting for anyway, without slowing its workers); None when not in use."""
    if not NUMBA_ENABLED or _kernels.compiled:
        return None
    thread = threading.Thread(target=_warm_up_niced, name="zephyr-numba-warm-up", daemon=True)
    thread.start()
    return thread


_P = np.uint64(0x9E3779B97F4A7C15)  # hashing.POLY_BASE
_SPACE = np.uint64(32)
_C1 = np.uint64(0xFF51AFD7ED558CCD)
_C2 = np.uint64(0xC4CEB9FE1A85EC53)
_S33 = np.uint64(33)
_S61 = np.uint64(61)
_M61 = np.uint64((1 << 61) - 1)
_ONE = np.uint64(1)
_ZERO = np.uint64(0)
_MAX = np.uint64(0xFFFFFFFFFFFFFFFF)

# Python's str.isspace() in UTF-8: ASCII 9-13 and 28-32, plus the multi-byte sequences of _multibyte_space
_ASCII_SPACE = np.zeros(256, dtype=np.bool_)
_ASCII_SPACE[[9, 10, 11, 12, 13, 28, 29, 30, 31, 32]] = True


@_kernels.kernel
def _multibyte_space(c, c1, c2):
    """Byte length of the whitespace character starting with bytes ``c c1 c2`` (``c`` ≥ 0x80; missing bytes
    past the end are passed as 0), or 0. Scalars only: a helper taking the array would cost an atomic
    refcount increment/decrement per call (numba does not prune them across calls), 35× slower."""
    if c == 0xC2:
        return 2 if c1 == 0x85 or c1 == 0xA0 else 0
    if c == 0xE1:
        return 3 if c1 == 0x9A and c2 == 0x80 else 0
    if c == 0xE2:
        general_punct = c1 == 0x80 and (0x80 <= c2 <= 0x8A or c2 == 0xA8 or c2 == 0xA9 or c2 == 0xAF)
        return 3 if general_punct or (c1 == 0x81 and c2 == 0x9F) else 0
    if c == 0xE3:
        return 3 if c1 == 0x80 and c2 == 0x80 else 0
    return 0


@_kernels.kernel
def _tokens(data, lo, hi, ascii_space, tok_hash, tok_pow):
    """Hash (and P^len) of each whitespace-separated token of ``data[lo:hi]``; returns the token count."""
    count = 0
    h = _ZERO
    pw = _ONE
    in_token = False
    i = lo
    while i < hi:
        c = data[i]
        if c < 128:
            w = 1 if ascii_space[c] else 0
        else:
            w = _multibyte_space(c, data[i + 1] if i + 1 < hi else 0, data[i + 2] if i + 2 < hi else 0)
        if w:
            if in_token:
                tok_hash[count] = h
                tok_pow[count] = pw
                count += 1
                in_token = False
            i += w
        else:
            if not in_token:
                h = _ZERO
                pw = _ONE
                in_token = True
            h = h * _P + np.uint64(c)
            pw = pw * _P
            i += 1
    if in_token:
        tok_hash[count] = h
        tok_pow[count] = pw
        count += 1
    return count


@_kernels.kernel
def _collapse(data, offsets, ascii_space):
    """Each document's tokens joined by one ASCII space (``" ".join(text.split())``): (bytes, offsets)."""
    num_docs = len(offsets) - 1
    out = np.empty(len(data), dtype=np.uint8)
    out_offsets = np.zeros(num_docs + 1, dtype=np.int64)
    pos = 0
    for d in range(num_docs):
        hi = offsets[d + 1]
        i = offsets[d]
        pending_space = False
        while i < hi:
            c = data[i]
            if c < 128:
                w = 1 if ascii_space[c] else 0
            else:
                w = _multibyte_space(c, data[i + 1] if i + 1 < hi else 0, data[i + 2] if i + 2 < hi else 0)
            if w:
                pending_space = pos > out_offsets[d]
                i += w
            else:
                if pending_space:
                    out[pos] = 32
                    pos += 1
                    pending_space = False
                out[pos] = c
                pos += 1
                i += 1
        out_offsets[d + 1] = pos
    return out[:pos].copy(), out_offsets


@_kernels.kernel
def _word_shingles(data, offsets, n, ascii_space):
    num_docs = len(offsets) - 1
    # a document has at most len/2+1 tokens; one scratch buffer sized for the longest document
    longest = (offsets[1:] - offsets[:-1]).max() if num_docs else 0
    tok_hash = np.empty(longest // 2 + 2, dtype=np.uint64)
    tok_pow = np.empty(longest // 2 + 2, dtype=np.uint64)
    counts = np.zeros(num_docs, dtype=np.int64)
    out = np.empty(len(data) // 2 + num_docs + 1, dtype=np.uint64)  # >= total tokens >= total grams
    pos = 0
    for d in range(num_docs):
        t = _tokens(data, offsets[d], offsets[d + 1], ascii_space, tok_hash, tok_pow)
        if t == 0:
            continue
        grams = t - n + 1 if t >= n else 1
        span = min(n, t)
        for g in range(grams):
            acc = tok_hash[g]
            for j in range(g + 1, g + span):
                # H(a + " " + b) = H(a)·P^(1+|b|) + 32·P^|b| + H(b)
                acc = acc * (tok_pow[j] * _P) + _SPACE * tok_pow[j] + tok_hash[j]
            out[pos] = acc
            pos += 1
        counts[d] = grams
    return out[:pos].copy(), counts


@_kernels.kernel
def _char_shingles(data, offsets, n):
    num_docs = len(offsets) - 1
    counts = np.zeros(num_docs, dtype=np.int64)
    out = np.empty(len(data) + 1, dtype=np.uint64)  # >= total code points >= total grams
    starts = np.empty(n + 1, dtype=np.int64)  # ring of the last n+1 code point starts
    pos = 0
    for d in range(num_docs):
        lo = offsets[d]
        hi = offsets[d + 1]
        if hi <= lo:
            continue
        # slide over code point starts and the end; a gram is the bytes from start k to start k+n (or the end)
        seen = 0
        for i in range(lo, hi + 1):
            if i == hi or (data[i] & 0xC0) != 0x80:
                starts[seen % (n + 1)] = i
                seen += 1
                if seen > n:
                    h = _ZERO
                    for k in range(starts[(seen - n - 1) % (n + 1)], i):
                        h = h * _P + np.uint64(data[k])
                    out[pos] = h
                    pos += 1
        if seen <= n:  # fewer than n code points: one shingle of them all
            h = _ZERO
            for k in range(lo, hi):
                h = h * _P + np.uint64(data[k])
            out[pos] = h
            pos += 1
        counts[d] = max(seen - n, 1)
    return out[:pos].copy(), counts


def word_shingles(data: np.ndarray, offsets: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """(hashes, per-document counts) of the word ``n``-grams of each ``data[offsets[d]:offsets[d+1]]``."""
    with _kernels.compile():
        return _word_shingles(_ro(data, np.uint8), _ro(offsets, np.int64), np.int64(n), _ASCII_SPACE)


def collapse_whitespace(data: np.ndarray, offsets: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(bytes, offsets) of every document with whitespace runs collapsed to one space and trimmed."""
    with _kernels.compile():
        return _collapse(_ro(data, np.uint8), _ro(offsets, np.int64), _ASCII_SPACE)


def char_shingles(data: np.ndarray, offsets: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """(hashes, per-document counts) of the code point ``n``-grams of each document."""
    with _kernels.compile():
        return _char_shingles(_ro(data, np.uint8), _ro(offsets, np.int64), np.int64(n))


@_kernels.kernel
def _minhash(hashes, offsets, a, b, mersenne, out):
    # Loop order: per document, per permutation, a min-reduction over the document's shingles. The
    # reduction has no stores, so LLVM vectorizes it; the document's (mixed) hashes stay in L1/L2.
    k = len(a)
    num_docs = len(offsets) - 1
    longest = (offsets[1:] - offsets[:-1]).max() if num_docs else 0
    x = np.empty(longest, dtype=np.uint64)
    for d in range(num_docs):
        lo = offsets[d]
        m = offsets[d + 1] - lo
        if m <= 0:
            continue
        for s in range(m):
            h = hashes[lo + s]
            if not mersenne:  # fmix64
                h ^= h >> _S33
                h *= _C1
                h ^= h >> _S33
                h *= _C2
                h ^= h >> _S33
            x[s] = h
        for q in range(k):
            aq = a[q]
            bq = b[q]
            best = _MAX
            if mersenne:
                for s in range(m):
                    v = aq * x[s] + bq
                    v = (v & _M61) + (v >> _S61)
                    v = v - _M61 if v >= _M61 else v
                    best = min(best, v)
            else:
                for s in range(m):
                    best = min(best, aq * x[s] + bq)
            out[d, q] = best


def minhash(
    hashes: np.ndarray, offsets: np.ndarray, a: np.ndarray, b: np.ndarray, mersenne: bool
) -> np.ndarray:
    """``(num_docs, len(a))`` signatures; documents without shingles keep the all-``UINT64_MAX`` row."""
    out = np.full((len(offsets) - 1, len(a)), _MAX, dtype=np.uint64)
    with _kernels.compile():
        _minhash(
            _ro(hashes, np.uint64),
            _ro(offsets, np.int64),
            _ro(a, np.uint64),
            _ro(b, np.uint64),
            bool(mersenne),
            out,
        )
    return out


@_kernels.kernel
def _sorted_sets(hashes, offsets):
    num_docs = len(offsets) - 1
    out = np.empty_like(hashes)
    counts = np.zeros(num_docs, dtype=np.int64)
    pos = 0
    for d in range(num_docs):
        lo = offsets[d]
        hi = offsets[d + 1]
        if hi <= lo:
            continue
        seg = np.sort(hashes[lo:hi])
        out[pos] = seg[0]
        c = 1
        for i in range(1, len(seg)):
            if seg[i] != seg[i - 1]:
                out[pos + c] = seg[i]
                c += 1
        pos += c
        counts[d] = c
    return out[:pos].copy(), counts


def sorted_sets(hashes: np.ndarray, offsets: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each document's hashes sorted and de-duplicated: (flat hashes, per-document counts)."""
    with _kernels.compile():
        return _sorted_sets(_ro(hashes, np.uint64), _ro(offsets, np.int64))


@_kernels.kernel
def _intersections(hashes, offsets, u, v):
    out = np.zeros(len(u), dtype=np.int64)
    for e in range(len(u)):
        i = offsets[u[e]]
        i_end = offsets[u[e] + 1]
        j = offsets[v[e]]
        j_end = offsets[v[e] + 1]
        c = 0
        while i < i_end and j < j_end:
            x = hashes[i]
            y = hashes[j]
            if x == y:
                c += 1
                i += 1
                j += 1
            elif x < y:
                i += 1
            else:
                j += 1
        out[e] = c
    return out


def intersections(hashes: np.ndarray, offsets: np.ndarray, u: np.ndarray, v: np.ndarray) -> np.ndarray:
    """``|set(u_e) ∩ set(v_e)|`` per edge, on sets from ``sorted_sets`` (``offsets`` = its cumulative counts)."""
    with _kernels.compile():
        return _intersections(
            _ro(hashes, np.uint64), _ro(offsets, np.int64), _ro(u, np.int64), _ro(v, np.int64)
        )


@_kernels.kernel
def _greedy_anchors(offsets, earlier):
    n = len(offsets) - 1
    anchor = np.arange(n, dtype=np.int64)
    for u in range(n):
        best = -1
        for k in range(offsets[u], offsets[u + 1]):
            v = earlier[k]
            if anchor[v] == v and (best < 0 or v < best):
                best = v
        if best >= 0:
            anchor[u] = best
    return anchor


def greedy_anchors(offsets: np.ndarray, earlier: np.ndarray) -> np.ndarray:
    """Anchor of each node in keep order: itself, or the earliest adjacent anchor; ``earlier[offsets[u]:
    offsets[u + 1]]`` are the nodes before ``u`` that share a verified edge with it (CSR)."""
    with _kernels.compile():
        return _greedy_anchors(_ro(offsets, np.int64), _ro(earlier, np.int64))
