"""Parquet reading: projection, bounded batches, corrupt files, missing columns, invalid UTF-8."""

from __future__ import annotations

import io

import fsspec
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from zephyr.errors import InputError, SchemaError
from zephyr.io.sources import Shard, list_shards, read_shard


def _table(n: int = 1000) -> pa.Table:
    return pa.table(
        {
            "id": pa.array(np.arange(n, dtype=np.int64)),
            "text": [f"document number {i} " + "z" * (i % 17) for i in range(n)],
            "meta": [{"len": i % 17, "tags": ["t"] * (i % 3)} for i in range(n)],
        }
    )


def _write(table: pa.Table, path, **kwargs) -> str:
    with fsspec.open(str(path), "wb") as f:
        pq.write_table(table, f, **kwargs)
    return str(path)


def test_round_trip_and_projection(tmp_path, read_all):
    table = _table()
    path = _write(table, tmp_path / "a.parquet", row_group_size=300)
    assert read_all(path).equals(table)
    projected = read_all(path, columns=["text", "id"])
    assert projected.column_names == ["text", "id"]
    assert projected.column("id").equals(table.column("id"))


def test_memory_filesystem(mem_root, read_all):
    table = _table(50)
    _write(table, f"{mem_root}/d/a.parquet")
    assert read_all(f"memory://{mem_root.removeprefix('memory://')}/d/*.parquet").equals(table)


def test_row_group_selection(tmp_path, read_shards):
    table = _table()
    path = _write(table, tmp_path / "a.parquet", row_group_size=100)
    shard = Shard(path=path, format="parquet", index=0, row_groups=(2, 3))
    assert read_shards([shard]).column("id").to_pylist() == list(range(200, 400))
    assert shard.describe() == f"{path} (row groups 2-3)"


def test_batches_are_bounded_even_for_dictionary_heavy_text(tmp_path):
    # one repeated long string: tiny in the footer (dictionary), large once decoded
    n = 20000
    table = pa.table({"text": ["the same long line of text " * 20] * n, "id": np.arange(n)})
    path = _write(table, tmp_path / "a.parquet")
    batch_bytes = 1 << 20
    batches = list(read_shard(list_shards(path)[0], batch_bytes=batch_bytes))
    assert sum(b.num_rows for b in batches) == n
    assert max(b.nbytes for b in batches) <= 2 * batch_bytes
    assert len(batches) > 5


def test_schema_casts_losslessly(tmp_path, read_all):
    table = pa.table({"a": pa.array([1, 2], pa.int32()), "b": ["x", "y"]})
    path = _write(table, tmp_path / "a.parquet")
    schema = pa.schema([("b", pa.large_string()), ("a", pa.int64()), ("c", pa.float64())])
    out = read_all(path, schema=schema)
    assert out.schema == schema
    assert out.column("c").null_count == 2
    with pytest.raises(SchemaError, match="'b'"):
        read_all(path, schema=pa.schema([("b", pa.int64())]))


def test_missing_column_is_schema_error(tmp_path):
    path = _write(_table(10), tmp_path / "a.parquet")
    with pytest.raises(SchemaError) as info:
        list(read_shard(list_shards(path)[0], columns=["id", "txt"]))
    message = str(info.value)
    assert "'txt'" in message and path in message and "['id', 'text', 'meta']" in message


# -- corrupt files ---------------------------------------------------------------------------------------------


def _bytes(table: pa.Table, **kwargs) -> bytes:
    buffer = io.BytesIO()
    pq.write_table(table, buffer, **kwargs)
    return buffer.getvalue()


