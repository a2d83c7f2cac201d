"""Activation checkpointing recomputes blocks in the backward pass: same numbers, routers counted once."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from zephyr.trainer.config import OptimConfig, TrainConfig, get_preset
from zephyr.trainer.model import build_model
from zephyr.trainer.train import train


@pytest.mark.parametrize("balance", ["bias", "quantile"])
def test_checkpointed_training_reproduces_the_plain_run(balance: str) -> None:
    def run(ac: bool):
        return train(
            TrainConfig(
                preset="tiny",
                steps=4,
                batch_size=2,
                seq_len=32,
                device="cpu",
                activation_checkpointing=ac,
                model={"moe": {"balance": balance, "dispatch": "capacity", "capacity_factor": 0.5}},
                optim=OptimConfig(lr=3e-3, warmup_steps=1),
            )
        )

    plain, checkpointed = run(False), run(True)
    assert checkpointed.losses == plain.losses  # CPU fp32 recomputation is bit-exact
    for a, b in zip(plain.records, checkpointed.records, strict=True):
        # loads, biases and dropped tokens counted once, not again during the recomputation
        for key in ("expert_load", "bias_abs_max", "dropped_tokens"):
            assert a[key] == b[key], key
    assert plain.records[0]["dropped_tokens"] > 0


def test_recomputation_leaves_the_counters_alone() -> None:
    torch.manual_seed(0)
    model = build_model(get_preset("tiny"), dispatch="loop")
    ids = torch.randint(0, 512, (2, 16))
    pos = torch.arange(16).repeat(2, 1)
    model(ids, pos)[0].sum().backward()
    once = [b.ffn.router.tokens_per_expert.clone() for b in model.layers]
    for block in model.layers:
        block.ffn.router.tokens_per_expert.zero_()
        block.checkpoint_activations = True
    model(ids, pos)[0].sum().backward()
    for block, expected in zip(model.layers, once, strict=True):
        assert torch.equal(block.ffn.router.tokens_per_expert, expected)


def test_cli_flag(tmp_path: Path) -> None:
    from zephyr.cli import main

    args = ["train", "--preset", "tiny", "--steps", "2", "--batch-size", "2", "--seq-len", "16", "--device"]
    args += ["cpu", "--activation-checkpointing", "--log", str(tmp_path / "ac.jsonl")]
    assert main(args) == 0
    assert len((tmp_path / "ac.jsonl").read_text().splitlines()) == 2
    json.loads((tmp_path / "ac.jsonl").read_text().splitlines()[0])
