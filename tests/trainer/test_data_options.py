"""The trainer's data-loading keys: packing, mixing (mix specs, caps, schedule, --reweight), instance filter."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from zephyr.trainer.config import ConfigProblems, OptimConfig, TrainConfig
from zephyr.trainer.train import train

from zephyr.errors import ResumeError

from ..token_sets import synthetic_meta

SEQ = 32


def _token_set(
    directory: Path, *, low: int, high: int, docs: int = 60, seed: int = 0, plant: bool = False
) -> str:
    """A shard set of random ids in [low, high) (the tiny preset's vocabulary is 512), documents of 5..80."""
    import pyarrow as pa
    from zephyr.tokenize.shards import write_manifest, write_shard

    rng = np.random.default_rng(seed)
    lengths = rng.integers(5, 80, docs)
    stream = rng.integers(low, high, int(lengths.sum())).astype(np.uint16)
    if plant:  # document 3 becomes one token repeated: a repetitive instance
        start = int(lengths[:3].sum())
        stream[start : start + lengths[3]] = low
        lengths[3] = max(lengths[3], 1)
    body = np.concatenate([[0], np.cumsum(lengths)]) * 2
    column = pa.LargeBinaryArray.from_buffers(
        pa.large_binary(), len(lengths), [None, pa.py_buffer(body), pa.py_buffer(stream.tobytes())]
    )
    info, _ = write_shard(
        str(directory),
        "shard-00000",
        [pa.table({"tokens": column})],
        dtype=np.dtype("uint16"),
        num_tokens=len(stream),
    )
    write_manifest(str(directory), [info], meta=synthetic_meta("uint16", 512))
    return str(directory)


@pytest.fixture
def two_sets(tmp_path: Path) -> tuple[str, str]:
    return _token_set(tmp_path / "a", low=1, high=250), _token_set(
        tmp_path / "b", low=250, high=500, docs=120, seed=1
    )


def _cfg(root: Path, **kw) -> TrainConfig:
    base = dict(
        preset="tiny",
        steps=4,
        batch_size=4,
        seq_len=SEQ,
        device="cpu",
        optim=OptimConfig(lr=1e-3, warmup_steps=1),
        log=str(root / "t.jsonl"),
        checkpoint_dir=str(root / "ck"),
    )
    base.update(kw)
    return TrainConfig(**base)


def _records(root: Path) -> list[dict]:
    return [json.loads(line) for line in (root / "t.jsonl").read_text().splitlines()]


def test_cli_best_fit_mix_spec_and_filter_log_the_realized_mix(tmp_path: Path, two_sets) -> None:
    from zephyr.cli import main

    a, b = two_sets
    args = ["train", "--preset", "tiny", "--batch-size", "4", "--seq-len", str(SEQ), "--device", "cpu"]
    args += ["--data", a, "--data", b, "--mix", "temperature:1", "--packing", "best-fit", "--steps", "3"]
    args += ["--instance-filter", "repetition", "--log", str(tmp_path / "t.jsonl"), "--mix-window", "2"]
    assert main(args) == 0
    records = _records(tmp_path)
    last = records[-1]
    assert sum(last["mix_tokens"].values()) == 3 * 4 * SEQ  # every sample drawn so far, in tokens
    assert set(last["mix_share"]) == {a, b} and sum(last["mix_share"].values()) == pytest.approx(1, abs=1e-4)
    assert last["instances_filtered_total"] == sum(r["instances_filtered"] for r in records) == 0


def test_instance_filter_count_reaches_train_jsonl(tmp_path: Path) -> None:
    data = _token_set(tmp_path / "p", low=1, high=500, plant=True, docs=20)
    train(
        _cfg(
            tmp_path,
            data=data,
            steps=12,
            packing="documents",
            instance_filter="repetition",
            repetition_max_count=4,
        )
    )
    records = _records(tmp_path)
    assert records[-1]["instances_filtered_total"] >= 1


def test_resume_with_new_weights_needs_reweight(tmp_path: Path, two_sets) -> None:
    a, b = two_sets
    train(_cfg(tmp_path, data={a: 0.5, b: 0.5}, steps=2))
    with pytest.raises(ResumeError, match=r"0\.9.*--reweight|--reweight"):
        train(_cfg(tmp_path, data={a: 0.9, b: 0.1}, steps=4))
    result = train(_cfg(tmp_path, data={a: 0.9, b: 0.1}, steps=4, reweight=True))
    assert result.resumed_from == 2 and result.step == 4


def test_schedule_switches_on_its_step_across_a_resume_with_another_batch(tmp_path: Path, two_sets) -> None:
    a, b = two_sets
    schedule = [[0, {a: 1.0, b: 0.0}], [3, {a: 0.0, b: 1.0}]]
    train(_cfg(tmp_path, data={a: 1.0, b: 0.0}, mix_schedule=schedule, steps=2, checkpoint_every=1))
    train(_cfg(tmp_path, data={a: 1.0, b: 0.0}, mix_schedule=schedule, steps=6, batch_size=2))
    records = {r["step"]: r["mix_tokens"] for r in _records(tmp_path)}
    drawn_b = [records[s][b] for s in range(1, 7)]  # a record's step counts the steps done
    assert drawn_b[:3] == [0, 0, 0] and drawn_b[3:] == [2 * SEQ, 4 * SEQ, 6 * SEQ]  # b once 3 steps are done


def test_bad_data_keys_are_named(two_sets) -> None:
    a, b = two_sets
    with pytest.raises(ConfigProblems) as err:
        TrainConfig(
            data=a,
            mix="temperature:1",
            packing="bestfit",
            mix_schedule=[[0, {"c/": 1}]],
            repetition_min_period=9,
            repetition_max_period=3,
        )
    text = str(err.value)
    for needle in (
        "packing must be one of",
        "mix needs a mixture",
        "mix_schedule[0]",
        "repetition_min_period (9)",
    ):
        assert needle in text
