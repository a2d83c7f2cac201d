"""Benchmark: docs/s of each heuristic rule family and of fastText LID, LID agreement with the claimed
language per language, and the quality classifier's held-out report — on the benchmark corpus.

    .venv/bin/python benchmarks/quality_filters.py --corpus /work/corpus/medium [--limit 20000]

Prints Markdown rows and appends them to benchmarks/RESULTS.md with machine, date and command.
datatrove is not run here (see docs/quality.md: its venv was not built in this session).
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import sys
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from zephyr.pipelines.quality.classifier import evaluate_classifier, train_classifier
from zephyr.pipelines.quality.filters import apply_filters, build_rule_families
from zephyr.pipelines.quality.langid import LangIdConfig, identify_language
from zephyr.pipelines.quality.normalize import normalize_text


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--corpus", default="/work/corpus/medium")
    ap.add_argument("--limit", type=int, default=20_000, help="docs for the filter timings (seeded sample)")
    ap.add_argument("--batch-rows", type=int, default=2048)
    args = ap.parse_args()
    corpus = Path(args.corpus)
    docs = pq.read_table(corpus / "docs", columns=["id", "text", "source", "lang"])
    if docs.num_rows > args.limit:
        step = docs.num_rows / args.limit
        idx = pa.array([int(i * step) for i in range(args.limit)])
        docs = docs.take(idx)
    mb = pc.sum(pc.binary_length(docs["text"])).as_py() / 1e6
    rows: list[str] = []

    def timed(label: str, fn) -> float:
        t0 = time.perf_counter()
        for start in range(0, docs.num_rows, args.batch_rows):
            fn(docs.slice(start, args.batch_rows))
        dt = time.perf_counter() - t0
        rows.append(f"| {label} | {docs.num_rows} | {mb:.1f} | {dt:.1f} | {docs.num_rows / dt:,.0f} | {mb / dt:.2f} |")
        print(rows[-1], flush=True)
        return dt

    timed("normalize", normalize_text)
    for name in ("gopher_quality", "gopher_repetition", "c4", "fineweb"):
        fams = build_rule_families(name)
        timed(f"filter {name}", lambda t, f=fams: apply_filters(t, f))
    timed("langid (lid.176, max_chars=10000)", lambda t: identify_language(t.rename_columns(["id", "text", "source", "claimed"])))

    # LID agreement with the claimed language, per claimed language (handbook + manpages + kernel docs)
    multi = pq.read_table(corpus / "docs", columns=["text", "source", "lang"])
    multi = multi.filter(pc.is_in(multi["source"], pa.array(["handbook", "manpages", "kernel_docs"])))
    pred = identify_language(multi.rename_columns(["text", "source", "claimed"]), LangIdConfig())
    agree_rows = []
    claimed = pred["claimed"].to_pylist()
    got = pred["lang"].to_pylist()
    by: dict[str, list[int]] = {}
    for c, g in zip(claimed, got):
        s = by.setdefault(c, [0, 0, 0])
        s[0] += 1
        s[1] += c == g
        s[2] += g == "en"
    for lang in sorted(by):
        n, ok, en = by[lang]
        agree_rows.append(f"| {lang} | {n} | {ok / n:.1%} | {en / n:.1%} |")

    q = corpus / "quality"
    t0 = time.perf_counter()
    model = train_classifier(pq.read_table(q / "train.parquet"), Path("/tmp/zephyr-bench-quality.bin"))
    train_s = time.perf_counter() - t0
    rep = evaluate_classifier(pq.read_table(q / "test.parquet"), model)

    stamp = datetime.datetime.now().strftime("%Y-%m-%d %H:%M")
    machine = f"{platform.node()} ({os.cpu_count()} cores, {platform.processor() or platform.machine()})"
    cmd = "python " + " ".join(sys.argv)
    out = [
        f"\n## quality filters — {stamp}, {machine}\n",
        f"Command: `{cmd}`; corpus {corpus} ({docs.num_rows} docs sampled evenly, {mb:.1f} MB text), "
        f"batches of {args.batch_rows} rows, one process.\n",
        "| stage | docs | MB | seconds | docs/s | MB/s |", "|---|---:|---:|---:|---:|---:|", *rows,
        "\nLID agreement with the claimed `lang` (handbook, manpages, kernel_docs; claimed labels are partly "
        "untranslated English, so disagreement is often the label's fault — see the 'predicted en' column):\n",
        "| claimed | docs | agree | predicted en |", "|---|---:|---:|---:|", *agree_rows,
        f"\nQuality classifier (fastText, corpus quality/ train → test): train {train_s:.1f} s, "
        f"precision {rep['precision']}, recall {rep['recall']}, F1 {rep['f1']}, AUC {rep['auc']} "
        f"on {rep['rows']} held-out docs.\n",
    ]
    text = "\n".join(out)
    print(text)
    with open(Path(__file__).with_name("RESULTS.md"), "a", encoding="utf-8") as f:
        f.write(text)


if __name__ == "__main__":
    main()
