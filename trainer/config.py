"""Configuration dataclasses for the MoE language model and its training run.

Configs are plain, frozen, serializable data; change them with ``dataclasses.replace`` (or
``TrainConfig.with_overrides({"model.moe.top_k": 2})``), never by mutation. Cross-field rules are checked in
``__post_init__`` and raise ``ConfigError`` naming both sides. ``ModelConfig.build()`` and ``TrainConfig`` are
consumed by ``zephyr.trainer.model.build_model`` and ``zephyr.trainer.train.train``.

YAML is optional: ``TrainConfig.from_yaml`` imports PyYAML lazily, so the trainer imports with torch, numpy and
fsspec alone.
"""

from __future__ import annotations

import dataclasses
import json
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from zephyr.errors import ConfigError

__all__ = [
    "MoEConfig",
    "ModelConfig",
    "OptimConfig",
    "TrainConfig",
    "ScoreFunc",
    "Dispatch",
    "AttentionBackend",
    "Schedule",
]

ScoreFunc = Literal["softmax", "sigmoid"]
Dispatch = Literal["auto", "grouped_mm", "loop", "capacity"]
AttentionBackend = Literal["auto", "flex", "sdpa"]
Schedule = Literal["cosine", "wsd", "constant"]


@dataclass(frozen=True)
class MoEConfig:
    """The mixture-of-experts feed-forward layer (token-choice top-k routing)."""

    num_experts: int = 8
    """Routed experts per MoE layer (E)."""
    top_k: int = 2
    """Experts each token is sent to (K)."""
    expert_ffn_dim: int = 64
    """Hidden width of one SwiGLU expert."""
    num_shared_experts: int = 0
    """Experts every token passes through (DeepSeek-style); 0 disables them. They share one SwiGLU of width
    ``num_shared_experts * expert_ffn_dim``."""
    score_func: ScoreFunc = "softmax"
    """Router scoring: ``softmax`` over experts or an independent ``sigmoid`` per expert (DeepSeek-V3)."""
    route_norm: bool = False
    """Renormalize the K selected scores to sum to 1 (DeepSeek-V3 does this with sigmoid scoring)."""
    route_scale: float = 1.0
    """Multiplier on the routing weights."""
    bias_update_rate: float = 1e-3
    """Aux-loss-free balancing: after each optimizer step every expert bias moves by this amount towards balance,
    ``bias += rate * sign(mean_load - load)``. 0 disables it (the bias stays 0)."""
    balance_loss_weight: float = 0.0
    """Weight α of the sequence-level balance loss (DeepSeek-V3 eq. 17-20); 0 disables it. Keep it tiny (1e-4)."""
    dispatch: Dispatch = "auto"
    """``grouped_mm`` (dropless, one ``torch._grouped_mm`` per projection), ``loop`` (dropless, one matmul per
    expert; the exact fallback for devices without grouped_mm such as XPU), ``capacity`` (fixed expert capacity,
    static shapes for torch_xla; overflow tokens are dropped and counted) or ``auto`` (chosen by device)."""
    capacity_factor: float = 1.25
    """``capacity`` dispatch only: slots per expert = ceil(capacity_factor * tokens * K / E)."""

    def __post_init__(self) -> None:
        if self.num_experts < 1 or self.top_k < 1:
            raise ConfigError(
                f"moe.num_experts ({self.num_experts}) and moe.top_k ({self.top_k}) must be >= 1"
            )
        if self.top_k > self.num_experts:
            raise ConfigError(f"moe.top_k ({self.top_k}) must be <= moe.num_experts ({self.num_experts})")
        if self.score_func not in typing.get_args(ScoreFunc):
            raise ConfigError(
                f"moe.score_func must be one of {typing.get_args(ScoreFunc)}, got {self.score_func!r}"
            )
        if self.dispatch not in typing.get_args(Dispatch):
            raise ConfigError(
                f"moe.dispatch must be one of {typing.get_args(Dispatch)}, got {self.dispatch!r}"
            )
        if self.capacity_factor <= 0:
            raise ConfigError(f"moe.capacity_factor must be > 0, got {self.capacity_factor}")


