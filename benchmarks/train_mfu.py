"""Training throughput and MFU of zephyr's MoE trainer on synthetic tokens, after ``zephyr train check``.

Default: the ``moe-785m`` preset (785M total / 152M active), bf16, per-block ``torch.compile``, batch 16 × 2048,
grouped_mm dispatch, fused AdamW — the configuration whose reference point on one H100 is a plain compiled torch
harness at 26% MFU / 226k tokens/s (DESIGN.md §7); the target is ≥ 30%.

    python benchmarks/train_mfu.py                                  # on a GPU machine
    python benchmarks/train_mfu.py --preset tiny --device cpu --steps 3 --batch-size 2 --seq-len 128   # smoke

First it runs ``zephyr train check`` on the same configuration (graph breaks, host syncs, FLOPs against the
MFU formula, peak memory, the step time 30% MFU needs; printed with its exact command) and appends a row to
the "Trainer readiness" table. Then, when an accelerator is present (or ``--device cpu`` is given), the timed
run: it reports the median over the steps after ``--warmup`` (compilation and allocator warm-up excluded) and appends
a Markdown row to the "Trainer throughput" table of the month's notebook (benchmarks/history/<YYYY-MM>.md) with
the machine, date and command; the figure's row in benchmarks/RESULTS.md is updated by hand. MFU uses torchtitan's convention
(``zephyr.trainer.metrics``): 6 × active non-embedding params + 12 · layers · d_model · seq_len FLOPs per
token over the device's peak dense bf16 FLOPS (H100: 989 TFLOPS).
"""

from __future__ import annotations

import argparse
import datetime
import json
import logging
import platform
import shlex
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch
from zephyr.trainer.config import OptimConfig, TrainConfig, get_preset
from zephyr.trainer.model import count_params
from zephyr.trainer.train import train

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _measure import history_file  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--preset", default="moe-785m")
    p.add_argument("--device", default="auto")
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--warmup", type=int, default=10, help="steps excluded from the median")
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--seq-len", type=int, default=2048)
    p.add_argument("--dtype", default="auto")
    p.add_argument(
        "--compile",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="per-block torch.compile (default: on for accelerators)",
    )
    p.add_argument("--dispatch", default="auto", help="MoE dispatch: auto, grouped_mm, loop, capacity")
    p.add_argument("--attention", default="auto", help="auto, flex or sdpa")
    p.add_argument(
        "--no-append", action="store_true", help="print the row without adding it to the month's notebook"
    )
    p.add_argument("--skip-check", action="store_true", help="go straight to the timed run")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")

    on_accelerator = args.device != "cpu" and torch.accelerator.is_available()
    this_command = (
        f"python benchmarks/{Path(__file__).name} {shlex.join(sys.argv[1:] if argv is None else argv)}"
    )
    if not args.skip_check:
        _check(args)
    if not on_accelerator and args.device != "cpu":
        print(
            f"no accelerator here: the timed run is skipped. On a GPU machine run:\n  {this_command.strip()}"
        )
        return 0
    compile_blocks = on_accelerator if args.compile is None else args.compile
    cfg = TrainConfig(
        preset=args.preset,
        model={"moe": {"dispatch": args.dispatch}, "attention": args.attention},
        steps=args.steps,
        batch_size=args.batch_size,
        seq_len=args.seq_len,
        device=args.device,
        dtype=args.dtype,
        compile=compile_blocks,
        optim=OptimConfig(lr=3e-4, warmup_steps=min(10, args.steps)),
    )
    result = train(cfg)
    timed = result.records[min(args.warmup, len(result.records) - 1) :]
    tps = statistics.median(r["tokens_per_s"] for r in timed)
    mfus = [r["mfu"] for r in timed if r["mfu"] is not None]
    mfu = statistics.median(mfus) if mfus else None
    counts = count_params(get_preset(args.preset))
    device = (
        torch.cuda.get_device_name()
        if on_accelerator and torch.cuda.is_available()
        else platform.processor() or "cpu"
    )
    row = (
        f"| {datetime.date.today()} | {device} | zephyr trainer | {args.preset} "
        f"({counts.total / 1e6:.3g}M/{counts.active / 1e6:.3g}M) | {args.batch_size}×{args.seq_len} | "
        f"{'compile' if compile_blocks else 'eager'} | {tps:,.0f} | "
        f"{'n/a' if mfu is None else f'{100 * mfu:.1f}%'} | final loss {result.losses[-1]:.3f}, torch "
        f"{torch.__version__} | `{this_command.strip()}` |"
    )
    header = (
        "\n## Trainer throughput (benchmarks/train_mfu.py)\n\n"
        "| date | device | system | model (total/active) | batch | mode | tokens/s | MFU | note | command |\n"
        "|---|---|---|---|---|---|---|---|---|---|\n"
        "| (reference) | H100 | plain compiled torch harness | 785M/152M | 16×2048 | compile | 226,000 | 26% | "
        "DESIGN.md §7 | — |\n"
    )
    print(header.strip().splitlines()[-3])
    print(row)
    if not args.no_append:
        _append_row(header, row)
    return 0


