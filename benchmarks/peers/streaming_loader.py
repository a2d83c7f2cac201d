"""mosaicml-streaming peer for benchmarks/loader_throughput.py (runs in benchmarks/.venvs/loader-peers).

    benchmarks/.venvs/loader-peers/bin/python benchmarks/peers/streaming_loader.py SHARD_DIR MDS_DIR \
        --seq-len 2048 --samples 10000 --rounds 3

Writes the zephyr shard set's samples as an MDS dataset (once; one ``tokens`` column of raw bytes per sample:
the same windows of seq_len + 1 tokens every seq_len tokens within each shard that ``TokenLoader`` reads),
then reads ``--samples`` of them ``--rounds`` times with ``StreamingDataset(shuffle=True)`` in one process
and through a torch ``DataLoader`` with 2 workers, each sample turned into an int64 tensor (what the numpy
memmap limit does; no labels/positions). Prints one JSON line per measurement: {"reader", "round",
"tokens_per_s"}. Needs only numpy, torch and streaming (no zephyr import).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import time

import numpy as np
import torch
from streaming import MDSWriter, StreamingDataset
from streaming.base.util import clean_stale_shared_memory


class TokenWindows(StreamingDataset):
    """Each sample as an int64 tensor of seq_len + 1 tokens."""

    def __init__(self, *, dtype: str, **kwargs):
        super().__init__(**kwargs)
        self.token_dtype = np.dtype(dtype)

    def __getitem__(self, index: int) -> torch.Tensor:
        sample = super().__getitem__(index)
        return torch.from_numpy(np.frombuffer(sample["tokens"], dtype=self.token_dtype).astype(np.int64))


def write_mds(shard_dir: str, mds_dir: str, seq_len: int) -> tuple[int, str]:
    with open(os.path.join(shard_dir, "manifest.json")) as handle:
        manifest = json.load(handle)
    dtype = manifest["dtype"]
    done = os.path.join(mds_dir, "index.json")
    count = 0
    if not os.path.exists(done):
        shutil.rmtree(mds_dir, ignore_errors=True)
        with MDSWriter(out=mds_dir, columns={"tokens": "bytes"}, compression=None, size_limit=1 << 26) as out:
            for shard in manifest["shards"]:
                tokens = np.load(os.path.join(shard_dir, shard["files"]["tokens"]["path"]), mmap_mode="r")
                for start in range(0, ((len(tokens) - 1) // seq_len) * seq_len, seq_len):
                    out.write({"tokens": tokens[start : start + seq_len + 1].tobytes()})
    with open(done) as handle:
        count = sum(s["samples"] for s in json.load(handle)["shards"])
    return count, dtype


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("shard_dir")
    parser.add_argument("mds_dir")
    parser.add_argument("--seq-len", type=int, default=2048)
    parser.add_argument("--samples", type=int, default=10000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=16)
    args = parser.parse_args()
    L, n, B = args.seq_len, args.samples, args.batch_size
    total, dtype = write_mds(args.shard_dir, args.mds_dir, L)
    print(json.dumps({"mds_samples": total}), flush=True)
    for r in range(args.rounds):
        for workers in (0, 2):
            clean_stale_shared_memory()
            dataset = TokenWindows(
                dtype=dtype, local=args.mds_dir, shuffle=True, shuffle_seed=r, batch_size=B, epoch_size=None
            )
            if workers == 0:
                it = iter(dataset)
                next(it)
                t0, c0 = time.perf_counter(), time.process_time()
                for _ in range(n):
                    next(it)
                seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
                reader = "1 process"
            else:
                loader = torch.utils.data.DataLoader(
                    dataset, batch_size=B, num_workers=workers, prefetch_factor=4
                )
                it = iter(loader)
                next(it)
                t0 = time.perf_counter()
                for _ in range(n // B):
                    next(it)
                seconds, cpu = time.perf_counter() - t0, None  # the work is in the workers
                n_read = (n // B) * B
                reader = f"DataLoader, {workers} workers, batch_size={B}"
            del it
            count = (n if workers == 0 else n_read) * L
            row = {"reader": reader, "round": r, "tokens_per_s": count / seconds}
            row["cpu_tokens_per_s"] = count / cpu if cpu else None
            print(json.dumps(row), flush=True)
            del dataset
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
