"""``partition_sources``: a reducer's partition read whole and sorted in memory, or streamed through an external
merge with a bounded fan-in (several levels of intermediate files), gives the same rows in the same order.

Runs come from the real map side (``write_runs`` at a small budget, several map tasks, many spills each),
so ties between runs, null keys and the run order are what a job produces."""

from __future__ import annotations

import logging
import os
import tempfile

import fsspec
import numpy as np
import pyarrow as pa
import pytest
from zephyr.shuffle.reduce import merge_sorted, partition_sources
from zephyr.shuffle.runs import Run
from zephyr.shuffle.writer import ShuffleSpec, range_boundaries, write_runs

from zephyr.budget import EXPANSION, Budget
from zephyr.io.checksum import checksum_record, file_checksum

FS = fsspec.filesystem("file")
MAP_BUDGET = 4 << 20  # shuffle buffer 1 MiB: every map task spills several runs
TINY = 1 << 20  # reduce budget: fan-in 2, in-memory share 0.4 MiB
HUGE = 1 << 34


def _table(seed: int, rows: int = 30_000) -> pa.Table:
    rng = np.random.default_rng(seed)
    keys = rng.integers(0, 400, rows).astype(object)  # many ties within and across runs
    keys[rng.random(rows) < 0.05] = None
    pad = rng.bytes(rows * 32).hex()
    return pa.table(
        {
            "key": pa.array(keys.tolist(), pa.int64()),
            "task_row": pa.array([f"{seed}:{i}" for i in range(rows)]),
            "pad": pa.array([pad[i * 64 : (i + 1) * 64] for i in range(rows)]),
        }
    )


def _map_side(tmp_path, spec: ShuffleSpec, tasks: int = 4) -> list[Run]:
    runs: list[Run] = []
    for task in range(tasks):
        table = _table(task)
        batches = (table.slice(start, 2000) for start in range(0, table.num_rows, 2000))  # as a task's output
        directory = str(tmp_path / f"map-{task:05d}")
        written, _, _ = write_runs(batches, spec, FS, directory, budget_bytes=MAP_BUDGET, task_index=task)
        runs += [w.run for w in written]
    return runs


def _read(runs: list[Run], partition: int, columns, budget: int) -> tuple[pa.Table | None, int]:
    with partition_sources(runs, partition, columns, budget) as sources:
        count = len(sources)
        batches = list(merge_sorted(sources, columns)) if columns else [t for s in sources for t in s]
        batches = [b for b in batches if b.num_rows]
        return (pa.concat_tables(batches, promote_options="permissive") if batches else None), count


def _specs() -> dict[str, tuple[ShuffleSpec, list]]:
    sample = pa.concat_tables([_table(t) for t in range(4)])
    out = {}
    hash_spec = ShuffleSpec("hash", 3, keys=("key",))
    out["hash"] = (hash_spec, hash_spec.sort_columns)
    for descending in (False, True):
        bounds = range_boundaries(sample, "key", 3, descending=descending)
        spec = ShuffleSpec("range", 3, keys=("key",), descending=(descending,), boundaries=bounds)
        out["range-desc" if descending else "range-asc"] = (spec, spec.sort_columns)
    sort_by = ShuffleSpec("hash", 3, keys=("key",), sort_by=(("task_row", True),))
    out["hash-sort-by"] = (sort_by, sort_by.sort_columns)
    return out


@pytest.mark.parametrize("name", ["hash", "range-asc", "range-desc", "hash-sort-by"])
def test_in_memory_and_external_merge_agree(tmp_path, caplog, name):
    spec, columns = _specs()[name]
    runs = _map_side(tmp_path, spec)
    assert len(runs) >= 8, "the map side should spill several runs per task"
    fan_in = Budget(TINY).merge_fan_in
    assert fan_in == 2
    for partition in range(spec.num_partitions):
        whole, whole_sources = _read(runs, partition, columns, HUGE)
        assert whole_sources == 1  # read whole: one sorted source
        with caplog.at_level(logging.INFO, logger="zephyr.shuffle.reduce"):
            caplog.clear()
            streamed, streamed_sources = _read(runs, partition, columns, TINY)
        assert streamed_sources <= fan_in
        merges = [r for r in caplog.records if "merged" in r.getMessage()]
        assert len(merges) >= 2, "expected a multi-level external merge"
        assert whole is not None and streamed is not None
        assert streamed.to_pylist() == whole.to_pylist()
        assert whole.num_rows == sum(int(pa.concat_tables([_part_rows(r, partition)]).num_rows) for r in runs)


def _part_rows(run: Run, partition: int) -> pa.Table:
    from zephyr.shuffle.runs import part_sources, read_index_block

    tables = [t for s in part_sources(FS, read_index_block(FS, run, partition), 1 << 30) for t in s]
    if not tables:
        return pa.table({"x": pa.array([], pa.int64())})
    return pa.concat_tables(tables, promote_options="permissive")


