"""``zephyr train check [CONFIG.yaml] [--flags]``: is this training run ready for the accelerator?

Measured on this machine's CPU, in minutes, for the accelerator whose code path is named by ``--device``
(default ``cuda``; ``xpu`` and ``xla`` too; always bf16, as they train)::

    zephyr train check --preset moe-785m --batch-size 16 --seq-len 2048
    zephyr train check run.yaml --device-memory 80GiB --json          # the training config itself
    zephyr train check --preset moe-1b --batch-size 8 --seq-len 4096 --activation-checkpointing
    zephyr train check ... --dispatch grouped_mm,capacity --step-time 0.15

It reports graph breaks and host syncs (per MoE dispatch), FLOPs per token counted against the MFU formula,
the peak memory (with and without activation checkpointing, and the estimator checked against a measured CPU
run), and the step time a target MFU needs. Exit status 0 when the run is ready (0 graph breaks, 0 host
syncs, FLOPs within 5%, fits the device memory), 1 otherwise, with the problems listed.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from zephyr.trainer.run_args import add_run_arguments, config_from_args

from zephyr.errors import ConfigError

__all__ = ["build_check_parser", "handler", "options_from_args"]


def build_check_parser(common: argparse.ArgumentParser) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="zephyr train check",
        parents=[common],
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="\n\n".join(__doc__.split("\n\n")[1:]),
    )
    add_run_arguments(p, skip=("dispatch",))
    p.add_argument(
        "--dispatch",
        dest="check_dispatch",
        default="grouped_mm,loop,capacity",
        help="MoE dispatches to trace, comma-separated (default: all three); the device's default is always one",
    )
    p.add_argument("--device-memory", default="80GiB", help="memory of one device (default 80GiB: an H100)")
    p.add_argument(
        "--gpu", default="H100", help="device whose peak bf16 FLOPS the MFU uses (H100, H200, A100, B200...)"
    )
    p.add_argument(
        "--target-mfu", type=float, default=0.30, help="the MFU whose step time is reported (0.30)"
    )
    p.add_argument("--step-time", type=float, default=None, help="a measured step time (s): report its MFU")
    p.add_argument(
        "--measure-memory",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="check the memory estimator against a small real step on the CPU (~30 s)",
    )
    # --json comes from ``common``: here it prints the check's report as one JSON object (not a run summary)
    p.set_defaults(func=handler)
    return p


def options_from_args(args: argparse.Namespace) -> Any:  # CheckOptions (imported lazily)
    """The training config the flags describe (as ``zephyr train`` reads it), turned into check options."""
    from zephyr.trainer.check.report import DISPATCHES, CheckOptions
    from zephyr.trainer.devices import peak_flops_for
    from zephyr.trainer.train import resolve_model_config

    from zephyr.sizes import parse_bytes

    cfg = config_from_args(args)
    model = resolve_model_config(cfg)
    dispatches = tuple(d.strip() for d in args.check_dispatch.split(",") if d.strip())
    unknown = [d for d in dispatches if d not in DISPATCHES]
    if unknown or not dispatches:
        raise ConfigError(f"--dispatch {args.check_dispatch!r}: choose among {', '.join(DISPATCHES)}")
    peak = cfg.peak_tflops * 1e12 if cfg.peak_tflops > 0 else peak_flops_for(args.gpu)
    if peak is None:
        raise ConfigError(f"--gpu {args.gpu!r}: unknown peak FLOPS; give --peak-tflops (an H100 SXM: 989)")
    if not 0 < args.target_mfu <= 1:
        raise ConfigError(f"--target-mfu must be within (0, 1], got {args.target_mfu}")
    if args.step_time is not None and args.step_time <= 0:
        raise ConfigError(f"--step-time must be > 0 seconds, got {args.step_time}")
    return CheckOptions(
        model=model,
        preset=cfg.preset,
        batch_size=cfg.batch_size,
        seq_len=cfg.seq_len,
        device="cuda" if cfg.device == "auto" else cfg.device,
        dispatches=dispatches,
        device_memory_bytes=parse_bytes(args.device_memory),
        peak_flops=peak,
        gpu=args.gpu,
        target_mfu=args.target_mfu,
        step_time_s=args.step_time,
        activation_checkpointing=cfg.activation_checkpointing,
        measure_memory=args.measure_memory,
    )


def handler(args: argparse.Namespace) -> int:
    from zephyr.trainer.check.render import render
    from zephyr.trainer.check.report import run_check

    report = run_check(options_from_args(args))
    print(json.dumps(report, indent=2) if args.json else render(report))
    return 0 if report["ok"] else 1
