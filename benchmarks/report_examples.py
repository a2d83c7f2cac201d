"""Benchmark: what saving the report's example rows costs a stage, beside the op it rides on.

    .venv/bin/python benchmarks/report_examples.py [--copies 41] [--batch-rows 1000]

The embedded sample (``data/sample/sample.parquet``) repeated ``--copies`` times, each copy with fresh ids
(real rows are distinct: repeated ids would tie with the selection and never be pruned), in batches of
``--batch-rows``. Side by side, CPU microseconds per row (``time.process_time``, one thread):

- ``CollectExamples`` as a filter stage runs it (``ReasonGroups``: drop reason or kept) and as a dedup stage
  runs it (``ClusterGroups``: 3 clusters, kept row + 1 removed), after its selection has filled once;
- the ops they sit beside in the pipelines: the Gopher/C4/FineWeb ``FilterAnnotator`` (heuristic_filter) and
  ``RemoveDuplicates`` (exact_dedup, fuzzy_dedup).

Prints a Markdown table and appends it to the month's notebook, benchmarks/history/<YYYY-MM>.md, with machine,
date, load average, command.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from zephyr.pipelines.examples import ClusterGroups, CollectExamples, ReasonGroups
from zephyr.pipelines.quality.filters import FilterAnnotator
from zephyr.pipelines.step import RemoveDuplicates

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _measure import append_history  # noqa: E402

REPO = Path(__file__).resolve().parents[1]


def _copies(copies: int) -> list[pa.Table]:
    """The sample ``copies`` times with fresh ids, a drop reason column (15% dropped) and dedup columns."""
    base = pq.read_table(REPO / "data" / "sample" / "sample.parquet")
    n = base.num_rows
    rng = np.random.default_rng(0)
    out = []
    for k in range(copies):
        ids = pa.array([f"c{k}-{i}" for i in range(n)])
        reasons = pa.array(rng.choice(["short", "symbols", "repeats", None], n, p=[0.05, 0.05, 0.05, 0.85]))
        cluster = rng.integers(0, n // 2, n)
        table = base.set_column(base.schema.get_field_index("id"), "id", ids).append_column("reason", reasons)
        table = table.append_column("dup_cluster", pa.array([f"c{k}-{c}" for c in cluster]))
        table = table.append_column("dup_cluster_size", pa.array(np.full(n, 2)))
        out.append(table.append_column("dup_keep", pa.array(rng.random(n) < 0.5)))
    return out


def _cpu_us_per_row(op: Callable[[pa.Table], object], tables: list[pa.Table], batch_rows: int) -> float:
    rows = 0
    started = time.process_time()
    for table in tables:
        for lo in range(0, table.num_rows, batch_rows):
            op(table.slice(lo, batch_rows))
        rows += table.num_rows
    return (time.process_time() - started) / rows * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--copies", type=int, default=41)
    parser.add_argument("--batch-rows", type=int, default=1000)
    parser.add_argument(
        "--annotator-rows", type=int, default=3000, help="rows timed for FilterAnnotator (slow)"
    )
    args = parser.parse_args()
    tables = _copies(args.copies)
    load = os.getloadavg()[0]
    results = []
    with tempfile.TemporaryDirectory() as scratch:
        filters = CollectExamples(f"{scratch}/f", ReasonGroups("reason"), id_column="id", text_column="text")
        dedup = CollectExamples(
            f"{scratch}/d", ClusterGroups(), id_column="id", text_column="text", per_group=2, max_groups=3
        )
        for name, op in (
            ("CollectExamples (filter: reasons)", filters),
            ("CollectExamples (dedup: clusters)", dedup),
        ):
            _cpu_us_per_row(op, tables[:1], args.batch_rows)  # the selection fills on the first copy
            us = _cpu_us_per_row(op, tables[1:], args.batch_rows)
            parts = len(list(Path(op.folder).glob("part-*.parquet")))
            results.append((name, us, f"{parts} parts written in all"))
    results.append(
        (
            "RemoveDuplicates (its dedup peer)",
            _cpu_us_per_row(RemoveDuplicates("fuzzy"), tables[1:], args.batch_rows),
            "",
        )
    )
    sample = [tables[1].slice(0, args.annotator_rows)]
    results.append(
        (
            "FilterAnnotator gopher,c4,fineweb (its filter peer)",
            _cpu_us_per_row(FilterAnnotator(), sample, args.batch_rows),
            f"{args.annotator_rows} rows",
        )
    )
    rows = sum(t.num_rows for t in tables[1:])
    lines = [
        f"### Report examples: cost per row — {datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M} UTC, "
        f"{platform.node()} ({os.cpu_count()} cores), load average {load:.1f}",
        "",
        f"`{' '.join([Path(sys.executable).name, *sys.argv])}` — {rows:,} rows of the sample "
        f"({args.copies - 1} fresh-id copies after one that fills the selection), batches of {args.batch_rows}.",
        "",
        "| op | CPU µs/row | note |",
        "|---|---|---|",
        *[f"| {name} | {us:.2f} | {note} |" for name, us, note in results],
        "",
    ]
    print("\n".join(lines))
    append_history("\n".join(lines))


if __name__ == "__main__":
    main()
