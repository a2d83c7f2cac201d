"""Exact substring dedup: zephyr dedup substring (engine, bounded memory) at 100 MB and 400 MB, beside the
whole-corpus suffix array (pydivsufsort; benchmarks/peers/suffix_array_substring.py) at the sizes where it fits.

The corpus is web-like and generated here (seeded): documents of Zipf-distributed words, a third of them with
one of 40 site footers/headers (~300-600 bytes), and 5% of paragraphs copied from earlier documents.

    .venv/bin/python benchmarks/substring_dedup.py --sizes 100,400 --peer-max-mb 100

Appends a Markdown table to the month's notebook, benchmarks/history/<YYYY-MM>.md (with --no-append it only prints).
"""

from __future__ import annotations

import argparse
import datetime
import json
import shutil
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _measure import machine, publish, run_measured  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
PY = str(ROOT / ".venv" / "bin" / "python")
ZEPHYR = str(ROOT / ".venv" / "bin" / "zephyr")


def make_corpus(out: Path, mb: int, seed: int = 0) -> int:
    """Write about ``mb`` MB of text as Parquet parts of ~64 MB; returns the text bytes."""
    rng = np.random.default_rng(seed)
    vocab = np.array([f"w{i:x}" for i in range(50_000)])
    cdf = np.cumsum(1.0 / np.arange(1, len(vocab) + 1))
    cdf /= cdf[-1]

    def words(k: int) -> str:  # Zipf draws by inverse CDF: rng.choice(p=...) re-sums 50k weights per call
        return " ".join(vocab[np.searchsorted(cdf, rng.random(k))])

    boiler = [words(int(rng.integers(50, 100))) + "." for _ in range(40)]
    out.mkdir(parents=True, exist_ok=True)
    total, part, rows, pool = 0, 0, [], []
    while total < mb * 1e6:
        paras = [words(int(rng.integers(20, 120))) + "." for _ in range(int(rng.integers(2, 12)))]
        if pool and rng.random() < 0.5:
            paras.insert(int(rng.integers(0, len(paras) + 1)), pool[int(rng.integers(0, len(pool)))])
        if rng.random() < 0.34:
            paras.append(boiler[int(rng.integers(0, len(boiler)))])
        text = "\n".join(paras)
        pool.append(paras[0])
        if len(pool) > 5000:
            pool = pool[-5000:]
        rows.append(text)
        total += len(text.encode())
        if sum(map(len, rows)) > 64e6 or total >= mb * 1e6:
            pq.write_table(
                pa.table(
                    {"id": np.arange(len(rows)) + part * 10**9, "source": ["gen"] * len(rows), "text": rows}
                ),
                out / f"part-{part:05d}.parquet",
                row_group_size=2000,
            )
            part, rows = part + 1, []
    return total


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="100,400")
    ap.add_argument("--peer-max-mb", type=int, default=100)
    ap.add_argument("--min-bytes", type=int, default=100)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--memory-budget", default="1GiB")
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / ".out" / "substring"))
    ap.add_argument("--no-append", action="store_true")
    args = ap.parse_args()
    out = Path(args.out)
    rows = []
    for mb in (int(s) for s in args.sizes.split(",")):
        shutil.rmtree(out, ignore_errors=True)
        text_bytes = make_corpus(out / "docs", mb)
        cmd = [
            ZEPHYR,
            "dedup",
            "substring",
            str(out / "docs"),
            "--output",
            str(out / "zephyr"),
            "--min-bytes",
            str(args.min_bytes),
            "--workers",
            str(args.workers),
            "--memory-budget",
            args.memory_budget,
        ]
        m = run_measured(cmd, log_path=str(out / "zephyr.log"))
        removed = "–"
        if m["rc"] == 0:
            removed = json.loads((out / "zephyr" / "_dedup_stats.json").read_text())["dedup"]["bytes_removed"]
        rows.append(
            (
                f"zephyr dedup substring ({args.workers} workers, budget {args.memory_budget})",
                mb,
                text_bytes,
                m,
                removed,
            )
        )
        if mb <= args.peer_max_mb:
            log = out / "peer.log"
            m = run_measured(
                [
                    PY,
                    str(ROOT / "benchmarks" / "peers" / "suffix_array_substring.py"),
                    str(out / "docs"),
                    "--min-bytes",
                    str(args.min_bytes),
                ],
                log_path=str(log),
            )
            lines = [ln for ln in log.read_text().splitlines() if ln.startswith("{")]
            peer_removed = json.loads(lines[-1])["bytes_removed"] if lines and m["rc"] == 0 else "–"
            rows.append(
                ("whole-corpus suffix array (pydivsufsort, 1 process)", mb, text_bytes, m, peer_removed)
            )
    text = (
        f"\n### Exact substring dedup, generated web-like corpus, --min-bytes {args.min_bytes} — "
        f"{datetime.date.today()}, {machine()}\n\n"
        f"Command: `.venv/bin/python benchmarks/substring_dedup.py --sizes {args.sizes} --peer-max-mb {args.peer_max_mb}`"
        " (bytes removed differ by the UTF-8 snapping only: the suffix array does not snap)\n\n"
        "| system | corpus MB | wall s | MB/s | peak RSS MB | bytes removed |\n|---|---|---|---|---|---|\n"
    )
    for name, mb, text_bytes, m, removed in rows:
        text += (
            f"| {name} | {text_bytes / 1e6:.0f} | {m['wall_s']:.1f} | {text_bytes / 1e6 / m['wall_s']:.2f} | "
            f"{m['peak_rss_mb']:.0f} | {removed:,} |\n"
            if m["rc"] == 0
            else f"| {name} | {mb} | failed | – | – | – |\n"
        )
    publish(text, append=not args.no_append)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
