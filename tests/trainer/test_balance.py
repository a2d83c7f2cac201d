"""Quantile Balancing (``moe.balance: quantile``): the bias that would have balanced the step, set each step."""

from __future__ import annotations

import json
import math
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from zephyr.trainer.config import MoEConfig
from zephyr.trainer.moe import MoE, Router, chunk_quantile_bias, mean_quantile_bias, update_expert_bias

from zephyr.errors import ConfigError

D = 32


def _entropy(load_E: torch.Tensor) -> float:
    """Normalized entropy of a load vector (1 = uniform), as the training log's ``load_entropy``."""
    p = load_E / load_E.sum()
    return float(-(p * p.clamp_min(1e-12).log()).sum() / math.log(len(p)))


def _skewed_layer(balance: str, **kw) -> tuple[MoE, torch.Tensor]:
    """A router whose expert 0 beats the others by ~2 logits on every token of the returned batch."""
    torch.manual_seed(0)
    layer = MoE(D, MoEConfig(num_experts=4, top_k=1, expert_ffn_dim=8, balance=balance, **kw), "loop")
    layer.reset_parameters(0.1, 0.1)
    u = torch.nn.functional.normalize(torch.randn(D), dim=0)
    with torch.no_grad():
        layer.router.gate.weight[0] += u
    return layer, torch.randn(4, 64, D) + 2 * u


def _entropies(layer: MoE, x: torch.Tensor, steps: int) -> list[float]:
    model = torch.nn.ModuleList([layer])
    out = []
    for _ in range(steps):
        layer(x)
        out.append(_entropy(update_expert_bias(model)["load"][0]))
    return out


def test_quantile_balancing_evens_a_skewed_router_within_a_few_steps() -> None:
    layer, x = _skewed_layer("quantile")
    quantile = _entropies(layer, x, 6)
    assert quantile[0] < 0.4  # the first step routes under the zero bias: nearly everything to expert 0
    assert quantile[-1] > 0.97, quantile
    assert abs(float(layer.router.expert_bias.sum())) < 1e-5  # centred
    # the sign rule at its default rate is still skewed after as many steps
    slow, _ = _skewed_layer("bias")
    assert _entropies(slow, x, 6)[-1] < 0.5


def test_the_chunk_bias_is_exact_and_a_fixed_point() -> None:
    """Under the chunk's own bias each expert gets exactly K/E of its tokens; iterated on one batch, the
    estimate converges (every bias moves the cutoffs, so one pass from a skewed start is not yet balanced)."""
    torch.manual_seed(1)
    T, E, K = 4096, 8, 2
    scores = torch.softmax(torch.randn(T, E) + torch.linspace(0, 3, E), dim=-1)  # expert 7 favoured
    bias = torch.zeros(E)
    deviations = []
    for _ in range(12):
        load = torch.bincount(torch.topk(scores + bias, K, dim=-1).indices.reshape(-1), minlength=E).float()
        deviations.append(float((load - T * K / E).abs().max()))
        top = torch.topk(scores + bias, K + 1, dim=-1)
        required = chunk_quantile_bias(top.values[:, K], scores, K)
        r = top.values[:, K : K + 1] - scores  # the bias each expert needs to win each token
        # the balanced share of tokens needs at most the new bias (ties: the cutoff expert's r is its old bias)
        assert ((r < required).sum(dim=0) <= T * K // E).all() and (
            (r <= required).sum(dim=0) >= T * K // E
        ).all()
        bias = mean_quantile_bias(required, torch.tensor(1.0), bias)
    assert deviations[0] > 1500 and deviations[-1] < 0.015 * T * K / E, deviations
    assert sorted(deviations, reverse=True) == deviations


def test_quantile_balancing_keeps_the_gradient_path() -> None:
    """With the same bias, a quantile router selects and weights exactly as the plain one: same outputs, same
    gradients. The bias is a buffer: no gradient reaches it."""
    torch.manual_seed(2)
    plain = Router(D, MoEConfig(num_experts=8, top_k=2, balance="bias"))
    plain.reset_parameters(0.1)
    quant = Router(D, MoEConfig(num_experts=8, top_k=2, balance="quantile"))
    quant.load_state_dict(plain.state_dict())
    bias = torch.randn(8) * 0.05
    plain.expert_bias.copy_(bias)
    quant.expert_bias.copy_(bias)
    x = torch.randn(2, 16, D)
    (w_p, e_p, _), (w_q, e_q, _) = plain(x), quant(x)
    assert torch.equal(e_p, e_q)
    torch.testing.assert_close(w_q, w_p)
    w_p.square().sum().backward()
    w_q.square().sum().backward()
    torch.testing.assert_close(quant.gate.weight.grad, plain.gate.weight.grad)
    assert "expert_bias" not in dict(quant.named_parameters())
    assert quant.quantile_chunks == 1 and plain.quantile_chunks == 0


