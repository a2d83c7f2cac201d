"""FLOPs the training step really does, counted by ``torch.utils.flop_counter.FlopCounterMode``, against the
MFU formula the trainer logs (``zephyr.trainer.model.flops_per_token``).

The step (``train_step``: forward, backward, AdamW) of the full model at the full batch runs on fake tensors
(``FakeTensorMode``: every op with its real shapes and dtypes, no memory, no arithmetic), so the count is the
one of the configuration being checked, in seconds on a CPU. The counter sees the matrix products: ``mm``,
``bmm``, attention, and — formulas added here, torch has none — ``torch._grouped_mm`` and the CPU attention
kernel. Elementwise work (norms, softmax, AdamW) is not counted, as the MFU convention does not count it.

Grouped GEMM rows: on the device ``torch._grouped_mm`` computes the rows up to the last group offset,
including each group's alignment padding. With real offsets the count uses them; on fake tensors it counts
the whole static buffer (T·K + E·16 rows), an upper bound by at most E·16 rows (0.4% of the expert FLOPs of
``moe-785m`` at 16×2048). The per-expert loop needs real group sizes, so it is counted with grouped_mm's
shapes (the same products without padding). Capacity dispatch computes E·C slots (C = capacity_factor ·
T·K/E), so it does capacity_factor × the routed-expert FLOPs: work, but not model FLOPs.

The formula (PaLM appendix B, as in torchtitan): ``6 · N_active + 12 · layers · d_model · seq_len``, the
attention term for full (non-causal) score matrices, which is what SDPA with a mask computes.

What MFU the step can reach (``mfu_bounds``), from the counted FLOPs, the MFU formula and the device's peak: MFU credits ``flops_per_token_formula`` per token (``zephyr.trainer.metrics.mfu``). If the step does more
matrix work than that (alignment padding, capacity slack), a device running at its peak still reaches only
``formula / measured``: the ``mfu_upper_bound``. The step time a target MFU needs follows from the formula:
``tokens · formula / (mfu · peak)``; with a measured step time the MFU is ``tokens · formula / (time · peak)``.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any

import torch
from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode
from torch.utils.flop_counter import FlopCounterMode
from zephyr.trainer.check.harness import Target, build, run_step, synthetic_batch
from zephyr.trainer.model import flops_per_token


@dataclass(frozen=True)
class MfuBounds:
    """The module docstring's bounds, named as ``zephyr train check --json`` reports them."""

    peak_tflops: float
    target_mfu: float
    mfu_upper_bound: float
    """MFU at the device's peak FLOPS: formula / measured, at most 1."""
    step_time_s_for_target_mfu: float
    """Seconds per optimizer step that ``target_mfu`` needs."""
    tokens_per_s_for_target_mfu: float
    """Tokens per second that ``target_mfu`` needs."""
    mfu_at_step_time: float | None
    """MFU at a given step time (``None`` when none was given)."""


def mfu_bounds(
    *,
    measured_flops_per_token: float,
    formula_flops_per_token: float,
    tokens_per_step: int,
    peak_flops: float,
    target_mfu: float = 0.30,
    step_time_s: float | None = None,
) -> MfuBounds:
    """The bounds above for one device with ``peak_flops`` (dense bf16 FLOPS)."""
    step_flops = tokens_per_step * formula_flops_per_token
    return MfuBounds(
        peak_tflops=peak_flops / 1e12,
        target_mfu=target_mfu,
        mfu_upper_bound=min(1.0, formula_flops_per_token / measured_flops_per_token),
        step_time_s_for_target_mfu=step_flops / (target_mfu * peak_flops),
        tokens_per_s_for_target_mfu=target_mfu * peak_flops / formula_flops_per_token,
        mfu_at_step_time=None if step_time_s is None else step_flops / (step_time_s * peak_flops),
    )


