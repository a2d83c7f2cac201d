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

import zephyr

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
        return zephyr.read_parquet(str(inputs)).map_batches(_keep).write_parquet(
            str(out), executor="inprocess", work_dir=str(work)
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
