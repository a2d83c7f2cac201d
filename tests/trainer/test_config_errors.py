"""Bad training configs fail before any work, listing every problem at once, each led by its key path."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from zephyr.trainer.config import ConfigProblems, MoEConfig, OptimConfig, TrainConfig

from zephyr.errors import ConfigError


@pytest.mark.parametrize(
    ("raw", "line"),
    [
        pytest.param({"steps": "ten"}, "steps must be an integer, got 'ten' (str)", id="str-for-int"),
        pytest.param({"steps": True}, "steps must be an integer, got True (bool)", id="bool-for-int"),
        pytest.param(
            {"optim": {"lr": [0.1]}}, "optim.lr must be a number, got [0.1] (list)", id="list-for-float"
        ),
        pytest.param(
            {"optim": {"lr": "3e-4"}},
            "optim.lr must be a number, got '3e-4' (str); write numbers unquoted, with a dot before the exponent",
            id="yaml-3e-4",
        ),
        pytest.param({"batch_size": -2}, "batch_size must be >= 1, got -2", id="negative-count"),
        pytest.param({"keep_checkpoints": -1}, "keep_checkpoints must be >= 0, got -1", id="negative-keep"),
        pytest.param({"seed": -1}, "seed must be >= 0, got -1", id="negative-seed"),
        pytest.param({"optim": {"beta2": 1.0}}, "optim.beta2 must be within [0, 1), got 1.0", id="beta"),
        pytest.param(
            {"dtype": "fp16"}, "dtype must be one of 'auto', 'bf16', 'fp32', got 'fp16' (str)", id="lit"
        ),
        pytest.param(
            {"data": {"web/": "lots"}}, "data must be a string, a mapping {string: number} or null", id="mix"
        ),
        pytest.param(
            {"optim": "fast"}, "optim must be a mapping of OptimConfig keys, got 'fast' (str)", id="section"
        ),
        pytest.param(
            {"stepz": 3},
            "stepz is not a known key; allowed: activation_checkpointing, batch_size,",
            id="unknown-top",
        ),
        pytest.param(
            {"optim": {"lrr": 1}}, "optim.lrr is not a known key; allowed: beta1,", id="unknown-optim"
        ),
        pytest.param({"model": {"qk_nrm": True}}, "model.qk_nrm is not a known key", id="unknown-model"),
        pytest.param({"model": {"moe": {"topk": 1}}}, "model.moe.topk is not a known key", id="unknown-moe"),
        pytest.param(
            {"model": {"n_layers": "2"}}, "model.n_layers must be an integer, got '2' (str)", id="model"
        ),
        pytest.param(
            {"model": {"moe": {"top_k": 9}}},
            "model.moe.top_k (9) must be <= model.moe.num_experts (8)",
            id="x",
        ),
        pytest.param(
            {"model": {"n_kv_heads": 0}}, "model.n_kv_heads must be -1 or >= 1, got 0", id="sentinel"
        ),
        pytest.param(
            {"model": {"moe": "big"}}, "model.moe must be a mapping of MoEConfig keys or null", id="moe"
        ),
        pytest.param({"preset": "huge"}, "unknown model preset 'huge'", id="preset"),
    ],
)
def test_each_problem_names_its_key(raw: dict, line: str) -> None:
    with pytest.raises(ConfigProblems) as info:
        TrainConfig.from_dict(raw)
    assert len(info.value.problems) == 1, info.value.problems
    assert info.value.problems[0].startswith(line), info.value.problems[0]
    assert str(info.value) == info.value.problems[0]  # one problem: one line


def test_every_problem_is_listed_at_once() -> None:
    raw = {
        "steps": "ten",
        "batch_size": 0,
        "optim": {"lr": [0.1], "warmup_steps": -1},
        "model": {"d_model": 1.5, "moe": {"top_k": 0}},
    }
    with pytest.raises(ConfigError) as info:
        TrainConfig.from_dict(raw)
    lines = str(info.value).splitlines()
    assert lines[0] == "invalid training config (6 problems):"
    assert sorted(line.split()[0] for line in lines[1:]) == sorted(
        ["steps", "batch_size", "optim.lr", "optim.warmup_steps", "model.d_model", "model.moe.top_k"]
    )


def test_direct_construction_is_checked_too() -> None:
    with pytest.raises(ConfigProblems, match="optim.eps must be > 0, got 0"):
        OptimConfig(eps=0)
    with pytest.raises(ConfigProblems, match="model.moe.score_func must be one of 'softmax', 'sigmoid'"):
        MoEConfig(score_func="relu")
    with pytest.raises(ConfigProblems, match="model.moe.top_k must be an integer"):
        TrainConfig(model={"moe": {"top_k": "2"}})


def _zephyr(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "zephyr.cli", "train", *args],
        cwd=cwd,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_cli_lists_the_problems_of_a_config_file_without_a_traceback(tmp_path: Path) -> None:
    (tmp_path / "run.yaml").write_text(
        'steps: "ten"\nbatch_size: -2\noptim: {lr: [0.1], warmup_steps: 1.5}\nmodel: {moe: {top_k: 0}}\nstepz: 1\n'
    )
    result = _zephyr("run.yaml", "--device", "cpu", cwd=tmp_path)
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    assert result.stderr.splitlines() == [
        "zephyr train: error: invalid training config (6 problems):",
        "  stepz is not a known key; allowed: activation_checkpointing, batch_size, cache_limit_bytes, "
        "checkpoint_dir, checkpoint_every, compile, data, device, dtype, grad_accum, instance_filter, "
        "keep_checkpoints, log, log_every, max_epochs, mix, mix_schedule, mix_window, model, optim, packing, "
        "peak_tflops, prefetch_shards, preset, repetition_max_count, repetition_max_period, "
        "repetition_min_period, reweight, seed, seq_len, spike_factor, steps, tensorboard_dir",
        "  steps must be an integer, got 'ten' (str)",
        "  batch_size must be >= 1, got -2",
        "  model.moe.top_k must be >= 1, got 0",
        "  optim.lr must be a number, got [0.1] (list)",
        "  optim.warmup_steps must be an integer, got 1.5 (float)",
    ]


def test_cli_flags_are_checked_and_replace_bad_file_values(tmp_path: Path) -> None:
    """A flag's bad value is named by the flag (--lr), a file's or --set's by its key."""
    (tmp_path / "run.yaml").write_text('steps: "ten"\nbatch_size: 1\nseq_len: 8\n')
    bad = _zephyr(
        "run.yaml", "--steps", "1", "--lr", "-1", "--set", "moe.top_k=x", "--device", "cpu", cwd=tmp_path
    )
    assert bad.returncode == 1 and "Traceback" not in bad.stderr
    assert bad.stderr.splitlines()[1:] == [
        "  model.moe.top_k must be an integer, got 'x' (str)",
        "  --lr must be > 0, got -1.0",
    ]
    for text, problem in [("steps: [\n", "not valid YAML"), ("- 1\n", "must be a mapping of keys to values")]:
        (tmp_path / "broken.yaml").write_text(text)
        result = _zephyr("broken.yaml", cwd=tmp_path)
        assert result.returncode == 1 and "Traceback" not in result.stderr and problem in result.stderr
