"""The decoder-only MoE transformer, its building blocks, and its parameter/FLOP accounting.

``build_model(cfg, device=..., dispatch=...)`` returns a ``Transformer`` whose ``forward(input_ids, positions)``
gives logits ``[B, L, V]`` and an auxiliary (balance) loss; ``Transformer.loss`` adds cross-entropy. Blocks are
kept in ``model.layers`` (a ``ModuleList``) so FSDP2 and ``torch.compile`` can wrap them one by one. Each block
is RMSNorm, document-masked attention with rotary embeddings, RMSNorm and a feed-forward layer (SwiGLU or the
mixture of experts, ``zephyr.trainer.moe``).

Shape legend: B batch, L sequence, D model width, H query heads, G key/value heads, Q head width, F FFN width.

Document masking: the loader yields ``positions`` (position within its document, 0 at each document start).
``document_ids(positions_BL)`` turns them into a per-token document number, and a query attends to a key only
when both are in the same document and the key is not in the future. Rotary embeddings use the same
within-document positions, so a document packed mid-sequence is computed exactly as if it started at 0.

Two attention backends compute the same function:

* ``flex``: FlexAttention with a block-sparse mask (CUDA; skips fully-masked blocks, so packing many short
  documents costs less than causal attention over the whole sequence);
* ``sdpa``: ``scaled_dot_product_attention`` with an explicit ``[B, 1, L, L]`` boolean mask (any device; the
  portable, obviously-correct fallback — memory grows with L²).

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
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint
from zephyr.trainer.config import ModelConfig
from zephyr.trainer.moe import MoE, SwiGLU, recomputing_activations


class RMSNorm(nn.Module):
    """Root-mean-square norm with a learned scale, computed in fp32 for stability under bf16 autocast."""

    def __init__(self, dim: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.rms_norm(x.float(), (x.shape[-1],), self.weight.float(), self.eps).type_as(x)

    def reset_parameters(self) -> None:
        nn.init.ones_(self.weight)


def document_ids(positions_BL: torch.Tensor) -> torch.Tensor:
    """Number the documents of each row: a new document starts wherever ``positions == 0``.

    A row that begins mid-document (first position > 0) gets document 0 for that fragment, still distinct from
    the documents that follow.
    """
    return torch.cumsum((positions_BL == 0).to(torch.int32), dim=-1)


# The per-batch attention mask, built once per forward and shared by every layer: a boolean tensor
# [B, 1, L, L] for SDPA, FlexAttention's BlockMask for flex.
AttentionMask = Any


def build_attention_mask(positions_BL: torch.Tensor, backend: str) -> AttentionMask:
    """Causal and same-document mask for ``backend`` (``flex`` or ``sdpa``)."""
    doc_BL = document_ids(positions_BL)
    B, L = doc_BL.shape
    if backend == "flex":
        from torch.nn.attention.flex_attention import create_block_mask

        def same_doc_causal(b, h, q_idx, kv_idx):  # noqa: ANN001 - FlexAttention's mask_mod signature
            return (doc_BL[b, q_idx] == doc_BL[b, kv_idx]) & (q_idx >= kv_idx)

        block = create_block_mask(
            same_doc_causal,
            B,
            None,
            L,
            L,
            device=positions_BL.device,
            _compile=positions_BL.device.type == "cuda",
        )
        return block
    causal_LL = torch.ones(L, L, dtype=torch.bool, device=positions_BL.device).tril()
    same_doc_BLL = doc_BL[:, :, None] == doc_BL[:, None, :]
    return (same_doc_BLL & causal_LL)[:, None]


_compiled_flex: Any = None


def _flex_attention(q, k, v, block_mask, enable_gqa: bool):  # noqa: ANN001, ANN202
    """FlexAttention compiled once per process (eager flex is a slow reference implementation)."""
    global _compiled_flex
    from torch.nn.attention.flex_attention import flex_attention

    if torch.compiler.is_compiling():  # inside a compiled block: dynamo compiles flex itself
        return flex_attention(q, k, v, block_mask=block_mask, enable_gqa=enable_gqa)
    if _compiled_flex is None:
        _compiled_flex = torch.compile(flex_attention)
    return _compiled_flex(q, k, v, block_mask=block_mask, enable_gqa=enable_gqa)


def rope_cos_sin(
    positions_BL: torch.Tensor, head_dim: int, theta: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """Rotary cos/sin tables ``[B, 1, L, Q/2]`` in fp32 for the given (within-document) positions."""
    inv_freq = 1.0 / (
        theta ** (torch.arange(0, head_dim, 2, device=positions_BL.device, dtype=torch.float32) / head_dim)
    )
    angles_BLq = positions_BL.to(torch.float32)[..., None] * inv_freq
    return angles_BLq.cos()[:, None], angles_BLq.sin()[:, None]


def _apply_rope(x_BHLQ: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    x = x_BHLQ.float()
    x1, x2 = x.chunk(2, dim=-1)
    out = torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)
    return out.type_as(x_BHLQ)


class Attention(nn.Module):
    """Multi-head (or grouped-query) self-attention with RoPE, optional QK-norm and document masking."""

    def __init__(self, dim: int, n_heads: int, n_kv_heads: int, qk_norm: bool, norm_eps: float) -> None:
        super().__init__()
        self.n_heads = n_heads
        self.n_kv_heads = n_kv_heads
        self.head_dim = dim // n_heads
        self.wq = nn.Linear(dim, n_heads * self.head_dim, bias=False)
        self.wk = nn.Linear(dim, n_kv_heads * self.head_dim, bias=False)
        self.wv = nn.Linear(dim, n_kv_heads * self.head_dim, bias=False)
        self.wo = nn.Linear(n_heads * self.head_dim, dim, bias=False)
        self.q_norm = RMSNorm(self.head_dim, norm_eps) if qk_norm else None
        self.k_norm = RMSNorm(self.head_dim, norm_eps) if qk_norm else None

    def forward(
        self, x_BLD: torch.Tensor, rope: tuple[torch.Tensor, torch.Tensor], mask: AttentionMask
    ) -> torch.Tensor:
        B, L, _ = x_BLD.shape
        q = self.wq(x_BLD).view(B, L, self.n_heads, self.head_dim).transpose(1, 2)
        k = self.wk(x_BLD).view(B, L, self.n_kv_heads, self.head_dim).transpose(1, 2)
        v = self.wv(x_BLD).view(B, L, self.n_kv_heads, self.head_dim).transpose(1, 2)
        if self.q_norm is not None:
            q, k = self.q_norm(q), self.k_norm(k)
        cos, sin = rope
        q, k = _apply_rope(q, cos, sin), _apply_rope(k, cos, sin)
        gqa = self.n_kv_heads != self.n_heads
        if isinstance(mask, torch.Tensor):
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=gqa)
        else:  # a BlockMask
            out = _flex_attention(q, k, v, mask, gqa)
        return self.wo(out.transpose(1, 2).reshape(B, L, -1))


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
            block.ffn.reset_parameters(std, out_std)  # SwiGLU or MoE
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
    return ParamCounts(total=total, active=active)


def flops_per_token(cfg: ModelConfig, seq_len: int) -> float:
    """Training FLOPs per token: ``6 · active params + 12 · n_layers · d_model · seq_len`` (see module doc)."""
    return 6.0 * count_params(cfg).active + 12.0 * cfg.n_layers * cfg.d_model * seq_len
