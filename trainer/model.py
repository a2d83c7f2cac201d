"""The decoder-only MoE transformer and its parameter/FLOP accounting.

``build_model(cfg, device=..., dispatch=...)`` returns a ``Transformer`` whose ``forward(input_ids, positions)``
gives logits ``[B, L, V]`` and an auxiliary (balance) loss; ``Transformer.loss`` adds cross-entropy. Blocks are
kept in ``model.layers`` (a ``ModuleList``) so FSDP2 and ``torch.compile`` can wrap them one by one.

``count_params(cfg)`` gives total and *active* parameters: active = what one token multiplies with — every
non-expert parameter except the input embedding table, plus K routed experts and the shared experts, plus the
output head (torchtitan's convention in ``get_nparams_and_flops``). ``flops_per_token(cfg, seq_len)`` is the
training FLOPs per token used for MFU: ``6 · active + 12 · n_layers · d_model · seq_len`` (PaLM appendix B,
as in torchtitan's metrics: the attention term counts QK^T and AV, forward and backward, over the full
sequence — document masking is not credited).
"""

from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint
from zephyr.trainer.layers import (
    Attention,
    AttentionMask,
    RMSNorm,
    SwiGLU,
    build_attention_mask,
    rope_cos_sin,
)
from zephyr.trainer.model_config import ModelConfig
from zephyr.trainer.moe import MoE, recomputing_activations

__all__ = [
    "Transformer",
    "Block",
    "build_model",
    "count_params",
    "ParamCounts",
    "flops_per_token",
    "IGNORE_INDEX",
]

IGNORE_INDEX = -100
"""Labels equal to this are excluded from the loss (the loader may mask padding or document ends)."""


class Block(nn.Module):
    """Pre-norm block: ``x + attn(norm(x))`` then ``x + ffn(norm(x))``; the FFN is SwiGLU or MoE.

    ``checkpoint_activations``: keep only the block's input for the backward pass and recompute the rest there
    (``torch.utils.checkpoint``, non-reentrant): activation memory falls from every block's intermediates to
    one block's, for one more forward pass of compute.
    """

    checkpoint_activations: bool = False

    def __init__(self, cfg: ModelConfig, layer: int, dispatch: str) -> None:
        super().__init__()
        self.attn_norm = RMSNorm(cfg.d_model, cfg.norm_eps)
        self.attn = Attention(cfg.d_model, cfg.n_heads, cfg.kv_heads, cfg.qk_norm, cfg.norm_eps)
        self.ffn_norm = RMSNorm(cfg.d_model, cfg.norm_eps)
        if cfg.is_moe_layer(layer):
            assert cfg.moe is not None
            self.ffn: nn.Module = MoE(cfg.d_model, cfg.moe, dispatch)
        else:
            self.ffn = SwiGLU(cfg.d_model, cfg.dense_ffn_dim)

    def forward(
        self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, mask: AttentionMask
    ) -> tuple[torch.Tensor, torch.Tensor]:
        if not (self.checkpoint_activations and torch.is_grad_enabled()):
            return self._forward(x, cos, sin, mask)
        if torch.compiler.is_compiling():  # the compiled backward recomputes ops, never the counter updates
            return checkpoint(self._forward, x, cos, sin, mask, use_reentrant=False)
        return checkpoint(
            self._forward, x, cos, sin, mask, use_reentrant=False, context_fn=_recompute_context
        )

    def _forward(
        self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, mask: AttentionMask
    ) -> tuple[torch.Tensor, torch.Tensor]:
        x = x + self.attn(self.attn_norm(x), (cos, sin), mask)
        h = self.ffn_norm(x)
        if isinstance(self.ffn, MoE):
            out, aux = self.ffn(h)
        else:
            out, aux = self.ffn(h), x.new_zeros((), dtype=torch.float32)
        return x + out, aux


def _recompute_context() -> tuple[contextlib.AbstractContextManager, contextlib.AbstractContextManager]:
    """``torch.utils.checkpoint``'s ``context_fn``: nothing around the first forward, the router-counter guard
    around the recomputation."""
    return contextlib.nullcontext(), recomputing_activations()


