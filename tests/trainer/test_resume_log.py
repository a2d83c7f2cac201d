"""train.jsonl after a kill and a resume: every step exactly once, in order, with the uninterrupted run's losses.

The trainer promises bit-identical losses on CPU after a resume (docs/trainer.md), so the resumed log is compared
with an uninterrupted run's log value for value.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from zephyr.trainer.config import OptimConfig, TrainConfig
from zephyr.trainer.metrics import trim_log
from zephyr.trainer.train import train

FAST = OptimConfig(lr=1e-3, warmup_steps=1)


def _records(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def _steps(path: Path) -> list[int]:
    return [r["step"] for r in _records(path)]


def _line(step: int, loss: float = 1.0) -> str:
    return json.dumps({"step": step, "loss": loss}) + "\n"


def test_trim_keeps_each_step_up_to_the_start_once(tmp_path: Path) -> None:
    """A record's step counts the steps done (1 for the first): resuming a checkpoint of step 6 keeps 1..6."""
    log = tmp_path / "train.jsonl"
    log.write_text("".join(_line(s) for s in range(1, 11)) + '{"step": 11, "lo')  # cut mid-write
    assert trim_log(log, 6) == 5
    assert log.read_text() == "".join(_line(s) for s in range(1, 7))
    assert trim_log(log, 6) == 0  # idempotent; nothing rewritten
    assert [p.name for p in tmp_path.iterdir()] == ["train.jsonl"]  # no temporary file left


def test_trim_heals_a_log_appended_by_an_old_resume(tmp_path: Path) -> None:
    """A resume from step 3 appended without a trim (4..8 after 1..6): the later records win."""
    log = tmp_path / "train.jsonl"
    log.write_text("".join(_line(s, 1.0) for s in range(1, 7)) + "".join(_line(s, 2.0) for s in range(4, 9)))
    trim_log(log, 8)
    assert [(r["step"], r["loss"]) for r in _records(log)] == [(1, 1.0), (2, 1.0), (3, 1.0)] + [
        (s, 2.0) for s in range(4, 9)
    ]


def test_trim_of_a_missing_or_clean_log_changes_nothing(tmp_path: Path) -> None:
    assert trim_log(tmp_path / "none.jsonl", 3) == 0
    log = tmp_path / "train.jsonl"
    log.write_text(_line(1) + _line(2))
    before = log.stat().st_mtime_ns
    assert trim_log(log, 2) == 0 and log.stat().st_mtime_ns == before


def _cfg(root: Path, **kw) -> TrainConfig:
    base = dict(
        preset="tiny",
        steps=8,
        batch_size=2,
        seq_len=32,
        device="cpu",
        optim=FAST,
        log=str(root / "train.jsonl"),
        checkpoint_dir=str(root / "ck"),
        checkpoint_every=3,
        keep_checkpoints=0,
    )
    base.update(kw)
    return TrainConfig(**base)


def test_resumed_log_is_the_uninterrupted_log(tmp_path: Path) -> None:
    whole = _cfg(tmp_path / "whole")
    train(whole)
    cut = _cfg(tmp_path / "cut")
    train(cut)  # logs 1..8, saves at 3, 6 and 8
    # as if killed after logging step 8, mid-write of one more record, before the saves at 6 and 8
    (tmp_path / "cut" / "ck" / "latest").write_text("step-00000003\n")
    with open(tmp_path / "cut" / "train.jsonl", "a") as f:
        f.write('{"step": 9, "loss": 4.')
    result = train(cut)
    assert result.resumed_from == 3
    assert _steps(tmp_path / "cut" / "train.jsonl") == list(range(1, 9))
    resumed = [r["loss"] for r in _records(tmp_path / "cut" / "train.jsonl")]
    assert resumed == [r["loss"] for r in _records(tmp_path / "whole" / "train.jsonl")]  # bit for bit


def test_a_fresh_run_does_not_append_to_an_old_log(tmp_path: Path) -> None:
    cfg = _cfg(tmp_path, steps=3, checkpoint_dir=None)
    train(cfg)
    train(cfg)  # no checkpoint: it starts again at step 0
    assert _steps(tmp_path / "train.jsonl") == [1, 2, 3]


def _cli(root: Path, steps: int) -> list[str]:
    return [
        sys.executable,
        "-m",
        "zephyr.cli",
        "train",
        "--preset",
        "tiny",
        "--steps",
        str(steps),
        "--batch-size",
        "4",
        "--seq-len",
        "64",
        "--device",
        "cpu",
        "--lr",
        "1e-3",
        "--warmup-steps",
        "1",
        "--checkpoint-dir",
        str(root / "ck"),
        "--checkpoint-every",
        "20",
        "--keep-checkpoints",
        "0",
        "--log",
        str(root / "train.jsonl"),
    ]


def test_sigkill_after_a_checkpoint_then_resume(tmp_path: Path) -> None:
    """A real ``kill -9`` of ``zephyr train`` between checkpoints; the rerun resumes and the log stays clean."""
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    steps = 60
    log = tmp_path / "train.jsonl"
    proc = subprocess.Popen(_cli(tmp_path, steps), env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and proc.poll() is None:
            if log.exists() and log.read_bytes().count(b"\n") >= 25:  # past the save at step 20
                break
            time.sleep(0.005)
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.wait()
    assert proc.returncode == -signal.SIGKILL, proc.stderr.read().decode()
    checkpoint = int((tmp_path / "ck" / "latest").read_text().strip().removeprefix("step-"))
    logged = _steps(log) if log.read_bytes().endswith(b"\n") else _steps(log)[:-1]
    assert logged[-1] > checkpoint  # the kill left steps the resumed run repeats (the case under test)

    rerun = subprocess.run(_cli(tmp_path, steps), env=env, capture_output=True, text=True, timeout=300)
    assert rerun.returncode == 0, rerun.stderr
    assert f"trained steps {checkpoint + 1}..{steps}" in rerun.stderr
    assert _steps(log) == list(range(1, steps + 1))

    whole = train(TrainConfig(preset="tiny", steps=steps, batch_size=4, seq_len=64, device="cpu", optim=FAST))
    assert [r["loss"] for r in _records(log)] == whole.losses  # the resumed run reproduces the losses exactly
