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
    merging = b.merge_fan_in() * b.spill_row_group_bytes * 4
    floor = 4 * MIB  # the 1 MiB floors make a tiny budget's shares a little larger than it
    for held in (reading_and_writing, spilling, merging, b.in_memory_reduce_bytes):
        assert held <= max(budget, floor)


def test_caps_and_floors():
    assert Budget(1).read_batch_bytes == MIB and Budget(1).merge_fan_in() == 2
    assert Budget(64 << 30).row_group_bytes == 128 * MIB
    assert Budget(64 << 30).partition_target_bytes == PARTITION_TARGET_CAP
    assert Budget(64 << 30).merge_fan_in() == MAX_FAN_IN
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
