"""Quantile Balancing (QB) of the MoE router: the expert bias that would have balanced the step, set each step.

Shape legend: T tokens, E routed experts, K experts per token.

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

import torch

__all__ = ["chunk_quantile_bias", "mean_quantile_bias"]


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
