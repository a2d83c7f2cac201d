"""One optimizer step: ``grad_accum`` micro-batches forward and backward, clip, AdamW, router-bias update.

``train_step`` is the step that ``zephyr.trainer.train`` runs and that ``zephyr train check`` inspects (graph
breaks, host syncs, FLOPs, memory), so what the check reports is what training does. It issues no host
synchronization of its own: everything it returns is a device tensor, read later by the caller.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn
from zephyr.trainer.model import Transformer
from zephyr.trainer.moe import update_expert_bias

__all__ = ["StepOutput", "train_step", "forward_loss", "apply_gradients"]


@dataclass
class StepOutput:
    """The step's results as device tensors (nothing here has been read by the host)."""

    loss: torch.Tensor
    """Mean cross-entropy over the micro-batches (scalar)."""
    aux: torch.Tensor
    """Mean auxiliary (balance) loss over the micro-batches (scalar)."""
    grad_norm: torch.Tensor
    """Global gradient norm before clipping (scalar)."""
    moe: dict[str, torch.Tensor]
    """``update_expert_bias``'s load, bias and dropped-token tensors; empty for a dense model."""


def forward_loss(
    model: nn.Module, batch: dict[str, torch.Tensor], autocast: contextlib.AbstractContextManager
) -> tuple[torch.Tensor, torch.Tensor]:
    """Cross-entropy and auxiliary loss of one micro-batch: the region ``torch.compile`` captures (its backward
    is derived from it by AOTAutograd)."""
    with autocast:
        logits, aux = model(batch["input_ids"], batch["positions"])
        loss = Transformer.loss(logits, batch["labels"])
    return loss, aux


def apply_gradients(
    model: nn.Module, optimizer: torch.optim.Optimizer, *, grad_clip: float, all_reduce: bool
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Clip, AdamW step, drop the gradients, balance the routers; returns the pre-clip norm and the MoE stats."""
    params = [p for p in model.parameters() if p.requires_grad]
    max_norm = grad_clip if grad_clip > 0 else math.inf
    grad_norm = torch.nn.utils.clip_grad_norm_(params, max_norm, foreach=True)
    if hasattr(grad_norm, "full_tensor"):  # DTensor under FSDP2
        grad_norm = grad_norm.full_tensor()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return grad_norm, update_expert_bias(model, all_reduce=all_reduce)


def train_step(
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    next_batch: Callable[[], dict[str, torch.Tensor]],
    *,
    grad_accum: int = 1,
    grad_clip: float = 1.0,
    autocast: contextlib.AbstractContextManager | None = None,
    all_reduce: bool = False,
) -> StepOutput:
    """Run one optimizer step on ``grad_accum`` batches from ``next_batch()`` (each already on the device).

    ``grad_clip`` <= 0 only measures the norm. ``all_reduce`` sums the router loads over the process group
    before the bias update, so every data-parallel rank applies the same bias.
    """
    autocast = autocast if autocast is not None else contextlib.nullcontext()
    device = next(model.parameters()).device
    loss_sum = torch.zeros((), device=device)
    aux_sum = torch.zeros((), device=device)
    for _ in range(grad_accum):
        loss, aux = forward_loss(model, next_batch(), autocast)
        ((loss + aux) / grad_accum).backward()
        loss_sum += loss.detach()
        aux_sum += aux.detach()
    grad_norm, moe_stats = apply_gradients(model, optimizer, grad_clip=grad_clip, all_reduce=all_reduce)
    return StepOutput(loss_sum / grad_accum, aux_sum / grad_accum, grad_norm, moe_stats)
