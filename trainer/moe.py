"""The feed-forward layers: SwiGLU (the dense FFN, the shared experts) and the mixture of experts (token-choice
top-k router, aux-loss-free or Quantile Balancing, three dispatch paths).

Shape legend: B batch, L sequence, T = B·L tokens, D model width, E routed experts, K experts per token,
F expert hidden width, S = T·K routed slots, N padded slots (grouped_mm), C slots per expert (capacity).

Router (fp32, autocast off): ``scores_TE = softmax(x W)`` or ``sigmoid(x W)``. Experts are *selected* with
``topk(scores + expert_bias)`` but *weighted* with the unbiased scores (DeepSeek-V3 §2.1.2, aux-loss-free load
balancing): the bias only steers selection. After each optimizer step ``update_expert_bias`` sets the bias from
what was observed since the last update (all-reduced across data-parallel ranks, so every rank keeps the same
bias): ``balance: bias`` moves every bias by ``rate · sign(mean_load − load)`` from the token counts;
``balance: quantile`` replaces it with the Quantile Balancing estimate (below), the mean
of the micro-batches' balancing biases; ``balance: aux`` leaves it at 0. An optional sequence-level balance loss
(DeepSeek-V3 eq. 17–20) ``α · Σ_e f_e P_e`` per sequence is returned as the layer's auxiliary loss.

Dispatch — all three compute the same function when no token is dropped:

* ``grouped_mm`` (dropless): slots are sorted by expert and scattered into a buffer where each expert's group
  starts at a multiple of 16 rows (the alignment grouped GEMM kernels need); one ``torch._grouped_mm`` per
  projection. Every shape is static (N = S + E·16), nothing syncs with the host — friendly to CUDA graphs and
  ``torch.compile``.
* ``loop`` (dropless): one matmul per expert over its contiguous slice; needs the group sizes on the host (one
  sync). The exact reference path and the fallback where grouped_mm is missing (XPU).
* ``capacity``: each expert takes at most C = ceil(capacity_factor·S/E) slots, earliest tokens first; the rest
  are dropped (their expert output is 0, the residual passes through) and counted in ``dropped_tokens``. Shapes
  are static for torch_xla; experts run as one ``bmm`` over ``[E, C, D]``.

The combine step is deterministic: each token's K expert outputs are put back in slot order and summed with
the routing weights, no atomics.

Quantile Balancing (QB, ``balance: quantile``): the expert bias that would have balanced the step, set each
step (``chunk_quantile_bias``, ``mean_quantile_bias``).

Source: Jianlin Su, "MoE Odyssey 6: Optimal Allocation for Equilibrium" (kexue.fm/archives/11619), which
derives the bias as the dual variable of the balanced assignment problem, and Marin's validation of it at
32B-A5B ("Mixture of Experts Quantile Balancing: Validated at 32B-A5B (1e22 FLOPs) Scale",
openathena.ai/blog/quantile-balancing/), which sums it up as two parts run after each step: for each token, the
score an expert needs to be activated; for each expert, the bias that would activate a balanced number of
tokens. The estimator (a quantile per chunk of tokens, averaged over the step's chunks) is the one Marin's MoE
runs use by default (marin-community/marin#8033, "chunk-quantile averaging"). Written here from those public
descriptions; no code was taken from them.

The rule. Selection is ``topk(s_t + b, K)`` over the experts' scores ``s_t`` and biases ``b``. Let ``α_t`` be
the (K+1)-th largest biased score of token t. Expert e is selected for t exactly when ``s_te + b_e > α_t``,
i.e. when ``b_e > r_te`` with ``r_te = α_t − s_te``, the bias e needs to win t. Perfect balance gives every
expert a share K/E of the tokens, so the balancing bias of e is the K/E-quantile of ``r_·e``: the value with
``n = round(T·K/E)`` of the chunk's ``r_te`` below it (the midpoint of the n-th and (n+1)-th smallest). Biases
are shift-invariant under top-k, so the result is centred (mean 0). A balanced bias is a fixed point: for each
e exactly its selected tokens have ``r_te < b_e``. Changing every bias at once moves the cutoffs ``α_t`` too, so
from a skewed start the load evens out over a few steps (the alternating scheme of Su's post). Unlike the
sign rule of aux-loss-free balancing (``bias += rate · sign(...)``, DeepSeek-V3) there is no rate to tune.

Estimation. Each training forward pass (a chunk: one micro-batch on one rank) adds its per-expert quantile to
a running sum and counts the chunk; the sums and counts add up across micro-batches and data-parallel ranks
(one all-reduce, like the load counters), and the new bias is their mean. Static shapes, no host sync. The bias
carries no gradient: routing weights stay the unbiased scores, so QB changes which experts are chosen, never the
gradient path through the chosen ones.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator

import torch
import torch.nn.functional as F
from torch import nn
from zephyr.trainer.config import MoEConfig


class SwiGLU(nn.Module):
    """``w2(silu(w1 x) * w3 x)`` (Shazeer 2020), the dense FFN and the shared-expert FFN."""

    def __init__(self, dim: int, hidden: int) -> None:
        super().__init__()
        self.w1 = nn.Linear(dim, hidden, bias=False)
        self.w3 = nn.Linear(dim, hidden, bias=False)
        self.w2 = nn.Linear(hidden, dim, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.w2(F.silu(self.w1(x)) * self.w3(x))

    def reset_parameters(self, std: float, out_std: float) -> None:
        nn.init.normal_(self.w1.weight, std=std)
        nn.init.normal_(self.w3.weight, std=std)
        nn.init.normal_(self.w2.weight, std=out_std)


GROUP_ALIGN_ROWS = 16
"""Each expert's group in the grouped_mm buffer starts at a multiple of this many rows (16 covers bf16/fp8)."""


