"""Loader benchmark: packing modes side by side (padding, splits, tokens/s) and the peers on the same tokens.

    .venv/bin/zephyr tokenize --tokenizer CORPUS/models/gpt2/tokenizer.json --output /tmp/medium-gpt2 \
        CORPUS/docs --executor threads                  # the medium corpus as token shards (once)
    bash benchmarks/venvs/loader_peers.sh            # litdata + mosaicml-streaming in their own venv (once)
    .venv/bin/python benchmarks/loader_throughput.py --shards /tmp/medium-gpt2 [--seq-len 2048] \
        [--samples 10000] [--batch-size 16] [--rounds 3] [--no-write]

Without ``--shards`` it writes a synthetic uint16 set (random ids, documents of 1..4000 tokens, 4 shards).

1. Packing: per mode (``tokens`` = concat-and-chunk, ``documents``, ``best-fit``), from the set's document
   lengths (``packing_stats``, here): samples, padding fraction, fraction of documents
   split across samples, the same among documents that fit in seq_len, and tokens in no sample.
2. Throughput, rounds interleaved: the numpy memmap limit (shuffled windows sliced and cast to int64, nothing
   else), then ``TokenLoader.iter_batches(B)`` per packing mode (input_ids + labels + positions), single
   samples and a 2-worker DataLoader for ``tokens``. Tokens/s by wall clock (the machine is shared, so load
   moves it) and by the process's CPU time (``time.process_time``: robust to other tenants; the per-process
   figure); each reader is warmed on one item (sha256 checks and best-fit packing excluded: the packing time
   is reported in part 1).
3. Peers in their own venvs, on the same tokens: mosaicml-streaming (benchmarks/peers/streaming_loader.py:
   MDS of the same seq_len + 1 windows, ``StreamingDataset(shuffle=True)``) and litdata
   (benchmarks/peers/litdata_loader.py: ``litdata.optimize`` + ``StreamingDataset`` with ``TokensLoader``,
   i.e. concat-and-chunk), each sample cast to an int64 tensor (no labels/positions).
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
from zephyr.tokenize._samples import document_spans, pack_best_fit

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _measure import append_history  # noqa: E402

HERE = Path(__file__).resolve().parent
PEER_PYTHON = HERE / ".venvs" / "loader-peers" / "bin" / "python"  # benchmarks/venvs/loader_peers.sh
PEERS = {
    "mosaicml-streaming": (PEER_PYTHON, HERE / "peers" / "streaming_loader.py"),
    "litdata": (PEER_PYTHON, HERE / "peers" / "litdata_loader.py"),
}
LIMIT = "numpy memmap shuffled windows (limit)"
MODES = ("tokens", "documents", "best-fit")


def packing_stats(shard_lengths: list[np.ndarray], seq_len: int, packing: str, **kwargs) -> dict[str, float]:
    """Padding and splitting of one packing mode over shards of documents (``shard_lengths``: lengths per shard).

    Returns ``padding_fraction`` (pad inputs / input slots), ``split_fraction`` (documents whose inputs land
    in more than one sample), ``fit_split_fraction`` (the same among documents of at most ``seq_len``
    tokens: the splits a packing could avoid), ``unused_fraction`` (tokens that are in no sample's inputs)
    and ``samples``. ``"tokens"``: windows start every ``seq_len`` tokens of a shard; ``"best-fit"``: as
    ``pack_best_fit`` (``window`` in ``kwargs``).
    """
    lengths = np.concatenate(shard_lengths) if shard_lengths else np.zeros(0, np.int64)
    fits = lengths <= seq_len
    total = int(lengths.sum())
    if packing == "tokens":
        split = []
        samples = used = 0
        for docs in shard_lengths:
            ends = np.cumsum(docs)
            n = max(0, (int(ends[-1]) - 1) // seq_len) if len(docs) else 0
            starts = ends - docs
            last = np.minimum(ends, n * seq_len) - 1  # the last input token of each document
            inside = starts < n * seq_len
            split.append(inside & (last // seq_len > starts // seq_len))
            samples += n
            used += n * seq_len
        split_mask = np.concatenate(split) if split else np.zeros(0, bool)
        padding = 0.0
    elif packing == "best-fit":
        offsets = [np.concatenate([[0], np.cumsum(d)]) for d in shard_lengths]
        base = np.concatenate([[0], np.cumsum([o[-1] for o in offsets])])
        doc_starts = np.concatenate([o[:-1] + b for o, b in zip(offsets, base)] + [[base[-1]]]).astype(
            np.int64
        )
        doc_base = np.concatenate([[0], np.cumsum([len(d) for d in shard_lengths])]).astype(np.int64)
        index = pack_best_fit(doc_starts, doc_base, seq_len, **kwargs)
        samples, used = len(index.shard), total
        padding = 1.0 - total / max(1, samples * seq_len)
        split_mask = lengths > seq_len
    elif packing == "documents":
        split, samples, slots_used = [], 0, 0
        for docs in shard_lengths:
            offsets = np.concatenate([[0], np.cumsum(docs)]).astype(np.int64)
            starts, spans = document_spans(offsets, seq_len)
            samples += len(starts)
            slots_used += int(np.minimum(spans, seq_len).sum())
            first = np.searchsorted(starts, offsets[:-1], side="right") - 1  # the sample holding each start
            last_in = np.searchsorted(starts, np.maximum(offsets[1:] - 1, offsets[:-1]), side="right") - 1
            split.append(last_in > first)
        split_mask = np.concatenate(split) if split else np.zeros(0, bool)
        used = total
        padding = 1.0 - slots_used / max(1, samples * seq_len)
    else:
        raise ValueError(f"packing_stats knows 'tokens', 'documents' and 'best-fit', got {packing!r}")
    docs = max(1, len(lengths))
    return {
        "samples": float(samples),
        "padding_fraction": float(padding),
        "split_fraction": float(split_mask.sum() / docs),
        "fit_split_fraction": float((split_mask & fits).sum() / max(1, int(fits.sum()))),
        "unused_fraction": float(1.0 - used / max(1, total)),
    }


def build(directory: Path, tokens: int) -> None:
    """A synthetic uint16 set: random ids, documents of 1..4000 tokens, 4 shards."""
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
    meta = {
        "dtype": "uint16",
        "vocab_size": 50257,
        "eos_id": 50256,
        "bos_id": None,
        "bos_policy": "never",
        "tokenizer": {},
        "seed": 0,
        "sources": {},
    }
    write_manifest(str(directory), shards, meta=meta)


def packing_rows(shards: Path, L: int) -> list[str]:
    from zephyr.tokenize import TokenLoader
    from zephyr.tokenize.shards import read_manifest

    manifest = read_manifest(str(shards))
    lengths = [np.diff(np.load(shards / s.files["offsets"].path)) for s in manifest.shards]
    rows = []
    for mode in MODES:
        t0 = time.process_time()
        TokenLoader(str(shards), seq_len=L, packing=mode)
        built = time.process_time() - t0
        st = packing_stats(lengths, L, mode)
        rows.append(
            f"| {mode} | {int(st['samples']):,} | {st['padding_fraction']:.3%} | {st['split_fraction']:.2%} | "
            f"{st['fit_split_fraction']:.2%} | {st['unused_fraction']:.4%} | {built:.2f} s |"
        )
    longer = float(np.mean(np.concatenate(lengths) > L))
    rows.append(
        f"\nDocuments longer than seq_len (split by any packing): {longer:.2%} of "
        f"{sum(map(len, lengths)):,}; {manifest.num_tokens:,} tokens."
    )
    return rows


def _limit(maps: list[np.ndarray], order: np.ndarray, L: int) -> float:
    """numpy memmap windows at permuted offsets converted to int64, nothing else: CPU seconds for ``order``."""
    per_shard = [(len(m) - 1) // L for m in maps]
    cum = np.concatenate([[0], np.cumsum(per_shard)])
    t0 = time.process_time()
    for idx in order.tolist():
        s = int(np.searchsorted(cum, idx, side="right") - 1)
        start = (idx - int(cum[s])) * L
        window = maps[s][start : start + L + 1].astype(np.int64)
    del window
    return time.process_time() - t0


def _timed(iterator, items: int) -> tuple[float, float]:
    next(iterator)  # warm: first open (sha256 of each shard touched), worker start
    t0, c0 = time.perf_counter(), time.process_time()
    for _ in range(items):
        next(iterator)
    return time.perf_counter() - t0, time.process_time() - c0


def _peer(name: str, shards: Path, work: Path, args) -> list[dict]:
    python, script = PEERS[name]
    cmd = [
        str(python),
        str(script),
        str(shards),
        str(work / name),
        "--seq-len",
        str(args.seq_len),
        "--samples",
        str(args.samples),
        "--rounds",
        str(args.rounds),
        "--batch-size",
        str(args.batch_size),
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=7200)
    if proc.returncode != 0:
        raise RuntimeError(f"{name} peer failed (rc {proc.returncode}): {proc.stderr[-2000:]}")
    return [
        json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{") and "reader" in line
    ]


def throughput(shards: Path, work: Path, args) -> tuple[dict, dict, dict, list[str]]:
    from zephyr.tokenize import TokenLoader
    from zephyr.tokenize.shards import read_manifest

    L, n, B = args.seq_len, args.samples, args.batch_size
    manifest = read_manifest(str(shards))
    wall: dict[str, list[float]] = {}
    cpu: dict[str, list[float]] = {}
    notes: dict[str, str] = {}

    def record(name: str, seconds: tuple[float | None, float | None], samples: int, note: str) -> None:
        w, c = seconds
        wall.setdefault(name, []).append(samples * L / w if w else float("nan"))
        cpu.setdefault(name, []).append(samples * L / c if c else float("nan"))
        notes[name] = note
        print(
            f"  {name}: wall {wall[name][-1] / 1e6:.1f}M, cpu {cpu[name][-1] / 1e6:.1f}M tokens/s", flush=True
        )

    for r in range(args.rounds):
        print(f"round {r + 1}/{args.rounds} (load {os.getloadavg()[0]:.1f})", flush=True)
        maps = [np.load(shards / s.files["tokens"].path, mmap_mode="r") for s in manifest.shards]
        windows = sum((len(m) - 1) // L for m in maps)
        order = np.random.default_rng(r).permutation(windows)[:n]
        record(
            LIMIT, (None, _limit(maps, order, L)), n, "memmap slice + astype(int64) per window, nothing else"
        )
        for mode in MODES:
            loader = TokenLoader(str(shards), seq_len=L, packing=mode, seed=r, pin_memory=False)
            record(
                f"TokenLoader iter_batches({B}), packing={mode}",
                _timed(loader.iter_batches(B), n // B),
                n // B * B,
                "input_ids+labels+positions int64 tensors",
            )
        loader = TokenLoader(str(shards), seq_len=L, seed=r, pin_memory=False)
        record(
            "TokenLoader single samples, packing=tokens",
            _timed(iter(loader), n),
            n,
            "row views of 64-sample gathers",
        )
        loader = TokenLoader(str(shards), seq_len=L, seed=r, batch_size=B, pin_memory=False)
        it = iter(loader.data_loader(num_workers=2))
        w, _ = _timed(it, n // B)
        del it
        record(
            f"TokenLoader via DataLoader, 2 workers, batch_size={B}, packing=tokens",
            (w, None),
            n // B * B,
            "batches built in shared memory by the workers (CPU time is in the workers)",
        )
    skipped = []
    for name, (python, _) in PEERS.items():
        if not python.exists():
            skipped.append(f"{name} not run ({python} missing; see benchmarks/venvs/)")
            continue
        try:
            rows = _peer(name, shards, work, args)
        except (RuntimeError, subprocess.TimeoutExpired) as exc:
            skipped.append(f"{name} failed: {str(exc).splitlines()[-1][:200]}")
            continue
        for row in rows:
            key = f"{name} {row['reader']}"
            wall.setdefault(key, []).append(row["tokens_per_s"])
            cpu.setdefault(key, []).append(row.get("cpu_tokens_per_s") or float("nan"))
            notes[key] = "same tokens, seq_len + 1 windows (concat-and-chunk), each sample -> int64 tensor"
    return wall, cpu, notes, skipped


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--shards", default=None, help="a zephyr token-shard set (default: a synthetic one)")
    parser.add_argument("--tokens", type=float, default=100e6, help="synthetic set size (without --shards)")
    parser.add_argument("--seq-len", type=int, default=2048)
    parser.add_argument("--samples", type=int, default=10000)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=3, help="interleaved repetitions; the best is reported")
    parser.add_argument(
        "--no-write",
        action="store_true",
        help="print the rows, do not append them to the month's notebook (benchmarks/history/)",
    )
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="zephyr-loaderbench-"))
    try:
        shards = Path(args.shards) if args.shards else work / "set"
        if not args.shards:
            build(shards, int(args.tokens))
        loads = [os.getloadavg()[0]]
        packing = packing_rows(shards, args.seq_len)
        wall, cpu, notes, skipped = throughput(shards, work, args)
        loads.append(os.getloadavg()[0])
    finally:
        shutil.rmtree(work, ignore_errors=True)
    limit = max(cpu[LIMIT])
    machine = f"{platform.node()} ({os.cpu_count()} cores, {psutil.virtual_memory().total / 2**30:.0f} GiB)"
    what = f"`{args.shards}`" if args.shards else f"synthetic {args.tokens / 1e6:.0f}M uint16 tokens"
    lines = [
        "",
        f"### Loader: packing modes and peers — {datetime.datetime.now().strftime('%Y-%m-%d %H:%M')}, {machine}",
        f"`python {' '.join(sys.argv)}` — {what}, seq_len {args.seq_len}, {args.samples} shuffled samples per "
        f"reader per round, best of {args.rounds} interleaved rounds; 1-min load average {min(loads):.1f}–"
        f"{max(loads):.1f} on {os.cpu_count()} cores" + (f"; {'; '.join(skipped)}" if skipped else ""),
        "",
        "| packing | samples | padding | docs split | docs ≤ seq_len split | tokens unused | packing time (CPU) |",
        "|---|---|---|---|---|---|---|",
        *packing,
        "",
        "| reader | tokens/s, CPU time (best) | tokens/s, wall (best) | × memmap limit (CPU) | note |",
        "|---|---|---|---|---|",
    ]

    def best(values: list[float]) -> float | None:
        kept = [v for v in values if not np.isnan(v)]
        return max(kept) if kept else None

    for name in wall:
        c, w = best(cpu[name]), best(wall[name])
        ratio = f"{c / limit:.2f}" if c else "–"
        c_text = f"{c / 1e6:.1f}M" if c else "–"
        w_text = f"{w / 1e6:.1f}M" if w else "–"
        lines.append(f"| {name} | {c_text} | {w_text} | {ratio} | {notes[name]} |")
    print("\n".join(lines))
    if not args.no_write:
        append_history("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
