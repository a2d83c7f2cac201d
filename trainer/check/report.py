"""``run_check``: every measurement of ``zephyr train check`` for one configuration, and the verdict.

The verdict concerns the run's dispatch (``moe.dispatch``; with ``auto``, the device's default): 0 graph
breaks, 0 host syncs, counted FLOPs within ``FLOP_TOLERANCE`` of the MFU formula, the estimated peak within
``device_memory``, and the memory estimator within ``MEMORY_TOLERANCE`` of a measured CPU run of the same
step at a small size. Other dispatches are measured and reported, not judged.

``render`` is the report's human-readable form (``zephyr train check`` without ``--json``).
"""

from __future__ import annotations

import dataclasses
import logging
import time
from dataclasses import dataclass, field
from typing import Any

import torch
from zephyr.trainer.check.flops import count_flops, mfu_bounds
from zephyr.trainer.check.graph_breaks import find_graph_breaks
from zephyr.trainer.check.harness import Target, reduced_width
from zephyr.trainer.check.host_syncs import find_host_syncs
from zephyr.trainer.check.memory import GIB, estimate_memory, measure_cpu_peak
from zephyr.trainer.config import CheckConfig, TrainConfig
from zephyr.trainer.devices import peak_flops_for, resolve_device, resolve_dispatch
from zephyr.trainer.model import count_params
from zephyr.trainer.train import resolve_model_config

from zephyr.errors import ConfigError


def _breaks_line(data: dict[str, Any]) -> str:
    text = f"{len(data['breaks'])} (graphs: " + ", ".join(f"{k} {v}" for k, v in data["graphs"].items()) + ")"
    return text + "".join(f"\n        {b['region']}: {b['reason']} at {b['where']}" for b in data["breaks"])


def _syncs_line(data: dict[str, Any]) -> str:
    shapes = (
        "static shapes"
        if data["static_shapes"]
        else f"shapes depend on the data: {data['first_dynamic_shape']}"
    )
    text = f"{sum(s['count'] for s in data['syncs'])}, {shapes}"
    return text + "".join(
        f"\n        {s['count']}x {s['op']}: {s['reason']} at {s['where']}" for s in data["syncs"]
    )


def _size(gib: float) -> str:
    return f"{gib:.1f} GiB" if gib >= 1 else f"{gib * 1024:.1f} MiB"


def render(report: dict[str, Any]) -> str:
    """A page a person reads before booking the GPU: every figure and, last, the verdict."""
    default = report["default_dispatch"]
    params = report["params"]
    lines = [
        f"zephyr train check: {report['preset']}, {report['batch_size']} x {report['seq_len']} = "
        f"{report['tokens_per_step']:,} tokens per step, {report['device']}, torch {report['torch']}",
        f"  parameters: {params['total'] / 1e6:.1f}M total, {params['active'] / 1e6:.1f}M active",
    ]
    breaks = "graph breaks (forward + backward per dispatch, optimizer once; reduced width, attention sdpa)"
    traced, moe = report["traced_moe_layers"], report["moe_layers"]
    syncs = f"host syncs in the step (reduced width, {traced} MoE block; the model has {moe})"
    for title, key, line in ((breaks, "graph_breaks", _breaks_line), (syncs, "host_syncs", _syncs_line)):
        lines.append(f"  {title}:")
        for dispatch, data in report["dispatch"].items():
            lines.append(f"    {dispatch}{' (default)' if dispatch == default else ''}: {line(data[key])}")
    lines.append(
        f"  FLOPs per token: measured {report['flops_per_token_measured'] / 1e9:.4g} G, formula "
        f"{report['flops_per_token_formula'] / 1e9:.4g} G (x{report['flops_measured_over_formula']:.4f})"
    )
    for dispatch, data in report["dispatch"].items():
        if dispatch != default and "flops" in data:
            lines.append(f"    {dispatch}: x{data['flops']['measured_over_formula']:.4f} of the formula")
    memory = report["memory"]
    for key, label in (
        ("without_activation_checkpointing", "peak memory"),
        ("with_activation_checkpointing", "  with activation checkpointing"),
    ):
        m = memory[key]
        b = m["breakdown_gib"]
        lines.append(
            f"  {label}: {_size(m['peak_memory_gib'])} (parameters {_size(b['parameters'])}, AdamW "
            f"{_size(b['optimizer_state'])}, gradients {_size(b['gradients_at_peak'])}, activations "
            f"{_size(b['activations_at_peak'])} at the peak; saved by the forward {_size(m['saved_activations_gib'])})"
        )
    lines.append(
        f"    the run's peak: {_size(report['peak_memory_gib'])} of {_size(report['device_memory_gib'])} "
        f"(activation checkpointing {'on' if report['activation_checkpointing'] else 'off'})"
    )
    if memory["validation"]:
        v = memory["validation"]
        lines.append(
            f"    estimator vs a measured CPU step ({v['batch_size']} x {v['seq_len']}, d_model {v['d_model']}): "
            f"{v['estimated_step_peak_mib']:.1f} vs {v['measured_step_peak_mib']:.1f} MiB "
            f"(x{v['estimated_over_measured']:.3f})"
        )
    lines.append(
        f"  MFU: upper bound {report['mfu_upper_bound']:.1%}; {report['target_mfu']:.0%} MFU on an {report['gpu']} "
        f"({report['peak_tflops']:.0f} TFLOPS) needs {report['step_time_s_for_target_mfu']:.3g} s per step "
        f"({report['tokens_per_s_for_target_mfu']:,} tokens/s)"
    )
    if report["mfu_at_step_time"] is not None:
        lines.append(f"    at the given step time: {report['mfu_at_step_time']:.1%} MFU")
    if report["problems"]:
        lines.append("  NOT READY:")
        lines += [f"    - {p}" for p in report["problems"]]
    else:
        lines.append(
            f"  ready: 0 graph breaks, 0 host syncs, FLOPs within 5% of the formula, fits {_size(report['device_memory_gib'])}"
        )
    return "\n".join(lines)


