"""What checking a finished task's bytes costs on resume: a command run fresh, then again on the same
``--work-dir`` (every task finished, so the second run only checks and skips), at two revisions.

    .venv/bin/python benchmarks/resume_check_cost.py --python base=PATH/bin/python --python head=.venv/bin/python \
        --input DIR --out DIR [--repeat N] [--workers N]

Each ``--python NAME=PATH`` names an interpreter whose ``zephyr`` is one revision (``benchmarks/
revision_compare.py --keep`` leaves one per revision under ``OUT/venvs``). Per command and revision: the best
wall seconds of the fresh runs and of the resumed runs (``--repeat`` pairs, interleaved across revisions), the
bytes of the files the resumed run relies on (everything under the work dir and the output), and a sha256
over the output's part files (they must be equal across revisions). A revision that checks nothing on resume
(existence only) shows what the check adds: reading every such file once and hashing it (xxh3-128).

Prints a Markdown table and appends nothing: copy it into the month's notebook (benchmarks/history/<YYYY-MM>.md)
with the command line, and its figures into the resume row of benchmarks/RESULTS.md.
"""

from __future__ import annotations

import argparse
import hashlib
import shutil
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _measure import machine, run_measured  # noqa: E402

COMMANDS = {
    "sort --by url": ["sort", "{in}", "--by", "url"],
    "dedup exact": ["dedup", "exact", "{in}"],
    "convert --to jsonl": ["convert", "{in}", "--to", "jsonl"],
}


def _bytes(*folders: Path) -> int:
    return sum(p.stat().st_size for f in folders for p in f.rglob("*") if p.is_file())


def _parts_digest(out: Path) -> str:
    digest = hashlib.sha256()
    for part in sorted(out.glob("part-*")):
        digest.update(part.name.encode())
        digest.update(part.read_bytes())
    return digest.hexdigest()[:16]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--python", action="append", required=True, help="NAME=PATH of an interpreter")
    parser.add_argument("--input", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--only", default=None, help="comma-separated command names")
    args = parser.parse_args()
    sides = dict(item.split("=", 1) for item in args.python)
    names = [n for n in COMMANDS if args.only is None or n in args.only.split(",")]
    scratch = Path(args.out)
    scratch.mkdir(parents=True, exist_ok=True)
    rows = []
    for name in names:
        best: dict[str, dict[str, float]] = {
            s: {"fresh": float("inf"), "resumed": float("inf")} for s in sides
        }
        digests, sizes = {}, {}
        for repeat in range(args.repeat):
            order = list(sides) if repeat % 2 == 0 else list(reversed(sides))
            for side in order:
                run = scratch / "run"
                shutil.rmtree(run, ignore_errors=True)
                run.mkdir()
                cmd = [
                    sides[side],
                    "-m",
                    "zephyr.cli",
                    *[a.replace("{in}", args.input) for a in COMMANDS[name]],
                    "--output",
                    str(run / "out"),
                    "--work-dir",
                    str(run / "work"),
                    "--executor",
                    "local",
                    "--workers",
                    str(args.workers),
                    "--small-job-bytes",
                    "0",
                ]
                for phase in ("fresh", "resumed"):
                    # not from the repository root: ``python -m`` would import its zephyr/ over the venv's
                    result = run_measured(cmd, log_path=str(scratch / f"{side}-{phase}.log"), cwd=str(run))
                    if result["rc"] != 0:
                        raise SystemExit(f"{name} ({side}, {phase}) failed: see {scratch}/{side}-{phase}.log")
                    best[side][phase] = min(best[side][phase], result["wall_s"])
                    print(
                        f"  {name} [{side} {phase} {repeat + 1}/{args.repeat}]: {result['wall_s']:.1f} s",
                        flush=True,
                    )
                digests[side] = _parts_digest(run / "out")
                sizes[side] = _bytes(run / "work", run / "out")
        rows.append((name, best, digests, sizes))
    print(f"\n{machine()}\n")
    head = " | ".join(f"{s} fresh s | {s} resumed s" for s in sides)
    print(f"| command | {head} | MB of work dir + output | parts identical |")
    print("|---|" + "---|" * (2 * len(sides)) + "---|---|")
    for name, best, digests, sizes in rows:
        cells = " | ".join(f"{best[s]['fresh']:.2f} | {best[s]['resumed']:.2f}" for s in sides)
        same = "yes" if len(set(digests.values())) == 1 else f"**no** {digests}"
        print(f"| {name} | {cells} | {max(sizes.values()) / 1e6:.0f} | {same} |")


if __name__ == "__main__":
    main()
