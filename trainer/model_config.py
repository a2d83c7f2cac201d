"""The model's configuration: ``ModelConfig`` (the transformer) and ``MoEConfig`` (its mixture-of-experts FFN).

Frozen, serializable data, checked in ``__post_init__`` by ``zephyr.config``. Kept apart from the
training run's ``zephyr.trainer.config`` because the named presets (``zephyr.trainer.presets``) are built from
these classes while ``TrainConfig`` checks its ``preset`` against them: while these classes lived in ``config``,
config and presets imported each other. ``ModelConfig.build()`` is consumed by ``zephyr.trainer.model.build_model``.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Literal

from zephyr.config import ConfigProblems, check_fields, field_hints, ranged_field, unknown_keys

__all__ = [
    "MoEConfig",
    "ModelConfig",
    "ScoreFunc",
    "Dispatch",
    "AttentionBackend",
    "Balance",
    "model_config_from_dict",
]


ScoreFunc = Literal["softmax", "sigmoid"]
Dispatch = Literal["auto", "grouped_mm", "loop", "capacity"]
AttentionBackend = Literal["auto", "flex", "sdpa"]
Balance = Literal["bias", "quantile", "aux"]


@dataclass(frozen=True)
class MoEConfig:
    """The mixture-of-experts feed-forward layer (token-choice top-k routing)."""

    num_experts: int = ranged_field(1, default=8)
    """Routed experts per MoE layer (E)."""
    top_k: int = ranged_field(1, default=2)
    """Experts each token is sent to (K)."""
    expert_ffn_dim: int = ranged_field(1, default=64)
    """Hidden width of one SwiGLU expert."""
    num_shared_experts: int = ranged_field(0, default=0)
    """Experts every token passes through (DeepSeek-style); 0 disables them. They share one SwiGLU of width
    ``num_shared_experts * expert_ffn_dim``."""
    score_func: ScoreFunc = "softmax"
    """Router scoring: ``softmax`` over experts or an independent ``sigmoid`` per expert (DeepSeek-V3)."""
    route_norm: bool = False
    """Renormalize the K selected scores to sum to 1 (DeepSeek-V3 does this with sigmoid scoring)."""
    route_scale: float = ranged_field(0, low_open=True, default=1.0)
    """Multiplier on the routing weights."""
    balance: Balance = "bias"
    """How expert load is balanced. ``bias``: aux-loss-free balancing (DeepSeek-V3), each step every expert bias
    moves by ``bias_update_rate`` towards balance. ``quantile``: Quantile Balancing (``zephyr.trainer.balance``),
    each step the bias is set to the one that would have balanced that step's tokens; no rate to tune.
    ``aux``: no bias, the sequence-level balance loss alone (needs ``balance_loss_weight`` > 0). The balance
    loss can be added to ``bias`` and ``quantile`` too."""
    bias_update_rate: float = ranged_field(0, default=1e-3)
    """``balance: bias`` only: after each optimizer step every expert bias moves by this amount towards balance,
    ``bias += rate * sign(mean_load - load)``. 0 disables it (the bias stays 0)."""
    balance_loss_weight: float = ranged_field(0, default=0.0)
    """Weight α of the sequence-level balance loss (DeepSeek-V3 eq. 17-20); 0 disables it. Keep it tiny (1e-4)."""
    dispatch: Dispatch = "auto"
    """``grouped_mm`` (dropless, one ``torch._grouped_mm`` per projection), ``loop`` (dropless, one matmul per
    expert; the exact fallback for devices without grouped_mm such as XPU), ``capacity`` (fixed expert capacity,
    static shapes for torch_xla; overflow tokens are dropped and counted) or ``auto`` (chosen by device)."""
    capacity_factor: float = ranged_field(0, low_open=True, default=1.25)
    """``capacity`` dispatch only: slots per expert = ceil(capacity_factor * tokens * K / E)."""

    def __post_init__(self) -> None:
        check_fields(self, "model.moe.", self._rules)

    def _rules(self) -> list[str]:
        if self.top_k > self.num_experts:
            return [f"model.moe.top_k ({self.top_k}) must be <= model.moe.num_experts ({self.num_experts})"]
        if self.balance == "quantile" and self.top_k == self.num_experts:
            return [
                f"model.moe.balance=quantile needs model.moe.top_k ({self.top_k}) < model.moe.num_experts "
                f"({self.num_experts}): with every expert chosen there is nothing to balance"
            ]
        if self.balance == "aux" and self.balance_loss_weight == 0:
            return [
                "model.moe.balance=aux needs model.moe.balance_loss_weight > 0 (it is the only balancing), "
                "e.g. --balance-loss-weight 1.0e-3"
            ]
        return []


@dataclass(frozen=True)
class ModelConfig:
    """A decoder-only transformer: RMSNorm, RoPE, attention with document masks, SwiGLU or MoE FFN."""

    vocab_size: int = ranged_field(1, default=256)
    d_model: int = ranged_field(1, default=64)
    n_layers: int = ranged_field(1, default=2)
    n_heads: int = ranged_field(1, default=4)
    n_kv_heads: int = ranged_field(1, sentinel=-1, default=-1)
    """Key/value heads (grouped-query attention); -1 means ``n_heads`` (plain multi-head attention)."""
    qk_norm: bool = False
    """RMSNorm on queries and keys per head before RoPE (stabilizes attention logits)."""
    rope_theta: float = ranged_field(0, low_open=True, default=10000.0)
    norm_eps: float = ranged_field(0, low_open=True, default=1e-6)
    dense_ffn_dim: int = ranged_field(1, default=256)
    """SwiGLU width of dense layers (all layers when ``moe`` is None, else the first ``n_dense_layers``)."""
    n_dense_layers: int = ranged_field(0, default=0)
    """Leading layers that use a dense FFN even when ``moe`` is set (DeepSeek keeps the first few dense)."""
    moe: MoEConfig | None = field(default_factory=MoEConfig)
    """The MoE FFN; None makes every layer dense."""
    tie_embeddings: bool = False
    init_std: float = ranged_field(0, low_open=True, default=0.02)
    attention: AttentionBackend = "auto"
    """``flex`` (FlexAttention block mask; CUDA), ``sdpa`` (SDPA with an explicit boolean mask; any device) or
    ``auto`` (flex on CUDA, sdpa elsewhere)."""

    def __post_init__(self) -> None:
        check_fields(self, "model.", self._rules)

    def _rules(self) -> list[str]:
        problems = []
        if self.d_model % self.n_heads:
            problems.append(
                f"model.d_model ({self.d_model}) must be divisible by model.n_heads ({self.n_heads})"
            )
        elif self.head_dim % 2:
            problems.append(
                f"model.d_model / model.n_heads ({self.d_model} / {self.n_heads} = {self.head_dim}) must be even "
                "for RoPE"
            )
        if self.n_heads % self.kv_heads:
            problems.append(
                f"model.n_heads ({self.n_heads}) must be a multiple of model.n_kv_heads ({self.n_kv_heads})"
            )
        if self.n_dense_layers > self.n_layers:
            problems.append(
                f"model.n_dense_layers ({self.n_dense_layers}) must be <= model.n_layers ({self.n_layers})"
            )
        return problems

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_heads

    @property
    def kv_heads(self) -> int:
        return self.n_heads if self.n_kv_heads == -1 else self.n_kv_heads

    def is_moe_layer(self, layer: int) -> bool:
        return self.moe is not None and layer >= self.n_dense_layers


def model_config_from_dict(raw: dict[str, Any], base: ModelConfig) -> ModelConfig:
    """Apply plain-data overrides (nested ``moe`` dict allowed; ``moe: null`` makes the model dense); raises one
    ``ConfigProblems`` listing every bad key."""
    problems = unknown_keys(raw, ModelConfig, "model.")
    values = {k: v for k, v in raw.items() if k in field_hints(ModelConfig)}
    if isinstance(values.get("moe"), dict):
        moe = values["moe"]
        problems += unknown_keys(moe, MoEConfig, "model.moe.")
        try:
            values["moe"] = dataclasses.replace(
                base.moe or MoEConfig(), **{k: v for k, v in moe.items() if k in field_hints(MoEConfig)}
            )
        except ConfigProblems as exc:
            problems += exc.problems
            values["moe"] = base.moe  # stands in, so the other keys are still checked
    try:
        model = dataclasses.replace(base, **values)
    except ConfigProblems as exc:
        problems += exc.problems
    if problems:
        raise ConfigProblems(problems)
    return model
