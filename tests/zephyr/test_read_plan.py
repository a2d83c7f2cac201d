"""``zephyr.physical.plan_read``: the one rule for estimated bytes, the read split and small jobs, at its
boundaries (the split constants are lowered so that the files stay small)."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import zephyr
from zephyr import physical
from zephyr.options import ExecutionOptions
from zephyr.physical import Sources, plan_bytes, plan_read
from zephyr.plan import build_plan


@pytest.fixture
def parquet(tmp_path):
    """One Parquet file of 40 row groups (about 4 KB each in memory)."""
    path = tmp_path / "in.parquet"
    table = pa.table({"text": [f"document {i:05d} " + "x" * 90 for i in range(2000)]})
    pq.write_table(table, path, row_group_size=50)
    return str(path)


def _estimate(path: str) -> int:
    return plan_read([path], ExecutionOptions(executor="inprocess")).estimated_bytes


def test_the_estimate_is_the_drivers(parquet):
    """Paths and the driver's plan of the same files (``Job.run``) give the same estimate (Parquet
    footers)."""
    segment = build_plan(zephyr.read_parquet(parquet)._ops)

    plan = plan_read([parquet], ExecutionOptions(executor="local", workers=2))
    assert plan_bytes(segment, Sources().size_of) == plan.estimated_bytes == _estimate(parquet)
    assert plan.approx_shard_bytes is None and plan.tasks == 1


def test_small_job_boundary(parquet):
    """``small_job_bytes`` is a strict bound: an estimate equal to it is not small."""
    estimated = _estimate(parquet)
    at = ExecutionOptions(executor="local", workers=2, small_job_bytes=estimated)
    above = ExecutionOptions(executor="local", workers=2, small_job_bytes=estimated + 1)
    assert not plan_read([parquet], at).small
    assert plan_read([parquet], above).small
    assert not plan_read([parquet], above.replace(executor="threads")).small  # only local jobs move in
    assert not plan_read([parquet], above.replace(small_job_bytes=0)).small


def test_an_input_under_twice_the_split_minimum_is_read_in_shards_of_it(parquet, monkeypatch):
    estimated = _estimate(parquet)
    monkeypatch.setattr(physical, "TASK_MIN_BYTES", 1)
    options = ExecutionOptions(executor="local", workers=2, small_job_bytes=1)
    monkeypatch.setattr(physical, "SPLIT_MIN_BYTES", estimated + 1)  # under the minimum: one task
    plan = plan_read([parquet], options, split=True)
    assert plan.approx_shard_bytes == estimated + 1
    assert plan.tasks == 1 and plan.small  # one split task: not worth a worker process
    assert not plan_read([parquet], options.replace(small_job_bytes=0), split=True).small
    monkeypatch.setattr(physical, "SPLIT_MIN_BYTES", estimated // 2 + 1)  # estimated < 2 × minimum
    plan = plan_read([parquet], options, split=True)
    assert plan.approx_shard_bytes == estimated // 2 + 1
    assert plan.tasks == 2 and not plan.small


def test_at_twice_the_split_minimum_the_input_is_split_per_worker(parquet, monkeypatch):
    estimated = _estimate(parquet)
    monkeypatch.setattr(physical, "SPLIT_MIN_BYTES", estimated // 2)  # estimated >= 2 × minimum
    monkeypatch.setattr(physical, "TASK_MIN_BYTES", 1)
    options = ExecutionOptions(executor="local", workers=2, small_job_bytes=1)
    plan = plan_read([parquet], options, split=True)
    assert plan.approx_shard_bytes == estimated // (physical.TASKS_PER_WORKER * 2)
    assert plan.tasks > 1 and not plan.small
    # the per-task minimum wins over a finer split
    monkeypatch.setattr(physical, "TASK_MIN_BYTES", estimated // 4)
    assert plan_read([parquet], options, split=True).approx_shard_bytes == estimated // 4


def test_no_split_with_enough_files_or_in_process(tmp_path, parquet):
    for i in range(4):
        pq.write_table(pa.table({"text": ["a"]}), tmp_path / f"f{i}.parquet")
    files = sorted(str(p) for p in tmp_path.glob("f*.parquet"))
    enough = plan_read(files, ExecutionOptions(executor="local", workers=1, small_job_bytes=0), split=False)
    assert enough.approx_shard_bytes is None and enough.tasks == 4
    # 4 files < 8 per worker: split (each file stays whole, being small)
    few = plan_read(files, ExecutionOptions(executor="local", workers=1, small_job_bytes=0), split=True)
    assert few.approx_shard_bytes == physical.SPLIT_MIN_BYTES and few.tasks == 4 and not few.small
    inprocess = plan_read([parquet], ExecutionOptions(executor="inprocess"), split=True)
    assert inprocess.approx_shard_bytes is None and not inprocess.small


def test_enough_files_per_worker_are_not_split(tmp_path):
    for i in range(16):
        pq.write_table(pa.table({"text": ["a"]}), tmp_path / f"f{i:02d}.parquet")
    files = sorted(str(p) for p in tmp_path.glob("*.parquet"))
    plan = plan_read(files, ExecutionOptions(executor="local", workers=2), split=True)
    assert plan.approx_shard_bytes is None and plan.tasks == 16


def test_the_tokenize_writer_takes_the_engines_plan(parquet, monkeypatch):
    """``plan_tasks`` adds only the tasks that run at once (encoder threads); the rest is ``plan_read``'s."""
    from zephyr.tokenize.writer import plan_tasks

    monkeypatch.setattr(physical, "SPLIT_MIN_BYTES", _estimate(parquet) // 2)
    monkeypatch.setattr(physical, "TASK_MIN_BYTES", 1)
    options = ExecutionOptions(executor="local", workers=2)
    plan, concurrent = plan_tasks(parquet, options)
    assert plan == plan_read([parquet], options, split=True)
    assert concurrent == 2 and plan.tasks > 2
    assert plan_tasks(parquet, ExecutionOptions(executor="inprocess")) == (None, 1)
    assert plan_tasks(zephyr.read_parquet(parquet), options) == (None, 2)
