"""``run_check``: every measurement of ``zephyr train check`` for one configuration, and the verdict.

The verdict concerns the run's dispatch (``moe.dispatch``; with ``auto``, the device's default): 0 graph
breaks, 0 host syncs, counted FLOPs within ``FLOP_TOLERANCE`` of the MFU formula, the estimated peak within
``--device-memory``, and the memory estimator within ``MEMORY_TOLERANCE`` of a measured CPU run of the same
step at a small size. Other dispatches are measured and reported, not judged.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from dataclasses import dataclass, field
from typing import Any

import torch
from zephyr.trainer.check.flops import count_flops
from zephyr.trainer.check.graph_breaks import find_graph_breaks
from zephyr.trainer.check.harness import Target, reduced_width
from zephyr.trainer.check.host_syncs import find_host_syncs
from zephyr.trainer.check.memory import GIB, estimate_memory, measure_cpu_peak
from zephyr.trainer.check.mfu import mfu_bounds
from zephyr.trainer.devices import resolve_device, resolve_dispatch
from zephyr.trainer.model import count_params
from zephyr.trainer.model_config import ModelConfig

from zephyr.errors import ConfigError

__all__ = ["CheckOptions", "run_check", "FLOP_TOLERANCE", "MEMORY_TOLERANCE", "DISPATCHES"]

log = logging.getLogger(__name__)

FLOP_TOLERANCE = 0.05
MEMORY_TOLERANCE = 0.15
DISPATCHES = ("grouped_mm", "loop", "capacity")
ACCELERATORS = ("cuda", "xpu", "xla")
TRACE_BATCH, TRACE_SEQ = 2, 32
"""Batch and sequence length of the reduced-width traces (graph breaks, host syncs)."""
VALIDATE_BATCH, VALIDATE_SEQ, VALIDATE_WIDTH, VALIDATE_VOCAB = 4, 512, 16, 8192
"""The small run measured on the CPU: d_model = 16 per head, a 8192-token vocabulary (~0.25 GiB peak)."""


@dataclass(frozen=True)
class CheckOptions:
    model: ModelConfig
    preset: str
    batch_size: int
    seq_len: int
    device: str = "cuda"
    """Whose code path to check: ``cuda``, ``xpu`` or ``xla`` (emulated on the CPU, bf16)."""
    dispatches: tuple[str, ...] = DISPATCHES
    device_memory_bytes: int = 80 * GIB
    peak_flops: float = 989e12
    gpu: str = "H100"
    target_mfu: float = 0.30
    step_time_s: float | None = None
    activation_checkpointing: bool = False
    """The run's setting: the one whose peak must fit (both are estimated)."""
    measure_memory: bool = True
    """Run the small CPU measurement that checks the memory estimator."""


