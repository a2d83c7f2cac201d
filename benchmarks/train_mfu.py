"""Training throughput and MFU of zephyr's MoE trainer on synthetic tokens.

Default: the ``moe-785m`` preset (785M total / 152M active), bf16, per-block ``torch.compile``, batch 16 × 2048,
grouped_mm dispatch, fused AdamW — the configuration whose reference point on one H100 is a plain compiled torch
harness at 26% MFU / 226k tokens/s (DESIGN.md §7); the target is ≥ 30%.

    python benchmarks/train_mfu.py                                  # on a GPU machine
    python benchmarks/train_mfu.py --preset tiny --device cpu --steps 3 --batch-size 2 --seq-len 128   # smoke

Reports the median over the steps after ``--warmup`` (compilation and allocator warm-up excluded) and appends
a Markdown row to benchmarks/RESULTS.md with the machine, date and command. MFU uses torchtitan's convention
(``zephyr.trainer.metrics``): 6 × active non-embedding params + 12 · layers · d_model · seq_len FLOPs per
token over the device's peak dense bf16 FLOPS (H100: 989 TFLOPS).
"""

from __future__ import annotations

import argparse
import datetime
import logging
import platform
import shlex
import statistics
import sys
from pathlib import Path

import torch
from zephyr.trainer.config import OptimConfig, TrainConfig
from zephyr.trainer.model import count_params
from zephyr.trainer.presets import get_preset
from zephyr.trainer.train import train

RESULTS = Path(__file__).resolve().parent / "RESULTS.md"


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
    p.add_argument("--no-append", action="store_true", help="print the row without appending to RESULTS.md")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")

    on_accelerator = args.device != "cpu" and torch.accelerator.is_available()
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
        f"{'n/a' if mfu is None else f'{100 * mfu:.1f}%'} | final loss {result.losses[-1]:.3f} | "
        f"`python benchmarks/{Path(__file__).name} {shlex.join(sys.argv[1:] if argv is None else argv)}` |"
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


def _append_row(header: str, row: str) -> None:
    """Add ``row`` at the end of this benchmark's table (created on first use), whatever follows it."""
    text = RESULTS.read_text() if RESULTS.exists() else "# Benchmark results\n"
    if "## Trainer throughput" not in text:
        text = text.rstrip("\n") + "\n" + header
    lines = text.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("## Trainer throughput"))
    end = at + 1
    while end < len(lines) and (not lines[end].strip() or lines[end].startswith("|")):
        if lines[end].startswith("|"):
            last = end
        end += 1
    lines.insert(last + 1, row)
    RESULTS.write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    sys.exit(main())
