"""Transformer building blocks: RMSNorm, rotary embeddings, document-masked attention, SwiGLU.

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
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

__all__ = [
    "RMSNorm",
    "SwiGLU",
    "Attention",
    "AttentionMask",
    "document_ids",
    "build_attention_mask",
    "rope_cos_sin",
]


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


class SwiGLU(nn.Module):
    """``w2(silu(w1 x) * w3 x)`` (Shazeer 2020), the dense FFN and the shared-expert FFN."""

    def __init__(self, dim: int, hidden: int) -> None:
        super().__init__()
        self.w1 = nn.Linear(dim, hidden, bias=False)
        self.w3 = nn.Linear(dim, hidden, bias=False)
        self.w2 = nn.Linear(hidden, dim, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


def document_ids(positions_BL: torch.Tensor) -> torch.Tensor:
    """Number the documents of each row: a new document starts wherever ``positions == 0``.

    A row that begins mid-document (first position > 0) gets document 0 for that fragment, still distinct from
    the documents that follow.
    """
    return torch.cumsum((positions_BL == 0).to(torch.int32), dim=-1)


class AttentionMask:
    """The per-batch attention mask, built once per forward and shared by every layer."""

    def __init__(self, kind: str, mask: Any) -> None:
        self.kind = kind  # "sdpa" (bool tensor [B, 1, L, L]) or "flex" (BlockMask)
        self.mask = mask


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
        return AttentionMask("flex", block)
    causal_LL = torch.ones(L, L, dtype=torch.bool, device=positions_BL.device).tril()
    same_doc_BLL = doc_BL[:, :, None] == doc_BL[:, None, :]
    return AttentionMask("sdpa", (same_doc_BLL & causal_LL)[:, None])


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
        if mask.kind == "flex":
            out = _flex_attention(q, k, v, mask.mask, gqa)
        else:
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask.mask, enable_gqa=gqa)
        return self.wo(out.transpose(1, 2).reshape(B, L, -1))