def test_stable_order_across_runs_and_nulls_last(tmp_path):
    spec = ShuffleSpec("range", 1, keys=("key",), descending=(False,), boundaries=pa.array([], pa.int64()))
    runs = _map_side(tmp_path, spec, tasks=2)
    rows, _ = _read(runs, 0, spec.sort_columns, TINY)
    keys = rows.column("key").to_pylist()
    nulls = keys.index(None)
    assert all(k is None for k in keys[nulls:]) and keys[:nulls] == sorted(keys[:nulls])
    # ties keep (task, row) order: the rows of one key appear in input order
    order = {
        (t, i): n
        for n, (t, i) in enumerate(
            (int(s.split(":")[0]), int(s.split(":")[1])) for s in rows.column("task_row").to_pylist()
        )
    }
    by_key: dict = {}
    for (task, row), position in sorted(order.items(), key=lambda kv: kv[1]):
        by_key.setdefault(keys[position], []).append((task, row))
    for key, members in by_key.items():
        assert members == sorted(members), f"ties of key {key} out of input order"


def test_without_merge_columns_parts_come_in_run_order(tmp_path):
    spec = ShuffleSpec("round_robin", 2)
    runs = _map_side(tmp_path, spec, tasks=2)
    for budget in (TINY, HUGE):
        rows, count = _read(runs, 1, None, budget)
        assert count == sum(1 for r in runs if _part_rows(r, 1).num_rows)
        expected = pa.concat_tables([_part_rows(r, 1) for r in runs if _part_rows(r, 1).num_rows])
        assert rows.to_pylist() == expected.to_pylist()


def test_in_memory_threshold_follows_the_budget_share(tmp_path):
    """A partition is read whole exactly when its stored bytes × EXPANSION fit ``in_memory_reduce_bytes``."""
    spec, columns = _specs()["hash"]
    runs = _map_side(tmp_path, spec, tasks=1)
    from zephyr.shuffle.runs import read_index_block

    stored = sum(read_index_block(FS, r, 0)[0].length for r in runs)
    fits = int(stored * EXPANSION / 0.4) + 16
    with partition_sources(runs, 0, columns, fits) as sources:
        assert len(sources) == 1
    with partition_sources(runs, 0, columns, max(TINY, fits // 4)) as sources:
        assert len(sources) > 1


def test_empty_partition_and_scratch_cleanup(tmp_path, monkeypatch):
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    spec = ShuffleSpec("hash", 64, keys=("key",))
    table = pa.table({"key": pa.array([1, 1, 1], pa.int64())})
    written, _, _ = write_runs(
        [table], spec, FS, str(tmp_path / "map"), budget_bytes=MAP_BUDGET, task_index=0
    )
    runs = [w.run for w in written]
    used = {p for p in range(64) if _part_rows(runs[0], p).num_rows}
    empty = next(p for p in range(64) if p not in used)
    with partition_sources(runs, empty, spec.sort_columns, TINY) as sources:
        assert sources == [] and os.listdir(scratch) == []
    # an external merge leaves its intermediate files in a scratch directory, removed when the block ends
    spec, columns = _specs()["hash"]
    runs = _map_side(tmp_path / "big", spec)
    with partition_sources(runs, 0, columns, TINY):
        (directory,) = os.listdir(scratch)
        assert os.listdir(scratch / directory)
    assert os.listdir(scratch) == []


@pytest.mark.parametrize("name", ["hash", "range-asc", "hash-sort-by"])
def test_coalesced_runs_give_the_same_rows_in_the_same_order(tmp_path, name):
    """Runs coalesced in groups (as a job's combine tasks do) read back, in memory and through the external
    merge, exactly as the map runs themselves: ties across runs keep (map task, run) order either way."""
    from zephyr.shuffle.runs import coalesce_runs

    spec, columns = _specs()[name]
    runs = _map_side(tmp_path, spec)
    groups = [runs[:5], runs[5:6], runs[6:]]
    files = [p for r in runs for p in (r.path, r.path[: -len(".data")] + ".index")]
    checksums = {p: checksum_record(*file_checksum(p)) for p in files}  # as the map tasks' markers hold them
    coalesced = [
        coalesce_runs(
            FS,
            group,
            str(tmp_path / f"group-{g}"),
            spec.num_partitions,
            window_bytes=1 << 16,
            upload_bytes=1 << 20,
            expected=checksums,
        ).run
        for g, group in enumerate(groups)
    ]
    assert [c.slots for c in coalesced] == [5, 1, len(runs) - 6]
    for partition in range(spec.num_partitions):
        for budget in (HUGE, TINY):
            original, _ = _read(runs, partition, columns, budget)
            again, _ = _read(coalesced, partition, columns, budget)
            assert again.equals(original)
