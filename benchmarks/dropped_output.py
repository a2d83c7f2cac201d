"""What ``--dropped-output DIR`` costs: each command with and without it, side by side, on the same input.

The flag routes a command's rows through three engine jobs (verdict → scratch, kept rows, dropped rows;
``zephyr/dropped.py``) where the command alone writes once; the peer of each row is the same command without
the flag, whose kept output the flagged run must equal (checked here: same rows, and the dropped rows are
the rest). Wall time and peak RSS of the whole process tree (``_measure.run_measured``).

    .venv/bin/python benchmarks/dropped_output.py [--input data/sample/sample.parquet] [--no-append]
"""

from __future__ import annotations

import argparse
import datetime
import json
import shutil
import sys
import tempfile
from pathlib import Path

import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _measure import machine, publish, run_measured  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
ZEPHYR = str(ROOT / ".venv" / "bin" / "zephyr")

COMMANDS = {
    "dedup exact --mode remove": ["dedup", "exact", "IN", "--mode", "remove"],
    "dedup fuzzy --mode remove": ["dedup", "fuzzy", "IN", "--mode", "remove"],
    "decontaminate": ["decontaminate", "IN", "--eval", "EVAL"],
}


def _run(words: list[str], src: str, eval_path: str, out: Path, extra: list[str], log: Path) -> dict:
    argv = [ZEPHYR, *(src if w == "IN" else eval_path if w == "EVAL" else w for w in words)]
    argv += ["--output", str(out), "--workers", "2", "--json", *extra]
    result = run_measured(argv, log_path=str(log))
    if result["rc"] != 0:
        raise SystemExit(f"{' '.join(argv)} failed; see {log}")
    text = log.read_text().strip().splitlines()
    result["summary"] = json.loads(text[-1])  # --json: the last line of the combined log
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--input", default=str(ROOT / "data" / "sample" / "sample.parquet"))
    parser.add_argument("--no-append", action="store_true")
    parser.add_argument("--only", default=None, help="run only the commands whose name contains this")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="zephyr-dropped-bench-"))
    texts = pq.read_table(args.input, columns=["text"])["text"].to_pylist()
    eval_path = work / "eval.jsonl"  # every 50th document's first 400 characters: a contaminated share
    eval_path.write_text("".join(json.dumps({"text": t[:400]}) + "\n" for t in texts[::50] if t))
    rows = []
    try:
        for name, words in COMMANDS.items():
            if args.only and args.only not in name:
                continue
            plain = _run(words, args.input, str(eval_path), work / "plain", [], work / "plain.log")
            routed = _run(
                words,
                args.input,
                str(eval_path),
                work / "routed",
                ["--dropped-output", str(work / "dropped")],
                work / "routed.log",
            )
            kept, again = pq.read_table(work / "plain"), pq.read_table(work / "routed")
            dropped = pq.read_table(work / "dropped")
            same = kept.num_rows == again.num_rows and kept.sort_by("id").equals(again.sort_by("id"))
            whole = dropped.num_rows + again.num_rows + routed["summary"]["rows_quarantined"]
            ok = same and whole == routed["summary"]["rows_in"]
            for label, r in (("without", plain), ("--dropped-output", routed)):
                s = r["summary"]
                rows.append(
                    f"| {name} | {label} | {s['rows_in']:,} | {s['rows_kept']:,} | {s['rows_dropped']:,} | "
                    f"{r['wall_s']:.1f} | {r['peak_rss_mb']:.0f} | {'yes' if ok else 'NO'} |"
                )
            for path in ("plain", "routed", "dropped"):
                shutil.rmtree(work / path, ignore_errors=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    stamp = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    size = Path(args.input).stat().st_size / 1e6
    text = (
        f"\n## --dropped-output: what routing the dropped rows costs (benchmarks/dropped_output.py) — {stamp}\n\n"
        f"{machine()}; input {args.input} ({size:.1f} MB), `--workers 2` (each command's default executor). "
        "Peer: the same command without the flag. *same* = the flagged run's kept rows equal the plain run's, "
        "and its dropped rows are the rest.\n\n"
        "| command | flag | rows in | kept | dropped | wall (s) | peak RSS (MB) | same |\n"
        "|---|---|---|---|---|---|---|---|\n" + "\n".join(rows) + "\n"
    )
    publish(text, append=not args.no_append)


if __name__ == "__main__":
    main()