def _corrupt_cases() -> dict[str, bytes]:
    good = _bytes(_table(2000), compression="none", use_dictionary=False, row_group_size=500)
    footer_length = int.from_bytes(good[-8:-4], "little")
    garbage_page = bytearray(good)
    # overwrite the middle of the first data page of row group 1 with junk bytes
    meta = pq.ParquetFile(io.BytesIO(good)).metadata.row_group(1).column(1)
    start = meta.data_page_offset + 30
    garbage_page[start : start + 200] = b"\xff" * 200
    return {
        "bad-magic": b"NOPE" + good[4:-4] + b"NOPE",
        "truncated-footer": good[: len(good) - 8 - footer_length // 2],
        "cut-in-half": good[: len(good) // 2],
        "garbage-in-page": bytes(garbage_page),
        "zero-bytes": b"",
        "not-parquet": b'{"a": 1}\n',
    }


@pytest.mark.parametrize("case", sorted(_corrupt_cases()))
def test_corrupt_file_is_input_error_naming_the_file(tmp_path, case):
    path = tmp_path / "bad.parquet"
    path.write_bytes(_corrupt_cases()[case])
    with pytest.raises(InputError) as info:
        list(read_shard(list_shards(str(path))[0]))
    assert info.value.path == str(path)
    assert str(path) in str(info.value)
    if case == "garbage-in-page":
        assert "row group 1" in str(info.value)


def test_corrupt_footer_found_when_splitting(tmp_path):
    path = tmp_path / "bad.parquet"
    path.write_bytes(b"PAR1 not really")
    with pytest.raises(InputError, match="bad.parquet"):
        list_shards(str(path), approx_shard_bytes=1000)


# -- invalid UTF-8 -----------------------------------------------------------------------------------------------


def _invalid_utf8_file(path, rows_per_group: int = 4) -> str:
    values = [b"fine", b"caf\xe9", b"ok", None, b"also fine", b"\xff\xfe bad", b"good", b"last"]
    binary = pa.array(values, pa.binary())
    as_string = pa.Array.from_buffers(
        pa.string(), len(binary), binary.buffers(), null_count=binary.null_count
    )
    table = pa.table({"text": as_string, "id": list(range(len(values)))})
    return _write(table, path, row_group_size=rows_per_group)


def test_invalid_utf8_raises_with_row(tmp_path):
    path = _invalid_utf8_file(tmp_path / "u.parquet")
    with pytest.raises(InputError) as info:
        list(read_shard(list_shards(path)[0]))
    assert info.value.row == 1
    assert "invalid UTF-8 in column 'text'" in str(info.value)
    assert path in str(info.value)


def test_invalid_utf8_quarantined(tmp_path, quarantine, read_all):
    path = _invalid_utf8_file(tmp_path / "u.parquet")
    table = read_all(path, on_error="quarantine", quarantine=quarantine)
    assert table.column("id").to_pylist() == [0, 2, 3, 4, 6, 7]
    q = quarantine.table
    assert q.column("line").to_pylist() == [1, 5]  # row index within the file, across row groups
    assert q.column("raw").null_count == 2
    assert all("invalid UTF-8" in r for r in q.column("reason").to_pylist())
    table.validate(full=True)


def test_rows_larger_than_the_batch_are_read_alone_with_one_warning(tmp_path, caplog):
    """A row group cannot be sliced below one row: such rows are read (none lost), and one warning per file
    names it, so a task that exceeds its memory budget says why."""
    rng = np.random.default_rng(0)
    big = [rng.bytes(600_000).hex() for _ in range(6)]  # 1.2 MB of text a row
    path = _write(pa.table({"id": np.arange(6), "text": big}), tmp_path / "wide.parquet", row_group_size=3)
    with caplog.at_level("WARNING", logger="zephyr.io.parquet"):
        batches = list(read_shard(list_shards(path)[0], batch_bytes=1 << 20, buffer_bytes=1 << 20))
    assert pa.Table.from_batches(batches).column("text").to_pylist() == big
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert len(warnings) == 1 and path in warnings[0] and "larger than the read batch" in warnings[0]


@pytest.mark.parametrize("buffer_bytes", [0, 1 << 16, 1 << 20])
def test_buffered_column_reads_give_the_same_rows(tmp_path, buffer_bytes):
    table = _table(5000)
    path = _write(table, tmp_path / "a.parquet", row_group_size=2500)
    batches = read_shard(list_shards(path)[0], batch_bytes=64 << 10, buffer_bytes=buffer_bytes)
    assert pa.Table.from_batches(list(batches)).equals(table)


def test_parquet_rows_sums_footers_local_and_remote(tmp_path):
    from zephyr.io.parquet import parquet_rows

    local = _write(_table(300), tmp_path / "a.parquet", row_group_size=100)
    with fsspec.open("memory:///parquet_rows/b.parquet", "wb") as f:
        pq.write_table(_table(7), f)
    assert parquet_rows([local, "memory:///parquet_rows/b.parquet"]) == 307
    assert parquet_rows([]) == 0  # empty input is valid input


def test_parquet_rows_names_an_unreadable_file(tmp_path):
    from zephyr.io.parquet import parquet_rows

    bad = tmp_path / "bad.parquet"
    bad.write_bytes(b"not parquet")
    with pytest.raises(InputError, match="bad.parquet"):
        parquet_rows([str(bad)])
