"""Router load balancing side by side: aux-loss-free bias (DeepSeek-V3) vs Quantile Balancing, same run.

Each method trains the ``tiny`` preset (8 routed experts, top-2, one shared expert) for ``--steps`` steps on the
trainer's synthetic token stream, from the same initialization and data order, for each seed; the table gives
the load entropy (normalized, 1 = uniform; mean over MoE layers) and the max-over-mean expert load, at the last
step and averaged over the run, and the loss (mean of the last 20 steps) and wall time per method.

    .venv/bin/python benchmarks/moe_balance.py                       # bias vs quantile, 300 steps, 3 seeds
    .venv/bin/python benchmarks/moe_balance.py --steps 50 --seeds 0 --no-append   # smoke

``--balance`` takes more methods (``aux`` runs with ``--balance-loss-weight``). Appends a section to
the month's notebook, benchmarks/history/<YYYY-MM>.md, with the machine, date, torch version and the exact command.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import shlex
import statistics
import sys
import time
from pathlib import Path

import torch
from zephyr.trainer.config import OptimConfig, TrainConfig
from zephyr.trainer.train import train

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _measure import append_history  # noqa: E402


def _run(balance: str, seed: int, args: argparse.Namespace) -> dict[str, float]:
    moe: dict[str, object] = {"balance": balance}
    if balance == "aux":
        moe["balance_loss_weight"] = args.balance_loss_weight
    cfg = TrainConfig(
        preset=args.preset,
        model={"moe": moe},
        steps=args.steps,
        batch_size=args.batch_size,
        seq_len=args.seq_len,
        device="cpu",
        seed=seed,
        optim=OptimConfig(lr=args.lr, warmup_steps=min(30, args.steps)),
    )
    start = time.perf_counter()
    result = train(cfg)
    wall = time.perf_counter() - start
    records = result.records
    return {
        "entropy_last": records[-1]["load_entropy"],
        "entropy_mean": statistics.fmean(r["load_entropy"] for r in records),
        "max_over_mean_last": records[-1]["load_max_over_mean"],
        "max_over_mean_mean": statistics.fmean(r["load_max_over_mean"] for r in records),
        "loss_last20": statistics.fmean(result.losses[-20:]),
        "wall_s": wall,
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--preset", default="tiny")
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--seq-len", type=int, default=256)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--seeds", default="0,1,2")
    p.add_argument("--balance", default="bias,quantile", help="comma-separated: bias, quantile, aux")
    p.add_argument("--balance-loss-weight", type=float, default=1e-2, help="for --balance aux")
    p.add_argument("--no-append", action="store_true")
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    seeds = [int(s) for s in args.seeds.split(",")]
    methods = args.balance.split(",")
    load = os.getloadavg()[0]
    rows = []
    for method in methods:
        runs = [_run(method, seed, args) for seed in seeds]
        mean = {k: statistics.fmean(r[k] for r in runs) for k in runs[0]}
        spread = statistics.pstdev(r["loss_last20"] for r in runs) if len(runs) > 1 else 0.0
        rows.append(
            f"| {method} | {mean['entropy_last']:.4f} | {mean['entropy_mean']:.4f} | {mean['max_over_mean_last']:.3f} "
            f"| {mean['max_over_mean_mean']:.3f} | {mean['loss_last20']:.4f} ± {spread:.4f} | {mean['wall_s']:.1f} |"
        )
    command = f"python benchmarks/{Path(__file__).name} {shlex.join(sys.argv[1:] if argv is None else argv)}".strip()
    text = (
        f"\n## MoE load balancing: bias vs quantile (benchmarks/moe_balance.py) — {datetime.date.today()}\n\n"
        f"{platform.machine()} {os.cpu_count()} cores, torch {torch.__version__}, 1 thread, load {load:.1f}; "
        f"`{args.preset}` preset, {args.steps} steps of {args.batch_size}×{args.seq_len} synthetic tokens, "
        f"lr {args.lr}, seeds {args.seeds} (means over seeds). Command: `{command}`\n\n"
        "| balance | load entropy, last step | load entropy, run mean | max/mean load, last | max/mean load, "
        "run mean | loss (last 20 steps) ± sd over seeds | wall s per run |\n"
        "|---|---|---|---|---|---|---|\n" + "\n".join(rows) + "\n"
    )
    print(text)
    if not args.no_append:
        append_history(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
