"""The human-readable form of a ``run_check`` report (``zephyr train check`` without ``--json``)."""

from __future__ import annotations

from typing import Any

__all__ = ["render"]


def _breaks_line(data: dict[str, Any]) -> str:
    graphs = data["graphs"]
    text = f"{data['count']} (graphs: " + ", ".join(f"{k} {v}" for k, v in graphs.items()) + ")"
    for b in data["breaks"]:
        text += f"\n        {b['region']}: {b['reason']} at {b['where']}"
    return text


def _syncs_line(data: dict[str, Any]) -> str:
    shapes = (
        "static shapes"
        if data["static_shapes"]
        else f"shapes depend on the data: {data['first_dynamic_shape']}"
    )
    text = f"{data['count']}, {shapes}"
    for s in data["syncs"]:
        text += f"\n        {s['count']}x {s['op']}: {s['reason']} at {s['where']}"
    return text


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
        "  graph breaks (forward + backward per dispatch, optimizer once; reduced width, attention sdpa):",
    ]
    for dispatch, data in report["dispatch"].items():
        tag = " (default)" if dispatch == default else ""
        lines.append(f"    {dispatch}{tag}: {_breaks_line(data['graph_breaks'])}")
    lines.append(
        f"  host syncs in the step (reduced width, {report['traced_moe_layers']} MoE block; the model has "
        f"{report['moe_layers']}):"
    )
    for dispatch, data in report["dispatch"].items():
        tag = " (default)" if dispatch == default else ""
        lines.append(f"    {dispatch}{tag}: {_syncs_line(data['host_syncs'])}")
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