_recomputing = False
"""True while activation checkpointing recomputes a block (``recomputing_activations``)."""


@contextlib.contextmanager
def recomputing_activations() -> Iterator[None]:
    """Mark a block's recomputation in the backward pass (activation checkpointing's second forward).

    The routers' counters (loads, dropped tokens, quantile estimates) were updated by the block's first
    forward; inside this context they are left alone, so every token is counted once.
    """
    global _recomputing
    before, _recomputing = _recomputing, True
    try:
        yield
    finally:
        _recomputing = before


class Router(nn.Module):
    """Token-choice top-k router with a selection-only expert bias (buffers: ``expert_bias``, load counters)."""

    def __init__(self, dim: int, cfg: MoEConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.gate = nn.Linear(dim, cfg.num_experts, bias=False)
        # Persistent: the bias is model state and goes into checkpoints.
        self.register_buffer("expert_bias", torch.zeros(cfg.num_experts, dtype=torch.float32))
        # Counters since the last bias update / metrics read; reset every optimizer step (not checkpointed:
        # checkpoints are taken right after an update, when they are zero).
        self.register_buffer(
            "tokens_per_expert", torch.zeros(cfg.num_experts, dtype=torch.float32), persistent=False
        )
        self.register_buffer("dropped_tokens", torch.zeros((), dtype=torch.float32), persistent=False)
        # Quantile Balancing: the sum of the micro-batches' balancing biases since the update, and their number.
        self.register_buffer(
            "quantile_bias_sum", torch.zeros(cfg.num_experts, dtype=torch.float32), persistent=False
        )
        self.register_buffer("quantile_chunks", torch.zeros((), dtype=torch.float32), persistent=False)

    def forward(self, x_BLD: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Return routing weights ``[T, K]`` (fp32), selected experts ``[T, K]`` and the balance loss (scalar)."""
        B, L, D = x_BLD.shape
        E, K = self.cfg.num_experts, self.cfg.top_k
        with torch.autocast(x_BLD.device.type, enabled=False):
            logits_TE = F.linear(x_BLD.reshape(B * L, D).float(), self.gate.weight.float())
            if self.cfg.score_func == "softmax":
                scores_TE = torch.softmax(logits_TE, dim=-1)
            else:
                scores_TE = torch.sigmoid(logits_TE)
            experts_TK = self._select(scores_TE)
            weights_TK = scores_TE.gather(1, experts_TK)
            if self.cfg.route_norm:
                weights_TK = weights_TK / weights_TK.sum(dim=-1, keepdim=True).clamp_min(1e-20)
            weights_TK = weights_TK * self.cfg.route_scale
            with torch.no_grad():
                counts_E = torch.zeros(E, dtype=torch.float32, device=x_BLD.device)
                counts_E.scatter_add_(
                    0, experts_TK.reshape(-1), torch.ones_like(experts_TK, dtype=torch.float32).reshape(-1)
                )
                if not _recomputing:
                    self.tokens_per_expert.add_(counts_E)
            if self.cfg.balance_loss_weight > 0 and self.training:
                aux = sequence_balance_loss(scores_TE.view(B, L, E), experts_TK.view(B, L, K), E, K)
                aux = aux * self.cfg.balance_loss_weight
            else:
                aux = logits_TE.new_zeros(())
        return weights_TK, experts_TK, aux

    def _select(self, scores_TE: torch.Tensor) -> torch.Tensor:
        """Top-K experts of the biased scores; under Quantile Balancing also record each token's cutoff."""
        K = self.cfg.top_k
        if self.cfg.balance != "quantile":
            return torch.topk(scores_TE + self.expert_bias, K, dim=-1).indices
        top = torch.topk(scores_TE + self.expert_bias, K + 1, dim=-1)
        if self.training and not _recomputing:
            self.quantile_bias_sum.add_(chunk_quantile_bias(top.values[:, K], scores_TE, K))
            self.quantile_chunks.add_(1.0)
        return top.indices[:, :K]

    def reset_parameters(self, std: float) -> None:
        nn.init.normal_(self.gate.weight, std=std)
        self.expert_bias.zero_()
        self.tokens_per_expert.zero_()
        self.dropped_tokens.zero_()


def sequence_balance_loss(
    scores_BLE: torch.Tensor, experts_BLK: torch.Tensor, E: int, K: int
) -> torch.Tensor:
    """DeepSeek-V3's sequence-wise balance loss without α: mean over sequences of ``Σ_e f_e · P_e``.

    ``f_e = E / (K·L) · #{tokens of the sequence routed to e}`` and ``P_e`` = mean over the sequence of the
    normalized scores. Perfect balance gives 1 for softmax scores.
    """
    B, L, _ = scores_BLE.shape
    probs_BLE = scores_BLE / scores_BLE.sum(dim=-1, keepdim=True).clamp_min(1e-20)
    counts_BE = torch.zeros(B, E, dtype=scores_BLE.dtype, device=scores_BLE.device)
    counts_BE.scatter_add_(
        1,
        experts_BLK.reshape(B, L * K),
        torch.ones(B, L * K, dtype=scores_BLE.dtype, device=scores_BLE.device),
    )
    f_BE = counts_BE * (E / (K * L))
    P_BE = probs_BLE.mean(dim=1)
    return (f_BE * P_BE).sum(dim=-1).mean()


class GroupedExperts(nn.Module):
    """E SwiGLU experts stored as 3-D weights in ``nn.Linear`` layout (``w1, w3: [E, F, D]``, ``w2: [E, D, F]``).

    The matmuls use the transposed views (``[E, D, F]`` column-major), the operand layout grouped GEMM kernels
    take without a copy.
    """

    def __init__(self, dim: int, hidden: int, num_experts: int) -> None:
        super().__init__()
        self.w1 = nn.Parameter(torch.empty(num_experts, hidden, dim))
        self.w3 = nn.Parameter(torch.empty(num_experts, hidden, dim))
        self.w2 = nn.Parameter(torch.empty(num_experts, dim, hidden))

    def reset_parameters(self, std: float, out_std: float) -> None:
        nn.init.normal_(self.w1, std=std)
        nn.init.normal_(self.w3, std=std)
        nn.init.normal_(self.w2, std=out_std)

    def _operands(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """``x`` in the compute dtype (autocast's, else its own) and the ``x @ w`` operands ``[E, D, F]``,
        ``[E, D, F]``, ``[E, F, D]`` in it (transposed views, no copy)."""
        device_type = x.device.type
        dtype = torch.get_autocast_dtype(device_type) if torch.is_autocast_enabled(device_type) else x.dtype
        w1, w3, w2 = [w.to(dtype).transpose(-2, -1) for w in (self.w1, self.w3, self.w2)]
        return x.to(dtype), w1, w3, w2

    def run_grouped_mm(self, x_ND: torch.Tensor, offsets_E: torch.Tensor) -> torch.Tensor:
        """Rows ``offsets[e-1]:offsets[e]`` of ``x`` go through expert e (int32 cumulative group ends)."""
        x, w1, w3, w2 = self._operands(x_ND)
        h = F.silu(torch._grouped_mm(x, w1, offs=offsets_E)) * torch._grouped_mm(x, w3, offs=offsets_E)
        return torch._grouped_mm(h, w2, offs=offsets_E)

    def run_loop(self, x_SD: torch.Tensor, counts: list[int]) -> torch.Tensor:
        """The reference: expert e takes the next ``counts[e]`` rows of ``x`` (sorted by expert)."""
        x, w1, w3, w2 = self._operands(x_SD)
        outs = []
        for e, chunk in enumerate(torch.split(x, counts, dim=0)):
            outs.append((F.silu(chunk @ w1[e]) * (chunk @ w3[e])) @ w2[e])
        return torch.cat(outs, dim=0)

    def run_batched(self, x_ECD: torch.Tensor) -> torch.Tensor:
        """Every expert over its fixed-capacity slice ``[E, C, D]`` with three ``bmm``s."""
        x, w1, w3, w2 = self._operands(x_ECD)
        return torch.bmm(F.silu(torch.bmm(x, w1)) * torch.bmm(x, w3), w2)


class MoE(nn.Module):
    """Router + routed experts (+ shared experts). ``forward`` returns the output and the auxiliary loss."""

    def __init__(self, dim: int, cfg: MoEConfig, dispatch: str) -> None:
        super().__init__()
        if dispatch not in ("grouped_mm", "loop", "capacity"):
            raise ValueError(f"resolve moe.dispatch before building the layer, got {dispatch!r}")
        self.cfg = cfg
        self.dispatch = dispatch
        self.router = Router(dim, cfg)
        self.experts = GroupedExperts(dim, cfg.expert_ffn_dim, cfg.num_experts)
        self.shared = (
            SwiGLU(dim, cfg.expert_ffn_dim * cfg.num_shared_experts) if cfg.num_shared_experts else None
        )

    def forward(self, x_BLD: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        B, L, D = x_BLD.shape
        x_TD = x_BLD.reshape(B * L, D)
        weights_TK, experts_TK, aux = self.router(x_BLD)
        routed_TD = self.route(x_TD, weights_TK, experts_TK)
        out = routed_TD.to(x_BLD.dtype) if routed_TD.dtype != x_BLD.dtype else routed_TD
        if self.shared is not None:
            out = out + self.shared(x_TD)
        return out.view(B, L, D), aux

    def route(self, x_TD: torch.Tensor, weights_TK: torch.Tensor, experts_TK: torch.Tensor) -> torch.Tensor:
        """Send each token to its K experts with the configured dispatch and combine the weighted outputs."""
        T, K = experts_TK.shape
        E = self.cfg.num_experts
        flat_S = experts_TK.reshape(-1)
        order_S = torch.argsort(flat_S, stable=True)  # slots grouped by expert, token order inside a group
        expert_of_slot_S = flat_S[order_S]
        token_of_slot_S = order_S // K
        counts_E = torch.zeros(E, dtype=torch.int64, device=x_TD.device)
        counts_E.scatter_add_(0, flat_S, torch.ones_like(flat_S))
        starts_E = torch.cumsum(counts_E, 0) - counts_E
        rank_in_group_S = torch.arange(T * K, device=x_TD.device) - starts_E[expert_of_slot_S]
        x_SD = x_TD[token_of_slot_S]

        if self.dispatch == "grouped_mm":
            padded_E = (counts_E + GROUP_ALIGN_ROWS - 1) // GROUP_ALIGN_ROWS * GROUP_ALIGN_ROWS
            ends_E = torch.cumsum(padded_E, 0)
            dest_S = (ends_E - padded_E)[expert_of_slot_S] + rank_in_group_S
            N = T * K + E * GROUP_ALIGN_ROWS  # static upper bound of sum(padded_E)
            buf_ND = x_SD.new_zeros(N, x_TD.shape[1]).index_copy(0, dest_S, x_SD)
            out_SD = self.experts.run_grouped_mm(buf_ND, ends_E.to(torch.int32))[dest_S]
        elif self.dispatch == "loop":
            out_SD = self.experts.run_loop(x_SD, counts_E.tolist())
        else:
            C = max(1, math.ceil(self.cfg.capacity_factor * T * K / E))
            keep_S = rank_in_group_S < C
            trash = E * C
            dest_S = torch.where(
                keep_S, expert_of_slot_S * C + rank_in_group_S, torch.full_like(rank_in_group_S, trash)
            )
            buf = x_SD.new_zeros(E * C + 1, x_TD.shape[1]).index_put((dest_S,), x_SD)
            out_ECD = self.experts.run_batched(buf[:trash].view(E, C, -1))
            out_ext = torch.cat([out_ECD.reshape(trash, -1), out_ECD.new_zeros(1, out_ECD.shape[-1])], dim=0)
            out_SD = out_ext[dest_S]
            if not _recomputing:
                with torch.no_grad():
                    self.router.dropped_tokens.add_((~keep_S).sum().to(torch.float32))

        # Deterministic combine: put slot outputs back in (token, k) order, weight, sum over k.
        slot_out = torch.empty_like(out_SD).index_copy(0, order_S, out_SD).view(T, K, -1)
        return (slot_out.float() * weights_TK[..., None]).sum(dim=1).to(out_SD.dtype)

    def reset_parameters(self, std: float, out_std: float) -> None:
        self.router.reset_parameters(std)
        self.experts.reset_parameters(std, out_std)
        if self.shared is not None:
            self.shared.reset_parameters(std, out_std)


def moe_layers(model: nn.Module) -> list[MoE]:
    return [m for m in model.modules() if isinstance(m, MoE)]


@torch.no_grad()
def update_expert_bias(model: nn.Module, *, all_reduce: bool = False) -> dict[str, torch.Tensor]:
    """Apply each layer's balancing (``moe.balance``) to what was observed since the last call, then reset.

    Returns device tensors for metrics (no host sync here): ``load [layers, E]`` (fraction of slots per
    expert), ``bias [layers, E]`` (after the update) and ``dropped`` (tokens dropped by capacity dispatch).
    With ``all_reduce`` the counts are summed over the default process group first, so every data-parallel
    rank applies the same update.
    """
    layers = moe_layers(model)
    if not layers:
        return {}
    counts_LE = torch.stack([m.router.tokens_per_expert for m in layers])
    dropped = torch.stack([m.router.dropped_tokens for m in layers]).sum()
    qsum_LE = torch.stack([m.router.quantile_bias_sum for m in layers])
    chunks_L = torch.stack([m.router.quantile_chunks for m in layers])
    if all_reduce:
        import torch.distributed as dist

        packed = torch.cat([counts_LE.reshape(-1), qsum_LE.reshape(-1), chunks_L, dropped.reshape(1)])
        dist.all_reduce(packed)
        counts_LE, qsum_LE, chunks_L, dropped = packed.split(
            [counts_LE.numel(), qsum_LE.numel(), len(layers), 1]
        )
        counts_LE, qsum_LE, dropped = (
            counts_LE.view(len(layers), -1),
            qsum_LE.view(len(layers), -1),
            dropped[0],
        )
    for i, m in enumerate(layers):
        router = m.router
        if m.cfg.balance == "quantile":
            router.expert_bias.copy_(mean_quantile_bias(qsum_LE[i], chunks_L[i], router.expert_bias))
            router.quantile_bias_sum.zero_()
            router.quantile_chunks.zero_()
        elif m.cfg.balance == "bias" and m.cfg.bias_update_rate > 0:
            load_E = counts_LE[i]
            router.expert_bias.add_(m.cfg.bias_update_rate * torch.sign(load_E.mean() - load_E))
        router.tokens_per_expert.zero_()
        router.dropped_tokens.zero_()
    load_LE = counts_LE / counts_LE.sum(dim=-1, keepdim=True).clamp_min(1.0)
    bias_LE = torch.stack([m.router.expert_bias for m in layers])
    return {"load": load_LE, "bias": bias_LE, "dropped": dropped}


@torch.no_grad()
def chunk_quantile_bias(cutoff_T: torch.Tensor, scores_TE: torch.Tensor, top_k: int) -> torch.Tensor:
    """The bias ``[E]`` (not centred) that gives each expert K/E of this chunk's T tokens.

    ``cutoff_T`` is each token's (K+1)-th largest biased score; ``scores_TE`` the unbiased scores.
    """
    T, E = scores_TE.shape
    r_ET = (cutoff_T.float()[:, None] - scores_TE.float()).T
    if T == 1:
        return r_ET[:, 0]
    n = min(max(round(T * top_k / E), 1), T - 1)
    smallest_En = torch.topk(r_ET, n + 1, dim=-1, largest=False).values  # sorted ascending
    return (smallest_En[:, n - 1] + smallest_En[:, n]) / 2


@torch.no_grad()
def mean_quantile_bias(sum_E: torch.Tensor, chunks: torch.Tensor, bias_E: torch.Tensor) -> torch.Tensor:
    """The centred mean of the chunks' biases; ``bias_E`` unchanged when no chunk was observed."""
    mean_E = sum_E / chunks.clamp_min(1.0)
    return torch.where(chunks > 0, mean_E - mean_E.mean(), bias_E)