@dataclass(frozen=True)
class ModelConfig:
    """A decoder-only transformer: RMSNorm, RoPE, attention with document masks, SwiGLU or MoE FFN."""

    vocab_size: int = 256
    d_model: int = 64
    n_layers: int = 2
    n_heads: int = 4
    n_kv_heads: int = -1
    """Key/value heads (grouped-query attention); -1 means ``n_heads`` (plain multi-head attention)."""
    qk_norm: bool = False
    """RMSNorm on queries and keys per head before RoPE (stabilizes attention logits)."""
    rope_theta: float = 10000.0
    norm_eps: float = 1e-6
    dense_ffn_dim: int = 256
    """SwiGLU width of dense layers (all layers when ``moe`` is None, else the first ``n_dense_layers``)."""
    n_dense_layers: int = 0
    """Leading layers that use a dense FFN even when ``moe`` is set (DeepSeek keeps the first few dense)."""
    moe: MoEConfig | None = field(default_factory=MoEConfig)
    """The MoE FFN; None makes every layer dense."""
    tie_embeddings: bool = False
    init_std: float = 0.02
    attention: AttentionBackend = "auto"
    """``flex`` (FlexAttention block mask; CUDA), ``sdpa`` (SDPA with an explicit boolean mask; any device) or
    ``auto`` (flex on CUDA, sdpa elsewhere)."""

    def __post_init__(self) -> None:
        if self.d_model % self.n_heads:
            raise ConfigError(f"d_model ({self.d_model}) must be divisible by n_heads ({self.n_heads})")
        if self.head_dim % 2:
            raise ConfigError(f"head_dim = d_model / n_heads ({self.head_dim}) must be even for RoPE")
        if self.kv_heads < 1 or self.n_heads % self.kv_heads:
            raise ConfigError(
                f"n_heads ({self.n_heads}) must be a multiple of n_kv_heads ({self.n_kv_heads})"
            )
        if not 0 <= self.n_dense_layers <= self.n_layers:
            raise ConfigError(
                f"n_dense_layers ({self.n_dense_layers}) must be within [0, n_layers={self.n_layers}]"
            )
        if self.attention not in typing.get_args(AttentionBackend):
            raise ConfigError(
                f"attention must be one of {typing.get_args(AttentionBackend)}, got {self.attention!r}"
            )

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_heads

    @property
    def kv_heads(self) -> int:
        return self.n_heads if self.n_kv_heads == -1 else self.n_kv_heads

    def is_moe_layer(self, layer: int) -> bool:
        return self.moe is not None and layer >= self.n_dense_layers


@dataclass(frozen=True)
class OptimConfig:
    """AdamW with warmup and a cosine or warmup-stable-decay (WSD) schedule."""

    lr: float = 3e-4
    min_lr_ratio: float = 0.1
    """The final learning rate as a fraction of ``lr`` (cosine floor, WSD end point)."""
    warmup_steps: int = 100
    schedule: Schedule = "cosine"
    decay_fraction: float = 0.2
    """WSD only: the last fraction of the steps decays linearly to ``min_lr_ratio * lr``."""
    weight_decay: float = 0.1
    beta1: float = 0.9
    beta2: float = 0.95
    eps: float = 1e-8
    grad_clip: float = 1.0
    """Clip the global gradient norm to this; 0 disables clipping (the norm is still logged)."""

    def __post_init__(self) -> None:
        if self.schedule not in typing.get_args(Schedule):
            raise ConfigError(
                f"optim.schedule must be one of {typing.get_args(Schedule)}, got {self.schedule!r}"
            )
        if self.lr <= 0 or not 0 <= self.min_lr_ratio <= 1:
            raise ConfigError(f"optim.lr ({self.lr}) must be > 0 and optim.min_lr_ratio within [0, 1]")
        if not 0 < self.decay_fraction <= 1:
            raise ConfigError(f"optim.decay_fraction must be within (0, 1], got {self.decay_fraction}")


