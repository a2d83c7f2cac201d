"""The ZSHX spill-run format (zephyr.shuffle.runs): what RunWriter leaves on disk, read back entry by entry,
and every damage a run can suffer (truncated index or data, padded index, foreign magic, old version, a blob
whose row count disagrees with its entry) raising an ``InputError`` that names the file."""

from __future__ import annotations

import struct

import fsspec
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from zephyr.shuffle.runs import INDEX_VERSION, RunPart, RunWriter, read_index_entry, read_run_part

from zephyr.errors import InputError

FS = fsspec.filesystem("file")
PARTITIONS = 5


def _write_run(
    tmp_path, partitions: np.ndarray | None = None, rows: int = 1000
) -> tuple[str, pa.Table, np.ndarray]:
    """One run over ``rows`` rows; partitions 0, 2 and 4 hold rows, 1 and 3 are empty (by default)."""
    if partitions is None:
        partitions = np.sort(np.random.default_rng(0).choice([0, 2, 4], size=rows))
    table = pa.table(
        {"k": np.arange(len(partitions)), "text": [f"row {i} " * 3 for i in range(len(partitions))]}
    )
    prefix = str(tmp_path / "run-00000")
    RunWriter(FS, prefix, PARTITIONS, row_group_bytes=4096).write(table, partitions)
    return prefix + ".data", table, partitions


def _rows(part: RunPart) -> pa.Table | None:
    tables = list(read_run_part(FS, part))
    return pa.concat_tables(tables) if tables else None


def test_index_layout_is_header_then_one_entry_per_partition(tmp_path):
    data, _, partitions = _write_run(tmp_path)
    raw = (tmp_path / "run-00000.index").read_bytes()
    assert len(raw) == 16 + 24 * PARTITIONS
    magic, version, count = struct.unpack("<4sIQ", raw[:16])
    assert (magic, version, count) == (b"ZSHX", INDEX_VERSION, PARTITIONS)
    entries = np.frombuffer(raw[16:], dtype="<u8").reshape(PARTITIONS, 3)
    assert entries[:, 2].tolist() == [int((partitions == p).sum()) for p in range(PARTITIONS)]
    assert entries[1].tolist() == [0, 0, 0] and entries[3].tolist() == [0, 0, 0]
    # blobs are back to back, in partition order, and fill the data file exactly
    full = entries[entries[:, 2] > 0]
    assert full[0, 0] == 0
    assert (full[1:, 0] == full[:-1, 0] + full[:-1, 1]).all()
    assert full[-1, 0] + full[-1, 1] == (tmp_path / "run-00000.data").stat().st_size


def test_each_partition_reads_back_its_own_rows_in_order(tmp_path):
    data, table, partitions = _write_run(tmp_path)
    for p in range(PARTITIONS):
        part = read_index_entry(FS, data, p)
        assert part.rows == int((partitions == p).sum())
        got = _rows(part)
        if part.rows == 0:
            assert got is None and part.length == 0
            continue
        assert got.equals(table.filter(pa.array(partitions == p)))


def test_blob_streams_in_row_groups_of_the_spill_size(tmp_path):
    data, table, _ = _write_run(tmp_path)
    groups = list(read_run_part(FS, read_index_entry(FS, data, 0)))
    assert len(groups) > 1  # 4 KiB row groups: a reducer holds one at a time, never the whole blob
    assert all(g.num_rows >= 256 for g in groups[:-1])


def test_column_projection(tmp_path):
    data, table, partitions = _write_run(tmp_path)
    got = pa.concat_tables(read_run_part(FS, read_index_entry(FS, data, 2), columns=["k"]))
    assert got.column_names == ["k"]
    assert got.column("k").to_numpy().tolist() == np.flatnonzero(partitions == 2).tolist()


def test_empty_run_writes_an_index_of_empty_entries(tmp_path):
    prefix = str(tmp_path / "run-00000")
    rows, nbytes = RunWriter(FS, prefix, 3, 4096).write(
        pa.table({"k": pa.array([], pa.int64())}), np.array([], np.int64)
    )
    assert (rows, nbytes) == (0, 0)
    assert (tmp_path / "run-00000.data").stat().st_size == 0
    for p in range(3):
        part = read_index_entry(FS, prefix + ".data", p)
        assert (part.offset, part.length, part.rows) == (0, 0, 0)
        assert _rows(part) is None


