"""litdata peer for benchmarks/loader_throughput.py (runs in benchmarks/.venvs/loader-peers).

    benchmarks/.venvs/loader-peers/bin/python benchmarks/peers/litdata_loader.py SHARD_DIR OUT_DIR \
        --seq-len 2048 --samples 10000 --rounds 3 --batch-size 16

Writes the zephyr shard set's tokens with ``litdata.optimize`` (once; litdata's pretraining recipe: the
documents' tokens through ``TokensLoader``, which serves blocks of ``seq_len + 1`` tokens cut from the
concatenation: concat-and-chunk, what ``TokenLoader(packing="tokens")`` does), then reads ``--samples`` blocks
``--rounds`` times with ``StreamingDataset(shuffle=True)`` in one process, each block turned into an int64
tensor (no labels/positions), and through ``StreamingDataLoader`` with 2 workers. Prints one JSON line per
measurement: {"reader", "round", "tokens_per_s", "cpu_tokens_per_s"}. Needs only numpy, torch and litdata.
"""

from __future__ import annotations

import argparse
import json
import os
import time

import numpy as np


def _documents(shard_dir: str):
    """Every shard's tokens, in pieces of about 4M tokens (the zephyr .npy files, read with numpy only)."""
    with open(os.path.join(shard_dir, "manifest.json")) as handle:
        manifest = json.load(handle)
    for shard in manifest["shards"]:
        tokens = np.load(os.path.join(shard_dir, shard["files"]["tokens"]["path"]), mmap_mode="r")
        for start in range(0, len(tokens), 1 << 22):
            yield start, shard["files"]["tokens"]["path"]


def _piece(item, shard_dir: str):
    import torch

    start, path = item
    tokens = np.load(os.path.join(shard_dir, path), mmap_mode="r")
    yield torch.from_numpy(np.array(tokens[start : start + (1 << 22)]).astype(np.int32))


def write(shard_dir: str, out_dir: str, seq_len: int) -> None:
    from functools import partial

    import litdata as ld
    from litdata.streaming.item_loader import TokensLoader

    if os.path.exists(os.path.join(out_dir, "index.json")):
        return
    ld.optimize(
        fn=partial(_piece, shard_dir=shard_dir),
        inputs=list(_documents(shard_dir)),
        output_dir=out_dir,
        chunk_size=(seq_len + 1) * 4096,
        item_loader=TokensLoader(),
        num_workers=1,
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("shard_dir")
    parser.add_argument("out_dir")
    parser.add_argument("--seq-len", type=int, default=2048)
    parser.add_argument("--samples", type=int, default=10000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=16)
    args = parser.parse_args()
    import litdata as ld
    import torch
    from litdata.streaming.item_loader import TokensLoader

    write(args.shard_dir, args.out_dir, args.seq_len)
    L, n, B = args.seq_len, args.samples, args.batch_size
    for r in range(args.rounds):
        ds = ld.StreamingDataset(
            args.out_dir, item_loader=TokensLoader(block_size=L + 1), shuffle=True, seed=r
        )
        it = iter(ds)
        next(it)  # warm: index and first chunk
        t0, c0 = time.perf_counter(), time.process_time()
        for _ in range(n):
            sample = next(it).to(torch.int64)
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        del sample
        print(
            json.dumps(
                {
                    "reader": "1 process, single samples",
                    "round": r,
                    "tokens_per_s": n * L / wall,
                    "cpu_tokens_per_s": n * L / cpu,
                }
            ),
            flush=True,
        )
        ds = ld.StreamingDataset(
            args.out_dir, item_loader=TokensLoader(block_size=L + 1), shuffle=True, seed=r
        )
        loader = ld.StreamingDataLoader(ds, batch_size=B, num_workers=2)
        it = iter(loader)
        next(it)
        t0 = time.perf_counter()
        for _ in range(n // B):
            batch = next(it).to(torch.int64)
        wall = time.perf_counter() - t0
        del batch, it, loader
        print(
            json.dumps(
                {
                    "reader": f"StreamingDataLoader, 2 workers, batch_size={B}",
                    "round": r,
                    "tokens_per_s": n // B * B * L / wall,
                    "cpu_tokens_per_s": None,
                }
            ),
            flush=True,
        )


if __name__ == "__main__":
    main()
