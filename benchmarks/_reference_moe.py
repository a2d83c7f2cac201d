"""The peer of zephyr's MFU: a plain compiled torch MoE transformer of the same shape, in one page.

DESIGN.md §7's reference point (26% MFU, 226k tokens/s on one H100 for moe-785m at 16×2048, bf16, compiled)
came from "a plain compiled torch harness"; this is that harness, written the way a torch user would without
zephyr: pre-norm blocks (``nn.RMSNorm``), RoPE, causal SDPA (flash attention on CUDA; no document mask), a
softmax/sigmoid top-k router in fp32, SwiGLU experts, fused AdamW, bf16 autocast, ``torch.compile`` per block.
The experts run either as ``torch._grouped_mm`` over tokens sorted by expert, each group padded to 16 rows
as grouped GEMM kernels need (torchtitan's ``_run_experts_grouped_mm`` does the same), or as a loop over
experts on their slices (its ``_run_experts_for_loop``, one host sync per layer for the group sizes).
Nothing of zephyr's trainer is used, so the ratio of the two tokens/s says what the trainer itself adds.

Its parameters match zephyr's for the same ``ModelConfig`` one for one (attention ``wq wk wv wo``, two norms
per block, router gate, expert ``w1 w3 w2``, shared experts, final norm, untied head), so the MFU formula
(6 × active non-embedding params + 12 · layers · d_model · seq_len) gives both the same FLOPs per token;
``active_params`` counts them independently of zephyr's ``count_params``.

    T tokens, D model width, E experts, K experts per token, F expert width, N padded rows
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

__all__ = ["ReferenceMoE", "active_params", "reference_step", "unsupported"]

ALIGN_ROWS = 16


def unsupported(cfg) -> list[str]:  # noqa: ANN001 - a zephyr ModelConfig (not imported: the peer stands alone)
    """What in ``cfg`` this plain model does not build (it would compute another function)."""
    problems = []
    if cfg.moe is None:
        problems.append("a dense model (moe: null)")
    if cfg.qk_norm:
        problems.append("qk_norm")
    if cfg.kv_heads != cfg.n_heads:
        problems.append("grouped-query attention (n_kv_heads)")
    if cfg.n_dense_layers:
        problems.append("leading dense layers (n_dense_layers)")
    if cfg.tie_embeddings:
        problems.append("tied embeddings")
    return problems


def _rope(x_BLHd: torch.Tensor, cos_Ld: torch.Tensor, sin_Ld: torch.Tensor) -> torch.Tensor:
    a, b = x_BLHd.float().chunk(2, dim=-1)
    cos, sin = cos_Ld[:, None], sin_Ld[:, None]
    return torch.cat([a * cos - b * sin, a * sin + b * cos], dim=-1).type_as(x_BLHd)


class _Experts(nn.Module):
    """E SwiGLU experts as 3-D weights in ``nn.Linear`` layout (``w1, w3: [E, F, D]``, ``w2: [E, D, F]``),
    multiplied through their transposed views, the operand layout grouped GEMM kernels take as is."""

    def __init__(self, d: int, f: int, e: int, dispatch: str) -> None:
        super().__init__()
        self.dispatch = dispatch
        self.w1 = nn.Parameter(torch.randn(e, f, d) * 0.02)
        self.w3 = nn.Parameter(torch.randn(e, f, d) * 0.02)
        self.w2 = nn.Parameter(torch.randn(e, d, f) * 0.02)

    def forward(self, x_SD: torch.Tensor, expert_S: torch.Tensor, counts_E: torch.Tensor) -> torch.Tensor:
        """Rows of ``x`` sorted by expert (``expert_S``), ``counts_E`` rows per expert."""
        on = x_SD.device.type
        dtype = torch.get_autocast_dtype(on) if torch.is_autocast_enabled(on) else x_SD.dtype
        w1, w3, w2 = (w.to(dtype).transpose(-2, -1) for w in (self.w1, self.w3, self.w2))
        x_SD = x_SD.to(dtype)
        if self.dispatch == "loop":
            chunks = torch.split(x_SD, counts_E.tolist())
            return torch.cat([(F.silu(c @ w1[e]) * (c @ w3[e])) @ w2[e] for e, c in enumerate(chunks)])
        S = x_SD.shape[0]
        padded_E = (counts_E + ALIGN_ROWS - 1) // ALIGN_ROWS * ALIGN_ROWS
        ends_E = torch.cumsum(padded_E, 0)
        rank_S = torch.arange(S, device=x_SD.device) - (torch.cumsum(counts_E, 0) - counts_E)[expert_S]
        dest_S = (ends_E - padded_E)[expert_S] + rank_S
        buf_ND = x_SD.new_zeros(S + counts_E.shape[0] * ALIGN_ROWS, x_SD.shape[1]).index_copy(0, dest_S, x_SD)
        offs = ends_E.to(torch.int32)
        h = F.silu(torch._grouped_mm(buf_ND, w1, offs=offs)) * torch._grouped_mm(buf_ND, w3, offs=offs)
        return torch._grouped_mm(h, w2, offs=offs)[dest_S]


class _MoE(nn.Module):
    def __init__(self, d: int, moe, dispatch: str) -> None:  # noqa: ANN001
        super().__init__()
        self.k, self.score, self.route_norm = moe.top_k, moe.score_func, moe.route_norm
        self.route_scale = moe.route_scale
        self.gate = nn.Linear(d, moe.num_experts, bias=False)
        self.experts = _Experts(d, moe.expert_ffn_dim, moe.num_experts, dispatch)
        width = moe.expert_ffn_dim * moe.num_shared_experts
        self.shared = _SwiGLU(d, width) if width else None

    def forward(self, x_BLD: torch.Tensor) -> torch.Tensor:
        B, L, D = x_BLD.shape
        x_TD = x_BLD.reshape(B * L, D)
        logits_TE = F.linear(x_TD.float(), self.gate.weight.float())
        scores_TE = logits_TE.softmax(-1) if self.score == "softmax" else logits_TE.sigmoid()
        weights_TK, experts_TK = scores_TE.topk(self.k, dim=-1)
        if self.route_norm:
            weights_TK = weights_TK / weights_TK.sum(-1, keepdim=True)
        weights_TK = weights_TK * self.route_scale
        flat_S = experts_TK.reshape(-1)
        order_S = flat_S.argsort(stable=True)
        counts_E = torch.zeros(scores_TE.shape[1], dtype=torch.int64, device=x_BLD.device)
        counts_E = counts_E.scatter_add(0, flat_S, torch.ones_like(flat_S))
        out_SD = self.experts(x_TD[order_S // self.k], flat_S[order_S], counts_E)
        slots_TKD = torch.empty_like(out_SD).index_copy(0, order_S, out_SD).view(B * L, self.k, D)
        out_TD = (slots_TKD.float() * weights_TK[..., None]).sum(1).to(out_SD.dtype)
        if self.shared is not None:
            out_TD = out_TD + self.shared(x_TD)
        return out_TD.view(B, L, D)


class _SwiGLU(nn.Module):
    def __init__(self, d: int, f: int) -> None:
        super().__init__()
        self.w1, self.w3, self.w2 = (
            nn.Linear(d, f, bias=False),
            nn.Linear(d, f, bias=False),
            nn.Linear(f, d, bias=False),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class _Block(nn.Module):
    def __init__(self, cfg, dispatch: str) -> None:  # noqa: ANN001
        super().__init__()
        d, self.heads = cfg.d_model, cfg.n_heads
        self.attn_norm, self.ffn_norm = nn.RMSNorm(d, eps=cfg.norm_eps), nn.RMSNorm(d, eps=cfg.norm_eps)
        self.wq, self.wk, self.wv, self.wo = (nn.Linear(d, d, bias=False) for _ in range(4))
        self.moe = _MoE(d, cfg.moe, dispatch)

    def forward(self, x_BLD: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        B, L, D = x_BLD.shape
        h = self.attn_norm(x_BLD)
        q, k, v = (w(h).view(B, L, self.heads, D // self.heads) for w in (self.wq, self.wk, self.wv))
        q, k = _rope(q, cos, sin), _rope(k, cos, sin)
        a = F.scaled_dot_product_attention(
            q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True
        )
        x_BLD = x_BLD + self.wo(a.transpose(1, 2).reshape(B, L, D))
        return x_BLD + self.moe(self.ffn_norm(x_BLD))


class ReferenceMoE(nn.Module):
    """Token embedding, ``n_layers`` MoE blocks, final norm, untied output head (see the module docstring)."""

    def __init__(self, cfg, *, dispatch: str = "grouped_mm") -> None:  # noqa: ANN001
        super().__init__()
        if problems := unsupported(cfg):
            raise ValueError(f"the reference model does not build {', '.join(problems)}")
        self.cfg = cfg
        self.embed = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.blocks = nn.ModuleList(_Block(cfg, dispatch) for _ in range(cfg.n_layers))
        self.norm = nn.RMSNorm(cfg.d_model, eps=cfg.norm_eps)
        self.head = nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)
        nn.init.normal_(self.embed.weight, std=0.02)
        nn.init.normal_(self.head.weight, std=1 / math.sqrt(cfg.d_model))

    def forward(self, ids_BL: torch.Tensor, labels_BL: torch.Tensor) -> torch.Tensor:
        L, hd = ids_BL.shape[1], self.cfg.d_model // self.cfg.n_heads
        inv = 1.0 / self.cfg.rope_theta ** (torch.arange(0, hd, 2, device=ids_BL.device).float() / hd)
        angles = torch.outer(torch.arange(L, device=ids_BL.device).float(), inv)
        cos, sin = angles.cos(), angles.sin()
        x = self.embed(ids_BL)
        for block in self.blocks:
            x = block(x, cos, sin)
        logits = self.head(self.norm(x))
        return F.cross_entropy(logits.float().flatten(0, 1), labels_BL.flatten())


def active_params(model: ReferenceMoE) -> int:
    """Parameters one token touches, without the input embedding: the MFU numerator's N."""
    cfg = model.cfg
    total = sum(p.numel() for p in model.parameters())
    per_expert = sum(p[0].numel() for p in model.blocks[0].moe.experts.parameters())
    return (
        total - model.embed.weight.numel() - cfg.n_layers * per_expert * (cfg.moe.num_experts - cfg.moe.top_k)
    )


def reference_step(
    model: ReferenceMoE,
    optimizer: torch.optim.Optimizer,
    ids_BL: torch.Tensor,
    labels_BL: torch.Tensor,
    autocast,
) -> torch.Tensor:  # noqa: ANN001
    """Forward, backward, clip at 1.0, AdamW: the loss as a device tensor (nothing read on the host)."""
    with autocast:
        loss = model(ids_BL, labels_BL)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0, foreach=True)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return loss.detach()
