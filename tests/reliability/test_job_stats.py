"""Retries and resumed tasks reach the stats files: a rerun that logs "2 of 4 tasks already done" records
``tasks_resumed: 2``, and commands that run several engine jobs (``zephyr filter``, ``zephyr dedup``, ``zephyr
run`` stages) sum ``task_retries``/``tasks_resumed`` over all of them, not only the last job.

Failures are real: an op that raises once (a marker file in tmp says it did), then works, so the engine retries
its task."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import yaml

import zephyr
from zephyr.cli import main
from zephyr.io.layout import stats_path

from .conftest import GOOD

FAST = ["--executor", "inprocess"]


def _write_inputs(directory: Path, files: int = 4, rows: int = 5) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    for i in range(files):
        ids = list(range(i * rows, (i + 1) * rows))
        texts = [f"{GOOD} Document {n} of the set." for n in ids]
        pq.write_table(pa.table({"id": ids, "text": texts}), directory / f"in-{i}.parquet")
    return directory


def _fail_once(monkeypatch, cls: type, marker: Path) -> None:
    """``cls.__call__`` raises the first time it runs (a transient fault), then behaves as before."""
    original = cls.__call__

    def flaky(self, table):
        if not marker.exists():
            marker.write_text("failed once")
            raise RuntimeError("transient fault (test)")
        return original(self, table)

    monkeypatch.setattr(cls, "__call__", flaky)


def _keep(table: pa.Table) -> pa.Table:
    return table


def test_resumed_tasks_are_counted_in_stats_json(tmp_path, caplog):
    inputs, work, out = _write_inputs(tmp_path / "in"), tmp_path / "work", tmp_path / "out"

    def run():
        return (
            zephyr.read_parquet(str(inputs))
            .map_batches(_keep)
            .write_parquet(str(out), executor="inprocess", work_dir=str(work))
        )

    run()
    markers = sorted(work.glob("stage-*/_done/task-*.json"))
    assert len(markers) == 4
    for marker in markers[:2]:  # as if the run had been killed after two of its four tasks
        marker.unlink()
    with caplog.at_level(logging.INFO, logger="zephyr.job"):
        again = run()
    assert "2 of 4 tasks already done" in caplog.text
    written = json.loads((work / "stats.json").read_text())
    for stats in (again.stats, written):
        assert (stats["tasks"], stats["tasks_resumed"], stats["task_retries"]) == (4, 2, 0)
        assert [s["tasks_resumed"] for s in stats["stages"]] == [2]


def test_filter_records_a_retry_in_its_first_job(tmp_path, monkeypatch):
    from zephyr.pipelines.quality.filters import FilterAnnotator

    inputs, out = _write_inputs(tmp_path / "in"), tmp_path / "out"
    _fail_once(monkeypatch, FilterAnnotator, tmp_path / "failed")
    assert main(["filter", str(inputs), "--output", str(out), *FAST]) == 0
    assert (tmp_path / "failed").exists()
    stats = json.loads(Path(stats_path(out)).read_text())
    assert stats["filter"]["rows_in"] == 20 and stats["filter"]["balanced"]
    assert stats["task_retries"] == 1  # the annotate job's retry, though the top level is the kept-rows job
    assert [job["task_retries"] for job in stats["jobs"]] == [1, 0, 0, 0, 0]
    assert stats["tasks"] == sum(job["tasks"] for job in stats["jobs"]) > 4


def test_dedup_exact_sums_retries_and_resumed_over_its_jobs(tmp_path, monkeypatch):
    from zephyr.dedup.exact import _DocHashes

    inputs, work, out = _write_inputs(tmp_path / "in"), tmp_path / "work", tmp_path / "out"
    argv = ["dedup", "exact", str(inputs), "--output", str(out), "--work-dir", str(work), *FAST]
    with monkeypatch.context() as patch:
        _fail_once(patch, _DocHashes, tmp_path / "failed")
        assert main(argv) == 0
    stats = json.loads(Path(stats_path(out)).read_text())
    assert len(stats["jobs"]) > 1 and stats["jobs"][0]["task_retries"] == 1
    assert (stats["task_retries"], stats["tasks_resumed"]) == (1, 0)
    assert main(argv) == 0  # unchanged inputs, same work dir: every task of every job resumes
    stats = json.loads(Path(stats_path(out)).read_text())
    assert stats["tasks_resumed"] == stats["tasks"] > sum(s["tasks"] for s in stats["stages"])
    assert stats["task_retries"] == 0


def test_zephyr_run_step_records_a_retry_of_an_earlier_job(tmp_path, monkeypatch):
    from zephyr.dedup.exact import _DocHashes

    stage = "exact_dedup"  # hashes (the failing job), then the stage's own write
    inputs, job = _write_inputs(tmp_path / "in"), tmp_path / "job"
    config = {"name": "retries", "steps": [{"step": "read", "paths": [str(inputs)]}, {"step": stage}]}
    path = tmp_path / "retries.yaml"
    path.write_text(yaml.safe_dump(config))
    _fail_once(monkeypatch, _DocHashes, tmp_path / "failed")
    assert main(["run", str(path), "--job-dir", str(job), *FAST, "--no-report"]) == 0
    summary = json.loads((job / "stats.json").read_text())
    record = next(s for s in summary["steps"] if s["step"] == stage)
    assert record["task_retries"] == 1 and len(record["jobs"]) > 1
    assert summary["task_retries"] == 1


def test_write_token_shards_stats_cover_its_three_jobs(tmp_path, tokenizer_json):
    from zephyr.tokenize import write_token_shards

    inputs = _write_inputs(tmp_path / "in")
    result = write_token_shards(
        str(inputs), tokenizer=str(tokenizer_json), output=str(tmp_path / "tokens"), executor="inprocess"
    )
    jobs = result.stats["jobs"]  # tokenize, sort, pack
    assert len(jobs) == 3 and result.stats["tasks"] == sum(job["tasks"] for job in jobs)
    assert result.stats["tasks"] > sum(s["tasks"] for s in result.stats["stages"])
