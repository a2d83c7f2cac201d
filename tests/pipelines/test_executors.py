"""The same pipeline gives byte-identical outputs on every executor (and any worker count)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import yaml

from zephyr.cli import main

REPO = Path(__file__).resolve().parents[2]
SAMPLE = REPO / "data" / "sample" / "sample.parquet"
HAS_DASK_EXECUTOR = importlib.util.find_spec("zephyr.executors.dask") is not None


@pytest.fixture(
    scope="module",
    params=[
        pytest.param(False, id="light"),
        pytest.param(
            True, id="with_fuzzy", marks=pytest.mark.slow
        ),  # ~10 engine actions, a process pool each
    ],
)
def pipeline(tmp_path_factory, request) -> Path:
    root = tmp_path_factory.mktemp("executors")
    table = pq.read_table(SAMPLE)
    pq.write_table(table.slice(1189, 120), root / "in.parquet")  # Milton and Shakespeare: exact and near dups
    config = {
        "name": "executors",
        "steps": [
            {"step": "read", "paths": [str(root / "in.parquet")], "num_shards": 3},
            {"step": "normalize"},
            {"step": "exact_dedup"},
            {"step": "fuzzy_dedup", "threshold": 0.7, "enabled": request.param},
            {"step": "tokenize", "vocab_size": 400, "shard_bytes": "64KB"},
        ],
    }
    path = root / "p.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def _outputs(job: Path) -> dict[str, bytes]:
    files = (
        sorted(job.glob("*/part-*.parquet"))
        + sorted(job.glob("*/shards/shard-*"))
        + [job / "04-tokenize" / "tokenizer.json"]
    )
    return {str(p.relative_to(job)): p.read_bytes() for p in files}


@pytest.fixture(scope="module")
def inprocess_outputs(pipeline) -> dict[str, bytes]:
    job = pipeline.parent / "inprocess"
    assert main(["run", str(pipeline), "--job-dir", str(job), "--executor", "inprocess", "--no-report"]) == 0
    return _outputs(job)


@pytest.mark.parametrize(
    "argv",
    [
        # a spawned process pool per engine action: ~30 s idle, minutes on busy cores
        pytest.param(["--executor", "local", "--workers", "2"], id="local", marks=pytest.mark.slow),
        pytest.param(
            ["--executor", "dask", "--workers", "2"],
            id="dask",
            marks=[
                pytest.mark.dask,
                pytest.mark.slow,  # a LocalCluster per engine action: minutes
                pytest.mark.skipif(not HAS_DASK_EXECUTOR, reason="zephyr.executors.dask is not there yet"),
            ],
        ),
    ],
)
def test_outputs_identical_across_executors(pipeline, inprocess_outputs, argv):
    name = argv[1]
    job = pipeline.parent / name
    assert main(["run", str(pipeline), "--job-dir", str(job), *argv, "--no-report"]) == 0
    outputs = _outputs(job)
    assert len([k for k in outputs if "shard-" in k]) >= 2 and len(outputs) > 10
    assert outputs.keys() == inprocess_outputs.keys()
    assert outputs == inprocess_outputs
