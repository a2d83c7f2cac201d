"""MinHash signatures with torch (CUDA, XPU or CPU tensors), bit-identical to ``minhash.signatures``.

torch has no full uint64 arithmetic, so the kernel works on int64 bit patterns: multiplication and
addition wrap modulo 2⁶⁴ in two's complement exactly as uint64 does, and the unsigned minimum is taken on
``x ^ 0x8000_0000_0000_0000`` (flipping the sign bit maps unsigned order onto signed order). The
``mersenne61`` fold needs a logical shift, done as an arithmetic shift followed by a mask. Per-document
minima use ``scatter_reduce(..., "amin")`` over a document index, many documents per call.

The shingle hashes themselves come from numpy (``shingles.shingle_hashes``); only the
``shingles × permutations`` product, the dominant cost, runs on the device.

>>> import numpy as np, pyarrow as pa, torch
>>> from zephyr.dedup.shingles import shingle_hashes
>>> from zephyr.dedup.minhash import make_permutations, signatures
>>> s = shingle_hashes(pa.array(["a b c d e", "", "x y"]), n=2)
>>> p = make_permutations(8)
>>> bool((signatures_torch(s, p, device="cpu") == signatures(s, p)).all())
True
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
from zephyr.dedup.hashing import fmix64
from zephyr.dedup.minhash import EMPTY, Permutations
from zephyr.dedup.shingles import Shingles

if TYPE_CHECKING:
    import torch

__all__ = ["signatures_torch"]

_SIGN = -(1 << 63)
_MERSENNE61 = (1 << 61) - 1
_BLOCK_ELEMENTS = 1 << 24


def _as_i64(values: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(values, dtype=np.uint64).view(np.int64)


def signatures_torch(
    shingles: Shingles, perms: Permutations, *, device: str | torch.device = "cuda"
) -> np.ndarray:
    """``(num_docs, num_perm)`` uint64 signatures computed on ``device``; same integers as numpy."""
    import torch

    num_docs = len(shingles)
    k = len(perms)
    out = np.full((num_docs, k), EMPTY, dtype=np.uint64)
    if len(shingles.hashes) == 0:
        return out
    values = fmix64(shingles.hashes) if perms.scheme == "affine64" else shingles.hashes
    a = torch.from_numpy(_as_i64(perms.a)).to(device)[None, :]
    b = torch.from_numpy(_as_i64(perms.b)).to(device)[None, :]
    counts = shingles.counts
    doc_of = np.repeat(np.arange(num_docs, dtype=np.int64), counts)
    rows_per_block = max(1, _BLOCK_ELEMENTS // k)
    result = torch.full((num_docs, k), torch.iinfo(torch.int64).max, dtype=torch.int64, device=device)
    total = len(values)
    for lo in range(0, total, rows_per_block):
        hi = min(total, lo + rows_per_block)
        h = torch.from_numpy(_as_i64(values[lo:hi])).to(device)[:, None]
        v = h * a + b
        if perms.scheme == "mersenne61":
            folded = (v & _MERSENNE61) + ((v >> 61) & 0x7)
            v = torch.where(folded >= _MERSENNE61, folded - _MERSENNE61, folded)
        else:
            v = v ^ _SIGN  # unsigned order -> signed order
        idx = torch.from_numpy(doc_of[lo:hi]).to(device)[:, None].expand(-1, k)
        result.scatter_reduce_(0, idx, v, reduce="amin")
    res = result.cpu().numpy()
    if perms.scheme == "affine64":
        res = res ^ np.int64(_SIGN)
    res = res.view(np.uint64)
    has = counts > 0
    out[has] = res[has]
    return out
