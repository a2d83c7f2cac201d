"""MinHash permutations and signatures (numpy reference, numba kernel, torch on an explicit device), band
hashes and LSH bucket pairing.

Scheme (``affine64``, identical to datasketch ≥ 2.0's ``scheme="affine64"``): every shingle hash ``h`` is
pre-mixed once with MurmurHash3's 64-bit finalizer, then permutation ``k`` maps it to
``a_k · fmix64(h) + b_k mod 2⁶⁴`` (``a_k`` odd, so the map is a bijection); the signature is the minimum
per permutation. ``mersenne61`` is datatrove's arithmetic instead: ``((a_k·h + b_k) mod 2⁶⁴) mod (2⁶¹−1)``
on the raw shingle hash. ``signatures`` takes the minima in one compiled pass per document
(``_compiled.minhash``); a numpy reference (tests/dedup/test_compiled.py: one multiply-add per
permutation over a cache-sized run of documents and ``np.minimum.reduceat`` over their boundaries) is tested
equal to it. Documents without shingles get the all-``UINT64_MAX`` signature and must be kept out of LSH by the
caller.

Permutations come from ``numpy.random.default_rng(seed)``; ``Permutations`` is plain data and is stored in
a signature index so that a later corpus is hashed the same way.

>>> import pyarrow as pa
>>> from zephyr.dedup._hashing import shingle_hashes
>>> perms = make_permutations(16, seed=1)
>>> sig = signatures(shingle_hashes(pa.array(["a b c d e f", "a b c d e f", "x y z"]), n=2), perms)
>>> sig.shape, bool((sig[0] == sig[1]).all()), bool((sig[0] == sig[2]).all())
((3, 16), True, False)

LSH banding: threshold arithmetic and candidate pairs from band buckets.

A pair with Jaccard ``s`` shares at least one of ``b`` bands of ``r`` rows with probability
``1 − (1 − s^r)^b``; the S-curve's midpoint is ``t ≈ (1/b)^(1/r)`` (Leskovec, Rajaraman & Ullman,
*Mining of Massive Datasets*, §3.4.2; the same approximation is printed by datatrove's
``dedup/minhash.py``). ``optimal_bands`` picks ``(b, r)`` by minimizing weighted false-positive and
false-negative areas under that curve (the approach of datasketch's ``lsh._optimal_param``, integrated
here with numpy).

Candidate pairs: documents are grouped by ``(band, band hash)``; every member of a bucket is paired with
the bucket's first ``BUCKET_LINKS`` members before it, so a small bucket gives all its pairs and a giant
one (a templated source, boilerplate pages) costs ``m · BUCKET_LINKS`` pairs, never ``m²``. A true pair
missed this way must share no small bucket; the refinement rounds of ``anchored`` recover most of those.

>>> import numpy as np
>>> candidate_pairs(np.array([[5], [5], [7], [5]], dtype=np.uint64), np.arange(4)).tolist()
[[1, 0], [3, 0], [3, 1]]
>>> len(candidate_pairs(np.zeros((1000, 1), dtype=np.uint64), np.arange(1000), links=2))  # not 499,500
1997

MinHash signatures with torch (CUDA, XPU or CPU tensors), bit-identical to ``minhash.signatures``.

torch has no full uint64 arithmetic, so the kernel works on int64 bit patterns: multiplication and
addition wrap modulo 2⁶⁴ in two's complement exactly as uint64 does, and the unsigned minimum is taken on
``x ^ 0x8000_0000_0000_0000`` (flipping the sign bit maps unsigned order onto signed order). The
``mersenne61`` fold needs a logical shift, done as an arithmetic shift followed by a mask. Documents are
grouped by their length rounded up to the next quarter octave and padded with their own first shingle (a repeat
never changes a minimum), so each group is one dense ``(docs × length × permutations)`` block and the
per-document minimum is ``amin`` over the length axis — no scatter over a document index, which made the
earlier form 50–70× slower than the CPU kernels on CPU. Blocks hold at most 2²⁴ elements (128 MiB).

The shingle hashes themselves come from numpy (``shingles.shingle_hashes``); only the
``shingles × permutations`` product, the dominant cost, runs on the device.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import zephyr.dedup._compiled as compiled
from zephyr.dedup._hashing import Shingles, fmix64, shingle_hashes
from zephyr.dedup.config import SIGNATURE_DEVICES, FuzzyDedupConfig

from zephyr.errors import ConfigError

if TYPE_CHECKING:
    import torch


EMPTY = np.uint64(0xFFFFFFFFFFFFFFFF)
_MERSENNE61 = np.uint64((1 << 61) - 1)


@dataclass(frozen=True)
class Permutations:
    """The ``a``/``b`` parameters of the permutations (uint64 arrays) and the scheme they belong to."""

    a: np.ndarray
    b: np.ndarray
    scheme: str = "affine64"

    def __len__(self) -> int:
        return len(self.a)


def make_permutations(num_perm: int, *, seed: int = 1, scheme: str = "affine64") -> Permutations:
    """Draw ``num_perm`` permutations deterministically from ``seed`` (``num_perm`` and ``scheme``: a
    ``FuzzyDedupConfig``'s, checked there)."""
    rng = np.random.default_rng(seed)
    if scheme == "affine64":
        a = rng.integers(0, 1 << 63, num_perm, dtype=np.uint64) * np.uint64(2) + np.uint64(1)
        b = rng.integers(0, 1 << 64, num_perm, dtype=np.uint64, endpoint=False)
    elif scheme == "mersenne61":
        a = rng.integers(1, int(_MERSENNE61), num_perm, dtype=np.uint64)
        b = rng.integers(0, int(_MERSENNE61), num_perm, dtype=np.uint64)
    else:
        raise ConfigError(f"minhash scheme must be affine64 or mersenne61, got {scheme!r}")
    return Permutations(a=a, b=b, scheme=scheme)


def signatures(shingles: Shingles, perms: Permutations) -> np.ndarray:
    """``(num_docs, num_perm)`` uint64 MinHash signatures (the compiled kernel); see the module docstring."""
    return compiled.minhash(shingles.hashes, shingles.offsets, perms.a, perms.b, perms.scheme == "mersenne61")


def band_hashes(sigs: np.ndarray, bands: int, rows: int) -> np.ndarray:
    """``(num_docs, bands)`` uint64: one hash of the ``rows`` signature values of each band.

    The band index is not mixed in: buckets are keyed by ``(band, hash)``. ``FuzzyDedupConfig`` keeps
    ``bands * rows`` within the signature's values.
    """
    banded = sigs[:, : bands * rows].reshape(len(sigs), bands, rows)
    h = fmix64(banded[:, :, 0].copy())
    for r in range(1, rows):
        h ^= banded[:, :, r]
        h = fmix64(h)
    return h


def band_rows(rows: pa.Array | np.ndarray, bands: np.ndarray) -> pa.Table:
    """(ROW, band, band hash) of each of ``rows`` and each of its ``(n, bands)`` band hashes."""
    from zephyr.dedup._rows import ROW  # _rows reads inputs (zephyr.io): the kernels import without it

    rows, width = np.asarray(rows, dtype=np.int64), bands.shape[1]
    return pa.table(
        {
            ROW: pa.array(np.repeat(rows, width)),
            "band": pa.array(np.tile(np.arange(width, dtype=np.int32), len(rows))),
            "bhash": pa.array(np.ascontiguousarray(bands).reshape(-1).view(np.int64)),
        }
    )


BUCKET_LINKS = 8
"""Earlier bucket members each member is paired with (see ``candidate_pairs``)."""


def candidate_pairs(bands: np.ndarray, ranks: np.ndarray, *, links: int = BUCKET_LINKS) -> np.ndarray:
    """``(m, 2)`` int64 pairs ``[rank, earlier rank]`` from ``(num_docs, num_bands)`` band hashes.

    Each bucket member is paired with the bucket's first ``links`` members (by rank) that precede it, so a
    bucket of ``m`` members costs at most ``m · links`` pairs (all ``m(m−1)/2`` when ``m ≤ links + 1``).
    ``ranks`` orders the documents; rows whose band hashes should not take part must be left out by the
    caller. Duplicate pairs across bands are kept.
    """
    parts = []
    ranks = np.asarray(ranks, dtype=np.int64)
    for band in range(bands.shape[1]):
        order = np.lexsort((ranks, bands[:, band]))
        parts.extend(_bucket_links(bands[order, band], ranks[order], links))
    if not parts:
        return np.zeros((0, 2), dtype=np.int64)
    return np.concatenate(parts)


def _bucket_links(keys: np.ndarray, ranks: np.ndarray, links: int) -> list[np.ndarray]:
    """Edges member → each of the first ``links`` earlier members of its bucket; ``keys`` sorted, ``ranks``
    ascending within equal keys."""
    n = len(keys)
    if n < 2:
        return []
    new_group = np.ones(n, dtype=bool)
    new_group[1:] = keys[1:] != keys[:-1]
    start = np.flatnonzero(new_group)[np.cumsum(new_group) - 1]
    position = np.arange(n, dtype=np.int64) - start
    out = []
    for j in range(links):
        member = np.flatnonzero(position > j)
        if len(member) == 0:
            break
        out.append(np.stack((ranks[member], ranks[start[member] + j]), axis=1))
    return out


_SIGN = -(1 << 63)
_MERSENNE61_INT = (1 << 61) - 1
_BLOCK_ELEMENTS = 1 << 24
"""Elements of one (docs × length × permutations) block on an accelerator (128 MiB of int64)."""
_CPU_BLOCK_ELEMENTS = 1 << 20
"""The same on CPU (8 MiB): 2¹⁶–2²⁰ measured alike; 2²⁴ was 2–3× slower."""


def _as_i64(values: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(values, dtype=np.uint64).view(np.int64)


def signatures_torch(
    shingles: Shingles, perms: Permutations, *, device: str | torch.device = "cuda"
) -> np.ndarray:
    """``(num_docs, num_perm)`` uint64 signatures computed on ``device``; same integers as numpy."""
    import torch

    num_docs, k = len(shingles), len(perms)
    out = np.full((num_docs, k), EMPTY, dtype=np.uint64)
    if len(shingles.hashes) == 0:
        return out
    affine = perms.scheme == "affine64"
    values = torch.from_numpy(_as_i64(fmix64(shingles.hashes) if affine else shingles.hashes)).to(device)
    a = torch.from_numpy(_as_i64(perms.a)).to(device).view(1, 1, k)
    # affine64: (a·h + b) ^ 2⁶³ == a·h + (b ^ 2⁶³) mod 2⁶⁴ (flipping the top bit adds 2⁶³), so the map from
    # unsigned to signed order costs nothing: it is folded into b
    b_np = _as_i64(perms.b) ^ np.int64(_SIGN) if affine else _as_i64(perms.b)
    b = torch.from_numpy(np.ascontiguousarray(b_np)).to(device).view(1, 1, k)
    block_elements = _BLOCK_ELEMENTS if torch.device(device).type != "cpu" else _CPU_BLOCK_ELEMENTS
    counts, starts = shingles.counts, shingles.offsets[:-1]
    # Documents padded to the next quarter octave of their length (≤ 25% more work); every length is one
    # dense (docs × length × permutations) block — no scatter over a document index.
    width = np.zeros(num_docs, dtype=np.int64)
    has = counts > 0
    step = 1 << np.maximum(0, np.floor(np.log2(np.maximum(counts, 1))).astype(np.int64) - 2)
    width[has] = (-(-counts[has] // step[has])) * step[has]  # up to the next quarter octave: ≤ 25% padding
    for length in np.unique(width[has]).tolist():
        docs = np.flatnonzero(width == length)
        per_block = max(1, block_elements // (length * k))
        span = torch.arange(length, device=device).view(1, length)
        for lo in range(0, len(docs), per_block):
            block = docs[lo : lo + per_block]
            first = torch.from_numpy(starts[block]).to(device).view(-1, 1)
            n = torch.from_numpy(counts[block]).to(device).view(-1, 1)
            inside = span < n
            index = torch.where(inside, first + span, first)  # padding repeats the first shingle
            v = torch.addcmul(
                b, values[index].unsqueeze(2), a
            )  # (docs, length, k); wraps mod 2⁶⁴ like uint64
            if not affine:
                high = (v >> 61).bitwise_and_(0x7)
                v.bitwise_and_(_MERSENNE61_INT).add_(high)
                v.sub_((v >= _MERSENNE61_INT).to(v.dtype) * _MERSENNE61_INT)
            mins = v.amin(dim=1).cpu().numpy()
            if affine:
                mins ^= np.int64(_SIGN)
            out[block] = mins.view(np.uint64)
    return out


def signatures_on(shingles: Shingles, perms: Permutations, device: str = "cpu") -> np.ndarray:
    """``signatures`` on ``device`` (see ``resolve_signature_device``); the same integers everywhere."""
    target = resolve_signature_device(device)
    if target == "cpu":
        return signatures(shingles, perms)
    return signatures_torch(shingles, perms, device="cpu" if target == "torch-cpu" else target)


@functools.cache
def resolve_signature_device(device: str) -> str:
    """``cpu``: the compiled kernels (the numpy reference without numba), torch never imported;
    ``cuda``/``xpu``: torch on that device, refused by name when there is none; ``torch-cpu``: the torch
    path on CPU (what accelerators run, checkable anywhere). Only an explicit device imports torch: it costs
    ~1.5 s and ~300 MB in every worker."""
    if device not in SIGNATURE_DEVICES:
        raise ConfigError(f"signature device must be one of {', '.join(SIGNATURE_DEVICES)}, got {device!r}")
    if device == "cpu":
        return device
    try:
        import torch
    except ImportError as exc:
        raise ConfigError(f"signature device {device!r} needs torch (pip install torch)") from exc
    backend = getattr(torch, device, None)
    if device != "torch-cpu" and (backend is None or not backend.is_available()):
        raise ConfigError(
            f"signature device {device!r}: torch {torch.__version__} sees no {device} device here"
        )
    return device


def compute_signatures(
    texts: pa.Array | pa.ChunkedArray, config: FuzzyDedupConfig
) -> tuple[Shingles, np.ndarray]:
    """(shingles, ``(n, bands)`` band hashes) of a text column: the per-batch kernel of every surface."""
    shingles = shingle_hashes(texts, kind=config.shingle, n=config.ngram, normalize=config.normalize)
    bands, rows = config.bands_rows()
    perms = make_permutations(config.num_perm_resolved, seed=config.seed, scheme=config.scheme)
    return shingles, band_hashes(signatures_on(shingles, perms, config.signature_device), bands, rows)
