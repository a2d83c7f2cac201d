"""Hash kernels shared by the plain functions and the Dataset functions.

- ``xxh3_128_array``: 128-bit xxh3 of every string in an Arrow array (document and paragraph exact dedup).
  No library here offers a vectorized xxh3: Arrow's compute has no hash kernel, polars' ``hash`` is a
  different, version-dependent function, and numpy cannot express xxh3's length-dependent paths. So the
  kernel calls ``xxhash.xxh3_128_digest`` once per row on a zero-copy ``memoryview`` slice of the Arrow
  data buffer (no ``str`` objects are built) and assembles the digests with one ``bytes.join``: ~0.2 µs of
  overhead per row, the rest is xxh3's own speed.
- ``span_hashes``: a 64-bit polynomial hash of arbitrary byte spans of one buffer, fully vectorized: with
  prefix sums ``S[k] = Σ_{j<k} b_j Q^j`` (Q = P⁻¹ mod 2⁶⁴, P odd) every span ``[a, e)`` hashes to
  ``(S[e] − S[a])·P^(e−1) = Σ b_j P^(e−1−j) mod 2⁶⁴``, i.e. exactly ``poly_hash_bytes`` of the span's bytes.
  Shingles (word or character n-grams) are spans of the normalized text, so their hashes need no copy.
- ``fmix64``: the MurmurHash3 64-bit finalizer (a bijection), used to spread hashes before MinHash.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import xxhash

__all__ = [
    "POLY_BASE",
    "base_powers",
    "fmix64",
    "poly_hash_bytes",
    "span_hashes",
    "string_buffers",
    "xxh3_128_array",
]

POLY_BASE = 0x9E3779B97F4A7C15  # odd, so it is invertible mod 2**64
_MASK64 = (1 << 64) - 1
_POLY_INV = pow(POLY_BASE, -1, 1 << 64)
_FMIX_C1 = np.uint64(0xFF51AFD7ED558CCD)
_FMIX_C2 = np.uint64(0xC4CEB9FE1A85EC53)
_S33 = np.uint64(33)


def poly_hash_bytes(data: bytes) -> int:
    """Reference (pure Python) form of the span hash: ``Σ b_j · P^(n−1−j) mod 2⁶⁴``.

    >>> poly_hash_bytes(b"ab") == (ord("a") * POLY_BASE + ord("b")) % 2**64
    True
    """
    h = 0
    for byte in data:
        h = (h * POLY_BASE + byte) & _MASK64
    return h


def fmix64(values: np.ndarray) -> np.ndarray:
    """MurmurHash3's 64-bit finalizer, element-wise on a uint64 array (returns a new array)."""
    h = values ^ (values >> _S33)
    h *= _FMIX_C1
    h ^= h >> _S33
    h *= _FMIX_C2
    h ^= h >> _S33
    return h


class _Powers:
    """Growing caches of P^j and Q^j (mod 2⁶⁴) so batches reuse them."""

    def __init__(self) -> None:
        self.p = np.ones(1, dtype=np.uint64)
        self.q = np.ones(1, dtype=np.uint64)

    def ensure(self, n: int) -> None:
        if len(self.p) >= n:
            return
        size = max(n, 2 * len(self.p))
        with np.errstate(over="ignore"):
            p = np.full(size, POLY_BASE, dtype=np.uint64)
            p[0] = 1
            q = np.full(size, _POLY_INV, dtype=np.uint64)
            q[0] = 1
            self.p = np.cumprod(p, dtype=np.uint64)
            self.q = np.cumprod(q, dtype=np.uint64)


_POWERS = _Powers()


def base_powers(n: int) -> np.ndarray:
    """P^0 … P^(n-1) (mod 2⁶⁴) of the polynomial hash, from the shared growing cache: what a caller needs to
    combine span hashes (``H(a + b) = H(a)·P^|b| + H(b)``)."""
    _POWERS.ensure(n)
    return _POWERS.p[:n]


def span_hashes(data: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """Polynomial hashes of the byte spans ``data[starts[i]:ends[i]]`` (non-empty spans), vectorized.

    >>> buf = np.frombuffer(b"hello world", dtype=np.uint8)
    >>> int(span_hashes(buf, np.array([6]), np.array([11]))[0]) == poly_hash_bytes(b"world")
    True
    """
    n = len(data)
    _POWERS.ensure(n + 1)
    prefix = np.empty(n + 1, dtype=np.uint64)
    prefix[0] = 0
    weighted = data.astype(np.uint64)
    weighted *= _POWERS.q[:n]
    np.cumsum(weighted, out=prefix[1:])
    out = prefix[ends] - prefix[starts]
    out *= _POWERS.p[ends - 1]
    return out


def string_buffers(values: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """(bytes as uint8, offsets as int64 rebased to 0) of a string array without copying the bytes."""
    if pa.types.is_string(values.type):
        values = values.cast(pa.large_string())
    n = len(values)
    buffers = values.buffers()
    offsets = np.frombuffer(buffers[1], dtype=np.int64)[values.offset : values.offset + n + 1]
    if buffers[2] is None or n == 0:
        return np.zeros(0, dtype=np.uint8), np.zeros(n + 1, dtype=np.int64)
    data = np.frombuffer(buffers[2], dtype=np.uint8)[offsets[0] : offsets[-1]]
    return data, offsets - offsets[0]


def xxh3_128_array(values: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """xxh3-128 digests of every string, as an ``(n, 16)`` uint8 array (big-endian canonical digests).

    Nulls hash as the empty string; callers mask them with the validity bitmap.

    >>> d = xxh3_128_array(pa.array(["a", "b", "a"]))
    >>> bytes(d[0]) == xxhash.xxh3_128_digest(b"a"), bool((d[0] == d[2]).all()), bool((d[0] == d[1]).all())
    (True, True, False)
    """
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks() if values.num_chunks != 1 else values.chunk(0)
    data, offsets = string_buffers(values)
    view = memoryview(data)
    digest = xxhash.xxh3_128_digest
    bounds = offsets.tolist()
    joined = b"".join([digest(view[s:e]) for s, e in zip(bounds[:-1], bounds[1:])])
    return np.frombuffer(joined, dtype=np.uint8).reshape(len(values), 16)
