"""Reduce tasks sized from what the map side wrote (``zephyr.physical.reduce_groups``): a map that shrinks its input
~100× runs a fraction of the planned reduce tasks, and every result (aggregate, deduplicate, join, sort, a
second shuffle after the coalesced one, materialize's rows) is byte-identical to one task per partition; a
with_row_index after the reduce and a user's write keep one task per partition."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

import zephyr
from zephyr import job_stats, physical
from zephyr.budget import Budget

EXECUTION = {"executor": "inprocess", "memory_budget": "4MiB"}


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> list[str]:
    directory = tmp_path_factory.mktemp("wide")
    rng = np.random.default_rng(5)
    paths = []
    for i in range(6):
        rows = 3000
        pad = [bytes(rng.integers(97, 123, 1000, dtype=np.uint8)).decode() for _ in range(rows)]
        table = pa.table({"key": rng.integers(0, 4000, rows), "v": rng.random(rows), "pad": pad})
        paths.append(str(directory / f"in-{i}.parquet"))
        pq.write_table(table, paths[-1], compression="none")
    return paths


def _slim(table: pa.Table) -> pa.Table:
    return table.drop_columns(["pad"])  # opaque to the planner: partitions come from the 18 MB input


def _plans(files: list[str]) -> dict[str, zephyr.Dataset]:
    slim = zephyr.read_parquet(files).map_batches(_slim)
    other = zephyr.read_parquet(files[:3]).map_batches(_slim).select("key")
    counts = slim.group_by("key").agg(total=("v", "sum"), n=("v", "count"))
    return {
        "aggregate": counts,
        "deduplicate": slim.deduplicate("key"),
        "join": slim.join(other, on="key"),
        "sort": slim.sort("v"),
        "second shuffle": counts.map_batches(lambda t: t.set_column(0, "key", pc.bit_wise_and(t["key"], 7)))
        .group_by("key")
        .agg(total=("total", "sum")),
        "row index": counts.with_row_index("row"),
    }


def _run(ds: zephyr.Dataset) -> tuple[pa.Table, list[int]]:
    with job_stats.recording() as jobs:
        table = ds.to_arrow(**EXECUTION)
    return table, [s["tasks"] for s in jobs[0]["stages"]]


def test_a_shrinking_map_runs_fewer_reduce_tasks_with_the_same_rows(files, monkeypatch):
    coalesced = {name: _run(ds) for name, ds in _plans(files).items()}
    minimum = physical.MIN_REDUCE_TASKS
    monkeypatch.setattr(physical, "MIN_REDUCE_TASKS", 1 << 30)  # one task per partition
    planned = {name: _run(ds) for name, ds in _plans(files).items()}
    for name in planned:
        assert coalesced[name][0].equals(planned[name][0]), name
    partitions = planned["aggregate"][1][-1]
    assert partitions >= 16  # planned from the padded input
    assert coalesced["aggregate"][1][-1] == minimum < partitions
    for name in ("deduplicate", "join", "second shuffle"):  # a sort plans from its materialized input
        assert sum(coalesced[name][1]) < sum(planned[name][1]), name
    assert coalesced["row index"][1] == planned["row index"][1]  # row numbers are per task: not coalesced


def test_materialize_writes_a_file_per_coalesced_task_and_a_write_one_per_partition(files, tmp_path):
    ds = zephyr.read_parquet(files).map_batches(_slim).deduplicate("key")
    materialized = ds.materialize(str(tmp_path / "m"), **EXECUTION)
    written = ds.write_parquet(str(tmp_path / "w"), **EXECUTION)
    assert len(materialized.files) == physical.MIN_REDUCE_TASKS < len(written.files)
    assert materialized.to_arrow(**EXECUTION).equals(zephyr.read_parquet(written.files).to_arrow(**EXECUTION))


def test_groups_are_adjacent_ranges_sized_from_the_stored_bytes():
    budget = Budget(1 << 30)  # 64 MiB a partition
    assert physical.reduce_groups(200, 10 << 30, budget, coalesce=True) == [(p, p + 1) for p in range(200)]
    groups = physical.reduce_groups(200, 1 << 30, budget, coalesce=True)  # 5 GiB once decoded: 80 tasks
    assert len(groups) == 80 and groups[0][0] == 0 and groups[-1][1] == 200
    assert all(a[1] == b[0] for a, b in zip(groups, groups[1:]))
    assert len(physical.reduce_groups(200, 0, budget, coalesce=True)) == physical.MIN_REDUCE_TASKS
    assert physical.reduce_groups(5, 0, budget, coalesce=True) == [(p, p + 1) for p in range(5)]
    assert len(physical.reduce_groups(200, 0, budget, coalesce=False)) == 200