def _check(args: argparse.Namespace) -> dict:
    """Run ``zephyr train check`` on the benchmark's configuration (as a command, printed), add a readiness row."""
    device = (
        args.device if args.device in ("cuda", "xpu", "xla") else "cuda"
    )  # the accelerator to prepare for
    cmd = [sys.executable, "-m", "zephyr.cli", "train", "check", "--preset", args.preset, "--batch-size"]
    cmd += [str(args.batch_size), "--seq-len", str(args.seq_len), "--device", device, "--json"]
    if args.dispatch != "auto":
        cmd += ["--set", f"moe.dispatch={args.dispatch}"]
    shown = shlex.join(["zephyr", *cmd[3:]])
    print(f"$ {shown}", flush=True)
    start = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - start
    if not done.stdout.strip():
        print(done.stderr, file=sys.stderr)
        raise SystemExit(f"zephyr train check failed (exit {done.returncode})")
    report = json.loads(done.stdout)["details"]  # the summary object; the check's report is its details
    summary = {
        k: report[k]
        for k in (
            "graph_breaks",
            "host_syncs",
            "flops_measured_over_formula",
            "peak_memory_gib",
            "step_time_s_for_target_mfu",
            "ok",
        )
    }
    print(f"check ({wall:.0f} s): {json.dumps(summary)}")
    for problem in report["problems"]:
        print(f"  problem: {problem}")
    with_ac = report["memory"]["with_activation_checkpointing"]["peak_memory_gib"]
    row = (
        f"| {datetime.date.today()} | {report['device']} on {platform.machine()} | {report['torch']} | "
        f"{args.preset} | {args.batch_size}×{args.seq_len} | {report['default_dispatch']} | {report['graph_breaks']} | "
        f"{report['host_syncs']} | {report['flops_measured_over_formula']:.4f} | {report['peak_memory_gib']:.1f} "
        f"({with_ac:.1f} with AC) | {report['step_time_s_for_target_mfu']:.3f} s | {wall:.0f} | `{shown}` |"
    )
    header = (
        "\n## Trainer readiness (zephyr train check, run by benchmarks/train_mfu.py)\n\n"
        "| date | device path | torch | preset | batch | dispatch | graph breaks | host syncs | FLOPs measured/formula "
        "| peak GiB | step time for 30% MFU (H100) | check wall s | command |\n"
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|\n"
    )
    if not args.no_append:
        _append_row(header, row, "## Trainer readiness")
    return report


def _append_row(header: str, row: str, title: str = "## Trainer throughput") -> None:
    """Add ``row`` at the end of the table under ``title`` in the month's notebook (benchmarks/history/<YYYY-MM>.md;
    the table is created there by the month's first run), whatever follows it: one table per month, not a section
    per run, since a row says all a run has to say."""
    notebook = history_file()
    text = notebook.read_text()
    if title not in text:
        text = text.rstrip("\n") + "\n" + header
    lines = text.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith(title))
    end = at + 1
    while end < len(lines) and (not lines[end].strip() or lines[end].startswith("|")):
        if lines[end].startswith("|"):
            last = end
        end += 1
    lines.insert(last + 1, row)
    notebook.write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    sys.exit(main())
