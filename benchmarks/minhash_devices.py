"""MinHash signatures per device: the compiled CPU kernel (numba; numpy without it) vs ``signatures_torch``
(the path ``--signature-device cuda|xpu|torch-cpu`` runs) on the same shingles, both schemes, checking
that the integers are equal. On a CPU-only machine torch runs on the CPU (``torch-cpu``); with a GPU lent,
pass ``--device cuda``.

    .venv/bin/python benchmarks/minhash_devices.py [--docs 2000] [--device cpu|cuda|xpu] [--no-append]

Appends a Markdown table to the month's notebook, benchmarks/history/<YYYY-MM>.md.
"""

from __future__ import annotations

import argparse
import datetime
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _measure import machine, publish  # noqa: E402


def _best_of(repeat: int, fn) -> tuple[float, np.ndarray]:
    best, out = float("inf"), None
    for _ in range(repeat):
        start = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - start)
    return best, out


def main() -> int:
    import torch
    from zephyr.dedup._hashing import shingle_hashes
    from zephyr.dedup._minhash import make_permutations, signatures, signatures_torch

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--docs", type=int, default=2000)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--num-perm", type=int, default=112)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--no-append", action="store_true")
    args = ap.parse_args()

    rng = np.random.default_rng(0)
    lengths = rng.integers(200, 5000, size=args.docs)  # words: a wide spread, as web pages have
    docs = [" ".join(f"w{x}" for x in rng.integers(0, 50_000, size=int(n))) for n in lengths]
    shingles = shingle_hashes(pa.array(docs, pa.large_string()), n=5)
    if args.device == "cpu":
        torch.set_num_threads(2)
    first = type(shingles)(
        shingles.hashes[: shingles.offsets[1]], shingles.offsets[:2]
    )  # one document: warm-up
    rows = []
    for scheme in ("affine64", "mersenne61"):
        perms = make_permutations(args.num_perm, seed=1, scheme=scheme)
        signatures(first, perms)  # load the kernel
        cpu_s, ref = _best_of(args.repeat, lambda perms=perms: signatures(shingles, perms))
        signatures_torch(first, perms, device=args.device)
        torch_s, got = _best_of(
            args.repeat, lambda perms=perms: signatures_torch(shingles, perms, device=args.device)
        )
        equal = bool(np.array_equal(ref, got))
        rows.append((scheme, cpu_s, torch_s, equal))
        print(
            f"{scheme}: kernel {cpu_s:.3f} s, torch[{args.device}] {torch_s:.3f} s, equal {equal}", flush=True
        )
    n = len(shingles.hashes)
    text = [
        f"\n### MinHash signatures per device — {datetime.date.today()}, {machine()}, torch {torch.__version__}\n",
        f"Command: `.venv/bin/python benchmarks/minhash_devices.py --docs {args.docs} --device {args.device}` "
        f"({args.docs} documents, {n:,} word 5-gram shingles × {args.num_perm} permutations; best of "
        f"{args.repeat}; `signatures_torch` is what `--signature-device cuda|xpu|torch-cpu` runs).\n",
        f"| scheme | compiled CPU kernel s | torch ({args.device}) s | torch / kernel | ns per shingle×perm (torch) "
        "| same integers |",
        "|---|---|---|---|---|---|",
    ]
    for scheme, cpu_s, torch_s, equal in rows:
        per = torch_s / (n * args.num_perm) * 1e9
        text.append(
            f"| {scheme} | {cpu_s:.3f} | {torch_s:.3f} | {torch_s / cpu_s:.1f}× | {per:.2f} | {equal} |"
        )
    publish("\n".join(text) + "\n", append=not args.no_append)
    return 0 if all(r[3] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