class Transformer(nn.Module):
    def __init__(self, cfg: ModelConfig, dispatch: str = "loop", attention: str = "sdpa") -> None:
        super().__init__()
        self.cfg = cfg
        self.attention_backend = attention
        self.tok_embeddings = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.layers = nn.ModuleList(Block(cfg, i, dispatch) for i in range(cfg.n_layers))
        self.norm = RMSNorm(cfg.d_model, cfg.norm_eps)
        self.output = nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)
        if cfg.tie_embeddings:
            self.output.weight = self.tok_embeddings.weight

    @torch.no_grad()
    def reset_parameters(self) -> None:
        """Normal(0, init_std) weights; output projections of each block scaled by 1/sqrt(2·n_layers)."""
        std = self.cfg.init_std
        out_std = std / math.sqrt(2 * self.cfg.n_layers)
        nn.init.normal_(self.tok_embeddings.weight, std=std)
        for block in self.layers:
            for lin in (block.attn.wq, block.attn.wk, block.attn.wv):
                nn.init.normal_(lin.weight, std=std)
            nn.init.normal_(block.attn.wo.weight, std=out_std)
            for norm in (block.attn_norm, block.ffn_norm, block.attn.q_norm, block.attn.k_norm):
                if norm is not None:
                    norm.reset_parameters()
            if isinstance(block.ffn, MoE):
                block.ffn.reset_parameters(std, out_std)
            else:
                nn.init.normal_(block.ffn.w1.weight, std=std)
                nn.init.normal_(block.ffn.w3.weight, std=std)
                nn.init.normal_(block.ffn.w2.weight, std=out_std)
        self.norm.reset_parameters()
        if not self.cfg.tie_embeddings:
            nn.init.normal_(self.output.weight, std=1.0 / math.sqrt(self.cfg.d_model))

    def forward(
        self, input_ids_BL: torch.Tensor, positions_BL: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Logits ``[B, L, V]`` and the summed auxiliary loss of the MoE layers (0 when disabled)."""
        mask = build_attention_mask(positions_BL, self.attention_backend)
        cos, sin = rope_cos_sin(positions_BL, self.cfg.head_dim, self.cfg.rope_theta)
        x = self.tok_embeddings(input_ids_BL)
        aux_total = torch.zeros((), dtype=torch.float32, device=x.device)
        for block in self.layers:
            x, aux = block(x, cos, sin, mask)
            aux_total = aux_total + aux
        return self.output(self.norm(x)), aux_total

    @staticmethod
    def loss(logits_BLV: torch.Tensor, labels_BL: torch.Tensor) -> torch.Tensor:
        """Mean token cross-entropy in fp32, skipping ``IGNORE_INDEX`` labels."""
        return F.cross_entropy(
            logits_BLV.float().reshape(-1, logits_BLV.shape[-1]),
            labels_BL.reshape(-1),
            ignore_index=IGNORE_INDEX,
        )


def build_model(
    cfg: ModelConfig, *, device: torch.device | str = "cpu", dispatch: str = "loop", attention: str = "sdpa"
) -> Transformer:
    """Build and initialize a model on ``device`` (``meta`` builds without allocating, for counting)."""
    with torch.device(device):
        model = Transformer(cfg, dispatch=dispatch, attention=attention)
    if str(device) != "meta":
        model.reset_parameters()
    return model


@dataclass(frozen=True)
class ParamCounts:
    total: int
    """Every parameter (tied weights counted once)."""
    active: int
    """Parameters one token uses, without the input embedding table (the MFU numerator's 'N')."""
    embedding: int


def count_params(cfg: ModelConfig) -> ParamCounts:
    """Count total and active parameters by building the model on the meta device (no memory)."""
    model = build_model(cfg, device="meta")
    total = sum(p.numel() for p in model.parameters())
    embedding = model.tok_embeddings.weight.numel()
    inactive = 0
    for block in model.layers:
        if isinstance(block.ffn, MoE):
            per_expert = sum(p[0].numel() for p in block.ffn.experts.parameters())
            inactive += per_expert * (block.ffn.cfg.num_experts - block.ffn.cfg.top_k)
    active = total - inactive - (0 if cfg.tie_embeddings else embedding)
    return ParamCounts(total=total, active=active, embedding=embedding)


def flops_per_token(cfg: ModelConfig, seq_len: int) -> float:
    """Training FLOPs per token: ``6 · active params + 12 · n_layers · d_model · seq_len`` (see module doc)."""
    return 6.0 * count_params(cfg).active + 12.0 * cfg.n_layers * cfg.d_model * seq_len
