"""Router maths, aux-loss-free bias balancing, and the three dispatch paths against each other."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from zephyr.trainer.config import MoEConfig
from zephyr.trainer.devices import DeviceInfo
from zephyr.trainer.moe import MoE, Router, sequence_balance_loss, update_expert_bias

from zephyr.errors import ConfigError

D = 32


def _moe(dispatch: str, **kw) -> MoE:
    torch.manual_seed(0)
    cfg = MoEConfig(num_experts=4, top_k=2, expert_ffn_dim=48, **kw)
    layer = MoE(D, cfg, dispatch)
    layer.reset_parameters(0.1, 0.1)
    return layer


def _run(layer: MoE, x: torch.Tensor) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    x = x.clone().requires_grad_(True)
    out, aux = layer(x)
    (out.square().sum() + aux).backward()
    grads = {n: p.grad.clone() for n, p in layer.named_parameters()}
    grads["x"] = x.grad
    layer.zero_grad()
    return out.detach(), grads


@pytest.mark.parametrize("score_func", ["softmax", "sigmoid"])
def test_bias_steers_selection_not_weights(score_func: str) -> None:
    router = Router(D, MoEConfig(num_experts=4, top_k=1, score_func=score_func))
    router.reset_parameters(0.1)
    x = torch.randn(1, 16, D)
    with torch.no_grad():
        logits = x.reshape(16, D) @ router.gate.weight.T
        scores = logits.softmax(-1) if score_func == "softmax" else logits.sigmoid()
        router.expert_bias.copy_(torch.tensor([0.0, 0.0, 10.0, 0.0]))  # expert 2 wins every token
    weights, experts, _ = router(x)
    assert (experts[:, 0] == 2).all()
    torch.testing.assert_close(weights[:, 0], scores[:, 2])  # weighted by the unbiased score


def test_route_norm_and_scale() -> None:
    router = Router(
        D, MoEConfig(num_experts=8, top_k=3, score_func="sigmoid", route_norm=True, route_scale=2.5)
    )
    router.reset_parameters(0.1)
    weights, experts, _ = router(torch.randn(2, 5, D))
    torch.testing.assert_close(weights.sum(-1), torch.full((10,), 2.5))
    assert experts.shape == (10, 3) and (experts.sort(-1).values.diff(dim=-1) > 0).all()  # distinct experts


def test_bias_update_moves_towards_balance_and_resets_counters() -> None:
    layer = _moe("loop", bias_update_rate=1e-3)
    layer.router.tokens_per_expert.copy_(torch.tensor([10.0, 2.0, 4.0, 0.0]))  # mean 4
    model = torch.nn.ModuleList([layer])
    stats = update_expert_bias(model)
    torch.testing.assert_close(layer.router.expert_bias, torch.tensor([-1e-3, 1e-3, 0.0, 1e-3]))
    torch.testing.assert_close(stats["load"][0], torch.tensor([10.0, 2.0, 4.0, 0.0]) / 16)
    assert layer.router.tokens_per_expert.sum() == 0
    # counters accumulate over forwards (micro-batches) until the update
    layer(torch.randn(2, 8, D))
    layer(torch.randn(2, 8, D))
    assert layer.router.tokens_per_expert.sum() == 2 * 16 * 2


def test_bias_balances_a_skewed_router() -> None:
    """Aux-loss-free balancing alone (no gradient) evens out a router that prefers one expert."""
    torch.manual_seed(0)
    layer = MoE(D, MoEConfig(num_experts=4, top_k=1, expert_ffn_dim=8, bias_update_rate=0.01), "loop")
    layer.reset_parameters(0.1, 0.1)
    u = torch.nn.functional.normalize(torch.randn(D), dim=0)
    with torch.no_grad():
        layer.router.gate.weight[0] += u  # expert 0's logit is higher by ~2 for every token below
    x = torch.randn(4, 64, D) + 2 * u
    model = torch.nn.ModuleList([layer])
    layer(x)
    first = update_expert_bias(model)["load"][0]
    for _ in range(300):
        layer(x)
        last = update_expert_bias(model)["load"][0]
    assert first.max() > 0.9
    assert last.max() < 0.35 and last.min() > 0.15, last


def test_sequence_balance_loss_is_one_at_perfect_balance() -> None:
    E, K, L = 4, 2, 4
    scores = torch.full((1, L, E), 1.0 / E)
    experts = torch.tensor([[[0, 1], [2, 3], [0, 1], [2, 3]]])
    assert sequence_balance_loss(scores, experts, E, K).item() == pytest.approx(1.0)
    skewed = torch.tensor([[[0, 1]] * L])
    peaked = torch.tensor([[[0.5, 0.5, 0.0, 0.0]] * L])
    assert sequence_balance_loss(peaked, skewed, E, K).item() == pytest.approx(2.0)


def test_balance_loss_has_gradient_to_the_router() -> None:
    layer = _moe("loop", balance_loss_weight=1e-2)
    _, aux = layer(torch.randn(2, 8, D))
    assert aux.item() > 0
    aux.backward()
    assert layer.router.gate.weight.grad.abs().sum() > 0


@pytest.mark.parametrize("shared", [0, 1])
def test_grouped_mm_equals_loop(shared: int) -> None:
    """torch._grouped_mm runs on CPU in torch 2.13 (fp32): the fast path matches the per-expert loop."""
    if not hasattr(torch, "_grouped_mm"):
        pytest.skip("torch._grouped_mm is missing in this torch")
    x = torch.randn(3, 10, D)
    out_loop, g_loop = _run(_moe("loop", num_shared_experts=shared), x)
    out_gmm, g_gmm = _run(_moe("grouped_mm", num_shared_experts=shared), x)
    torch.testing.assert_close(out_gmm, out_loop, rtol=1e-5, atol=1e-6)
    for name in g_loop:
        torch.testing.assert_close(g_gmm[name], g_loop[name], rtol=1e-5, atol=1e-6, msg=name)


def test_capacity_equals_dropless_when_nothing_is_dropped() -> None:
    x = torch.randn(2, 12, D)
    out_loop, g_loop = _run(_moe("loop"), x)
    layer = _moe("capacity", capacity_factor=4.0)  # capacity = all slots: nothing can drop
    out_cap, g_cap = _run(layer, x)
    assert layer.router.dropped_tokens.item() == 0
    torch.testing.assert_close(out_cap, out_loop, rtol=1e-5, atol=1e-6)
    for name in g_loop:
        torch.testing.assert_close(g_cap[name], g_loop[name], rtol=1e-5, atol=1e-6, msg=name)


def test_capacity_drops_and_counts_overflow() -> None:
    x = torch.randn(2, 16, D)
    layer = _moe("capacity", capacity_factor=0.5)  # C = ceil(0.5 * 64 / 4) = 8 slots per expert
    out, _ = layer(x)
    counts = layer.router.tokens_per_expert
    expected_drops = (counts - 8).clamp_min(0).sum()
    assert expected_drops > 0
    assert layer.router.dropped_tokens.item() == expected_drops.item()
    # a dropped slot contributes nothing: rebuild each token's output from the kept slots via the loop path
    reference = _moe("loop")
    weights, experts, _ = layer.router(x)
    flat = experts.reshape(-1)
    order = torch.argsort(flat, stable=True)
    rank = torch.empty_like(order)
    for e in range(4):
        idx = order[flat[order] == e]
        rank[idx] = torch.arange(len(idx))
    kept = (rank < 8).view(32, 2).float()
    ref = reference.route(x.reshape(32, D), weights * kept, experts)
    torch.testing.assert_close(out.reshape(32, D), ref, rtol=1e-5, atol=1e-6)


def test_xpu_falls_back_to_loop_and_xla_to_capacity() -> None:
    xpu = DeviceInfo("xpu", torch.device("cpu"), "xccl", True, "Intel Max 1550", None)
    xla = DeviceInfo("xla", torch.device("cpu"), "xla", True, "xla", None)
    assert xpu.default_dispatch() == "loop"
    assert xla.default_dispatch() == "capacity"


def test_moe_config_rejects_bad_values() -> None:
    with pytest.raises(ConfigError, match="top_k"):
        MoEConfig(num_experts=2, top_k=3)
    with pytest.raises(ConfigError, match="dispatch"):
        dataclasses.replace(MoEConfig(), dispatch="magic")
