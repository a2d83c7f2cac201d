"""Fuzzy dedup side by side: zephyr vs text-dedup 0.4.0, data-juicer, datatrove 0.10.1, datasketch MinHashLSH.

Same corpus (the ``dupes`` corpus with ground truth), same shingling where the peer allows (word 5-grams,
14 bands × 8 rows), 2 workers. Reports wall time, MB/s of text, peak RSS of the process tree, and pair
precision/recall/F1 against ``pairs.parquet`` at Jaccard 0.8 (``benchmarks/dedup_evaluate.py``), then appends a
Markdown table to the month's notebook, benchmarks/history/<YYYY-MM>.md. A corpus without ground truth (``pairs.parquet``/``truth.parquet``,
e.g. ``medium/docs``, 382 MB) is timed only: quality columns read "–".

    .venv/bin/python benchmarks/dedup_fuzzy.py --corpus /work/corpus/medium/dupes [--only zephyr,datatrove]

Peers run in their own venvs (``bash benchmarks/venvs/all.sh``); a missing venv is reported, not fatal.
"""

from __future__ import annotations

import argparse
import datetime
import json
import shutil
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _measure import machine, publish, run_measured  # noqa: E402
from dedup_evaluate import oversized_clusters, pair_scores  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
VENVS = ROOT / "benchmarks" / ".venvs"
PEERS = ROOT / "benchmarks" / "peers"
ZEPHYR = str(ROOT / ".venv" / "bin" / "zephyr")
PY = str(ROOT / ".venv" / "bin" / "python")


def systems(files: list[str], corpus: str) -> dict[str, tuple[list[str], str]]:
    """name -> (command with {out} placeholder, how to read clusters)."""
    z = [ZEPHYR, "dedup", "fuzzy", *files, "--mode", "annotate", "--output", "{out}", "--workers", "2"]
    return {
        "zephyr (14×8, verified)": (z + ["--bands", "14", "--rows-per-band", "8"], "zephyr"),
        "zephyr (14×8, no verification)": (
            z + ["--bands", "14", "--rows-per-band", "8", "--no-verify"],
            "zephyr",
        ),
        "zephyr preset datatrove": (z + ["--preset", "datatrove"], "zephyr"),
        "zephyr preset nemo": (z + ["--preset", "nemo"], "zephyr"),
        "zephyr preset redpajama": (z + ["--preset", "redpajama"], "zephyr"),
        "datatrove 0.10.1": (
            [str(VENVS / "datatrove/bin/python"), str(PEERS / "datatrove_minhash.py"), corpus, "{out}"],
            "peer",
        ),
        "text-dedup 0.4.0": (
            [str(VENVS / "textdedup/bin/python"), str(PEERS / "textdedup_minhash.py"), *files, "{out}"],
            "peer",
        ),
        "data-juicer 1.6.1": (
            [str(VENVS / "datajuicer/bin/python"), str(PEERS / "datajuicer_minhash.py"), *files, "{out}"],
            "peer",
        ),
        "datasketch MinHashLSH 2.0 (1 process)": (
            [PY, str(PEERS / "datasketch_lsh.py"), *files, "{out}"],
            "peer",
        ),
    }


def read_clusters(out: Path, kind: str) -> pa.Table:
    if kind == "zephyr":
        t = pq.read_table(sorted(str(p) for p in out.glob("part-*.parquet")), columns=["id", "dup_cluster"])
        return t.rename_columns(["id", "cluster"])
    return pq.read_table(out / "clusters.parquet")