# -- fault injection: every damage names the file -----------------------------------------------------------


def _damage_index(tmp_path, transform) -> str:
    data, _, _ = _write_run(tmp_path)
    index = tmp_path / "run-00000.index"
    index.write_bytes(transform(index.read_bytes()))
    return data


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        pytest.param(lambda b: b[:10], "truncated", id="cut-in-header"),
        pytest.param(lambda b: b[:-5], "wrong length", id="cut-in-entries"),
        pytest.param(lambda b: b + b"\0" * 24, "wrong length", id="padded"),
        pytest.param(lambda b: b"ZSHY" + b[4:], "not a shuffle index", id="bad-magic"),
        pytest.param(lambda b: b[:4] + struct.pack("<I", 99) + b[8:], "version 99", id="bad-version"),
        pytest.param(
            lambda b: b[:8] + struct.pack("<Q", 7) + b[16:], "wrong length", id="wrong-partition-count"
        ),
        pytest.param(lambda b: b"", "truncated", id="empty"),
    ],
)
def test_damaged_index_names_the_file(tmp_path, damage, message):
    data = _damage_index(tmp_path, damage)
    with pytest.raises(InputError, match=message) as info:
        read_index_entry(FS, data, 0)
    assert str(tmp_path / "run-00000.index") in str(info.value)


def test_missing_index_names_the_file(tmp_path):
    data, _, _ = _write_run(tmp_path)
    (tmp_path / "run-00000.index").unlink()
    with pytest.raises(InputError, match="missing") as info:
        read_index_entry(FS, data, 0)
    assert "run-00000.index" in str(info.value)


def test_partition_out_of_range_and_foreign_partition_count(tmp_path):
    data, _, _ = _write_run(tmp_path)
    with pytest.raises(InputError, match="partition 5 out of range"):
        read_index_entry(FS, data, PARTITIONS)
    with pytest.raises(InputError, match="holds 5 partitions, the job expects 8"):
        read_index_entry(FS, data, 0, num_partitions=8)
    assert read_index_entry(FS, data, 0, num_partitions=PARTITIONS).rows > 0


def test_truncated_data_file_names_the_file(tmp_path):
    data, _, _ = _write_run(tmp_path)
    last = read_index_entry(FS, data, 4)
    with open(data, "r+b") as f:
        f.truncate(last.offset + last.length // 2)
    with pytest.raises(InputError, match="past the end of the data file") as info:
        list(read_run_part(FS, last))
    assert data in str(info.value)
    # partitions before the cut still read whole
    assert _rows(read_index_entry(FS, data, 0)).num_rows == read_index_entry(FS, data, 0).rows


def test_corrupt_blob_names_the_file_and_range(tmp_path):
    data, _, _ = _write_run(tmp_path)
    part = read_index_entry(FS, data, 2)
    with open(data, "r+b") as f:  # overwrite the blob's footer magic
        f.seek(part.offset + part.length - 4)
        f.write(b"XXXX")
    with pytest.raises(InputError, match=f"corrupt shuffle blob at bytes {part.offset}-") as info:
        list(read_run_part(FS, part))
    assert data in str(info.value)


def test_entry_row_count_disagreeing_with_blob_is_caught(tmp_path):
    data, _, _ = _write_run(tmp_path)
    part = read_index_entry(FS, data, 0)
    with pytest.raises(InputError, match=f"holds {part.rows} rows, its index entry says {part.rows + 1}"):
        list(read_run_part(FS, RunPart(data, part.offset, part.length, part.rows + 1)))


def test_blob_is_a_standalone_parquet_file(tmp_path):
    """Documented in the module: each blob can be cut out and read by any Parquet reader."""
    data, table, partitions = _write_run(tmp_path)
    part = read_index_entry(FS, data, 4)
    with open(data, "rb") as f:
        f.seek(part.offset)
        blob = f.read(part.length)
    assert pq.read_table(pa.BufferReader(blob)).equals(table.filter(pa.array(partitions == 4)))
