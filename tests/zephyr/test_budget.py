"""zephyr.budget: one task's memory budget and its shares."""

from __future__ import annotations

import subprocess
import sys

import pytest

from zephyr.budget import MAX_FAN_IN, PARTITION_TARGET_CAP, Budget

MIB = 1 << 20


@pytest.mark.parametrize("budget", [1 * MIB, 64 * MIB, 256 * MIB, 4 << 30])
def test_task_shares_stay_within_the_budget(budget):
    b = Budget(budget)
    # what a task holds at once on each path, by the module's own account
    reading_and_writing = b.read_batch_bytes + b.row_group_bytes
    spilling = 3 * b.shuffle_buffer_bytes  # the buffer, its sorted copy and the encoding
    merging = b.merge_fan_in * b.spill_row_group_bytes * 4
    floor = 4 * MIB  # the 1 MiB floors make a tiny budget's shares a little larger than it
    for held in (reading_and_writing, spilling, merging, b.in_memory_reduce_bytes):
        assert held <= max(budget, floor)


def test_caps_and_floors():
    assert Budget(1).read_batch_bytes == MIB and Budget(1).merge_fan_in == 2
    assert Budget(64 << 30).row_group_bytes == 128 * MIB
    assert Budget(64 << 30).partition_target_bytes == PARTITION_TARGET_CAP
    assert Budget(64 << 30).merge_fan_in == MAX_FAN_IN
    assert Budget(64 << 30).spill_row_group_bytes == 4 * MIB


def test_the_engine_sizes_partitions_from_the_budget(tmp_path):
    """A job's shuffle partition count follows Budget.partition_target_bytes."""
    import pyarrow as pa

    import zephyr

    table = pa.table({"k": list(range(20_000)), "v": ["x" * 200] * 20_000})
    ds = zephyr.from_arrow(table).sort("k")
    small = ds.write_parquet(str(tmp_path / "small"), executor="inprocess", memory_budget="4MiB")
    large = ds.write_parquet(str(tmp_path / "large"), executor="inprocess", memory_budget="1GiB")
    assert len(small.files) > len(large.files) == 1


def test_describe_lists_every_share():
    out = subprocess.run(
        [sys.executable, "-m", "zephyr.budget", "256MB"], capture_output=True, text=True, check=True
    ).stdout
    names = [line.split()[0] for line in out.splitlines()]
    assert names == [name for name, _, _ in Budget(256_000_000).table()]


def test_kernel_slices_fit_the_running_task_share():
    import pyarrow as pa

    from zephyr.budget import kernel_slices, running, running_budget

    table = pa.table({"text": ["x" * 1000] * 4000})  # ~4 MB
    assert running_budget() is None
    assert [t.num_rows for t in kernel_slices(table, 10.0)] == [4000]  # no task: whole
    budget = Budget(8 * MIB)
    with running(budget):
        assert running_budget() is budget
        slices = list(kernel_slices(table, 10.0))
        assert len(slices) > 1
        assert all(s.nbytes * 10 <= budget.kernel_scratch_bytes for s in slices)
        assert pa.concat_tables(slices).equals(table)
        assert len(list(kernel_slices(table, 0.1))) == 1  # a small multiple: whole
    assert running_budget() is None


def test_a_task_runs_with_its_budget(tmp_path):
    """run_task makes the task's budget the running one, in every executor's thread or process."""
    import zephyr
    from zephyr.budget import running_budget

    def probe(table):
        budget = running_budget()
        return table.append_column("budget", [[budget.bytes if budget else -1] * table.num_rows])

    for executor in ("inprocess", "threads"):
        out = (
            zephyr.from_items([{"x": 1}]).map_batches(probe).to_arrow(executor=executor, memory_budget="3MiB")
        )
        assert out.column("budget").to_pylist() == [3 * MIB]


def _wide_rows(path, rows: int = 4, row_bytes: int = 3 * MIB) -> None:
    """One row group of ``rows`` rows of ~``row_bytes`` of incompressible text each (plus an id)."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = np.random.default_rng(0)
    letters = np.frombuffer(b"abcdefghijklmnopqrstuvwxyz ", dtype=np.uint8)
    texts = [letters[rng.integers(0, len(letters), row_bytes)].tobytes().decode() for _ in range(rows)]
    pq.write_table(pa.table({"id": list(range(rows)), "text": texts}), path, row_group_size=rows)


def test_a_budget_too_small_for_the_rows_is_refused_naming_the_smallest_that_works(tmp_path, capsys):
    """Rows wider than a read batch (budget/8) cannot be split: the command is refused before any task, in one
    line naming the file, the row group and the smallest budget; that budget then runs, one MiB less does not."""
    from zephyr.cli import main

    source = tmp_path / "wide.parquet"
    _wide_rows(source)
    argv = ["sort", str(source), "--by", "id", "--executor", "inprocess"]
    assert main([*argv, "--output", str(tmp_path / "a"), "--memory-budget", "8MiB"]) != 0
    err = capsys.readouterr().err.strip().splitlines()
    refusal = [line for line in err if "the smallest budget that works" in line]
    assert len(refusal) == 1 and f"{source}: row group 0 holds rows of 3.0 MiB" in refusal[0], err
    smallest = refusal[0].split("pass --memory-budget ")[1].split()[0]
    assert smallest.endswith("MiB")
    assert not list(tmp_path.glob("a/*.parquet"))  # refused before any task
    below = f"{int(smallest[:-3]) - 1}MiB"
    assert main([*argv, "--output", str(tmp_path / "b"), "--memory-budget", below]) != 0
    assert "the smallest budget that works" in capsys.readouterr().err
    assert main([*argv, "--output", str(tmp_path / "c"), "--memory-budget", smallest]) == 0
    # the columns a job does not read do not count: the ids alone fit any budget
    import zephyr

    zephyr.read_parquet(str(source), columns=["id"]).write_parquet(
        str(tmp_path / "ids"), executor="inprocess", memory_budget="8MiB"
    )
    with pytest.raises(zephyr.ConfigError, match="the smallest budget that works for this input is"):
        zephyr.read_parquet(str(source)).write_parquet(
            str(tmp_path / "d"), executor="inprocess", memory_budget="8MiB"
        )
