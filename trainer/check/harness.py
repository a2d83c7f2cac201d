"""What every measurement of ``zephyr train check`` runs: the trainer's own step on the target device's path.

``Target`` names the run being checked (model, batch, sequence length, device path, dispatch, attention,
activation checkpointing). ``build`` makes its model and optimizer with the trainer's builders, and
``run_step`` runs ``zephyr.trainer.train.train_step`` on them, with bf16 autocast where the device uses it.
Tensors live on the CPU, real or fake (``FakeTensorMode``: shapes and dtypes without memory or compute);
the device's code path is taken through ``resolve_device(kind, emulate=True)``.

``reduced_width`` shrinks a model for the measurements that need real compute or a compiler trace: every
width becomes small (8 per head, expert FFN 32, vocabulary 256) and the depth one MoE block (after one dense
block if the model has any; every block runs the same code), while everything that selects a code path is kept: experts, top-k, shared
experts, scoring, GQA heads, QK-norm, tied embeddings, balancing.
"""

from __future__ import annotations

import contextlib
import dataclasses
import sysconfig
import traceback
from dataclasses import dataclass
from pathlib import Path

import torch
from zephyr.trainer.config import ModelConfig, OptimConfig
from zephyr.trainer.data import SyntheticTokens
from zephyr.trainer.devices import DeviceInfo, parallelize
from zephyr.trainer.model import Transformer, build_model
from zephyr.trainer.train import StepOutput, build_optimizer, train_step

_LIBRARY_DIRS = tuple(
    str(Path(p).resolve())
    for p in {sysconfig.get_paths()["stdlib"], str(Path(torch.__file__).parent), str(Path(__file__).parent)}
)


def source_line(stack: list[traceback.FrameSummary]) -> str:
    """``file:line: code`` of the innermost frame outside torch, the standard library and this check: the
    line of the trainer (or of the caller's code) that led to what is reported."""
    ours = [f for f in stack if not str(Path(f.filename).resolve()).startswith(_LIBRARY_DIRS)]
    frame = (ours or stack)[-1] if (ours or stack) else None
    if frame is None:
        return "?"
    return f"{'/'.join(Path(frame.filename).parts[-2:])}:{frame.lineno}: {(frame.line or '').strip()}"


@dataclass(frozen=True)
class Target:
    """One configuration to check: what the step would be on ``device``."""

    model: ModelConfig
    batch_size: int
    seq_len: int
    device: DeviceInfo
    """An emulated device (``resolve_device(kind, emulate=True)``) or the CPU."""
    dispatch: str
    """A resolved MoE dispatch: ``grouped_mm``, ``loop`` or ``capacity``."""
    attention: str = "sdpa"
    activation_checkpointing: bool = False

    def replace(self, **changes: object) -> Target:
        return dataclasses.replace(self, **changes)

    @property
    def tokens(self) -> int:
        return self.batch_size * self.seq_len


def reduced_width(cfg: ModelConfig) -> ModelConfig:
    """``cfg`` at a width and depth that trace and run in seconds, with the same code paths (module doc)."""
    dense = min(cfg.n_dense_layers, 1)
    layers = min(cfg.n_layers, dense + 1) if cfg.moe is not None else 1
    moe = dataclasses.replace(cfg.moe, expert_ffn_dim=32) if cfg.moe is not None else None
    return dataclasses.replace(
        cfg,
        d_model=8 * cfg.n_heads,
        vocab_size=256,
        dense_ffn_dim=64,
        n_layers=layers,
        n_dense_layers=dense if cfg.moe is not None else 0,
        moe=moe,
    )


def synthetic_batch(
    cfg: ModelConfig, batch_size: int, seq_len: int, seed: int = 0
) -> dict[str, torch.Tensor]:
    """``batch_size`` packed sequences of the trainer's synthetic token stream (documents of random length, so
    the document mask and the within-document positions are exercised)."""
    source = SyntheticTokens(max(cfg.vocab_size, 16), seq_len, seed=seed)
    samples = [source.sample(i) for i in range(batch_size)]
    batch = {key: torch.stack([s[key] for s in samples]) for key in samples[0]}
    if cfg.vocab_size < 16:
        batch = {k: v % cfg.vocab_size if k != "positions" else v for k, v in batch.items()}
    return batch


def autocast_for(device: DeviceInfo) -> contextlib.AbstractContextManager:
    """bf16 autocast where the device trains in bf16, on the device type the tensors are on."""
    if device.bf16:
        return torch.autocast(device.autocast_type, dtype=torch.bfloat16)
    return contextlib.nullcontext()


def build(target: Target, *, seed: int = 0) -> tuple[Transformer, torch.optim.Optimizer]:
    """The model (initialized, on ``target.device.device``) and AdamW as ``zephyr train`` builds them."""
    torch.manual_seed(seed)
    model = build_model(
        target.model, device=target.device.device, dispatch=target.dispatch, attention=target.attention
    )
    parallelize(
        model, compile=False, fsdp=False, bf16=False, activation_checkpointing=target.activation_checkpointing
    )
    model.train()
    optimizer = build_optimizer(model, OptimConfig(), target.device.type)
    return model, optimizer


def run_step(
    target: Target, model: Transformer, optimizer: torch.optim.Optimizer, batch: dict[str, torch.Tensor]
) -> StepOutput:
    """One ``train_step`` on ``batch`` (one micro-batch), under the target's autocast."""
    return train_step(model, optimizer, lambda: batch, autocast=autocast_for(target.device))
