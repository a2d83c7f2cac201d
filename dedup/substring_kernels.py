"""Per-document kernels of the exact substring dedup (``substring.py``): anchors, candidate windows, cuts.

Definitions (bytes of one document ``d`` of length ``n``; ``L`` = ``min_bytes``, ``w`` = anchor length):

- ``window(s)`` = ``d[s:s+L]`` for ``0 <= s <= n-L``; its hash is the polynomial hash mod the Mersenne prime
  2⁶¹−1 (base ``_BASE``) of its bytes; two different windows collide with probability about L/2⁶¹.
- ``anchor(s)``: the position of the smallest ``fmix64(gram hash)`` among the ``L-w+1`` w-grams inside
  ``window(s)``, the rightmost on ties (winnowing, Schleimer et al. 2003). It depends on the window's bytes
  only, so equal windows have anchors at the same offset with the same gram hash: a window can repeat only
  if its anchor's gram hash occurs at least twice in the corpus.
- ``anchor_hashes``: the gram hash of every distinct anchor position of every document (pass 1);
  ``candidates``: for windows whose anchor gram hash is in the sorted set ``repeated``, the window hash and
  start of every candidate window, and whether it is the first of its hash in its document (pass 2); ``cut``: remove the union of the windows
  that repeat inside their document or start at one of the given ``starts`` (earlier documents had them),
  snapped inward to UTF-8 character boundaries (pass 3).

The functions are plain Python over numpy arrays, compiled with numba on first use (``ZEPHYR_NO_NUMBA=1``
runs them as Python: the slow reference path the tests compare against on small inputs).
"""

from __future__ import annotations

import contextlib

import numpy as np
from zephyr.dedup.lazy_jit import NUMBA_ENABLED, LazyKernels

__all__ = ["anchor_hashes", "candidates", "cut", "window_hashes"]

_BASE = np.uint64(1_000_003)
_M61 = np.uint64((1 << 61) - 1)
_MASK30 = np.uint64((1 << 30) - 1)
_MASK31 = np.uint64((1 << 31) - 1)
_C1 = np.uint64(0xFF51AFD7ED558CCD)
_C2 = np.uint64(0xC4CEB9FE1A85EC53)
_NUMBA = NUMBA_ENABLED
_KERNELS = (
    "_mulmod",
    "_fmix",
    "_prefix",
    "_pow",
    "_span",
    "_anchor_positions",
    "_grow",
    "_document_anchors",
    "_anchors",
    "_candidates",
    "_cut",
)
_kernels = LazyKernels(globals(), _KERNELS)  # the functions are looked up when first compiled


def _jit() -> contextlib.AbstractContextManager:
    """Compile the kernels on first use; the context to call them in. Without numba they run as Python on numpy
    scalars, whose uint64 arithmetic wraps as numba's does (the hashes rely on it) but warns on overflow."""
    if _NUMBA:
        _kernels.compile()
        return contextlib.nullcontext()
    return np.errstate(over="ignore")


def _mulmod(a, b):
    """a·b mod 2⁶¹−1 for a, b < 2⁶¹, in 64-bit halves (no 128-bit integers in numba)."""
    au = a >> np.uint64(31)
    ad = a & _MASK31
    bu = b >> np.uint64(31)
    bd = b & _MASK31
    mid = ad * bu + au * bd
    res = ((au * bu) << np.uint64(1)) + (mid >> np.uint64(30)) + ((mid & _MASK30) << np.uint64(31)) + ad * bd
    res = (res & _M61) + (res >> np.uint64(61))
    res = (res & _M61) + (res >> np.uint64(61))
    return res - _M61 if res >= _M61 else res


def _fmix(h):
    h ^= h >> np.uint64(33)
    h *= _C1
    h ^= h >> np.uint64(33)
    h *= _C2
    h ^= h >> np.uint64(33)
    return h


def _prefix(data, lo, hi, prefix):
    """prefix[i] = hash of data[lo:lo+i] (mod 2⁶¹−1; byte b counts as b+1 so zero bytes matter)."""
    h = np.uint64(0)
    prefix[0] = h
    for i in range(hi - lo):
        h = _mulmod(h, _BASE) + np.uint64(data[lo + i]) + np.uint64(1)
        if h >= _M61:
            h -= _M61
        prefix[i + 1] = h


def _pow(n):
    r = np.uint64(1)
    for _ in range(n):
        r = _mulmod(r, _BASE)
    return r


def _span(prefix, s, n, pw):
    """Hash of the n bytes at s, from the prefix array (pw = BASE^n)."""
    h = prefix[s + n] + _M61 - _mulmod(prefix[s], pw)
    return h - _M61 if h >= _M61 else h


