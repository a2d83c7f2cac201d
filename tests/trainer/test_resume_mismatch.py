"""Resuming a checkpoint directory written by a different configuration is refused, naming what differs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from zephyr.trainer.config import OptimConfig, TrainConfig
from zephyr.trainer.train import train

from zephyr.errors import ResumeError


def _cfg(root: Path, **kw) -> TrainConfig:
    base = dict(
        preset="tiny",
        steps=2,
        batch_size=2,
        seq_len=32,
        device="cpu",
        optim=OptimConfig(lr=1e-3, warmup_steps=1),
        checkpoint_dir=str(root / "ck"),
    )
    base.update(kw)
    return TrainConfig(**base)


@pytest.fixture
def checkpointed(tmp_path: Path) -> Path:
    train(_cfg(tmp_path))
    return tmp_path


@pytest.mark.parametrize(
    ("change", "message"),
    [
        pytest.param({"model": {"moe": {"top_k": 1}}}, "model.moe.top_k: checkpoint 2, this run 1", id="moe"),
        pytest.param(
            {"model": {"qk_norm": True}}, "model.qk_norm: checkpoint False, this run True", id="model"
        ),
        pytest.param({"seed": 1}, "seed: checkpoint 0, this run 1", id="seed"),
        pytest.param({"seq_len": 16}, "seq_len: checkpoint 32, this run 16", id="seq_len"),
    ],
)
def test_resume_with_other_settings_names_the_difference(
    checkpointed: Path, change: dict, message: str
) -> None:
    with pytest.raises(ResumeError, match=message):
        train(_cfg(checkpointed, steps=4, **change))


def test_cli_refuses_with_one_line_and_no_traceback(checkpointed: Path, capsys) -> None:
    from zephyr.cli import main

    args = ["train", "--preset", "tiny", "--batch-size", "2", "--seq-len", "32", "--device", "cpu"]
    args += ["--checkpoint-dir", str(checkpointed / "ck"), "--steps", "4", "--set", "moe.top_k=1"]
    assert main(args) == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err and len(err.splitlines()) == 1
    assert "was written for a different model (model.moe.top_k: checkpoint 2, this run 1)" in err


def test_a_checkpoint_older_than_a_new_model_key_resumes_with_its_default(checkpointed: Path) -> None:
    """``moe.balance`` came after the first checkpoints: one written without it resumes (its default, ``bias``,
    is what the older run did); a key the checkpoint does have still has to match."""
    meta_path = checkpointed / "ck" / "step-00000002" / "trainer.json"
    meta = json.loads(meta_path.read_text())
    del meta["model_config"]["moe"]["balance"]
    meta_path.write_text(json.dumps(meta))
    assert train(_cfg(checkpointed, steps=3)).resumed_from == 2
