"""MinHash signatures and LSH band hashes, vectorized over many documents per call.

Scheme (``affine64``, identical to datasketch ≥ 2.0's ``scheme="affine64"``): every shingle hash ``h`` is
pre-mixed once with MurmurHash3's 64-bit finalizer, then permutation ``k`` maps it to
``a_k · fmix64(h) + b_k mod 2⁶⁴`` (``a_k`` odd, so the map is a bijection); the signature is the minimum
per permutation. ``mersenne61`` is datatrove's arithmetic instead: ``((a_k·h + b_k) mod 2⁶⁴) mod (2⁶¹−1)``
on the raw shingle hash. With numba (a dependency) the minima come from one compiled
pass per document (``compiled.minhash``); the numpy form below — one multiply-add per permutation over a
cache-sized run of documents and ``np.minimum.reduceat`` over their boundaries — is the reference and
the fallback, and the two are tested equal. Documents without shingles get
the all-``UINT64_MAX`` signature and must be kept out of LSH by the caller.

Permutations come from ``numpy.random.default_rng(seed)``; ``Permutations`` is plain data and is stored in
a signature index so that a later corpus is hashed the same way.

>>> import pyarrow as pa
>>> from zephyr.dedup.shingles import shingle_hashes
>>> perms = make_permutations(16, seed=1)
>>> sig = signatures(shingle_hashes(pa.array(["a b c d e f", "a b c d e f", "x y z"]), n=2), perms)
>>> sig.shape, bool((sig[0] == sig[1]).all()), bool((sig[0] == sig[2]).all())
((3, 16), True, False)
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from zephyr.dedup import compiled
from zephyr.dedup.config import SCHEMES, Scheme
from zephyr.dedup.hashing import fmix64
from zephyr.dedup.shingles import Shingles

from zephyr.errors import ConfigError

__all__ = [
    "Scheme",
    "SCHEMES",
    "EMPTY",
    "Permutations",
    "make_permutations",
    "signatures",
    "band_hashes",
]

"""Where MinHash signatures are computed; every choice gives the same integers (tested)."""
EMPTY = np.uint64(0xFFFFFFFFFFFFFFFF)
_MERSENNE61 = np.uint64((1 << 61) - 1)
_S61 = np.uint64(61)
# shingles per work chunk: 32 Ki uint64 = 256 KiB, cache-resident
_CHUNK_SHINGLES = 1 << 15


@dataclass(frozen=True)
class Permutations:
    """The ``a``/``b`` parameters of the permutations (uint64 arrays) and the scheme they belong to."""

    a: np.ndarray
    b: np.ndarray
    scheme: str = "affine64"

    def __post_init__(self) -> None:
        if self.scheme not in SCHEMES:
            raise ConfigError(f"minhash scheme must be one of {', '.join(SCHEMES)}, got {self.scheme!r}")
        if self.a.shape != self.b.shape or self.a.ndim != 1:
            raise ConfigError(
                f"permutation a and b must be 1-D of one length, got {self.a.shape} and {self.b.shape}"
            )

    def __len__(self) -> int:
        return len(self.a)


def make_permutations(num_perm: int, *, seed: int = 1, scheme: str = "affine64") -> Permutations:
    """Draw ``num_perm`` permutations deterministically from ``seed``."""
    if num_perm < 1:
        raise ConfigError(f"num_perm must be >= 1, got {num_perm}")
    rng = np.random.default_rng(seed)
    if scheme == "affine64":
        a = rng.integers(0, 1 << 63, num_perm, dtype=np.uint64) * np.uint64(2) + np.uint64(1)
        b = rng.integers(0, 1 << 64, num_perm, dtype=np.uint64, endpoint=False)
    elif scheme == "mersenne61":
        a = rng.integers(1, int(_MERSENNE61), num_perm, dtype=np.uint64)
        b = rng.integers(0, int(_MERSENNE61), num_perm, dtype=np.uint64)
    else:
        raise ConfigError(f"minhash scheme must be one of {', '.join(SCHEMES)}, got {scheme!r}")
    return Permutations(a=a, b=b, scheme=scheme)


def _mod_mersenne61(x: np.ndarray) -> None:
    """In place ``x mod (2⁶¹−1)`` without a division: fold the top bits, then one conditional subtract."""
    folded = (x & _MERSENNE61) + (x >> _S61)
    folded -= _MERSENNE61 * (folded >= _MERSENNE61)
    x[...] = folded


def signatures(shingles: Shingles, perms: Permutations) -> np.ndarray:
    """``(num_docs, num_perm)`` uint64 MinHash signatures; see the module docstring for the scheme.

    Work is cut into runs of whole documents of ~``_CHUNK_SHINGLES`` shingles (a 256 KiB buffer that stays
    in cache); within a run, each permutation is one contiguous multiply-add over the run's shingles and
    one ``np.minimum.reduceat`` over its document starts. Measured on the small corpus, this 1-D
    per-permutation form is ~2x faster than a broadcast ``(shingles × permutations)`` block (numpy's
    broadcast inner loop is not vectorized as well, and the 2-D block falls out of cache).
    """
    if compiled.available():
        return compiled.minhash(
            shingles.hashes, shingles.offsets, perms.a, perms.b, perms.scheme == "mersenne61"
        )
    num_docs = len(shingles)
    k = len(perms)
    out = np.full((num_docs, k), EMPTY, dtype=np.uint64)
    counts = shingles.counts
    docs = np.flatnonzero(counts > 0)
    if len(docs) == 0:
        return out
    values = fmix64(shingles.hashes) if perms.scheme == "affine64" else shingles.hashes
    mersenne = perms.scheme == "mersenne61"
    offsets = shingles.offsets
    doc_ends = offsets[docs + 1]
    buf = np.empty(_CHUNK_SHINGLES, dtype=np.uint64)
    a_list = list(perms.a)
    b_list = list(perms.b)
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


def band_hashes(sigs: np.ndarray, bands: int, rows: int) -> np.ndarray:
    """``(num_docs, bands)`` uint64: one hash of the ``rows`` signature values of each band.

    The band index is not mixed in: buckets are keyed by ``(band, hash)``.
    """
    if sigs.shape[1] < bands * rows:
        raise ConfigError(f"signatures have {sigs.shape[1]} values, need bands*rows = {bands * rows}")
    banded = sigs[:, : bands * rows].reshape(len(sigs), bands, rows)
    h = fmix64(banded[:, :, 0].copy())
    for r in range(1, rows):
        h ^= banded[:, :, r]
        h = fmix64(h)
    return h