log = logging.getLogger(__name__)

FLOP_TOLERANCE = 0.05
MEMORY_TOLERANCE = 0.15
ACCELERATORS = ("cuda", "xpu", "xla")
TRACE_BATCH, TRACE_SEQ = 2, 32
"""Batch and sequence length of the reduced-width traces (graph breaks, host syncs)."""
VALIDATE_BATCH, VALIDATE_SEQ, VALIDATE_WIDTH, VALIDATE_VOCAB = 4, 512, 16, 8192
"""The small run measured on the CPU: d_model = 16 per head, a 8192-token vocabulary (~0.25 GiB peak)."""


@dataclass
class _Clock:
    seconds: dict[str, float] = field(default_factory=dict)

    def timed(self, name: str, fn: Any, *args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            self.seconds[name] = round(self.seconds.get(name, 0.0) + time.perf_counter() - start, 1)


def run_check(train: TrainConfig, check: CheckConfig) -> dict[str, Any]:
    """Measure ``train``'s configuration as ``check`` asks (module docstring); the result is plain
    JSON-serializable data."""
    clock = _Clock()
    device = "cuda" if train.device == "auto" else train.device
    if device not in ACCELERATORS:
        raise ConfigError(
            f"zephyr train check checks an accelerator's code path: --device {', '.join(ACCELERATORS)}"
        )
    peak_flops = train.peak_tflops * 1e12 if train.peak_tflops > 0 else peak_flops_for(check.gpu)
    if peak_flops is None:
        raise ConfigError(f"--gpu {check.gpu!r}: unknown peak FLOPS; give --peak-tflops (an H100 SXM: 989)")
    model = resolve_model_config(train)
    info = resolve_device(device, emulate=True)
    moe = model.moe  # a compiled bf16 run on the accelerator: the dispatch the trainer would take
    default = "grouped_mm" if moe is None else resolve_dispatch(moe.dispatch, info, compile=True, bf16=True)
    dispatches = [d for d in check.dispatches if model.moe is not None] or [default]
    if default not in dispatches:
        dispatches.insert(0, default)
    full = Target(model, train.batch_size, train.seq_len, info, default, "sdpa")
    small = full.replace(model=reduced_width(model), batch_size=TRACE_BATCH, seq_len=TRACE_SEQ)

    per_dispatch = _measure_dispatches(dispatches, default, full, small, clock)

    log.info("FLOPs and memory of the full configuration (fake tensors)")
    flop_data = per_dispatch[default].get("flops") or dataclasses.asdict(
        clock.timed("flops", count_flops, full)
    )
    memory = {
        ac: clock.timed("memory", estimate_memory, full.replace(activation_checkpointing=ac))
        for ac in (False, True)
    }
    run_memory = memory[train.activation_checkpointing]
    validation = clock.timed("memory_validation", _validate_memory, small) if check.measure_memory else None
    bounds = mfu_bounds(
        measured_flops_per_token=flop_data["flops_per_token_measured"],
        formula_flops_per_token=flop_data["flops_per_token_formula"],
        tokens_per_step=full.tokens,
        peak_flops=peak_flops,
        target_mfu=check.target_mfu,
        step_time_s=check.step_time,
    )
    counts = count_params(model)
    report: dict[str, Any] = {
        "preset": train.preset,
        "batch_size": train.batch_size,
        "seq_len": train.seq_len,
        "tokens_per_step": full.tokens,
        "device": info.name,
        "default_dispatch": default,
        "attention_traced": "sdpa",
        "torch": torch.__version__,
        "params": {"total": counts.total, "active": counts.active},
        "moe_layers": sum(model.is_moe_layer(i) for i in range(model.n_layers)),
        "traced_moe_layers": sum(small.model.is_moe_layer(i) for i in range(small.model.n_layers)),
        "graph_breaks": len(per_dispatch[default]["graph_breaks"]["breaks"]),
        "host_syncs": sum(s["count"] for s in per_dispatch[default]["host_syncs"]["syncs"]),
        "static_shapes": per_dispatch[default]["host_syncs"]["static_shapes"],
        "flops_per_token_measured": flop_data["flops_per_token_measured"],
        "flops_per_token_formula": flop_data["flops_per_token_formula"],
        "flops_measured_over_formula": flop_data["measured_over_formula"],
        "peak_memory_gib": round(run_memory.peak_bytes / GIB, 4),
        "device_memory_gib": round(check.device_memory_bytes / GIB, 3),
        "activation_checkpointing": train.activation_checkpointing,
        "gpu": check.gpu,
        **dataclasses.asdict(bounds),
        "dispatch": per_dispatch,
        "memory": {
            "without_activation_checkpointing": memory[False].to_dict(),
            "with_activation_checkpointing": memory[True].to_dict(),
            "validation": validation,
        },
    }
    report["problems"] = _problems(report, check.device_memory_bytes, run_memory.peak_bytes)
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
        out[dispatch] = {"graph_breaks": dataclasses.asdict(breaks), "host_syncs": dataclasses.asdict(syncs)}
        if dispatch != "loop":
            flops = clock.timed("flops", count_flops, full.replace(dispatch=dispatch))
            out[dispatch]["flops"] = dataclasses.asdict(flops)
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


def _problems(report: dict[str, Any], device_memory_bytes: int, peak_bytes: int) -> list[str]:
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
    if peak_bytes > device_memory_bytes:
        problems.append(
            f"estimated peak {peak_bytes / GIB:.1f} GiB exceeds --device-memory {device_memory_bytes / GIB:.0f} "
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
