"""Loader throughput: TokenLoader (shuffled, one process and with DataLoader workers) vs a raw numpy memmap.

    .venv/bin/python benchmarks/loader_throughput.py [--tokens 100e6] [--seq-len 2048] [--samples 20000]

Writes a synthetic uint16 shard set (random ids, documents of 1..4000 tokens, 4 shards) to a temp dir on
local disk, then reads --samples shuffled windows of seq_len+1 tokens with: (1) the limit — numpy memmap
windows at permuted offsets converted to int64, nothing else; (2) TokenLoader yielding single samples;
(3) TokenLoader yielding batches of 16; (4) the same through ``loader.data_loader(num_workers=2)``.
TokenLoader also computes labels and per-document positions and checks sha256 on first open (excluded:
the loaders are warmed on one item first). mosaicml-streaming is not run (not installed here).
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import psutil
import pyarrow as pa

RESULTS = Path(__file__).resolve().parent / "RESULTS.md"


def build(directory: Path, tokens: int) -> None:
    from zephyr.tokenize.shards import write_manifest, write_shard

    rng = np.random.default_rng(0)
    shards = []
    per = int(tokens) // 4
    for s in range(4):
        lengths = rng.integers(1, 4000, size=per // 2000 + 10)
        lengths = lengths[: np.searchsorted(np.cumsum(lengths), per)]
        lengths[-1] += per - lengths.sum()
        body = np.concatenate([[0], np.cumsum(lengths)])
        ids = rng.integers(0, 50000, size=per, dtype=np.uint16)
        arr = pa.LargeBinaryArray.from_buffers(
            pa.large_binary(), len(lengths), [None, pa.py_buffer(body * 2), pa.py_buffer(ids.tobytes())]
        )
        info, _ = write_shard(
            str(directory),
            f"shard-{s:05d}",
            [pa.table({"tokens": arr})],
            dtype=np.dtype("uint16"),
            num_tokens=per,
        )
        shards.append(info)
    write_manifest(
        str(directory),
        shards,
        meta={
            "dtype": "uint16",
            "vocab_size": 50257,
            "eos_id": 50256,
            "bos_id": None,
            "bos_policy": "never",
            "tokenizer": {},
            "seed": 0,
            "sources": {},
        },
    )


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tokens", type=float, default=100e6)
    parser.add_argument("--seq-len", type=int, default=2048)
    parser.add_argument("--samples", type=int, default=20000)
    args = parser.parse_args()
    from zephyr.tokenize import TokenLoader
    from zephyr.tokenize.format import read_manifest

    work = Path(tempfile.mkdtemp(prefix="zephyr-loaderbench-"))
    build(work, int(args.tokens))
    L, n = args.seq_len, args.samples
    rows = []

    def record(name, seconds, samples, note=""):
        rate = samples * L / seconds
        rows.append((name, rate, note))
        print(f"{name}: {rate / 1e6:.1f}M tokens/s {note}", flush=True)

    # (1) the limit: numpy memmap, permuted window offsets, int64 conversion only
    manifest = read_manifest(str(work))
    maps = [np.load(work / s.files["tokens"].path, mmap_mode="r") for s in manifest.shards]
    per_shard = [(len(m) - 1) // L for m in maps]
    order = np.random.default_rng(1).permutation(sum(per_shard))[:n]
    cum = np.concatenate([[0], np.cumsum(per_shard)])
    t0 = time.perf_counter()
    for idx in order.tolist():
        s = int(np.searchsorted(cum, idx, side="right") - 1)
        start = (idx - int(cum[s])) * L
        window = maps[s][start : start + L + 1].astype(np.int64)
    del window
    record("numpy memmap shuffled windows (limit)", time.perf_counter() - t0, n)

    for batch_size in (None, 16):
        loader = TokenLoader(str(work), seq_len=L, seed=0, batch_size=batch_size)
        it = iter(loader)
        next(it)
        items = n if batch_size is None else n // batch_size
        t0 = time.perf_counter()
        for _ in range(items):
            next(it)
        record(
            f"TokenLoader, 1 process, batch_size={batch_size}",
            time.perf_counter() - t0,
            items * (batch_size or 1),
            "input_ids+labels+positions tensors",
        )

    loader = TokenLoader(str(work), seq_len=L, seed=0, batch_size=16)
    it = iter(loader.data_loader(num_workers=2))
    next(it)
    items = n // 16
    t0 = time.perf_counter()
    for _ in range(items):
        next(it)
    seconds = time.perf_counter() - t0
    del it
    record(
        "TokenLoader via DataLoader, 2 workers, batch_size=16",
        seconds,
        items * 16,
        "worker → main process tensor transfer through shared memory",
    )

    machine = f"{platform.node()} ({os.cpu_count()} cores, {psutil.virtual_memory().total / 2**30:.0f} GiB)"
    lines = [
        "",
        f"### Loader throughput — {datetime.date.today().isoformat()}, {machine}",
        f"`python {' '.join(sys.argv)}` — synthetic {args.tokens / 1e6:.0f}M uint16 tokens, 4 shards, local disk, "
        f"seq_len {L}, {n} shuffled samples; mosaicml-streaming not run (not installed)",
        "",
        "| reader | tokens/s | note |",
        "|---|---|---|",
    ] + [f"| {name} | {rate / 1e6:.1f}M | {note} |" for name, rate, note in rows]
    with open(RESULTS, "a") as handle:
        handle.write("\n".join(lines) + "\n")
    print("\n".join(lines))
    shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
