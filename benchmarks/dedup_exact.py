"""Exact document dedup: zephyr (CLI, 2 workers) vs duckdb (hash + group by, 2 threads) on the same corpus.

Both produce the annotated table (every input row plus its cluster's keeper id and size) as Parquet, so
the work is comparable: read, hash the text, group by the hash, join the groups back, write.

    .venv/bin/python benchmarks/dedup_exact.py --corpus /work/corpus/medium/docs

Appends a Markdown table to the month's notebook, benchmarks/history/<YYYY-MM>.md (with --no-append it only prints).
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

ROOT = Path(__file__).resolve().parent.parent
PY = str(ROOT / ".venv" / "bin" / "python")
ZEPHYR = str(ROOT / ".venv" / "bin" / "zephyr")

DUCKDB_SQL = """
import duckdb, sys
src, out = sys.argv[1], sys.argv[2]
con = duckdb.connect()
con.execute("SET threads = 2")
con.execute(f'''
COPY (
  WITH docs AS (SELECT *, hash(text) AS h FROM read_parquet('{src}/part-*.parquet')),
       g AS (SELECT h, min(id) AS dup_cluster, count(*) AS dup_cluster_size FROM docs WHERE text IS NOT NULL GROUP BY h)
  SELECT docs.* EXCLUDE (h), g.dup_cluster, g.dup_cluster_size, coalesce(docs.id = g.dup_cluster, true) AS dup_keep
  FROM docs LEFT JOIN g USING (h)
) TO '{out}/out.parquet' (FORMAT parquet, COMPRESSION zstd)''')
"""


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--corpus", default="/work/corpus/medium/docs")
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / ".out" / "dedup_exact"))
    ap.add_argument("--no-append", action="store_true")
    args = ap.parse_args()
    corpus = Path(args.corpus)
    files = sorted(str(p) for p in corpus.glob("part-*.parquet"))
    texts = pa.concat_tables([pq.read_table(f, columns=["text"]) for f in files])["text"]
    text_mb = pc.sum(pc.binary_length(texts)).as_py() / 1e6
    distinct = len(pc.unique(texts.combine_chunks()))
    runs = {
        "duckdb (hash + group by + join, 2 threads)": [PY, "-c", DUCKDB_SQL, str(corpus), "{out}"],
        "zephyr --normalize none (2 workers)": [
            ZEPHYR,
            "dedup",
            "exact",
            *files,
            "--mode",
            "annotate",
            "--output",
            "{out}",
            "--normalize",
            "none",
            "--workers",
            "2",
        ],
        "zephyr default normalization (2 workers)": [
            ZEPHYR,
            "dedup",
            "exact",
            *files,
            "--mode",
            "annotate",
            "--output",
            "{out}",
            "--workers",
            "2",
        ],
    }
    rows = []
    for name, cmd in runs.items():
        out = Path(args.out) / name.split(" ")[0] / ("none" if "none" in name else "default")
        shutil.rmtree(out, ignore_errors=True)
        out.mkdir(parents=True)
        res = run_measured([c.replace("{out}", str(out)) for c in cmd], log_path=str(out) + ".log")
        kept = None
        if res["rc"] == 0:
            t = pq.read_table(str(out), columns=["dup_keep", "text"])
            kept = int(pc.sum(pc.and_(t["dup_keep"], pc.is_valid(t["text"]))).as_py())
        row = {"system": name, **res, "mb_per_s": text_mb / res["wall_s"], "kept_non_null": kept}
        print(json.dumps(row), flush=True)
        rows.append(row)
    lines = [
        f"\n### Exact dedup, {corpus} ({texts.length()} docs, {text_mb:.1f} MB text, "
        f"{distinct} distinct texts) — {datetime.date.today()}, {machine()}\n",
        f"Command: `.venv/bin/python benchmarks/dedup_exact.py --corpus {corpus}`\n",
        "| system | wall s | MB/s | peak RSS MB | kept (non-null text) |",
        "|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['system']} | {r['wall_s']:.1f} | {r['mb_per_s']:.1f} | {r['peak_rss_mb']:.0f} | "
            f"{r['kept_non_null']} |"
        )
    text = "\n".join(lines) + "\n"
    publish(text, append=not args.no_append)
    return 0


if __name__ == "__main__":
    sys.exit(main())
