"""FSDP2 over 2 CPU processes (gloo on loopback) matches a single process on the same global batch.

The two ranks are launched the way torchrun would (RANK/WORLD_SIZE/MASTER_* in the environment) through the
real ``zephyr train`` command line. Rank r reads samples r, r+2, r+4...: the two ranks' batches of 2 together
are the single process's batch of 4, so the losses agree up to float reassociation.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from zephyr.trainer.config import OptimConfig, TrainConfig
from zephyr.trainer.train import train

STEPS = 4
COMMON = [
    "--preset",
    "tiny",
    "--steps",
    str(STEPS),
    "--seq-len",
    "32",
    "--device",
    "cpu",
    "--lr",
    "3e-3",
    "--warmup-steps",
    "1",
]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_fsdp2_two_gloo_ranks_match_single_process(tmp_path: Path) -> None:
    single = train(
        TrainConfig(
            preset="tiny",
            steps=STEPS,
            batch_size=4,
            seq_len=32,
            device="cpu",
            optim=OptimConfig(lr=3e-3, warmup_steps=1),
        )
    )
    port = _free_port()
    procs = []
    for rank in range(2):
        env = dict(
            os.environ,
            RANK=str(rank),
            WORLD_SIZE="2",
            LOCAL_RANK=str(rank),
            MASTER_ADDR="127.0.0.1",
            MASTER_PORT=str(port),
            OMP_NUM_THREADS="1",
        )
        cmd = [
            sys.executable,
            "-m",
            "zephyr.cli",
            "train",
            *COMMON,
            "--batch-size",
            "2",
            "--log",
            str(tmp_path / "fsdp.jsonl"),
            "--checkpoint-dir",
            str(tmp_path / "ckpt"),
        ]
        procs.append(
            subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        )
    outputs = []
    try:
        for p in procs:
            out, _ = p.communicate(timeout=120)
            outputs.append(out)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    assert all(p.returncode == 0 for p in procs), "\n".join(outputs)
    fsdp = [json.loads(line)["loss"] for line in (tmp_path / "fsdp.jsonl").read_text().splitlines()]
    assert len(fsdp) == STEPS  # rank 0 alone writes the log
    assert fsdp == pytest.approx(single.losses, rel=1e-4, abs=1e-4)
    meta = json.loads((tmp_path / "ckpt" / f"step-{STEPS:08d}" / "trainer.json").read_text())
    assert meta["world_size"] == 2 and meta["loader_state"]["index"] == 2 * STEPS