def test_micro_batches_average_eval_is_ignored_and_the_update_resets() -> None:
    layer, x = _skewed_layer("quantile")
    router = layer.router
    layer(x[:2])
    first = router.quantile_bias_sum.clone()
    layer(x[2:])
    assert router.quantile_chunks == 2
    second = router.quantile_bias_sum - first
    layer.eval()
    layer(x)
    assert router.quantile_chunks == 2  # evaluation does not steer the next step's bias
    update_expert_bias(torch.nn.ModuleList([layer]))
    mean = (first + second) / 2
    torch.testing.assert_close(router.expert_bias, mean - mean.mean())
    assert router.quantile_chunks == 0 and router.quantile_bias_sum.abs().sum() == 0


def test_no_chunks_keep_the_bias() -> None:
    bias = torch.tensor([0.1, -0.1, 0.0, 0.0])
    torch.testing.assert_close(mean_quantile_bias(torch.zeros(4), torch.tensor(0.0), bias), bias)


def test_aux_balance_leaves_the_bias_at_zero() -> None:
    layer, x = _skewed_layer("aux", balance_loss_weight=1e-2)
    _, aux = layer(x)
    assert aux > 0
    update_expert_bias(torch.nn.ModuleList([layer]))
    assert layer.router.expert_bias.abs().sum() == 0


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        ({"balance": "aux"}, "balance=aux needs model.moe.balance_loss_weight > 0"),
        ({"balance": "quantile", "num_experts": 2, "top_k": 2}, "top_k \\(2\\) < model.moe.num_experts"),
        ({"balance": "even"}, "model.moe.balance must be one of 'bias', 'quantile', 'aux'"),
    ],
)
def test_balance_config_errors_name_the_key_and_the_fix(kw: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        MoEConfig(**kw)


_RANK_SCRIPT = """
import json, os, sys
import torch
import torch.distributed as dist
sys.path.insert(0, {here!r})
from test_balance import _skewed_layer
from zephyr.trainer.moe import update_expert_bias

dist.init_process_group("gloo")
layer, x = _skewed_layer("quantile")
rank = dist.get_rank()
layer(x[2 * rank : 2 * rank + 2])
update_expert_bias(torch.nn.ModuleList([layer]), all_reduce=True)
print(json.dumps(layer.router.expert_bias.tolist()))
dist.destroy_process_group()
"""


@pytest.mark.slow  # two processes importing torch: ~30 s on a shared 2-core machine
def test_ranks_average_their_chunks_into_one_bias() -> None:
    """Two gloo ranks, one half of the batch each, end with the bias one process gets from both halves as two
    micro-batches: the quantile sums and chunk counts are all-reduced with the load counters."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    code = _RANK_SCRIPT.format(here=str(Path(__file__).parent))
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", code],
            env=dict(
                os.environ,
                RANK=str(rank),
                WORLD_SIZE="2",
                MASTER_ADDR="127.0.0.1",
                MASTER_PORT=str(port),
                OMP_NUM_THREADS="1",
            ),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for rank in range(2)
    ]
    outs = [p.communicate(timeout=120) for p in procs]
    assert all(p.returncode == 0 for p in procs), outs
    layer, x = _skewed_layer("quantile")
    layer(x[:2])
    layer(x[2:])
    update_expert_bias(torch.nn.ModuleList([layer]))
    for out, _ in outs:
        torch.testing.assert_close(torch.tensor(json.loads(out)), layer.router.expert_bias)


def test_cli_balance_flag(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from zephyr.cli import main

    common = ["train", "--preset", "tiny", "--steps", "3", "--batch-size", "2", "--seq-len", "32"]
    common += ["--device", "cpu", "--warmup-steps", "1"]
    assert main([*common, "--balance", "quantile", "--log", str(tmp_path / "q.jsonl")]) == 0
    records = [json.loads(line) for line in (tmp_path / "q.jsonl").read_text().splitlines()]
    assert len(records) == 3 and records[-1]["bias_abs_max"] > 0
    assert main([*common, "--balance", "aux"]) == 1
    assert "balance=aux needs model.moe.balance_loss_weight > 0" in capsys.readouterr().err
    assert main([*common, "--balance", "aux", "--balance-loss-weight", "1e-3"]) == 0
