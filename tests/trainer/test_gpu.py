"""Accelerator checks (run with ``-m gpu`` on a CUDA machine): flex == sdpa, bf16 grouped_mm == loop, a compiled
FSDP-free training step with finite loss and MFU reported."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from zephyr.trainer.config import MoEConfig, OptimConfig, TrainConfig
from zephyr.trainer.model import Attention, build_attention_mask, rope_cos_sin
from zephyr.trainer.moe import MoE
from zephyr.trainer.train import train

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA"),
]


def test_flex_attention_matches_sdpa_with_documents() -> None:
    torch.manual_seed(0)
    attn = Attention(256, 4, 2, qk_norm=True, norm_eps=1e-6).cuda()
    pos = torch.cat([torch.arange(n) for n in (300, 100, 112)])[None].repeat(2, 1).cuda()
    x = torch.randn(2, 512, 256, device="cuda")
    rope = rope_cos_sin(pos, 64, 10000.0)
    flex = attn(x, rope, build_attention_mask(pos, "flex"))
    sdpa = attn(x, rope, build_attention_mask(pos, "sdpa"))
    torch.testing.assert_close(flex, sdpa, rtol=2e-3, atol=2e-3)


def test_bf16_grouped_mm_matches_loop() -> None:
    torch.manual_seed(0)
    cfg = MoEConfig(num_experts=8, top_k=2, expert_ffn_dim=256)
    loop = MoE(128, cfg, "loop").cuda()
    loop.reset_parameters(0.02, 0.02)
    gmm = MoE(128, cfg, "grouped_mm").cuda()
    gmm.load_state_dict(loop.state_dict())
    x = torch.randn(4, 256, 128, device="cuda")
    with torch.autocast("cuda", dtype=torch.bfloat16):
        a, _ = loop(x)
        b, _ = gmm(x)
    torch.testing.assert_close(b.float(), a.float(), rtol=2e-2, atol=2e-2)


def test_compiled_bf16_training_runs(tmp_path: Path) -> None:
    result = train(
        TrainConfig(
            preset="small",
            steps=6,
            batch_size=4,
            seq_len=512,
            device="cuda",
            compile=True,
            optim=OptimConfig(lr=1e-3, warmup_steps=2),
            log=str(tmp_path / "log.jsonl"),
        )
    )
    assert all(torch.isfinite(torch.tensor(result.losses)))
    assert result.records[-1]["mfu"] is None or result.records[-1]["mfu"] > 0