def _scores(pred: pa.Table, pairs: pa.Table, truth: pa.Table, texts: pa.Table) -> dict:
    """A system's clusters scored against the corpus: pair precision/recall/F1 (the corpus rule), strict
    precision, and how many predicted clusters outgrow their true cluster."""
    scores = pair_scores(pred, pairs, threshold=0.8, texts=texts)
    scores["strict_precision"] = pair_scores(pred, pairs, threshold=0.8)["precision"]
    scores["oversized_clusters"] = len(oversized_clusters(pred, truth))
    return scores


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--corpus", default="/work/corpus/medium/dupes")
    ap.add_argument("--only", default=None, help="comma-separated name prefixes to run")
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / ".out" / "dedup_fuzzy"))
    ap.add_argument("--no-append", action="store_true")
    ap.add_argument(
        "--rescore", default=None, help="a log of an earlier run (JSON lines): score its outputs again"
    )
    args = ap.parse_args()
    corpus = Path(args.corpus)
    files = sorted(str(p) for p in corpus.glob("part-*.parquet"))
    docs = pa.concat_tables([pq.read_table(f, columns=["text"]) for f in files])
    text_mb = pc.sum(pc.binary_length(docs["text"])).as_py() / 1e6
    scored = (corpus / "pairs.parquet").exists() and (corpus / "truth.parquet").exists()
    if scored:
        pairs = pq.read_table(corpus / "pairs.parquet")
        truth = pq.read_table(corpus / "truth.parquet")
        texts = pa.concat_tables([pq.read_table(f, columns=["id", "text"]) for f in files])
    rows = []
    earlier = {}
    if args.rescore:
        for line in Path(args.rescore).read_text().splitlines():
            if line.startswith("{"):
                rec = json.loads(line)
                earlier[rec["system"]] = rec
    for name, (cmd, kind) in systems(files, str(corpus)).items():
        if args.only and not any(name.startswith(p.strip()) for p in args.only.split(",")):
            continue
        out = Path(args.out) / name.split(" (")[0].replace(" ", "_").replace(".", "")
        if args.rescore:
            if name not in earlier:
                continue
            row = {k: earlier[name][k] for k in ("system", "rc", "wall_s", "peak_rss_mb", "mb_per_s")}
            if row["rc"] == 0 and scored:
                row.update(_scores(read_clusters(out, kind), pairs, truth, texts))
            elif row["rc"] != 0:
                row["error"] = earlier[name].get("error", "failed")
            print(json.dumps(row), flush=True)
            rows.append(row)
            continue
        shutil.rmtree(out, ignore_errors=True)
        out.mkdir(parents=True)
        if not Path(cmd[0]).exists():
            rows.append({"system": name, "error": f"not installed ({cmd[0]} missing; run benchmarks/venvs/)"})
            continue
        res = run_measured(
            [c.replace("{out}", str(out)) for c in cmd], log_path=str(out.parent / (out.name + ".log"))
        )
        row = {"system": name, **res, "mb_per_s": text_mb / res["wall_s"]}
        if res["rc"] == 0 and scored:
            row.update(_scores(read_clusters(out, kind), pairs, truth, texts))
        elif res["rc"] != 0:
            row["error"] = f"exit {res['rc']}, see {out.parent / (out.name + '.log')}"
        print(json.dumps(row), flush=True)
        rows.append(row)
    table = [
        f"\n### Fuzzy dedup, {corpus} ({docs.num_rows} docs, {text_mb:.1f} MB text) — "
        f"{datetime.date.today()}, {machine()}\n",
        f"Command: `.venv/bin/python benchmarks/dedup_fuzzy.py --corpus {corpus}`\n",
        "Precision follows the corpus rule (predicted pairs missing from pairs.parquet whose reference Jaccard is "
        "≥ 0.8 are neutral); *strict* counts them as false positives.\n",
        "| system | wall s | MB/s | peak RSS MB | precision | strict precision | recall | F1 | max cluster | "
        "clusters >1.1× truth |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        if "error" in r and "precision" not in r:
            table.append(f"| {r['system']} | – | – | – | – | – | – | – | – | {r['error']} |")
            continue
        if "precision" not in r:
            timed = f"| {r['system']} | {r['wall_s']:.1f} | {r['mb_per_s']:.2f} | {r['peak_rss_mb']:.0f} |"
            table.append(timed + " – | – | – | – | – | – |")
            continue
        table.append(
            f"| {r['system']} | {r['wall_s']:.1f} | {r['mb_per_s']:.2f} | {r['peak_rss_mb']:.0f} | "
            f"{r['precision']:.4f} | {r['strict_precision']:.4f} | {r['recall']:.4f} | {r['f1']:.4f} | "
            f"{r['max_predicted_cluster']} | "
            f"{r['oversized_clusters']} |"
        )
    text = "\n".join(table) + "\n"
    publish(text, append=not args.no_append)
    return 0


if __name__ == "__main__":
    sys.exit(main())