@dataclass
class _Clock:
    seconds: dict[str, float] = field(default_factory=dict)

    def timed(self, name: str, fn: Any, *args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            self.seconds[name] = round(self.seconds.get(name, 0.0) + time.perf_counter() - start, 1)


def run_check(options: CheckOptions) -> dict[str, Any]:
    """Measure ``options``' configuration (module docstring); the result is plain JSON-serializable data."""
    clock = _Clock()
    if options.device not in ACCELERATORS:
        raise ConfigError(
            f"zephyr train check checks an accelerator's code path: --device {', '.join(ACCELERATORS)}"
        )
    info = resolve_device(options.device, emulate=True)
    moe = options.model.moe  # a compiled bf16 run on the accelerator: the dispatch the trainer would take
    default = "grouped_mm" if moe is None else resolve_dispatch(moe.dispatch, info, compile=True, bf16=True)
    dispatches = [d for d in options.dispatches if options.model.moe is not None] or [default]
    if default not in dispatches:
        dispatches.insert(0, default)
    full = Target(options.model, options.batch_size, options.seq_len, info, default, "sdpa")
    small = full.replace(model=reduced_width(options.model), batch_size=TRACE_BATCH, seq_len=TRACE_SEQ)

    per_dispatch = _measure_dispatches(dispatches, default, full, small, clock)

    log.info("FLOPs and memory of the full configuration (fake tensors)")
    flop_data = per_dispatch[default].get("flops") or clock.timed("flops", count_flops, full).to_dict()
    memory = {
        ac: clock.timed("memory", estimate_memory, full.replace(activation_checkpointing=ac))
        for ac in (False, True)
    }
    run_memory = memory[options.activation_checkpointing]
    validation = clock.timed("memory_validation", _validate_memory, small) if options.measure_memory else None
    bounds = mfu_bounds(
        measured_flops_per_token=flop_data["flops_per_token_measured"],
        formula_flops_per_token=flop_data["flops_per_token_formula"],
        tokens_per_step=full.tokens,
        peak_flops=options.peak_flops,
        target_mfu=options.target_mfu,
        step_time_s=options.step_time_s,
    )
    counts = count_params(options.model)
    report: dict[str, Any] = {
        "preset": options.preset,
        "batch_size": options.batch_size,
        "seq_len": options.seq_len,
        "tokens_per_step": full.tokens,
        "device": info.name,
        "default_dispatch": default,
        "attention_traced": "sdpa",
        "torch": torch.__version__,
        "params": {"total": counts.total, "active": counts.active},
        "moe_layers": sum(options.model.is_moe_layer(i) for i in range(options.model.n_layers)),
        "traced_moe_layers": sum(small.model.is_moe_layer(i) for i in range(small.model.n_layers)),
        "graph_breaks": per_dispatch[default]["graph_breaks"]["count"],
        "host_syncs": per_dispatch[default]["host_syncs"]["count"],
        "static_shapes": per_dispatch[default]["host_syncs"]["static_shapes"],
        "flops_per_token_measured": flop_data["flops_per_token_measured"],
        "flops_per_token_formula": flop_data["flops_per_token_formula"],
        "flops_measured_over_formula": flop_data["measured_over_formula"],
        "peak_memory_gib": round(run_memory.peak_bytes / GIB, 4),
        "device_memory_gib": round(options.device_memory_bytes / GIB, 3),
        "activation_checkpointing": options.activation_checkpointing,
        "gpu": options.gpu,
        **bounds.to_dict(),
        "dispatch": per_dispatch,
        "memory": {
            "without_activation_checkpointing": memory[False].to_dict(),
            "with_activation_checkpointing": memory[True].to_dict(),
            "validation": validation,
        },
    }
    report["problems"] = _problems(report, options, run_memory.peak_bytes)
    report["ok"] = not report["problems"]
    report["seconds"] = clock.seconds
    return report


def _measure_dispatches(
    dispatches: list[str], default: str, full: Target, small: Target, clock: _Clock
) -> dict[str, dict[str, Any]]:
    """Graph breaks and host syncs (reduced width) and FLOPs (full size; not the loop, whose shapes need real
    data) of each dispatch; the default first, the only one whose optimizer region is traced (the same in all)."""
    out: dict[str, dict[str, Any]] = {}
    for dispatch in sorted(dispatches, key=lambda d: d != default):
        log.info("graph breaks and host syncs: %s", dispatch)
        traced = small.replace(dispatch=dispatch)
        breaks = clock.timed("graph_breaks", find_graph_breaks, traced, optimizer_region=dispatch == default)
        syncs = clock.timed("host_syncs", find_host_syncs, traced)
        out[dispatch] = {"graph_breaks": breaks.to_dict(), "host_syncs": syncs.to_dict()}
        if dispatch != "loop":
            out[dispatch]["flops"] = clock.timed(
                "flops", count_flops, full.replace(dispatch=dispatch)
            ).to_dict()
    return out


def _validate_memory(small: Target) -> dict[str, Any]:
    """Estimate and measure one step of a small real run (same code paths) on the CPU."""
    heads = small.model.n_heads
    model = dataclasses.replace(small.model, d_model=VALIDATE_WIDTH * heads, vocab_size=VALIDATE_VOCAB)
    target = small.replace(model=model, batch_size=VALIDATE_BATCH, seq_len=VALIDATE_SEQ)
    estimated = estimate_memory(target).step.peak_bytes
    measured = measure_cpu_peak(target)
    return {
        "batch_size": VALIDATE_BATCH,
        "seq_len": VALIDATE_SEQ,
        "d_model": model.d_model,
        "vocab_size": model.vocab_size,
        "estimated_step_peak_mib": round(estimated / 2**20, 1),
        "measured_step_peak_mib": round(measured / 2**20, 1),
        "estimated_over_measured": round(estimated / measured, 4) if measured > 0 else None,
    }


def _problems(report: dict[str, Any], options: CheckOptions, peak_bytes: int) -> list[str]:
    default = report["default_dispatch"]
    problems = []
    if report["graph_breaks"]:
        where = "; ".join(b["where"] for b in report["dispatch"][default]["graph_breaks"]["breaks"])
        problems.append(f"{report['graph_breaks']} graph break(s) with {default} dispatch: {where}")
    if report["host_syncs"]:
        where = "; ".join(s["where"] for s in report["dispatch"][default]["host_syncs"]["syncs"])
        problems.append(f"{report['host_syncs']} host sync(s) with {default} dispatch: {where}")
    ratio = report["flops_measured_over_formula"]
    if abs(ratio - 1) > FLOP_TOLERANCE:
        problems.append(f"counted FLOPs are {ratio:.3f}x the MFU formula (tolerance {FLOP_TOLERANCE:.0%})")
    if peak_bytes > options.device_memory_bytes:
        problems.append(
            f"estimated peak {peak_bytes / GIB:.1f} GiB exceeds --device-memory {options.device_memory_bytes / GIB:.0f} "
            "GiB; try --activation-checkpointing or a smaller --batch-size"
        )
    validation = report["memory"]["validation"]
    if validation and validation["estimated_over_measured"] is not None:
        off = abs(validation["estimated_over_measured"] - 1)
        if off > MEMORY_TOLERANCE:
            problems.append(
                f"memory estimator is {off:.0%} off a measured CPU run (tolerance {MEMORY_TOLERANCE:.0%})"
            )
    return problems
