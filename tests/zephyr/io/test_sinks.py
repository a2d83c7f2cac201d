"""ShardWriter: round trips for every format and codec, deterministic bytes, atomic rename, schema casts."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import textwrap

import fsspec
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from zephyr.errors import ConfigError, SchemaError, ZephyrError
from zephyr.io.checksum import file_checksum
from zephyr.io.sinks import ShardWriter, WrittenFile, output_name
from zephyr.io.sources import list_shards, read_shard

FORMATS = [
    pytest.param("parquet", None, id="parquet"),
    pytest.param("jsonl", None, id="jsonl"),
    pytest.param("jsonl", "gzip", id="jsonl-gzip"),
    pytest.param("jsonl", "zstd", id="jsonl-zstd"),
    pytest.param("vortex", None, id="vortex"),
]


def _table(n: int = 500, seed: int = 0) -> pa.Table:
    rng = np.random.default_rng(seed)
    return pa.table(
        {
            "id": pa.array(np.arange(n, dtype=np.int64)),
            "text": [None if i % 11 == 0 else f'tëxt {i} "quoted"\n\t{rng.integers(1e9)}' for i in range(n)],
            "score": pa.array(rng.random(n)),
            "flag": [i % 2 == 0 for i in range(n)],
            "tags": [["a", "b"][: i % 3] if i % 7 else None for i in range(n)],
            "meta": [{"lang": "en", "n": i} if i % 5 else None for i in range(n)],
        }
    )


def _sha(fs, path) -> str:
    return hashlib.sha256(fs.cat(path)).hexdigest()


def _read(path: str) -> pa.Table:
    batches = [b for s in list_shards(path) for b in read_shard(s)]
    return pa.Table.from_batches(batches)


@pytest.mark.parametrize(("fmt", "compression"), FORMATS)
def test_round_trip(tmp_path, fmt, compression):
    table = _table()
    path = str(tmp_path / output_name(3, fmt, compression))
    with ShardWriter(path, fmt, compression=compression) as writer:
        for batch in table.to_batches(max_chunksize=64):
            writer.write(batch)
    result = writer.result
    size, digest = file_checksum(path)  # hashed while written: the same as reading the file back
    checksum = {"bytes": size, "xxh3_128": digest}
    assert result == WrittenFile(
        path=path, rows=table.num_rows, bytes=os.path.getsize(path), checksum=checksum
    )
    back = _read(path)
    assert back.num_rows == table.num_rows
    assert back.to_pylist() == table.to_pylist()
    assert [p for p in os.listdir(tmp_path)] == [os.path.basename(path)]  # no temporary left behind


@pytest.mark.parametrize(("fmt", "compression"), FORMATS)
def test_round_trip_memory_fs(mem_root, fmt, compression):
    table = _table(50)
    path = f"{mem_root}/out/{output_name(0, fmt, compression)}"
    writer = ShardWriter(path, fmt, compression=compression)
    writer.write(table)
    result = writer.close()
    assert result.rows == 50 and result.path == path
    assert _read(result.path).to_pylist() == table.to_pylist()
    fs = fsspec.filesystem("memory")
    assert fs.ls(mem_root.removeprefix("memory://") + "/out", detail=False) == [
        mem_root.removeprefix("memory://") + "/out/" + output_name(0, fmt, compression)
    ]


@pytest.mark.parametrize(("fmt", "compression"), FORMATS)
def test_same_batches_same_bytes(tmp_path, fmt, compression):
    table = _table(2000, seed=3)
    digests = []
    for attempt in range(2):
        path = tmp_path / f"run{attempt}" / output_name(0, fmt, compression)
        with ShardWriter(str(path), fmt, compression=compression) as writer:
            for batch in table.to_batches(max_chunksize=300):
                writer.write(batch)
        digests.append(hashlib.sha256(path.read_bytes()).hexdigest())
    assert digests[0] == digests[1]


def test_parquet_bytes_do_not_depend_on_batching(tmp_path):
    table = _table(3000)
    digests = set()
    for chunk in (100, 777, 3000):
        path = tmp_path / f"c{chunk}.parquet"
        with ShardWriter(str(path), "parquet") as writer:
            for batch in table.to_batches(max_chunksize=chunk):
                writer.write(batch)
        digests.add(hashlib.sha256(path.read_bytes()).hexdigest())
    assert len(digests) == 1


def test_parquet_layout(tmp_path):
    table = _table(5000)
    path = tmp_path / "a.parquet"
    with ShardWriter(str(path), "parquet", row_group_rows=2000) as writer:
        for batch in table.to_batches(max_chunksize=300):
            writer.write(batch)
    metadata = pq.ParquetFile(path).metadata
    assert [metadata.row_group(i).num_rows for i in range(metadata.num_row_groups)] == [2000, 2000, 1000]
    column = metadata.row_group(0).column(0)
    assert column.compression == "ZSTD"
    assert column.is_stats_set and column.statistics.min == 0 and column.statistics.max == 1999
    with ShardWriter(str(tmp_path / "b.parquet"), "parquet", row_group_bytes=20_000) as writer:
        writer.write(table)
    assert pq.ParquetFile(tmp_path / "b.parquet").metadata.num_row_groups > 3


def test_jsonl_text_format(tmp_path):
    table = pa.table(
        {"b": [1, None], "a": ["x", None], "bin": pa.array([b"\x00\xff", None]), "f": [float("nan"), 1.5]}
    )
    path = tmp_path / "a.jsonl"
    with ShardWriter(str(path), "jsonl") as writer:
        writer.write(table)
    lines = path.read_bytes().split(b"\n")
    assert lines[-1] == b""
    first = json.loads(lines[0])
    assert list(first) == ["b", "a", "bin", "f"]  # keys in schema order
    assert first == {"b": 1, "a": "x", "bin": "AP8=", "f": None}  # base64 binary; NaN has no JSON form
    assert json.loads(lines[1]) == {"b": None, "a": None, "bin": None, "f": 1.5}


def test_gzip_header_has_no_name_or_time(tmp_path):
    path = tmp_path / "a.jsonl.gz"
    with ShardWriter(str(path), "jsonl", compression="gzip") as writer:
        writer.write(_table(10))
    header = path.read_bytes()[:10]
    assert header[3] & 0x08 == 0  # FNAME flag unset: no temporary name in the header
    assert header[4:8] == b"\x00\x00\x00\x00"  # mtime 0


# -- atomicity ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("fmt", "compression"), FORMATS)
def test_abort_leaves_nothing(tmp_path, fmt, compression):
    path = tmp_path / output_name(0, fmt, compression)
    writer = ShardWriter(str(path), fmt, compression=compression, row_group_rows=10)
    writer.write(_table(100))
    assert not path.exists()
    writer.abort()
    assert os.listdir(tmp_path) == []
    with pytest.raises(ZephyrError):
        writer.write(_table(1))


def test_exception_in_with_block_aborts(tmp_path):
    path = tmp_path / "a.parquet"
    with pytest.raises(RuntimeError), ShardWriter(str(path), "parquet") as writer:
        writer.write(_table(10))
        raise RuntimeError("task failed")
    assert os.listdir(tmp_path) == []


def test_abort_on_memory_fs(mem_root):
    fs = fsspec.filesystem("memory")
    writer = ShardWriter(f"{mem_root}/a.jsonl", "jsonl")
    writer.write(_table(5))
    writer.abort()
    assert fs.ls(mem_root.removeprefix("memory://"), detail=False) == []


def test_crash_before_close_leaves_no_final_file(tmp_path):
    """A process killed mid-write leaves only a .tmp- file, which listings ignore."""
    path = tmp_path / "out" / "part-00000.parquet"
    script = textwrap.dedent(
        f"""
        import os, pyarrow as pa
        from zephyr.io.sinks import ShardWriter
        writer = ShardWriter({str(path)!r}, "parquet", row_group_rows=10)
        writer.write(pa.table({{"a": list(range(100))}}))
        os._exit(3)
        """
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, timeout=120)
    assert done.returncode == 3, done.stderr.decode()
    assert not path.exists()
    leftovers = os.listdir(path.parent)
    assert len(leftovers) == 1 and ".tmp-" in leftovers[0]
    with pytest.raises(ZephyrError, match="no files with a known extension"):
        list_shards(str(path.parent))


# -- schema ------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("fmt", ["parquet", "jsonl", "vortex"])
def test_lossless_casts_to_the_file_schema(tmp_path, fmt):
    path = tmp_path / f"a.{fmt}"
    with ShardWriter(str(path), fmt, row_group_rows=2) as writer:
        writer.write(pa.table({"x": [1.5, 2.5], "s": ["a", "b"]}))
        writer.write(pa.table({"s": pa.nulls(2), "x": pa.array([3, 4], pa.int64())}))  # reordered, null, int
    back = _read(str(path))
    assert back.column("x").to_pylist() == [1.5, 2.5, 3.0, 4.0]
    assert back.column("s").to_pylist() == ["a", "b", None, None]


def test_first_row_group_promotes_null_columns(tmp_path):
    path = tmp_path / "a.parquet"
    with ShardWriter(str(path), "parquet") as writer:
        writer.write(pa.table({"s": pa.nulls(2), "n": [1, 2]}))
        writer.write(pa.table({"s": ["late", None], "n": [3.5, 4]}))
    schema = pq.read_schema(path)
    assert schema.field("s").type == pa.string() and schema.field("n").type == pa.float64()


@pytest.mark.parametrize("fmt", ["parquet", "jsonl", "vortex"])
def test_lossy_cast_is_schema_error(tmp_path, fmt):
    path = tmp_path / f"a.{fmt}"
    writer = ShardWriter(str(path), fmt, row_group_rows=1)
    writer.write(pa.table({"id": [1, 2]}))
    with pytest.raises(SchemaError) as info:
        writer.write(pa.table({"id": ["x", "y"]}))
    message = str(info.value)
    assert "'id'" in message and "int64" in message and "string" in message and "schema=" in message
    writer.abort()
    assert not path.exists()


@pytest.mark.parametrize("fmt", ["parquet", "jsonl"])
def test_dictionary_columns_of_different_index_types_merge_as_their_values(tmp_path, fmt):
    path = tmp_path / f"a.{fmt}"
    small = pa.array(["a", "b", "a"]).dictionary_encode().cast(pa.dictionary(pa.int8(), pa.string()))
    wide = pa.array(["c", "a"]).dictionary_encode().cast(pa.dictionary(pa.int32(), pa.string()))
    with ShardWriter(str(path), fmt, row_group_rows=3) as writer:
        writer.write(pa.table({"lang": small}))
        writer.write(pa.table({"lang": wide}))
    assert _read(str(path)).column("lang").to_pylist() == ["a", "b", "a", "c", "a"]


def test_a_widened_field_keeps_its_metadata(tmp_path):
    path = tmp_path / "a.parquet"
    field = pa.field("n", pa.int32(), metadata={b"unit": b"tokens"})
    with ShardWriter(str(path), "parquet", row_group_rows=2) as writer:
        writer.write(pa.table([pa.array([1, 2], pa.int32())], schema=pa.schema([field])))
        writer.write(pa.table({"n": pa.array([2**40], pa.int64())}))
    written = pq.read_schema(path).field("n")
    assert written.type == pa.int64() and written.metadata == {b"unit": b"tokens"}


def test_a_nested_conflict_names_the_innermost_field(tmp_path):
    writer = ShardWriter(str(tmp_path / "a.parquet"), "parquet", row_group_rows=1)
    writer.write(pa.table({"meta": [{"lang": "en", "score": 1}]}))
    with pytest.raises(SchemaError, match=r"'meta\.score'"):
        writer.write(pa.table({"meta": [{"lang": "de", "score": "high"}]}))
    writer.abort()


def test_int_too_large_for_double_is_schema_error(tmp_path):
    writer = ShardWriter(str(tmp_path / "a.parquet"), "parquet", schema=pa.schema([("v", pa.float64())]))
    writer.write(pa.table({"v": pa.array([2**53], pa.int64())}))
    with pytest.raises(SchemaError, match="'v'"):
        writer.write(pa.table({"v": pa.array([2**53 + 1], pa.int64())}))
    writer.abort()


def test_explicit_schema_and_extra_column(tmp_path):
    schema = pa.schema([("a", pa.int64()), ("b", pa.string())])
    path = tmp_path / "a.parquet"
    with ShardWriter(str(path), "parquet", schema=schema) as writer:
        writer.write(pa.table({"a": pa.array([1], pa.int32())}))
        with pytest.raises(SchemaError, match=r"\['c'\]"):
            writer.write(pa.table({"a": [1], "c": [2]}))
    assert pq.read_schema(path).remove_metadata() == schema


@pytest.mark.parametrize(("fmt", "compression"), FORMATS)
def test_empty_output(tmp_path, fmt, compression):
    path = tmp_path / output_name(0, fmt, compression)
    schema = pa.schema([("a", pa.int64())])
    with ShardWriter(str(path), fmt, compression=compression, schema=schema) as writer:
        pass
    assert writer.result.rows == 0 and path.exists()
    assert sum(b.num_rows for s in list_shards(str(path)) for b in read_shard(s)) == 0


def test_output_name_and_bad_arguments(tmp_path):
    assert output_name(7, "parquet") == "part-00007.parquet"
    assert output_name(7, "jsonl", "zstd") == "part-00007.jsonl.zst"
    assert output_name(123456, "vortex") == "part-123456.vortex"
    with pytest.raises(ConfigError):
        output_name(0, "parquet", "gzip")
    with pytest.raises(ConfigError):
        ShardWriter(str(tmp_path / "a.csv"), "csv")
    with pytest.raises(ConfigError):
        ShardWriter(str(tmp_path / "a.jsonl.bz2"), "jsonl", compression="bz2")


def test_nested_binary_refused_for_jsonl(tmp_path):
    writer = ShardWriter(str(tmp_path / "a.jsonl"), "jsonl")
    with pytest.raises(SchemaError, match="nests binary"):
        writer.write(pa.table({"x": pa.array([[b"a"]], pa.list_(pa.binary()))}))
    writer.abort()


@pytest.mark.parametrize("fmt", ["parquet", "vortex"])
def test_widening_after_row_groups_were_written(tmp_path, fmt):
    """A column null for the first row groups and strings later: the file is rewritten, nothing is lost."""
    early = pa.table({"id": pa.array(range(0, 30), pa.int64()), "author": pa.nulls(30)})
    late = pa.table({"id": pa.array(range(30, 40), pa.int64()), "author": [f"a{i}" for i in range(10)]})
    path = tmp_path / f"w.{fmt}"
    with ShardWriter(str(path), fmt, row_group_rows=10) as writer:
        writer.write(early)
        writer.write(late)
        writer.write(pa.table({"id": [40.5]}))  # int64 -> double, author missing -> null
    back = _read(str(path))
    assert back.schema.field("author").type == pa.string()
    assert back.schema.field("id").type == pa.float64()
    assert back.column("id").to_pylist() == [float(i) for i in range(40)] + [40.5]
    assert back.column("author").to_pylist() == [None] * 30 + [f"a{i}" for i in range(10)] + [None]
    assert sorted(os.listdir(tmp_path)) == [f"w.{fmt}"]
    if fmt == "parquet":
        assert pq.ParquetFile(path).metadata.num_row_groups == 5
        # same bytes as a writer that knew the wide schema from the start
        wide = back.schema
        direct = tmp_path / "direct.parquet"
        with ShardWriter(str(direct), "parquet", row_group_rows=10, schema=wide) as writer:
            writer.write(early)
            writer.write(late)
            writer.write(pa.table({"id": [40.5]}))
        assert direct.read_bytes() == path.read_bytes()


def test_jsonl_shard_with_late_column_into_parquet(tmp_path):
    """Reader batches widen block by block; the Parquet writer keeps every row."""
    lines = [json.dumps({"i": i, "license": None}) for i in range(3000)]
    lines += [json.dumps({"i": i, "license": "cc-by"}) for i in range(3000, 3100)]
    source = tmp_path / "in.jsonl"
    source.write_text("\n".join(lines) + "\n")
    out = tmp_path / "out.parquet"
    with ShardWriter(str(out), "parquet", row_group_rows=500) as writer:
        for batch in read_shard(list_shards(str(source))[0], batch_bytes=8192):
            writer.write(batch)
    back = pq.read_table(out)
    assert back.num_rows == 3100
    assert back.column("license").null_count == 3000
    assert back.schema.field("license").type == pa.string()