def _anchor_positions(prefix, length, L, w, pw_w, gram, key, anchor):
    """gram[j] (gram hash at j), and anchor[s] for every window start s (sliding minimum, rightmost)."""
    grams = length - w + 1
    for j in range(grams):
        h = prefix[j + w] + _M61 - _mulmod(prefix[j], pw_w)
        h = h - _M61 if h >= _M61 else h
        gram[j] = h
        key[j] = _fmix(h)
    span = L - w + 1
    dq = np.empty(grams, dtype=np.int64)
    head = 0
    tail = 0
    for j in range(grams):
        while tail > head and key[dq[tail - 1]] >= key[j]:  # >=: the rightmost minimum survives
            tail -= 1
        dq[tail] = j
        tail += 1
        s = j - span + 1
        if s >= 0:
            while dq[head] < s:
                head += 1
            anchor[s] = dq[head]


def _grow(arr, need):
    if need <= len(arr):
        return arr
    out = np.empty(max(need, 2 * len(arr) + 16), dtype=arr.dtype)
    out[: len(arr)] = arr
    return out


def _document_anchors(data, lo, hi, L, w, pw_w):
    """(prefix hashes, gram hashes, anchor of every window start) of the document ``data[lo:hi]`` (at least
    ``L`` bytes; ``pw_w`` = BASE^w): what passes 1 and 2 both derive from a document."""
    n = hi - lo
    prefix = np.empty(n + 1, dtype=np.uint64)
    _prefix(data, lo, hi, prefix)
    gram = np.empty(n - w + 1, dtype=np.uint64)
    key = np.empty(n - w + 1, dtype=np.uint64)
    anchor = np.empty(n - L + 1, dtype=np.int64)
    _anchor_positions(prefix, n, L, w, pw_w, gram, key, anchor)
    return prefix, gram, anchor


def _anchors(data, offsets, L, w):
    out = np.empty(1024, dtype=np.uint64)
    count = 0
    pw_w = _pow(w)
    for d in range(len(offsets) - 1):
        lo, hi = offsets[d], offsets[d + 1]
        n = hi - lo
        if n < L:
            continue
        _, gram, anchor = _document_anchors(data, lo, hi, L, w, pw_w)
        last = -1
        for s in range(n - L + 1):
            a = anchor[s]
            if a != last:  # anchors only move right as s grows: distinct positions are the changes
                out = _grow(out, count + 1)
                out[count] = gram[a]
                count += 1
                last = a
    return out[:count]


def _candidates(data, offsets, L, w, repeated):
    """(window hash, document, start, first in its document) of every candidate window."""
    hashes = np.empty(1024, dtype=np.uint64)
    firsts = np.empty(1024, dtype=np.bool_)
    docs = np.empty(1024, dtype=np.int64)
    starts = np.empty(1024, dtype=np.int64)
    count = 0
    pw_w = _pow(w)
    pw_l = _pow(L)
    for d in range(len(offsets) - 1):
        lo, hi = offsets[d], offsets[d + 1]
        n = hi - lo
        if n < L:
            continue
        prefix, gram, anchor = _document_anchors(data, lo, hi, L, w, pw_w)
        wins = np.empty(n - L + 1, dtype=np.uint64)
        pos = np.empty(n - L + 1, dtype=np.int64)
        m = 0
        for s in range(n - L + 1):
            g = gram[anchor[s]]
            i = np.searchsorted(repeated, g)
            if i < len(repeated) and repeated[i] == g:
                wins[m] = _span(prefix, s, L, pw_l)
                pos[m] = s
                m += 1
        if m == 0:
            continue
        order = np.argsort(wins[:m], kind="mergesort")  # stable: starts stay increasing within a hash
        for k in range(m):
            i = order[k]
            hashes = _grow(hashes, count + 1)
            docs = _grow(docs, count + 1)
            starts = _grow(starts, count + 1)
            firsts = _grow(firsts, count + 1)
            hashes[count] = wins[i]
            docs[count] = d
            starts[count] = pos[i]
            firsts[count] = k == 0 or wins[order[k - 1]] != wins[i]
            count += 1
    return hashes[:count], docs[:count], starts[:count], firsts[:count]


