"""Fuzzy dedup on one templated web source: every page lands in the same LSH buckets (the "giant bucket").

``dupes_synthetic.templated_source`` makes pages that share a boilerplate header and footer (unrelated
pages at Jaccard ~0.4–0.7, so at 14×8 bands most pages collide with most others in some band) plus planted
near-duplicates (J ≥ 0.9 to their original, the only pairs at J ≥ 0.8). Per size (default 10k, 40k, 160k
rows, written to one Parquet file with ~16 MB row groups) it runs the CLI

    .venv/bin/zephyr dedup fuzzy IN --output OUT --mode remove --workers 2 --memory-budget 256MB \
        --executor threads -v

and reports wall time, peak RSS per process role (the driver, the workers — the largest of them — and the
whole tree; every process sampled every 50 ms, each pid's maximum kept), candidate and rejected edges,
removed rows against planted duplicates, and precision/recall of the removed rows
(``dupes_synthetic.score``). A run on 500 rows first gives each role's baseline RSS (imports,
compiled kernels). Goals, printed as pass/fail:

- time per doubling beyond linear, ``(t(4n) / (4·t(n)))^(1/2)`` between neighbouring sizes, ≤ 1.2;
- RSS flat and under the budget: each role's peak minus its baseline ≤ the memory budget of the tasks it runs
  (a worker process runs one task at a time: 1 × budget; on ``--executor threads`` the driver process runs
  ``--workers`` tasks at once: workers × budget), and flat: the largest size's peak ≤ 1.25 × the size
  before it (a small input need not fill the budget, so earlier steps may grow more);
- no collapse: removed rows ≤ 1.02 × planted duplicates.

    flock /tmp/zephyr-bench.lock .venv/bin/python benchmarks/dedup_giant_bucket.py [--sizes 10000,40000,160000]
        [--timeout 300] [--cli-args "--clusters components"] [--no-append]

It takes no lock itself (run it under ``flock``, as above, like the other benchmarks); generating and writing
the corpus is not timed. Each size's CLI log, ``_dedup_stats.json`` and RSS timeline (per role, every sample)
go to ``--logs`` (``benchmarks/.out/dedup_giant_bucket/``). Appends a Markdown table to the month's
notebook, benchmarks/history/<YYYY-MM>.md, unless ``--no-append``.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import shlex
import shutil
import sys
import tempfile
import time
from pathlib import Path

import pyarrow.compute as pc
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _measure import budget_mib, machine, publish, run_sampled  # noqa: E402
from dupes_synthetic import score, templated_source  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
ZEPHYR = str(ROOT / ".venv" / "bin" / "zephyr")
MIB = 2**20
ROW_GROUP_BYTES = 16 * 10**6
BASELINE_ROWS = 500


def _cli(inp: Path, out: Path, args: argparse.Namespace) -> list[str]:
    return [
        ZEPHYR,
        "dedup",
        "fuzzy",
        str(inp),
        "--output",
        str(out),
        "--mode",
        "remove",
        "--workers",
        str(args.workers),
        "--memory-budget",
        args.memory_budget,
        "--executor",
        args.executor,
        "-v",  # stage timings in the log
        *shlex.split(args.cli_args),
    ]


def run_size(num_docs: int, args: argparse.Namespace, work: Path, logs: Path) -> dict:
    """Generate, write and dedup one size; the CLI's log, stats and RSS timeline stay in ``logs``."""
    t0 = time.perf_counter()
    table, truth = templated_source(num_docs, seed=args.seed)
    gen_s = time.perf_counter() - t0
    text_mb = pc.sum(pc.binary_length(table["text"])).as_py() / 1e6
    inp = work / f"in-{num_docs}.parquet"
    rows_per_group = max(1, int(num_docs * ROW_GROUP_BYTES / (text_mb * 1e6)))
    pq.write_table(table, inp, row_group_size=rows_per_group)
    del table
    out = work / f"out-{num_docs}"
    shutil.rmtree(out, ignore_errors=True)
    log_path = logs / f"log-{num_docs}.txt"
    res = run_sampled(_cli(inp, out, args), log_path=log_path, timeout_s=args.timeout)
    (logs / f"rss-{num_docs}.json").write_text(json.dumps(res.pop("timeline")))
    row = {"docs": num_docs, "text_mb": text_mb, "generate_s": gen_s, **res}
    if res["rc"] == 0 and not res["timed_out"]:
        row.update(score(pq.read_table(out, columns=["id"]), truth))
        shutil.copy(out / "_dedup_stats.json", logs / f"stats-{num_docs}.json")
        stats = json.loads((out / "_dedup_stats.json").read_text())["dedup"]
        for key in ("candidate_pairs", "rejected_pairs", "verified_pairs", "in_memory", "cluster_rule"):
            row[key] = stats.get(key)
    else:
        log = log_path.read_text()[-2000:]
        row["error"] = (
            f"timeout after {args.timeout:.0f} s" if res["timed_out"] else f"exit {res['rc']}: {log}"
        )
    inp.unlink()
    shutil.rmtree(out, ignore_errors=True)
    return row


