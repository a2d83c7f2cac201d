"""Quality of zephyr's fuzzy dedup per configuration (plain function, one process) on a dupes corpus.

Rows: the default (14×8, verified), the same without verification, and each preset. Scores follow the
corpus rule (``dedup_evaluate.pair_scores`` with the texts, so unlisted pairs whose true Jaccard
reaches 0.8 are neutral). Appends a Markdown table to the month's notebook, benchmarks/history/<YYYY-MM>.md.

    .venv/bin/python benchmarks/dedup_quality.py --corpus /work/corpus/small/dupes
"""

from __future__ import annotations

import argparse
import datetime
import sys
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _measure import append_history, machine  # noqa: E402
from dedup_evaluate import oversized_clusters, pair_scores  # noqa: E402
from zephyr.dedup import FuzzyDedupConfig, fuzzy_dedup  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
CONFIGS = {
    "default (word 5-grams, 14×8, verified, anchored)": FuzzyDedupConfig(threshold=0.8),
    "14×8, verified, connected components": FuzzyDedupConfig(threshold=0.8, clusters="components"),
    "14×8, no verification, anchored": FuzzyDedupConfig(
        threshold=0.8, bands=14, rows_per_band=8, verify=False
    ),
    "14×8, no verification, components": FuzzyDedupConfig(
        threshold=0.8, bands=14, rows_per_band=8, verify=False, clusters="components"
    ),
    "preset datatrove (verified)": FuzzyDedupConfig.from_preset("datatrove"),
    "preset datatrove, no verification": FuzzyDedupConfig.from_preset("datatrove", verify=False),
    "preset nemo (verified)": FuzzyDedupConfig.from_preset("nemo"),
    "preset nemo, no verification": FuzzyDedupConfig.from_preset("nemo", verify=False),
    "preset redpajama 0.8 (verified)": FuzzyDedupConfig.from_preset("redpajama"),
    "preset redpajama 0.8, no verification": FuzzyDedupConfig.from_preset("redpajama", verify=False),
}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--corpus", default="/work/corpus/small/dupes")
    ap.add_argument("--no-append", action="store_true")
    args = ap.parse_args()
    corpus = Path(args.corpus)
    docs = pa.concat_tables(
        [pq.read_table(p, columns=["id", "text"]) for p in sorted(corpus.glob("part-*.parquet"))]
    )
    pairs = pq.read_table(corpus / "pairs.parquet")
    truth = pq.read_table(corpus / "truth.parquet")
    text_mb = pc.sum(pc.binary_length(docs["text"])).as_py() / 1e6
    lines = [
        f"\n### Fuzzy dedup quality per configuration, {corpus} ({docs.num_rows} docs, {text_mb:.1f} MB) — "
        f"{datetime.date.today()}, {machine()}, threshold 0.8\n",
        f"Command: `.venv/bin/python benchmarks/dedup_quality.py --corpus {corpus}` (plain function, 1 process; "
        "CPU s is the process CPU time, robust to other load on the machine; a cluster counts as >1.1× its true "
        "cluster only after members whose reference J to the kept row reaches 0.8 are counted as right, the "
        "corpus rule). Goal: precision ≥ 0.99, F1 ≥ 0.95, no cluster >1.1×.\n",
        "| configuration | bands×rows | LSH thr | CPU s | precision | recall | F1 | max cluster | "
        "clusters >1.1× truth | rows split from components |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, cfg in CONFIGS.items():
        t0 = time.process_time()
        r = fuzzy_dedup(docs, cfg, mode="annotate")
        cpu = time.process_time() - t0
        pred = r.table.select(["id", "dup_cluster"]).rename_columns(["id", "cluster"])
        s = pair_scores(pred, pairs, threshold=0.8, texts=docs)
        b, rr = cfg.bands_rows()
        line = (
            f"| {name} | {b}×{rr} | {cfg.lsh_threshold:.3f} | {cpu:.1f} | {s['precision']:.4f} | "
            f"{s['recall']:.4f} | {s['f1']:.4f} | {s['max_predicted_cluster']} | "
            f"{len(oversized_clusters(pred, truth, texts=docs))} | {r.stats.get('split_rows', 0)} |"
        )
        print(line, flush=True)
        lines.append(line)
    text = "\n".join(lines) + "\n"
    if not args.no_append:
        append_history(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
