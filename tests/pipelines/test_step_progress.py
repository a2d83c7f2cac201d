"""A pipeline step's one progress bar: its total announced from the step's plans before its first job."""

from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq
import yaml

from zephyr.cli import main

from ..terminal import bytes_done
from ..terminal import frames as frames_of

SAMPLE = Path(__file__).resolve().parents[2] / "data" / "sample" / "sample.parquet"


def test_a_dedup_step_of_several_jobs_shows_its_total_from_the_start(tmp_path, capsys):
    """Exact dedup runs two engine jobs (the hashes, then the output); its step's bar has its total from
    its first frame (``Step.plans`` announced up front)."""
    pq.write_table(pq.read_table(SAMPLE).slice(1189, 120), tmp_path / "in.parquet")  # near duplicates
    config = {
        "name": "bar",
        "steps": [
            {"step": "read", "paths": [str(tmp_path / "in.parquet")], "num_shards": 3},
            {"step": "exact_dedup"},
        ],
    }
    (tmp_path / "p.yaml").write_text(yaml.safe_dump(config))
    argv = ["run", str(tmp_path / "p.yaml"), "--job-dir", str(tmp_path / "job"), "--executor", "inprocess"]
    assert main([*argv, "--progress"]) == 0
    frames = [f for f in frames_of(capsys.readouterr().err, "[2/2] exact_dedup") if "|" in f]
    totals = [bytes_done(frame)[1] for frame in frames]
    # announced up front: the first frame's total is the step's (within the small reads the plans leave
    # out, such as collecting the hashes), not its first job's alone (about half of it here)
    assert len(frames) > 2 and totals[0] >= 0.9 * totals[-1] > 0, frames