def _fmt(x, spec: str = ".1f") -> str:
    return "–" if x is None else format(x, spec)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="10000,40000,160000", help="comma-separated row counts, ascending")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--memory-budget", default="256MB")
    ap.add_argument(
        "--executor",
        default="threads",
        help="the dedup CLI's default (threads), or local for worker processes",
    )
    ap.add_argument("--timeout", type=float, default=300, help="seconds per CLI run before it is killed")
    ap.add_argument("--cli-args", default="", help="extra flags for `zephyr dedup fuzzy`, one string")
    ap.add_argument(
        "--logs",
        default=str(ROOT / "benchmarks" / ".out" / "dedup_giant_bucket"),
        help="CLI logs, stats, RSS",
    )
    ap.add_argument("--no-append", action="store_true")
    args = ap.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    budget = budget_mib(args.memory_budget)
    # what each role may hold above its baseline: the budget of every task it runs at once
    allowed = {
        "driver": budget * (args.workers if args.executor == "threads" else 1),
        "worker": budget,
    }
    load = os.getloadavg()
    rows = []
    logs = Path(args.logs)
    logs.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="zephyr-giant-bucket-") as tmp:
        work = Path(tmp)
        base = run_size(BASELINE_ROWS, args, work, logs)
        print(json.dumps({"baseline": base}, default=str), flush=True)
        for n in sizes:
            row = run_size(n, args, work, logs)
            print(json.dumps(row, default=str), flush=True)
            rows.append(row)
    baseline = base["peak_mib"]

    def ratio(a: dict, b: dict) -> float | None:
        if "error" in a or "error" in b:
            return None
        doublings = math.log2(b["docs"] / a["docs"])
        return (b["wall_s"] / a["wall_s"] / (b["docs"] / a["docs"])) ** (1 / doublings)

    ratios = [None] + [ratio(a, b) for a, b in zip(rows, rows[1:])]
    # the same with the baseline run's wall time (process start, imports, kernel loading) taken off each size
    net = [{**r, "wall_s": max(r["wall_s"] - base["wall_s"], 1e-3)} for r in rows]
    net_ratios = [None] + [ratio(a, b) for a, b in zip(net, net[1:])]
    cli = " ".join(shlex.quote(c) for c in _cli(Path("IN.parquet"), Path("OUT"), args)).replace(
        str(ROOT) + "/", ""
    )
    lines = [
        f"\n### Fuzzy dedup on one templated source (giant LSH bucket) — {datetime.date.today()}, {machine()}, "
        f"load {load[0]:.1f}\n",
        "Command: `flock /tmp/zephyr-bench.lock .venv/bin/python benchmarks/dedup_giant_bucket.py "
        + " ".join(shlex.quote(a) for a in sys.argv[1:])
        + f"`; each size runs `{cli}` on `templated_source(n, seed={args.seed})` "
        "(boilerplate of 200 words, unrelated pages at J 0.4–0.7, 5% of originals with 1–3 variants at J ≥ 0.9).\n",
        f"Baseline RSS ({BASELINE_ROWS} rows): "
        + ", ".join(f"{r} {v:.0f} MiB" for r, v in sorted(baseline.items()))
        + f"; wall {base['wall_s']:.1f} s.\n",
        "| docs | text MB | wall s | ×/doubling beyond linear | same, minus baseline wall | driver peak MiB | worker peak MiB (n) | tree peak MiB "
        "| candidate edges | rejected edges | removed | planted | removed/planted | precision | recall |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r, q, qn in zip(rows, ratios, net_ratios):
        if "error" in r:
            lines.append(
                f"| {r['docs']:,} | {r['text_mb']:.0f} | >{r['wall_s']:.0f} | – | – | "
                f"{_fmt(r['peak_mib'].get('driver'), '.0f')} | {_fmt(r['peak_mib'].get('worker'), '.0f')} | "
                f"{r['tree_peak_mib']:.0f} | – | – | – | – | – | – | {r['error'].splitlines()[0]} |"
            )
            continue
        lines.append(
            f"| {r['docs']:,} | {r['text_mb']:.0f} | {r['wall_s']:.1f} | {_fmt(q, '.2f')} | {_fmt(qn, '.2f')} | "
            f"{_fmt(r['peak_mib'].get('driver'), '.0f')} | {_fmt(r['peak_mib'].get('worker'), '.0f')} "
            f"({r['processes'].get('worker', 0)}) | {r['tree_peak_mib']:.0f} | {_fmt(r['candidate_pairs'], ',')} | "
            f"{_fmt(r['rejected_pairs'], ',')} | {r['removed_rows']:,} | {r['planted_duplicates']:,} | "
            f"{r['removed_rows'] / max(1, r['planted_duplicates']):.3f} | {r['precision']:.4f} | "
            f"{r['recall']:.4f} |"
        )
    ok = [r for r in rows if "error" not in r]
    worst_ratio = max((q for q in ratios if q is not None), default=None)
    over = {
        role: max(r["peak_mib"].get(role, 0) - baseline.get(role, baseline.get("driver", 0)) for r in ok)
        for role in ("driver", "worker")
        if any(role in r["peak_mib"] for r in ok)
    }
    # flat: the peak stops growing with the input once the tasks use their budget (a small input need not
    # fill it), so the goal is on the last step between sizes; every step is printed
    steps = {
        role: [b["peak_mib"][role] / a["peak_mib"][role] for a, b in zip(ok, ok[1:])]
        for role in over
        if all(role in r["peak_mib"] for r in ok)
    }
    growth = {role: g[-1] for role, g in steps.items() if g}
    collapsed = [r["docs"] for r in ok if r["collapsed"]]

    def mark(passed: bool) -> str:
        return "✓" if passed else "✗"

    timed = len(ok) == len(rows)
    lines += [
        "",
        f"- time: worst {_fmt(worst_ratio, '.2f')}× per doubling beyond linear (goal ≤ 1.2) "
        f"{mark(timed and worst_ratio is not None and worst_ratio <= 1.2)}"
        + ("" if timed else f" (runs over {args.timeout:.0f} s were killed)"),
        "- RSS: peak above baseline "
        + ", ".join(f"{role} {v:.0f} MiB" for role, v in over.items())
        + " (goal ≤ "
        + ", ".join(f"{role} {allowed[role]:.0f} MiB" for role in over)
        + f") {mark(timed and all(v <= allowed[role] for role, v in over.items()))}; "
        + (
            "peak growth per size step "
            + ", ".join(f"{role} " + " → ".join(f"{g:.2f}×" for g in steps[role]) for role in growth)
            + f" (goal: last step ≤ 1.25) {mark(timed and all(g <= 1.25 for g in growth.values()))}"
            if growth
            else "flatness needs two sizes"
        ),
        f"- collapse: removed ≤ 1.02 × planted "
        f"{mark(timed and not collapsed)}" + (f" (collapsed at {collapsed})" if collapsed else ""),
    ]
    publish("\n".join(lines) + "\n", append=not args.no_append)
    return 0


if __name__ == "__main__":
    sys.exit(main())
