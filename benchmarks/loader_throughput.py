"""Loader throughput: TokenLoader (shuffled) vs the numpy memmap limit vs mosaicml-streaming, same tokens.

    bash benchmarks/venvs/make_streaming_venv.sh          # once: mosaicml-streaming in its own venv
    .venv/bin/python benchmarks/loader_throughput.py [--tokens 100e6] [--seq-len 2048] [--samples 10000] \
        [--batch-size 16] [--rounds 3] [--streaming-python ''] [--no-write]

Writes a synthetic uint16 shard set (random ids, documents of 1..4000 tokens, 4 shards) to a temp dir on
local disk, then per round reads --samples shuffled windows of seq_len + 1 tokens with: (1) the limit —
numpy memmap windows at permuted offsets converted to int64, nothing else; (2) TokenLoader yielding single
samples; (3) ``TokenLoader.iter_batches(B)`` (what the trainer uses); (4) batches of B through
``loader.data_loader(num_workers=2)``. TokenLoader also computes labels and per-document positions; sha256
checks happen on first open and are excluded (each reader is warmed on one item). Rounds are interleaved
and the best of each reader is reported with its ratio to the best limit of the same run, because the
machine is shared: load moves every number, and the ratio is the stable one. Then the mosaicml-streaming
peer (benchmarks/peers/streaming_loader.py, in benchmarks/.venvs/streaming) writes the same windows as MDS
and reads them with ``StreamingDataset(shuffle=True)`` in one process and with a 2-worker DataLoader.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import psutil
import pyarrow as pa

RESULTS = Path(__file__).resolve().parent / "RESULTS.md"
STREAMING_PY = Path(__file__).resolve().parent / ".venvs" / "streaming" / "bin" / "python"
LIMIT = "numpy memmap shuffled windows (limit)"


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


def _limit(maps: list[np.ndarray], order: np.ndarray, L: int) -> float:
    """numpy memmap windows at permuted offsets converted to int64, nothing else: seconds for ``order``."""
    per_shard = [(len(m) - 1) // L for m in maps]
    cum = np.concatenate([[0], np.cumsum(per_shard)])
    t0 = time.perf_counter()
    for idx in order.tolist():
        s = int(np.searchsorted(cum, idx, side="right") - 1)
        start = (idx - int(cum[s])) * L
        window = maps[s][start : start + L + 1].astype(np.int64)
    del window
    return time.perf_counter() - t0


def _timed(iterator, items: int) -> float:
    next(iterator)  # warm: first open (sha256 of each shard touched), worker start
    t0 = time.perf_counter()
    for _ in range(items):
        next(iterator)
    return time.perf_counter() - t0


def _streaming(python: Path, work: Path, args) -> list[dict]:
    """Run the mosaicml-streaming peer in its own venv; its JSON lines (or one error row)."""
    cmd = [
        str(python),
        str(Path(__file__).resolve().parent / "peers" / "streaming_loader.py"),
        str(work),
        str(work / "mds"),
        "--seq-len",
        str(args.seq_len),
        "--samples",
        str(args.samples),
        "--rounds",
        str(args.rounds),
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=3600)
    if proc.returncode != 0:
        raise RuntimeError(f"streaming peer failed (rc {proc.returncode}): {proc.stderr[-2000:]}")
    return [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tokens", type=float, default=100e6)
    parser.add_argument("--seq-len", type=int, default=2048)
    parser.add_argument("--samples", type=int, default=10000)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=3, help="interleaved repetitions; the best is reported")
    parser.add_argument("--streaming-python", default=str(STREAMING_PY), help="'' skips mosaicml-streaming")
    parser.add_argument("--no-write", action="store_true", help="print the rows, do not append to RESULTS.md")
    args = parser.parse_args()
    from zephyr.tokenize import TokenLoader
    from zephyr.tokenize.format import read_manifest

    work = Path(tempfile.mkdtemp(prefix="zephyr-loaderbench-"))
    try:
        build(work, int(args.tokens))
        L, n, B = args.seq_len, args.samples, args.batch_size
        manifest = read_manifest(str(work))
        maps = [np.load(work / s.files["tokens"].path, mmap_mode="r") for s in manifest.shards]
        windows = sum((len(m) - 1) // L for m in maps)
        rates: dict[str, list[float]] = {}
        notes: dict[str, str] = {}

        def record(name: str, seconds: float, samples: int, note: str) -> None:
            rates.setdefault(name, []).append(samples * L / seconds)
            notes[name] = note
            print(f"  {name}: {samples * L / seconds / 1e6:.1f}M tokens/s", flush=True)

        loads = [os.getloadavg()[0]]
        for r in range(args.rounds):
            print(f"round {r + 1}/{args.rounds} (load {os.getloadavg()[0]:.1f})", flush=True)
            # a fresh mapping and a fresh permutation per round: every window is a first touch, as for a loader
            maps = [np.load(work / s.files["tokens"].path, mmap_mode="r") for s in manifest.shards]
            order = np.random.default_rng(r).permutation(windows)[:n]
            record(LIMIT, _limit(maps, order, L), n, "memmap slice + astype(int64) per window, nothing else")
            loader = TokenLoader(str(work), seq_len=L, seed=r)
            record(
                "TokenLoader, 1 process, single samples",
                _timed(iter(loader), n),
                n,
                "input_ids+labels+positions int64 tensors",
            )
            loader = TokenLoader(str(work), seq_len=L, seed=r)
            record(
                f"TokenLoader, 1 process, iter_batches({B})",
                _timed(loader.iter_batches(B), n // B),
                n // B * B,
                "input_ids+labels+positions int64 tensors",
            )
            loader = TokenLoader(str(work), seq_len=L, seed=r, batch_size=B)
            it = iter(loader.data_loader(num_workers=2))
            seconds = _timed(it, n // B)
            del it
            record(
                f"TokenLoader via DataLoader, 2 workers, batch_size={B}",
                seconds,
                n // B * B,
                "batches built in shared memory by the workers, handed over by fd",
            )
            loads.append(os.getloadavg()[0])
        streaming_note = ""
        python = Path(args.streaming_python) if args.streaming_python else None
        if python is not None and python.exists():
            for row in _streaming(python, work, args):
                if "reader" in row:
                    name = f"mosaicml-streaming StreamingDataset(shuffle=True), {row['reader']}"
                    rates.setdefault(name, []).append(row["tokens_per_s"])
                    notes[name] = "MDS of the same windows (raw bytes), each sample → int64 tensor"
                    print(f"  {name}: {row['tokens_per_s'] / 1e6:.1f}M tokens/s", flush=True)
            loads.append(os.getloadavg()[0])
        else:
            why = "--streaming-python ''" if python is None else f"{python} missing"
            streaming_note = (
                f"; mosaicml-streaming not run ({why}; see benchmarks/venvs/make_streaming_venv.sh)"
            )
    finally:
        shutil.rmtree(work, ignore_errors=True)

    limit = max(rates[LIMIT])
    machine = f"{platform.node()} ({os.cpu_count()} cores, {psutil.virtual_memory().total / 2**30:.0f} GiB)"
    lines = [
        "",
        f"### Loader throughput — {datetime.datetime.now().strftime('%Y-%m-%d %H:%M')}, {machine}",
        f"`python {' '.join(sys.argv)}` — synthetic {args.tokens / 1e6:.0f}M uint16 tokens (documents of 1..4000 "
        f"tokens), 4 shards on local disk, seq_len {L}, {n} shuffled samples per reader per round; best of "
        f"{args.rounds} interleaved rounds; 1-min load average {min(loads):.1f}–{max(loads):.1f} on "
        f"{os.cpu_count()} cores{streaming_note}",
        "",
        "| reader | tokens/s (best) | all rounds | × memmap limit | note |",
        "|---|---|---|---|---|",
    ]
    for name, values in rates.items():
        best = max(values)
        runs = ", ".join(f"{v / 1e6:.1f}" for v in values)
        lines.append(f"| {name} | {best / 1e6:.1f}M | {runs} | {best / limit:.2f} | {notes[name]} |")
    print("\n".join(lines))
    if not args.no_write:
        with open(RESULTS, "a") as handle:
            handle.write("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
