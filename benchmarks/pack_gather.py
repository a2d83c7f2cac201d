"""Tokenize's pack gather when the token spills outgrow the page cache: reads in flight against µs a document.

At K = 24 copies in ``benchmarks/scale.py`` the tokenize job leaves ~2,000 spill files (14.7 GB) and the pack
job reads every document back in the global shuffle's order, inside a 3 GiB memory cap that also holds the page
cache: a 1,024-document pack batch takes about one document from each of ~1,000 files, so each read is a
random disk read. This benchmark builds that shape (``--files`` spill files of 1,024 documents of ~6.9 KB
each, exponentially distributed, in ``--dir``), then, in a memory cgroup of ``--cap`` bytes with a 1.4 GiB
ballast standing for the packer's own RSS and the page cache dropped first (root only; otherwise a warning),
gathers ``--batches`` random batches with ``zephyr.tokenize._pack.gather`` at each ``--threads`` count
(``SpillFiles(threads=N)``; 1 is the sequential gather, one ``preadv`` after another)::

    flock /tmp/zephyr-bench.lock .venv/bin/python benchmarks/pack_gather.py [--dir /tmp/pack_gather]
        [--threads 1,4,16,64] [--batches 300] [--files 2062] [--cap 3GiB]

It prints one JSON line per run and a Markdown table. The generated files (~14.6 GB) stay in ``--dir`` for the
next run; delete them when done.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

DOCS_PER_FILE = 1024
MEAN_DOC_BYTES = 6900
BALLAST_BYTES = int(1.4 * 2**30)


def layout(files: int) -> tuple[np.ndarray, np.ndarray]:
    """Per file and document: byte sizes (even: uint16 tokens) and offsets; seeded, so every run agrees."""
    rng = np.random.default_rng(0)
    sizes = rng.exponential(MEAN_DOC_BYTES, size=(files, DOCS_PER_FILE)).astype(np.int64) // 2 * 2 + 2
    offsets = np.zeros_like(sizes)
    offsets[:, 1:] = np.cumsum(sizes, axis=1)[:, :-1]
    return sizes, offsets


def build(directory: Path, files: int) -> None:
    """Write the spill files once (random bytes; their content does not matter to the reads)."""
    done = directory / f"done-{files}"
    if done.exists():
        return
    directory.mkdir(parents=True, exist_ok=True)
    sizes, _ = layout(files)
    payload = np.random.default_rng(1).bytes(int(sizes.sum(axis=1).max()))
    for f in range(files):
        (directory / f"{f:05d}.tokens").write_bytes(payload[: int(sizes[f].sum())])
    done.touch()


def measure(directory: Path, files: int, threads: int, batches: int) -> dict:
    """Gather ``batches`` batches of 1,024 random documents (the shuffle's order) with ``threads`` reads."""
    from zephyr.tokenize._pack import SpillFiles, gather

    ballast = np.ones(BALLAST_BYTES, dtype=np.uint8)  # the packer's own RSS, charged to the cap
    sizes, offsets = layout(files)
    names = [f"{f:05d}.tokens" for f in range(files)]
    order = np.random.default_rng(2).permutation(files * DOCS_PER_FILE)
    read = 0
    start = time.perf_counter()
    with contextlib.closing(SpillFiles(str(directory), threads=threads)) as opened:
        for b in range(batches):
            picked = order[b * DOCS_PER_FILE : (b + 1) * DOCS_PER_FILE]
            f, d = picked // DOCS_PER_FILE, picked % DOCS_PER_FILE
            read += gather(str(directory), f, names, offsets[f, d], sizes[f, d], spill_files=opened).nbytes
    seconds = time.perf_counter() - start
    del ballast
    docs = batches * DOCS_PER_FILE
    return {
        "threads": threads,
        "docs": docs,
        "s": round(seconds, 2),
        "us_per_doc": round(seconds / docs * 1e6, 1),
        "mb_s": round(read / seconds / 1e6, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", type=Path, default=Path("/tmp/pack_gather"))
    parser.add_argument("--threads", default="1,4,16,64")
    parser.add_argument("--batches", type=int, default=300)
    parser.add_argument("--files", type=int, default=2062)
    parser.add_argument("--cap", default="3GiB")
    parser.add_argument("--one", type=int, help=argparse.SUPPRESS)  # a run inside the cap
    args = parser.parse_args()
    if args.one is not None:
        print(json.dumps(measure(args.dir, args.files, args.one, args.batches)), flush=True)
        return
    sys.path.insert(0, str(Path(__file__).parent))
    from scale import MemoryCap

    from zephyr.config import parse_bytes

    build(args.dir, args.files)
    cap = MemoryCap(parse_bytes(args.cap))
    rows = []
    for threads in [int(t) for t in args.threads.split(",")]:
        subprocess.run(["sync"], check=True)
        try:
            Path("/proc/sys/vm/drop_caches").write_text("1")
        except OSError:
            print("warning: could not drop the page cache (not root): reads may hit it", file=sys.stderr)
        cmd = [
            sys.executable,
            __file__,
            "--dir",
            str(args.dir),
            "--files",
            str(args.files),
            "--batches",
            str(args.batches),
            "--one",
            str(threads),
        ]
        out = subprocess.run(cap.wrap(cmd), check=True, capture_output=True, text=True).stdout
        rows.append(json.loads(out.strip().splitlines()[-1]))
        print(json.dumps(rows[-1]), flush=True)
    print(
        f"\n{args.files} spill files, {args.batches} batches of {DOCS_PER_FILE} documents, cap {args.cap} ({cap.how})\n"
    )
    print("| reads in flight | µs a document | MB/s |\n|--:|--:|--:|")
    for row in rows:
        print(f"| {row['threads']} | {row['us_per_doc']} | {row['mb_s']} |")


if __name__ == "__main__":
    main()
