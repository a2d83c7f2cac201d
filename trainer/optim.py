"""AdamW and the learning-rate schedule.

``build_optimizer`` makes AdamW (fused kernels on CUDA/XPU, foreach elsewhere) with weight decay on matrices
only (norm scales are 1-D and not decayed). ``lr_at(step, ...)`` is a pure function of the step, so the schedule's
whole state is the step counter kept in the checkpoint:

* ``cosine``: linear warmup to ``lr``, then cosine to ``min_lr_ratio · lr`` at the last step;
* ``wsd`` (warmup-stable-decay, Hu et al. 2024 "MiniCPM"): warmup, flat at ``lr``, then a linear decay over the
  last ``decay_fraction`` of the steps to ``min_lr_ratio · lr``;
* ``constant``: warmup, then flat.
"""

from __future__ import annotations

import math

import torch
from torch import nn
from zephyr.trainer.config import OptimConfig

__all__ = ["build_optimizer", "lr_at", "set_lr"]


def build_optimizer(model: nn.Module, cfg: OptimConfig, device_type: str) -> torch.optim.AdamW:
    decay, no_decay = [], []
    for p in model.parameters():
        if p.requires_grad:
            (decay if p.ndim >= 2 else no_decay).append(p)
    groups = [{"params": decay, "weight_decay": cfg.weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    fused = device_type in ("cuda", "xpu")
    return torch.optim.AdamW(
        groups,
        lr=cfg.lr,
        betas=(cfg.beta1, cfg.beta2),
        eps=cfg.eps,
        fused=fused or None,
        foreach=None if fused else True,
    )


def lr_at(step: int, cfg: OptimConfig, total_steps: int) -> float:
    """Learning rate for optimizer step ``step`` (0-based) of ``total_steps``."""
    floor = cfg.lr * cfg.min_lr_ratio
    if cfg.warmup_steps > 0 and step < cfg.warmup_steps:
        return cfg.lr * (step + 1) / cfg.warmup_steps
    if cfg.schedule == "constant":
        return cfg.lr
    if cfg.schedule == "cosine":
        span = max(1, total_steps - cfg.warmup_steps - 1)
        progress = min(1.0, (step - cfg.warmup_steps) / span)
        return floor + (cfg.lr - floor) * 0.5 * (1.0 + math.cos(math.pi * progress))
    decay_steps = max(1, round(total_steps * cfg.decay_fraction))
    decay_start = total_steps - decay_steps
    if step < decay_start:
        return cfg.lr
    progress = min(1.0, (step - decay_start + 1) / decay_steps)
    return cfg.lr + (floor - cfg.lr) * progress


def set_lr(optimizer: torch.optim.Optimizer, lr: float) -> None:
    for group in optimizer.param_groups:
        group["lr"] = lr
