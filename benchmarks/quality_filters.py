"""Benchmark: docs/s of each heuristic rule family and of fastText LID, side by side with datatrove 0.10.1's
equivalent filters; LID agreement with the claimed language per language; the quality classifier's held-out
report — on the benchmark corpus.

    flock /tmp/zephyr-bench.lock .venv/bin/python benchmarks/quality_filters.py --corpus /work/corpus/medium

zephyr's filters run first over ``--limit`` documents sampled evenly from ``docs/`` (batches of
``--batch-rows``, one process). Then ``benchmarks/peers/datatrove_filters.py`` runs as a subprocess in the
datatrove venv (``benchmarks/venvs/datatrove.sh``) over every k-th of those documents (``--peer-limit``,
default all of them; datatrove's spaCy-tokenized Gopher filters run at ~40 docs/s here, so the whole run takes
~11 min), each filter alone in one process. Agreement is the share of the documents both ran on that both keep
or both drop. The subprocess does not take the benchmark lock itself: hold it around the whole command.

Prints Markdown and appends it to the month's notebook, benchmarks/history/<YYYY-MM>.md, with machine, date, load
average and command.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from zephyr.pipelines.quality.classifier import evaluate_classifier, train_classifier
from zephyr.pipelines.quality.filters import HeuristicFilter
from zephyr.pipelines.quality.langid import LanguageFilter, LanguageIdentifier
from zephyr.pipelines.quality.normalize import Normalize

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _measure import append_history  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
FILTERS = ("gopher_quality", "gopher_repetition", "c4", "fineweb")
LID_MIN_SCORE = 0.65
"""datatrove LanguageFilter's default threshold; used for zephyr's ``langid_en`` keep/drop too."""
DEFAULT_NOTES = {
    "gopher_quality": "same thresholds; zephyr uses the row's `lang` for stop words/scripts, datatrove English for all",
    "gopher_repetition": "same thresholds",
    "c4": "zephyr (C4 paper): ≥ 5 words/line, ≥ 3 sentences, en bad words; datatrove: ≥ 3 words/line, ≥ 5 sentences, no bad words",
    "fineweb": "duplicate-line-char ratio: zephyr 0.1 (paper), datatrove 0.01; newline/word ratio: zephyr off, datatrove 0.3",
    "langid_en": f"keep English with score ≥ {LID_MIN_SCORE}; zephyr reads the first 10,000 chars, datatrove the whole text",
}


def _ratio(r: float) -> str:
    return f"{r:.1f}×" if r < 10 else f"{r:,.0f}×"


def _lid_model() -> Path | None:
    for p in (
        Path("/work/corpus/small/models/lid.176.ftz"),
        Path.home() / ".cache/zephyr/models/lid.176.ftz",
    ):
        if p.is_file():
            return p
    return None


def run_datatrove(docs: pa.Table, venv: Path, peer_limit: int) -> tuple[dict, pa.Table] | None:
    """Run the datatrove peer on every k-th doc of ``docs``; (timings.json, keep table) or None if no venv."""
    py = venv / "bin" / "python"
    if not py.exists():
        print(f"datatrove venv {venv} missing: run benchmarks/venvs/datatrove.sh", file=sys.stderr)
        return None
    step = max(1, docs.num_rows // peer_limit)
    sub = docs.take(pa.array(range(0, docs.num_rows, step))[:peer_limit]).select(["id", "text"])
    with tempfile.TemporaryDirectory(prefix="zephyr-dt-filters-") as tmp:
        pq.write_table(sub, Path(tmp) / "docs.parquet")
        cmd = [
            str(py),
            str(REPO / "benchmarks/peers/datatrove_filters.py"),
            f"{tmp}/docs.parquet",
            f"{tmp}/out",
        ]
        model = _lid_model()
        if model is not None:
            cmd += ["--lid-model", str(model)]
        subprocess.run(cmd, check=True)
        summary = json.loads((Path(tmp) / "out/timings.json").read_text())
        keep = pq.read_table(Path(tmp) / "out/keep.parquet")
    return summary, keep


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--corpus", default="/work/corpus/medium")
    ap.add_argument("--limit", type=int, default=10_000, help="docs for the filter timings (even sample)")
    ap.add_argument("--batch-rows", type=int, default=2048)
    ap.add_argument("--peer-limit", type=int, default=10_000, help="docs (of --limit) datatrove runs on")
    ap.add_argument("--datatrove-venv", type=Path, default=REPO / "benchmarks/.venvs/datatrove")
    ap.add_argument("--no-peers", action="store_true", help="zephyr only")
    ap.add_argument("--no-classifier", action="store_true", help="skip LID agreement and classifier training")
    ap.add_argument(
        "--no-append",
        action="store_true",
        help="print only; append nothing to the month's notebook (benchmarks/history/)",
    )
    args = ap.parse_args()
    corpus = Path(args.corpus)
    docs = pq.read_table(corpus / "docs", columns=["id", "text", "source", "lang"])
    if docs.num_rows > args.limit:
        step = docs.num_rows / args.limit
        idx = pa.array([int(i * step) for i in range(args.limit)])
        docs = docs.take(idx)
    mb = pc.sum(pc.binary_length(docs["text"])).as_py() / 1e6
    rows: list[str] = []
    load_before = os.getloadavg()
    zephyr_rate: dict[str, float] = {}
    zephyr_keep: dict[str, set[str]] = {}

    def timed(label: str, fn, key: str | None = None) -> float:
        kept: set[str] = set()
        t0 = time.perf_counter()
        outs = [fn(docs.slice(start, args.batch_rows)) for start in range(0, docs.num_rows, args.batch_rows)]
        dt = time.perf_counter() - t0
        if key is not None:
            for o in outs:
                kept.update(o["id"].to_pylist())
            zephyr_keep[key] = kept
            zephyr_rate[key] = docs.num_rows / dt
        rows.append(
            f"| {label} | {docs.num_rows} | {mb:.1f} | {dt:.1f} | {docs.num_rows / dt:,.0f} | {mb / dt:.2f} |"
        )
        print(rows[-1], flush=True)
        return dt

    timed("normalize", Normalize())
    for name in FILTERS:
        op = HeuristicFilter(name)
        timed(f"filter {name}", lambda t, op=op: op(t).kept, key=name)
    identify, keep_en = LanguageIdentifier(), LanguageFilter(("en",), LID_MIN_SCORE)
    timed(
        "langid (lid.176, max_chars=10000)",
        lambda t: identify(t.rename_columns(["id", "text", "source", "claimed"])),
    )
    timed(
        "langid + keep en (score ≥ 0.65)",
        lambda t: keep_en(identify(t.rename_columns(["id", "text", "source", "claimed"]))).kept,
        key="langid_en",
    )
    load_mid = os.getloadavg()

    side: list[str] = []
    peer_note = "datatrove not run (--no-peers)"
    if not args.no_peers:
        peer = run_datatrove(docs, args.datatrove_venv, args.peer_limit)
        if peer is None:
            peer_note = f"datatrove not run: no venv at {args.datatrove_venv}"
        else:
            summary, keep = peer
            print(json.dumps({k: v.get("drop_reasons") for k, v in summary["filters"].items()}), flush=True)
            ids = keep["id"].to_pylist()
            en = set(docs.filter(pc.equal(docs["lang"], "en"))["id"].to_pylist())
            peer_note = (
                f"datatrove {summary['datatrove']} ran on {summary['docs']} of the {docs.num_rows} docs "
                f"(every {docs.num_rows // summary['docs']}th, {summary['mb']:.1f} MB)"
            )
            for why in summary["skipped"].values():
                peer_note += f"; skipped LID: {why}"
            for name in (*FILTERS, "langid_en"):
                res = summary["filters"].get(name)
                if res is None:
                    continue
                dt_rate = summary["docs"] / res["seconds"]
                dtk = keep[name].to_pylist()
                zk = [i in zephyr_keep[name] for i in ids]
                agree = sum(a == b for a, b in zip(zk, dtk)) / len(ids)
                en_pairs = [(a, b) for i, a, b in zip(ids, zk, dtk) if i in en]
                agree_en = sum(a == b for a, b in en_pairs) / max(1, len(en_pairs))
                side.append(
                    f"| {name} | {zephyr_rate[name]:,.0f} | {dt_rate:,.1f} | {dt_rate * summary['mb'] / summary['docs']:.2f} | {_ratio(zephyr_rate[name] / dt_rate)} | "
                    f"{agree:.1%} | {agree_en:.1%} | {sum(zk)} / {sum(dtk)} | {DEFAULT_NOTES[name]} |"
                )
                print(side[-1], flush=True)
    load_after = os.getloadavg()

    stamp = datetime.datetime.now().strftime("%Y-%m-%d %H:%M")
    machine = f"{platform.node()} ({os.cpu_count()} cores, {platform.processor() or platform.machine()})"
    cmd = "python " + " ".join(sys.argv)
    loads = " / ".join(f"{la[0]:.2f}" for la in (load_before, load_mid, load_after))
    out = [
        f"\n## quality filters — {stamp}, {machine}\n",
        f"Command: `flock /tmp/zephyr-bench.lock {cmd}`; corpus {corpus} ({docs.num_rows} docs sampled evenly, "
        f"{mb:.1f} MB text), batches of {args.batch_rows} rows, one process. 1-min load average before / after "
        f"zephyr / after datatrove: {loads}. {peer_note}.\n",
    ]
    if side:
        out += [
            "Side by side (docs/s; agreement = share of the common docs both keep or both drop, all docs and "
            "claimed-`en` docs only; kept = zephyr / datatrove on the common docs):\n",
            "| filter | zephyr docs/s | datatrove docs/s | datatrove MB/s | speedup | agreement | agreement (en) | kept z / dt | defaults that differ |",
            "|---|---:|---:|---:|---:|---:|---:|---:|---|",
            *side,
            "",
            "zephyr stages alone:\n",
        ]
    out += ["| stage | docs | MB | seconds | docs/s | MB/s |", "|---|---:|---:|---:|---:|---:|", *rows]
    if args.no_classifier:
        text = "\n".join(out) + "\n"
        _emit(text, append=not args.no_append)
        return

    # LID agreement with the claimed language, per claimed language (handbook + manpages + kernel docs)
    multi = pq.read_table(corpus / "docs", columns=["text", "source", "lang"])
    multi = multi.filter(pc.is_in(multi["source"], pa.array(["handbook", "manpages", "kernel_docs"])))
    pred = identify(multi.rename_columns(["text", "source", "claimed"]))
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

    out += [
        "\nLID agreement with the claimed `lang` (handbook, manpages, kernel_docs; claimed labels are partly "
        "untranslated English, so disagreement is often the label's fault — see the 'predicted en' column):\n",
        "| claimed | docs | agree | predicted en |",
        "|---|---:|---:|---:|",
        *agree_rows,
        f"\nQuality classifier (fastText, corpus quality/ train → test): train {train_s:.1f} s, "
        f"precision {rep['precision']}, recall {rep['recall']}, F1 {rep['f1']}, AUC {rep['auc']} "
        f"on {rep['rows']} held-out docs.\n",
    ]
    _emit("\n".join(out), append=not args.no_append)


def _emit(text: str, *, append: bool) -> None:
    print(text)
    if append:
        append_history(text)


if __name__ == "__main__":
    main()