def _grouped_mm_flops(a: torch.Tensor, b: torch.Tensor, offs: Any = None, *args: Any, **kwargs: Any) -> int:
    """``torch._grouped_mm``: 2·rows·K·N for a 2-D × 3-D product (rows up to the last offset), 2·M·N·K for the
    2-D × 2-D weight-gradient form (K grouped), 2·G·M·K·N batched."""
    offs = kwargs.get("offs", offs)
    used = None
    if isinstance(offs, torch.Tensor) and not isinstance(offs, FakeTensor) and offs.numel():
        used = int(offs[-1])
    if a.dim() == 2 and b.dim() == 3:
        rows = a.shape[0] if used is None else min(used, a.shape[0])
        return 2 * rows * a.shape[1] * b.shape[2]
    if a.dim() == 2 and b.dim() == 2:
        k = a.shape[1] if used is None else min(used, a.shape[1])
        return 2 * a.shape[0] * b.shape[1] * k
    if a.dim() == 3 and b.dim() == 3:
        return 2 * a.shape[0] * a.shape[1] * a.shape[2] * b.shape[2]
    out = kwargs.get("out_val")
    return 2 * (out.numel() if isinstance(out, torch.Tensor) else 0) * a.shape[-1]


_grouped_mm_flops._get_raw = True  # type: ignore[attr-defined]  # FlopCounterMode passes tensors, not shapes


def _attention_flops(query: Any, key: Any, value: Any) -> int:
    """QKᵀ and AV over full score matrices: 2·B·H·Lq·Lk·(Dqk + Dv) (query heads; GQA shares keys)."""
    b, h, lq, dqk = query
    lk, dv = key[-2], value[-1]
    return 2 * b * h * lq * lk * (dqk + dv)


def _sdpa_cpu_forward(
    query: Any, key: Any, value: Any, *args: Any, out_val: Any = None, **kwargs: Any
) -> int:
    return _attention_flops(query, key, value)


def _sdpa_cpu_backward(
    grad_out: Any, query: Any, key: Any, value: Any, *args: Any, out_val: Any = None, **kwargs: Any
) -> int:
    return 2 * _attention_flops(query, key, value)  # dQ, dK, dV and dP: four products, twice the forward


FLOP_FORMULAS = {
    torch.ops.aten._grouped_mm: _grouped_mm_flops,
    torch.ops.aten._scaled_dot_product_flash_attention_for_cpu: _sdpa_cpu_forward,
    torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward: _sdpa_cpu_backward,
}
"""Formulas for ops FlopCounterMode does not count (torch 2.11–2.13)."""


@dataclass
class FlopCount:
    """One step's count, named as ``zephyr train check --json`` reports it."""

    dispatch: str
    """The dispatch whose shapes were counted (``grouped_mm`` stands in for ``loop``)."""
    flops_per_token_measured: float
    """Counted FLOPs per token of one training step (forward + backward)."""
    flops_per_token_formula: float
    """``flops_per_token(model, seq_len)``, the MFU numerator per token."""
    measured_over_formula: float
    by_op: dict[str, int]
    """Counted FLOPs per token by op."""


def count_flops(target: Target, *, fake: bool = True) -> FlopCount:
    """Count one training step of ``target`` (fake tensors by default; ``fake=False`` runs it for real)."""
    if target.dispatch == "loop" and fake:
        target = target.replace(dispatch="grouped_mm")
    target = target.replace(activation_checkpointing=False)  # model FLOPs: recomputation is not counted
    batch = synthetic_batch(target.model, target.batch_size, target.seq_len)
    mode = FakeTensorMode() if fake else None
    if mode is not None:
        with mode:
            model, optimizer = build(target)
        batch = {k: mode.from_tensor(v) for k, v in batch.items()}
    else:
        model, optimizer = build(target)
    counter = FlopCounterMode(display=False, custom_mapping=FLOP_FORMULAS)
    with mode if mode is not None else contextlib.nullcontext(), counter:
        run_step(target, model, optimizer, batch)
    measured = counter.get_total_flops() / target.tokens
    formula = flops_per_token(target.model, target.seq_len)
    by_op = {str(op).removeprefix("aten."): n for op, n in counter.get_flop_counts()["Global"].items()}
    return FlopCount(
        dispatch=target.dispatch,
        flops_per_token_measured=measured,
        flops_per_token_formula=formula,
        measured_over_formula=round(measured / formula, 4),
        by_op={op: round(n / target.tokens) for op, n in sorted(by_op.items())},
    )
