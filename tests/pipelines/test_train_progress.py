"""``zephyr run`` shows the training steps of a train stage: lines named by the stage without a terminal, the
steps in the stage's progress line with ``--progress``; ``log_every`` changes what is shown, never the outputs."""

from __future__ import annotations

import re
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import yaml

from zephyr.cli import main

SAMPLE = Path(__file__).resolve().parents[2] / "data" / "sample" / "sample.parquet"


@pytest.fixture(scope="module")
def pipeline(tmp_path_factory) -> Path:
    """read → tokenize (a 300-token BPE trained on 40 sample documents) → train 4 tiny steps on the CPU."""
    root = tmp_path_factory.mktemp("train-progress")
    pq.write_table(pq.read_table(SAMPLE).slice(0, 40), root / "docs.parquet")
    config = {
        "name": "train-progress",
        "steps": [
            {"step": "read", "paths": [str(root / "docs.parquet")]},
            {"step": "tokenize", "vocab_size": 300},
            {
                "step": "train",
                "preset": "tiny",
                "steps": 4,
                "batch_size": 2,
                "seq_len": 32,
                "device": "cpu",
                "log_every": 2,
            },
        ],
    }
    path = root / "pipeline.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def _run(pipeline: Path, *flags: str) -> int:
    job = pipeline.parent / "job"
    return main(
        ["run", str(pipeline), "--job-dir", str(job), "--executor", "inprocess", "--no-report", *flags]
    )


def test_the_stage_shows_its_steps(pipeline, capsys):
    assert _run(pipeline) == 0
    err = capsys.readouterr().err
    # no terminal: the lines, named by the stage, and no bar
    assert re.findall(r"^\[3/3\] train: step (\d)/4 \| loss [\d.]+ \| [\d.]+k? tok/s \| lr ", err, re.M) == [
        "2",
        "4",
    ]
    assert "step/s" not in err
    assert re.search(
        r"^\[3/3\] train \(train\): done in [\d.]+s: 4 steps, final loss [\d.]+, [\d,]+ tokens/s$", err, re.M
    )

    # log_every is display only: changing it does not rerun (or clear) the trained stage
    assert _run(pipeline, "--set", "steps.train.log_every=1") == 0
    err = capsys.readouterr().err
    assert "[3/3] train (train): skipped, complete with the same config" in err and "step 1/4" not in err

    # --progress: the stage's line counts the training steps (the stage's name says what it counts)
    assert _run(pipeline, "--from", "train", "--progress") == 0
    err = capsys.readouterr().err
    # tqdm writes the rate as "N step/s", or as "N s/step" when a step takes over a second (a loaded machine)
    assert re.search(r"\[3/3\] train: +100%\|[^\n\r]*\| 4/4 \[[^\]]*(step/s|s/step), loss [\d.]+", err), err
    assert re.findall(r"\[3/3\] train: step (\d)/4 \|", err) == ["2", "4"]