def _cut(
    data, offsets, L, removed_docs, removed_starts, bounds, bound_offsets, out, out_offsets, removed_bytes
):
    """Copy each document without the union of the windows at ``removed_starts`` (sorted by document),
    each run of the union snapped inward to UTF-8 character boundaries, or, when ``bound_offsets`` is not
    empty, to the sorted byte positions ``bounds[bound_offsets[d]:bound_offsets[d + 1]]`` (token starts)."""
    tokens = len(bound_offsets) > 0
    k = 0
    o = 0
    out_offsets[0] = 0
    for d in range(len(offsets) - 1):
        lo, hi = offsets[d], offsets[d + 1]
        n = hi - lo
        cover = np.zeros(n + 1, dtype=np.int32)
        while k < len(removed_docs) and removed_docs[k] == d:
            s = removed_starts[k]
            cover[s] += 1
            cover[min(s + L, n)] -= 1
            k += 1
        depth = 0
        i = 0
        while i < n:
            depth += cover[i]
            if depth <= 0:
                out[o] = data[lo + i]
                o += 1
                i += 1
                continue
            a = i  # a covered run [a, b)
            i += 1
            while i < n:
                depth += cover[i]
                if depth <= 0:
                    break
                i += 1
            b = i
            a2 = a
            b2 = b
            if tokens:  # the first token start at or after a, the last at or before b (or the end)
                own = bounds[bound_offsets[d] : bound_offsets[d + 1]]
                j = np.searchsorted(own, a)
                a2 = own[j] if j < len(own) else n
                if b < n:
                    j = np.searchsorted(own, b, side="right") - 1
                    b2 = own[j] if j >= 0 else 0
                if b2 < a2:
                    b2 = a2
            else:
                while a2 < b and (data[lo + a2] & 0xC0) == 0x80:  # a is inside a character: keep it whole
                    a2 += 1
                if b < n:
                    while b2 > a2 and (data[lo + b2] & 0xC0) == 0x80:  # the char at b began before b: keep it
                        b2 -= 1
            for j in range(a, a2):
                out[o] = data[lo + j]
                o += 1
            removed_bytes[d] += b2 - a2
            for j in range(b2, b):
                out[o] = data[lo + j]
                o += 1
            if i < n:  # byte i is uncovered (its cover is counted already)
                out[o] = data[lo + i]
                o += 1
                i += 1
        out_offsets[d + 1] = o


# -- entry points (numpy in, numpy out) ----------------------------------------------------------------
def anchor_hashes(data: np.ndarray, offsets: np.ndarray, min_bytes: int, anchor_bytes: int) -> np.ndarray:
    """uint64 gram hashes of every distinct anchor position (one per occurrence)."""
    with _jit():
        return _anchors(data, offsets.astype(np.int64), min_bytes, anchor_bytes)


def candidates(
    data: np.ndarray,
    offsets: np.ndarray,
    min_bytes: int,
    anchor_bytes: int,
    repeated: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(window hash, document index, start, first in its document) of every window whose anchor is in
    ``repeated``; the windows that are not first repeat an earlier window of their own document."""
    with _jit():
        return _candidates(data, offsets.astype(np.int64), min_bytes, anchor_bytes, repeated)


def cut(
    data: np.ndarray,
    offsets: np.ndarray,
    min_bytes: int,
    docs: np.ndarray,
    starts: np.ndarray,
    token_starts: list[np.ndarray] | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(bytes, offsets, removed bytes per document) after removing the windows (docs, starts); runs snap to
    UTF-8 characters, or to ``token_starts`` (sorted byte positions per document) when given."""
    kernels = _jit()
    order = np.lexsort((starts, docs))
    n_docs = len(offsets) - 1
    out = np.empty(len(data), dtype=np.uint8)
    out_offsets = np.empty(n_docs + 1, dtype=np.int64)
    removed = np.zeros(n_docs, dtype=np.int64)
    if token_starts is None:
        bounds, bound_offsets = np.zeros(0, np.int64), np.zeros(0, np.int64)
    else:
        bounds = (
            np.concatenate([np.asarray(t, np.int64) for t in token_starts])
            if n_docs
            else np.zeros(0, np.int64)
        )
        bound_offsets = np.concatenate(([0], np.cumsum([len(t) for t in token_starts]))).astype(np.int64)
    with kernels:
        _cut(
            data,
            offsets.astype(np.int64),
            min_bytes,
            docs[order].astype(np.int64),
            starts[order].astype(np.int64),
            bounds,
            bound_offsets,
            out,
            out_offsets,
            removed,
        )
    return out[: out_offsets[-1]], out_offsets, removed


def window_hashes(text: bytes, min_bytes: int) -> np.ndarray:
    """The hash of every ``min_bytes`` window of one text (for reports: locating a window by its hash)."""
    data = np.frombuffer(text, dtype=np.uint8)
    n = len(data)
    if n < min_bytes:
        return np.zeros(0, dtype=np.uint64)
    prefix = np.empty(n + 1, dtype=np.uint64)
    with _jit():
        _prefix(data, 0, n, prefix)
        pw = _pow(min_bytes)
    return np.array([_span_py(prefix, s, min_bytes, pw) for s in range(n - min_bytes + 1)], dtype=np.uint64)


def _span_py(prefix, s, n, pw):
    h = int(prefix[s + n]) + int(_M61) - int(_mulmod(prefix[s], pw))
    return h - int(_M61) if h >= int(_M61) else h
