"""Coalescing a shuffle's runs (``coalesce_runs``): byte-identical outputs with and without it on every
executor, a coalesce stage that resumes, retries and reruns like any stage (a rerun map task reruns exactly
its group; a damaged coalesced run reruns its group), markers confined to their group's folder, and the rule
that decides when and in how many groups (``zephyr.shuffle.runs.coalesce_plan``)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from zephyr.shuffle.runs import COALESCE_PART_BYTES, coalesce_plan, group_count, max_slots

import zephyr
from zephyr import resume
from zephyr.budget import Budget

BUDGET = "2MiB"  # every map task spills several runs
FILES = 6


@pytest.fixture(scope="module")
def inputs(tmp_path_factory) -> str:
    directory = tmp_path_factory.mktemp("inputs")
    rng = np.random.default_rng(3)
    for i in range(FILES):
        rows = 6000
        pq.write_table(
            pa.table(
                {
                    "id": np.arange(i * rows, (i + 1) * rows),
                    "key": rng.integers(0, 700, rows),
                    "word": [f"w{v}" for v in rng.integers(0, 20_000, rows)],
                }
            ),
            directory / f"in-{i:02d}.parquet",
        )
    return str(directory / "*.parquet")


PLANS = {
    "sort": lambda ds: ds.sort("key", "word", num_partitions=5),
    "group_by": lambda ds: ds.group_by("key", num_partitions=4).agg(n=("id", "count"), w=("word", "first")),
    "group_apply": lambda ds: ds.group_by("key", num_partitions=3).reduce(lambda t: t.slice(0, 1)),
    "join": lambda ds: ds.join(ds.group_by("key", num_partitions=2).count(), on="key", num_partitions=3),
    "deduplicate": lambda ds: ds.deduplicate("word", num_partitions=4),
}


def _digest(directory: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(directory.glob("part-*"))}


def _write(inputs: str, plan: str, out: Path, **options) -> dict:
    result = PLANS[plan](zephyr.read_parquet(inputs)).write_parquet(
        str(out), memory_budget=BUDGET, small_job_bytes=0, **options
    )
    return result.stats


def _coalesce_stages(stats: dict) -> list[dict]:
    return [s for s in stats["stages"] if s["stage"].endswith("coalesce runs")]


@pytest.mark.parametrize("plan", list(PLANS))
def test_outputs_identical_with_and_without_coalescing(inputs, plan, tmp_path):
    reference = _write(inputs, plan, tmp_path / "plain", executor="inprocess", coalesce_runs="never")
    assert not _coalesce_stages(reference)
    for executor, workers in (("inprocess", 1), ("threads", 3), ("local", 2)):
        out = tmp_path / f"{executor}"
        stats = _write(inputs, plan, out, executor=executor, workers=workers, coalesce_runs="always")
        stages = _coalesce_stages(stats)
        assert stages and all(s["tasks"] == workers for s in stages)  # a group per worker
        assert _digest(out) == _digest(tmp_path / "plain"), executor


def _first_row(group: pa.Table) -> pa.Table:
    return group.slice(0, 1)


def test_a_group_of_map_tasks_without_runs(tmp_path):
    """Map tasks 3-5 read empty files and write no run: the second group coalesces nothing, and its empty run
    is not read; the first two map tasks spill several runs each, so there is something to coalesce."""
    rng = np.random.default_rng(8)
    for i in range(6):
        rows = 200_000 if i < 2 else 0
        table = pa.table(
            {"key": rng.integers(0, 700, rows), "word": [f"w{v}" for v in rng.integers(0, 9, rows)]}
        )
        pq.write_table(table, tmp_path / f"in-{i}.parquet")
    plan = zephyr.read_parquet(str(tmp_path / "in-*.parquet")).group_by("key", num_partitions=3)
    plan = plan.reduce(_first_row)  # no map-side combine: every row is shuffled
    options = dict(memory_budget=BUDGET, small_job_bytes=0, executor="threads", workers=2)
    plain = plan.write_parquet(str(tmp_path / "plain"), coalesce_runs="never", **options)
    merged = plan.write_parquet(str(tmp_path / "merged"), coalesce_runs="always", **options)
    assert plain.stats["stages"][0]["tasks"] == 6
    assert _coalesce_stages(merged.stats)[0]["tasks"] == 2
    assert _digest(tmp_path / "merged") == _digest(tmp_path / "plain")


def test_auto_does_not_coalesce_on_a_local_disk(inputs, tmp_path):
    stats = _write(inputs, "sort", tmp_path / "out", executor="threads", workers=2)
    assert not _coalesce_stages(stats)


def _work(tmp_path: Path) -> dict:
    return dict(executor="threads", workers=2, coalesce_runs="always", work_dir=str(tmp_path / "work"))


def _stage(stats: dict, suffix: str) -> dict:
    return next(s for s in stats["stages"] if s["stage"].endswith(suffix))


def _markers(work: Path, fingerprint: str) -> list[Path]:
    return sorted((work / f"stage-{fingerprint}" / "_done").glob("task-*.json"))


def test_a_rerun_map_task_reruns_exactly_its_group(inputs, tmp_path):
    first = _write(inputs, "group_by", tmp_path / "a", **_work(tmp_path))
    expected = _digest(tmp_path / "a")
    mapped, groups = _stage(first, "ReadFiles"), _stage(first, "coalesce runs")
    assert (mapped["tasks"], groups["tasks"]) == (FILES, 2)
    reduce = _stage(first, "GroupAggregate")
    for marker in _markers(tmp_path / "work", reduce["fingerprint"]):
        marker.unlink()  # the reducers read again, from the group rerun below
    _markers(tmp_path / "work", mapped["fingerprint"])[4].unlink()  # map task 4: in the second group
    again = _write(inputs, "group_by", tmp_path / "b", **_work(tmp_path))
    assert _stage(again, "ReadFiles")["tasks_resumed"] == FILES - 1
    assert _stage(again, "coalesce runs")["tasks_resumed"] == 1  # the first group kept
    group = json.loads(_markers(tmp_path / "work", groups["fingerprint"])[1].read_text())
    assert all("/map-00004/" not in run or run in group["inputs"] for run in group["inputs"])
    assert _digest(tmp_path / "b") == expected


def test_a_damaged_coalesced_run_reruns_its_group_and_a_changed_map_run_is_recomputed(inputs, tmp_path):
    first = _write(inputs, "sort", tmp_path / "a", **_work(tmp_path))
    expected = _digest(tmp_path / "a")
    work = tmp_path / "work"
    groups, reduce = _stage(first, "coalesce runs"), _stage(first, "Sort")
    for marker in _markers(work, reduce["fingerprint"]):
        marker.unlink()
    group = json.loads(_markers(work, groups["fingerprint"])[0].read_text())
    data = Path(group["runs"][0])
    data.write_bytes(data.read_bytes()[:-10])  # cut short
    map_stage = [s for s in first["stages"] if s["stage"] == "ReadFiles"][-1]  # after the sample stage
    mapped = json.loads(_markers(work, map_stage["fingerprint"])[-1].read_text())
    changed = Path(mapped["runs"][0])
    raw = bytearray(changed.read_bytes())
    raw[len(raw) // 2] ^= 0xFF
    changed.write_bytes(bytes(raw))  # same size, other bytes: the map task's resume check sees it
    again = _write(inputs, "sort", tmp_path / "b", **_work(tmp_path))
    assert _stage(again, "coalesce runs")["tasks_resumed"] == 0  # group 0 damaged, group 1's input changed
    assert sum(s["tasks"] - s["tasks_resumed"] for s in again["stages"] if s["stage"] == "ReadFiles") == 1
    assert _digest(tmp_path / "b") == expected


def test_a_failing_coalesce_task_is_retried(inputs, tmp_path, monkeypatch):
    import zephyr.tasks

    reference = _write(inputs, "deduplicate", tmp_path / "plain", executor="inprocess", coalesce_runs="never")
    real = zephyr.tasks.coalesce_runs
    calls = []

    def flaky(*args, **kwargs):
        calls.append(1)
        if len(calls) == 1:
            raise ConnectionError("connection reset by the object store")
        return real(*args, **kwargs)

    monkeypatch.setattr(zephyr.tasks, "coalesce_runs", flaky)
    stats = _write(inputs, "deduplicate", tmp_path / "out", executor="inprocess", coalesce_runs="always")
    assert _stage(stats, "coalesce runs")["task_retries"] == 1
    assert not _coalesce_stages(reference)
    assert _digest(tmp_path / "out") == _digest(tmp_path / "plain")


def test_a_coalesce_marker_names_only_its_own_group_folder(tmp_path):
    from zephyr.tasks import CoalesceOutput, StageSpec, TaskSpec, owned_folders

    stage = StageSpec("fp", "coalesce", (), CoalesceOutput(str(tmp_path / "stage" / "runs"), 4))
    task = TaskSpec(
        "fp", 2, str(tmp_path / "stage/_done/task-00002.json"), str(tmp_path / "q.parquet"), 1 << 20
    )
    rules = owned_folders(stage, task)["runs"]
    assert resume.inside(f"{tmp_path}/stage/runs/group-00002/abc/run-00000.data", rules)
    assert not resume.inside(f"{tmp_path}/stage/runs/group-00003/abc/run-00000.data", rules)
    assert not resume.inside(f"{tmp_path}/stage/runs/map-00002/abc/run-00000.data", rules)


# -- when and in how many groups ---------------------------------------------------------------------------


def test_groups_follow_the_workers_and_map_task_order():
    budget = Budget(1 << 30)
    groups = coalesce_plan([2] * 100, 100 << 20, 64, 4, budget)
    assert [(g.start, g.stop) for g in groups] == [(0, 25), (25, 50), (50, 75), (75, 100)]
    assert coalesce_plan([2] * 100, 100 << 20, 64, 4, budget, remote=False) == []  # auto: object stores only
    assert len(coalesce_plan([2] * 100, 100 << 20, 64, 4, budget, mode="always", remote=False)) == 4
    assert coalesce_plan([2] * 100, 100 << 20, 64, 4, budget, mode="never") == []
    assert coalesce_plan([1] * 4, 4 << 20, 64, 8, budget, mode="always") == []  # no fewer runs than now


def test_group_count_grows_with_the_bytes_and_the_index_memory():
    budget = Budget(1 << 30)
    chunk = budget.spill_row_group_bytes
    # a reducer's share of a group is at most a chunk: 10 groups, over 8 workers
    assert group_count(1000, 10 * 4096 * chunk, 4096, 8, budget) == 10
    assert max_slots(4096, budget) == (1 << 30) // 8 // (48 * 4096)
    assert group_count(100_000, 1, 4096, 8, budget) == -(-100_000 // max_slots(4096, budget))


def test_auto_coalesces_small_parts_only():
    budget = Budget(1 << 30)
    runs, partitions = 1000, 100
    small = runs * partitions * (COALESCE_PART_BYTES - 1)
    assert coalesce_plan([1] * runs, small, partitions, 10, budget)
    assert coalesce_plan([1] * runs, runs * partitions * COALESCE_PART_BYTES, partitions, 10, budget) == []
