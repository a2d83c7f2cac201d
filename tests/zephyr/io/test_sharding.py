"""Shard listing: one shard per file by default; row-group and byte-range splits cover every row exactly once."""

from __future__ import annotations

import gzip
import json
import pickle

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from zephyr.errors import ConfigError, InputError
from zephyr.io.sources import Shard, list_shards, read_shard


def _jsonl(path, rows) -> str:
    path.write_bytes(b"".join(json.dumps(r).encode() + b"\n" for r in rows))
    return str(path)


def test_one_shard_per_file_in_sorted_order(tmp_path):
    for name in ("b.jsonl", "a.jsonl", "c.jsonl.gz"):
        data = b'{"x": 1}\n'
        (tmp_path / name).write_bytes(gzip.compress(data) if name.endswith(".gz") else data)
    shards = list_shards(str(tmp_path))
    assert [s.path.rsplit("/", 1)[1] for s in shards] == ["a.jsonl", "b.jsonl", "c.jsonl.gz"]
    assert [s.index for s in shards] == [0, 1, 2]
    assert all(s.format == "jsonl" and s.byte_range is None for s in shards)
    assert pickle.loads(pickle.dumps(shards)) == shards
    assert list_shards(str(tmp_path)) == shards  # deterministic


def test_format_inference_and_mismatch(tmp_path):
    (tmp_path / "a.parquet").write_bytes(b"")
    with pytest.raises(ConfigError, match="has a parquet extension"):
        list_shards(str(tmp_path / "a.parquet"), "jsonl")
    (tmp_path / "weird.dat").write_bytes(b"id,text\n")
    with pytest.raises(InputError, match="cannot tell its format from its name or its first bytes"):
        list_shards(str(tmp_path / "weird.dat"))  # as every command lists its inputs (input_files)
    assert list_shards(str(tmp_path / "weird.dat"), "jsonl")[0].format == "jsonl"
    with pytest.raises(ConfigError, match="unknown format"):
        list_shards(str(tmp_path), "csv")


def test_parquet_row_group_split_covers_every_row_once(tmp_path, read_shards):
    n = 10_000
    table = pa.table({"id": np.arange(n), "text": [f"row {i}" for i in range(n)]})
    path = tmp_path / "a.parquet"
    pq.write_table(table, path, row_group_size=700)
    groups = pq.ParquetFile(path).metadata.num_row_groups
    group_bytes = pq.ParquetFile(path).metadata.row_group(0).total_byte_size
    shards = list_shards(str(path), approx_shard_bytes=3 * group_bytes)
    assert len(shards) == -(-groups // 3)
    covered = [g for s in shards for g in s.row_groups]
    assert covered == list(range(groups))
    assert read_shards(shards).column("id").to_pylist() == list(range(n))
    # a shard size above the file keeps one shard for the whole file
    whole = list_shards(str(path), approx_shard_bytes=1 << 40)
    assert len(whole) == 1 and whole[0].row_groups is None


def test_compressed_jsonl_and_vortex_stay_whole(tmp_path):
    (tmp_path / "a.jsonl.gz").write_bytes(gzip.compress(b'{"x": 1}\n' * 10000))
    shards = list_shards(str(tmp_path / "a.jsonl.gz"), approx_shard_bytes=100)
    assert len(shards) == 1 and shards[0].byte_range is None


def test_byte_ranges_cover_lines_once(tmp_path, read_shards):
    rows = [{"n": i, "pad": "p" * (i % 13)} for i in range(5000)]
    path = _jsonl(tmp_path / "a.jsonl", rows)
    shards = list_shards(path, approx_shard_bytes=4096)
    assert len(shards) > 10
    assert shards[0].byte_range[0] == 0
    assert all(a.byte_range[1] == b.byte_range[0] for a, b in zip(shards, shards[1:]))
    assert read_shards(shards).column("n").to_pylist() == list(range(5000))
    assert "(bytes 0-4096)" in shards[0].describe()


def test_byte_ranges_on_memory_fs(mem_root, read_shards):
    import fsspec

    with fsspec.open(f"{mem_root}/m.jsonl", "wb") as f:
        f.write(b"".join(json.dumps({"n": i}).encode() + b"\n" for i in range(300)))
    shards = list_shards(f"{mem_root}/m.jsonl", approx_shard_bytes=100)
    assert len(shards) > 10
    assert read_shards(shards).column("n").to_pylist() == list(range(300))


@settings(
    max_examples=60, deadline=None, database=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    line_lengths=st.lists(st.integers(min_value=0, max_value=120), min_size=0, max_size=60),
    shard_bytes=st.integers(min_value=1, max_value=400),
    trailing_newline=st.booleans(),
)
def test_byte_range_property(tmp_path_factory, line_lengths, shard_bytes, trailing_newline):
    """For any line lengths (0 = blank line) and shard size, the shards' rows are the file's rows in order."""
    lines = [
        b"" if n == 0 else json.dumps({"i": i, "p": "x" * n}).encode() for i, n in enumerate(line_lengths)
    ]
    data = b"\n".join(lines) + (b"\n" if trailing_newline and lines else b"")
    path = tmp_path_factory.mktemp("prop") / "p.jsonl"
    path.write_bytes(data)
    shards = list_shards(str(path), approx_shard_bytes=shard_bytes)
    got = [row["i"] for s in shards for b in read_shard(s, batch_bytes=64) for row in b.to_pylist()]
    expected = [i for i, n in enumerate(line_lengths) if n > 0]
    assert got == expected


def test_shard_describe():
    assert Shard("p", "parquet", 0).describe() == "p"
    assert Shard("p", "parquet", 0, row_groups=(4,)).describe() == "p (row group 4)"
    assert Shard("p", "parquet", 0, row_groups=(1, 5)).describe() == "p (row groups 1, 5)"
    assert Shard("p", "jsonl", 0, byte_range=(10, 20)).describe() == "p (bytes 10-20)"


def test_bad_shard_size(tmp_path):
    (tmp_path / "a.jsonl").write_bytes(b"{}\n")
    with pytest.raises(ConfigError):
        list_shards(str(tmp_path), approx_shard_bytes=0)