@dataclass(frozen=True)
class TrainConfig:
    """One training run. Every field is also a ``zephyr train`` flag (``--batch-size`` for ``batch_size``)."""

    data: str | dict[str, float] | None = None
    """Token-shard directory, or a mixture ``{dir: weight}``; None trains on a synthetic token stream."""
    preset: str = "tiny"
    """Named model preset (see ``zephyr.trainer.presets``); ``model`` overrides its fields."""
    model: dict[str, Any] = field(default_factory=dict)
    """Overrides of the preset's ``ModelConfig`` fields, e.g. ``{"moe": {"top_k": 2}, "qk_norm": True}``."""
    optim: OptimConfig = field(default_factory=OptimConfig)
    steps: int = 100
    batch_size: int = 8
    """Sequences per micro-batch per rank."""
    seq_len: int = 256
    grad_accum: int = 1
    """Micro-batches per optimizer step; the global batch is batch_size * grad_accum * world_size sequences."""
    device: str = "auto"
    """``auto``, ``cuda``, ``xpu``, ``cpu`` or ``xla`` (experimental)."""
    dtype: Literal["auto", "bf16", "fp32"] = "auto"
    """Autocast dtype: ``auto`` means bf16 where the device supports it, fp32 on CPU."""
    compile: bool = False
    """``torch.compile`` each transformer block separately."""
    seed: int = 0
    checkpoint_dir: str | None = None
    """Where step-N checkpoints go; an existing ``latest`` there is resumed."""
    checkpoint_every: int = 0
    """Save every K steps (and at the end); 0 saves only at the end (when checkpoint_dir is set)."""
    keep_checkpoints: int = 2
    """Checkpoints kept on disk; older ones are deleted after a successful save. 0 keeps all."""
    log: str | None = None
    """JSONL metrics file, one object per step."""
    tensorboard_dir: str | None = None
    spike_factor: float = 3.0
    """Warn when a step's loss exceeds this multiple of the running mean."""
    peak_tflops: float = 0.0
    """Peak dense TFLOPS per device for MFU; 0 looks it up from the device name (H100: 989 bf16)."""

    def __post_init__(self) -> None:
        for name in ("steps", "batch_size", "seq_len", "grad_accum"):
            if getattr(self, name) < 1:
                raise ConfigError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.checkpoint_every < 0:
            raise ConfigError(f"checkpoint_every must be >= 0, got {self.checkpoint_every}")
        if self.dtype not in ("auto", "bf16", "fp32"):
            raise ConfigError(f"dtype must be auto, bf16 or fp32, got {self.dtype!r}")

    # ---- construction ------------------------------------------------------------------------------------
    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> TrainConfig:
        """Build from plain data (parsed YAML/JSON); unknown keys raise naming the key."""
        raw = dict(raw)
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(raw) - known)
        if unknown:
            raise ConfigError(f"unknown training config keys {unknown}; known keys: {sorted(known)}")
        if isinstance(raw.get("optim"), dict):
            raw["optim"] = _from_dict(OptimConfig, raw["optim"], "optim")
        return cls(**raw)

    @classmethod
    def from_yaml(cls, path: str | Path) -> TrainConfig:
        """Read a YAML (or JSON) config file; PyYAML is imported only here."""
        text = Path(path).read_text()
        if str(path).endswith(".json"):
            raw = json.loads(text)
        else:
            try:
                import yaml
            except ImportError as exc:  # pragma: no cover - pyyaml is a project dependency
                raise ConfigError(f"reading {path} needs PyYAML: pip install pyyaml") from exc
            raw = yaml.safe_load(text) or {}
        if not isinstance(raw, dict):
            raise ConfigError(f"{path}: a training config must be a mapping of keys to values")
        return cls.from_dict(raw)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def _from_dict(cls: type, raw: dict[str, Any], where: str) -> Any:
    known = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(raw) - known)
    if unknown:
        raise ConfigError(f"unknown {where} keys {unknown}; known keys: {sorted(known)}")
    return cls(**raw)


def model_config_from_dict(raw: dict[str, Any], base: ModelConfig) -> ModelConfig:
    """Apply plain-data overrides (nested ``moe`` dict allowed; ``moe: null`` makes the model dense)."""
    raw = dict(raw)
    known = {f.name for f in dataclasses.fields(ModelConfig)}
    unknown = sorted(set(raw) - known)
    if unknown:
        raise ConfigError(f"unknown model keys {unknown}; known keys: {sorted(known)}")
    if "moe" in raw and isinstance(raw["moe"], dict):
        moe_base = base.moe or MoEConfig()
        moe_known = {f.name for f in dataclasses.fields(MoEConfig)}
        bad = sorted(set(raw["moe"]) - moe_known)
        if bad:
            raise ConfigError(f"unknown model.moe keys {bad}; known keys: {sorted(moe_known)}")
        raw["moe"] = dataclasses.replace(moe_base, **raw["moe"])
    return dataclasses.replace(base, **raw)
