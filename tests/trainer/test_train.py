"""End-to-end training: loss falls on real token shards, exact resume, CLI, alarms, dispatch fallback."""

from __future__ import annotations

import inspect
import json
import pathlib
from pathlib import Path

import pytest
from zephyr.trainer.config import OptimConfig, TrainConfig
from zephyr.trainer.metrics import NonFiniteLossError
from zephyr.trainer.model import Transformer
from zephyr.trainer.train import lr_at, train

from ..bpe import train_tiny_bpe

FAST = OptimConfig(lr=3e-3, warmup_steps=2, min_lr_ratio=0.1)


@pytest.fixture(scope="module")
def real_shards(tmp_path_factory) -> Path:
    """Token shards written by zephyr.tokenize from real English text (the standard library's docstrings),
    with a byte-level BPE trained on the same text — nothing downloaded."""
    write = pytest.importorskip("zephyr.tokenize").write_token_shards
    import argparse
    import collections
    import email.message
    import json as json_mod
    import logging

    texts = []
    for module in (pathlib, argparse, collections, email.message, json_mod, logging, inspect):
        for _, obj in inspect.getmembers(module):
            doc = inspect.getdoc(obj)
            if doc and len(doc) > 80:
                texts.append(doc)
    texts = sorted(set(texts))
    root = tmp_path_factory.mktemp("shards")
    train_tiny_bpe(root / "tokenizer.json", texts, vocab_size=512)
    import pyarrow as pa
    import pyarrow.parquet as pq

    (root / "in").mkdir()
    pq.write_table(pa.table({"id": list(range(len(texts))), "text": texts}), root / "in" / "docs.parquet")
    write(
        str(root / "in"),
        tokenizer=str(root / "tokenizer.json"),
        output=str(root / "set"),
        executor="inprocess",
    )
    return root / "set"


def _cfg(tmp_path: Path, **kw) -> TrainConfig:
    base = dict(
        preset="tiny",
        steps=8,
        batch_size=4,
        seq_len=64,
        device="cpu",
        optim=FAST,
        log=str(tmp_path / "log.jsonl"),
    )
    base.update(kw)
    return TrainConfig(**base)


def _log(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_loss_falls_on_real_shards(tmp_path: Path, real_shards: Path) -> None:
    result = train(_cfg(tmp_path, data=str(real_shards), steps=40))
    first, last = sum(result.losses[:5]) / 5, sum(result.losses[-5:]) / 5
    assert last < first - 1.0, (first, last)
    records = _log(tmp_path / "log.jsonl")
    assert [r["step"] for r in records] == list(range(1, 41))  # steps done, as the progress line counts
    r = records[-1]
    assert r["mfu"] is None and r["tokens_per_s"] > 0 and r["grad_norm"] > 0
    assert len(r["expert_load"]) == 8 and sum(r["expert_load"]) == pytest.approx(1.0, abs=1e-3)
    assert 0 < r["load_entropy"] <= 1 and r["bias_abs_max"] > 0 and r["dropped_tokens"] == 0


def test_each_record_holds_the_time_spent_getting_its_batches(tmp_path: Path, monkeypatch) -> None:
    """``data_loading_s``: the host time the step spent in the loader (torchtitan's data_loading), a part of
    ``step_time_s``; a loader that takes 50 ms a batch shows as at least that."""
    import time

    from zephyr.trainer.data import Batcher

    fetch = Batcher.next_batch

    def slow(self):  # noqa: ANN001, ANN202
        time.sleep(0.05)
        return fetch(self)

    monkeypatch.setattr(Batcher, "next_batch", slow)
    train(_cfg(tmp_path, steps=3, grad_accum=2))
    records = _log(tmp_path / "log.jsonl")
    assert len(records) == 3
    for r in records:
        assert 2 * 0.05 <= r["data_loading_s"] <= r["step_time_s"], r


def test_resume_is_bit_identical(tmp_path: Path, real_shards: Path) -> None:
    whole = train(_cfg(tmp_path / "a", data=str(real_shards), checkpoint_dir=str(tmp_path / "a" / "ck")))
    cut = _cfg(
        tmp_path / "b", data=str(real_shards), checkpoint_dir=str(tmp_path / "b" / "ck"), checkpoint_every=3
    )
    first = train(TrainConfig(**{**cut.__dict__, "steps": 5}))  # saves at 3 and at 5 (the end)
    # crash-like: forget step 5, resume from step 3
    (tmp_path / "b" / "ck" / "latest").write_text("step-00000003\n")
    second = train(cut)
    assert second.resumed_from == 3
    assert first.losses[:3] + second.losses == whole.losses  # exact, not approximate


def test_cli_trains_and_resumes_from_checkpoint_dir(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from zephyr.cli import main

    args = [
        "train",
        "--preset",
        "tiny",
        "--batch-size",
        "2",
        "--seq-len",
        "32",
        "--device",
        "cpu",
        "--checkpoint-dir",
        str(tmp_path / "ck"),
        "--checkpoint-every",
        "2",
        "--log",
        str(tmp_path / "t.jsonl"),
        "--lr",
        "1e-3",
        "--warmup-steps",
        "1",
    ]
    assert main([*args, "--steps", "3"]) == 0
    capsys.readouterr()
    assert main([*args, "--steps", "5", "--json"]) == 0
    steps = [r["step"] for r in _log(tmp_path / "t.jsonl")]
    assert steps == [1, 2, 3, 4, 5]  # steps done, as the progress line and the checkpoint names count
    summary = json.loads(capsys.readouterr().out)  # in samples and tokens of the steps this call ran
    assert (summary["unit"], summary["rows_in"], summary["details"]["steps"]) == ("samples", 2 * 2, 2)
    assert summary["details"]["tokens"] == 2 * 2 * 32
    on_disk = sum(f.stat().st_size for f in (tmp_path / "ck").rglob("*") if f.is_file())
    assert summary["bytes_out"] == on_disk > 100_000  # the checkpoints, .metadata and shards included
    assert (tmp_path / "ck" / "latest").read_text().strip() == "step-00000005"


def test_yaml_config_with_flag_override(tmp_path: Path) -> None:
    from zephyr.cli import main

    (tmp_path / "run.yaml").write_text(
        "preset: tiny\nsteps: 50\nbatch_size: 2\nseq_len: 16\ndevice: cpu\n"
        f"log: {tmp_path / 'y.jsonl'}\noptim:\n  lr: 0.001\n  warmup_steps: 1\nmodel:\n  qk_norm: true\n"
    )
    assert main(["train", str(tmp_path / "run.yaml"), "--steps", "2", "--set", "moe.top_k=1"]) == 0
    assert len(_log(tmp_path / "y.jsonl")) == 2


def test_nan_loss_stops_the_run_naming_the_step(tmp_path: Path, monkeypatch) -> None:
    calls = {"n": 0}
    real = Transformer.loss

    def poisoned(logits, labels):
        calls["n"] += 1
        loss = real(logits, labels)
        return loss * float("nan") if calls["n"] == 3 else loss

    monkeypatch.setattr(Transformer, "loss", staticmethod(poisoned))
    with pytest.raises(NonFiniteLossError, match="at step 2"):
        train(_cfg(tmp_path, steps=6, checkpoint_dir=str(tmp_path / "ck"), checkpoint_every=1))
    # the NaN step was never checkpointed
    assert (tmp_path / "ck" / "latest").read_text().strip() == "step-00000002"


def test_forced_loop_dispatch_matches_grouped_mm_training(tmp_path: Path) -> None:
    """The XPU fallback (per-expert loop) trains the same model as the grouped_mm path."""
    fast = train(_cfg(tmp_path / "g", steps=4, model={"moe": {"dispatch": "grouped_mm"}}))
    loop = train(_cfg(tmp_path / "l", steps=4, model={"moe": {"dispatch": "loop"}}))
    assert loop.losses == pytest.approx(fast.losses, rel=1e-4)


def test_grad_accumulation_matches_a_bigger_batch(tmp_path: Path) -> None:
    big = train(_cfg(tmp_path / "a", steps=3, batch_size=4))
    accum = train(_cfg(tmp_path / "b", steps=3, batch_size=2, grad_accum=2))
    assert accum.losses == pytest.approx(big.losses, rel=1e-4)


def test_schedules() -> None:
    cos = OptimConfig(lr=1.0, warmup_steps=10, min_lr_ratio=0.1, schedule="cosine")
    assert lr_at(0, cos, 100) == pytest.approx(0.1) and lr_at(9, cos, 100) == pytest.approx(1.0)
    assert lr_at(99, cos, 100) == pytest.approx(0.1)
    assert 0.1 < lr_at(50, cos, 100) < 1.0
    wsd = OptimConfig(lr=1.0, warmup_steps=10, min_lr_ratio=0.0, schedule="wsd", decay_fraction=0.2)
    assert lr_at(79, wsd, 100) == 1.0 and lr_at(89, wsd, 100) == pytest.approx(0.5)
    assert lr_at(99, wsd, 100) == pytest.approx(0.0)
