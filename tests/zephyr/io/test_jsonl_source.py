"""JSONL reading: round trips, bad lines (raise / quarantine with exact line numbers), truncation, schemas."""

from __future__ import annotations

import gzip
import json
import os

import fsspec
import pyarrow as pa
import pytest
import zstandard

from zephyr.errors import ConfigError, InputError, SchemaError
from zephyr.io.sources import Shard, list_shards, read_shard


def _write(path, data: bytes) -> str:
    with fsspec.open(path, "wb") as f:
        f.write(data)
    return str(path)


def _lines(rows) -> bytes:
    return b"".join(json.dumps(r).encode() + b"\n" for r in rows)


ROWS = [{"id": i, "text": f"doc {i} ü", "score": i / 2, "tags": ["a"] * (i % 3)} for i in range(200)]


@pytest.mark.parametrize("suffix", [".jsonl", ".jsonl.gz", ".jsonl.zst", ".ndjson", ".json"])
def test_round_trip_every_codec(tmp_path, read_all, suffix):
    data = _lines(ROWS)
    if suffix.endswith(".gz"):
        data = gzip.compress(data)
    elif suffix.endswith(".zst"):
        data = zstandard.ZstdCompressor().compress(data)
    path = _write(tmp_path / f"x{suffix}", data)
    table = read_all(path, batch_bytes=1024)
    assert table.to_pylist() == ROWS


def test_small_batches_are_bounded(tmp_path):
    path = _write(tmp_path / "x.jsonl", _lines(ROWS))
    batches = list(read_shard(list_shards(path)[0], batch_bytes=2048))
    assert len(batches) > 3
    assert sum(b.num_rows for b in batches) == len(ROWS)
    assert len({b.schema for b in batches}) == 1


def test_memory_filesystem(mem_root, read_all):
    _write(f"{mem_root}/a/x.jsonl.gz", gzip.compress(_lines(ROWS[:5])))
    assert read_all(f"{mem_root}/a").to_pylist() == ROWS[:5]


def test_blank_and_crlf_lines_are_skipped(tmp_path, read_all):
    data = b'\n  \n{"a":1}\r\n\r\n{"a":2}\n\t \n{"a":3}\n   '
    path = _write(tmp_path / "x.jsonl", data)
    assert read_all(path).to_pylist() == [{"a": 1}, {"a": 2}, {"a": 3}]


def test_utf8_byte_order_mark_is_skipped(tmp_path, read_all):
    path = _write(tmp_path / "x.jsonl", b'\xef\xbb\xbf{"a":1}\n{"a":2}\n')
    assert read_all(path).column("a").to_pylist() == [1, 2]


def test_last_line_without_newline(tmp_path, read_all):
    path = _write(tmp_path / "x.jsonl", b'{"a":1}\n{"a":2}')
    assert read_all(path).column("a").to_pylist() == [1, 2]


@pytest.mark.parametrize(
    "payload",
    [b"", gzip.compress(b""), zstandard.ZstdCompressor().compress(b""), b"\n\n  \n"],
    ids=["zero-bytes", "gzip-empty", "zstd-empty", "only-blank"],
)
def test_empty_file_is_zero_rows(tmp_path, payload):
    suffix = (
        ".jsonl.gz" if payload[:2] == b"\x1f\x8b" else ".jsonl.zst" if payload[:1] == b"\x28" else ".jsonl"
    )
    path = _write(tmp_path / f"x{suffix}", payload)
    assert list(read_shard(list_shards(path)[0])) == []


def test_zero_byte_compressed_file_is_empty(tmp_path):
    for suffix in (".jsonl.gz", ".jsonl.zst"):
        path = _write(tmp_path / f"x{suffix}", b"")
        assert list(read_shard(list_shards(path)[0])) == []


# -- bad lines ---------------------------------------------------------------------------------------------------

BAD_CASES = {
    "invalid-json": (b'{"a": 1,}', "invalid JSON"),
    "not-an-object-array": (b"[1, 2]", "not an object"),
    "not-an-object-number": (b"42", "not an object"),
    "not-an-object-string": (b'"hello"', "not an object"),
    "invalid-utf8": (b'{"a": "caf\xe9"}', "invalid UTF-8"),
    "two-objects": (b'{"a": 1}{"a": 2}', "invalid JSON"),
    "duplicate-key": (b'{"a": 1, "a": 2}', "rejected by the JSON parser"),
    "unterminated": (b'{"a": "x', "invalid JSON"),
}


def _file_with_bad_line(tmp_path, bad: bytes, bad_line: int = 5, total: int = 9) -> str:
    out = []
    for line in range(1, total + 1):
        out.append(bad if line == bad_line else json.dumps({"a": line}).encode())
    return _write(tmp_path / "bad.jsonl", b"\n".join(out) + b"\n")


@pytest.mark.parametrize("case", sorted(BAD_CASES))
def test_bad_line_raises_with_file_and_line(tmp_path, case):
    bad, reason = BAD_CASES[case]
    path = _file_with_bad_line(tmp_path, bad)
    with pytest.raises(InputError) as info:
        list(read_shard(list_shards(path)[0]))
    assert info.value.path == path
    assert info.value.line == 5
    assert f"{path}:5:" in str(info.value)
    assert reason in str(info.value)


@pytest.mark.parametrize("case", sorted(BAD_CASES))
def test_bad_line_quarantined_good_lines_kept_in_order(tmp_path, case, quarantine):
    bad, reason = BAD_CASES[case]
    path = _file_with_bad_line(tmp_path, bad)
    rows = [b for b in read_shard(list_shards(path)[0], on_error="quarantine", quarantine=quarantine)]
    kept = pa.Table.from_batches(rows).column("a").to_pylist()
    assert kept == [1, 2, 3, 4, 6, 7, 8, 9]
    q = quarantine.table
    assert q.column("line").to_pylist() == [5]
    assert q.column("source").to_pylist() == [path]
    assert q.column("raw").to_pylist() == [bad]
    assert reason in q.column("reason")[0].as_py()


def test_quarantine_accounting_over_many_bad_lines(tmp_path, quarantine):
    """rows yielded + rows quarantined == non-blank lines, across several blocks."""
    lines, expected_bad, expected_good = [], [], []
    for n in range(1, 3001):
        if n % 97 == 0:
            lines.append(b"{broken")
            expected_bad.append(n)
        elif n % 101 == 0:
            lines.append(b"")
        else:
            lines.append(json.dumps({"n": n, "pad": "x" * (n % 50)}).encode())
            expected_good.append(n)
    path = _write(tmp_path / "many.jsonl", b"\n".join(lines) + b"\n")
    batches = list(
        read_shard(list_shards(path)[0], on_error="quarantine", quarantine=quarantine, batch_bytes=4096)
    )
    good = pa.Table.from_batches(batches).column("n").to_pylist()
    assert good == expected_good
    assert quarantine.table.column("line").to_pylist() == expected_bad
    content_lines = sum(1 for line in lines if line.strip())
    assert len(good) + quarantine.table.num_rows == content_lines


def test_first_bad_line_of_a_later_block_has_absolute_line_number(tmp_path):
    rows = [json.dumps({"n": n}).encode() for n in range(1, 2001)]
    rows[1499] = b'{"n": nope}'
    path = _write(tmp_path / "x.jsonl", b"\n".join(rows) + b"\n")
    with pytest.raises(InputError, match=r":1500: invalid JSON") as info:
        list(read_shard(list_shards(path)[0], batch_bytes=1000))
    assert info.value.line == 1500


def test_json_array_file_gets_a_hint(tmp_path):
    path = _write(tmp_path / "x.json", b'[\n{"a": 1},\n{"a": 2}\n]\n')
    with pytest.raises(InputError, match="looks like one JSON array"):
        list(read_shard(list_shards(path)[0]))


def test_gzip_data_with_plain_name_is_named(tmp_path):
    path = _write(tmp_path / "x.jsonl", gzip.compress(_lines(ROWS)))
    with pytest.raises(InputError, match=r"gzip-compressed but its name has no \.gz"):
        list(read_shard(list_shards(path)[0]))


# -- truncation ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("codec", ["gzip", "zstd"])
def test_truncated_stream_raises_with_last_good_line(tmp_path, codec):
    rows = [{"n": n, "text": f"row {n} " + "y" * (n % 40)} for n in range(20000)]
    data = _lines(rows)
    if codec == "gzip":
        packed, suffix = gzip.compress(data, mtime=0), ".jsonl.gz"
    else:
        packed, suffix = zstandard.ZstdCompressor().compress(data), ".jsonl.zst"
    path = _write(tmp_path / f"cut{suffix}", packed[: len(packed) // 2])
    seen = []
    with pytest.raises(InputError, match=rf"truncated {codec} stream.*after line (\d+)") as info:
        for batch in read_shard(list_shards(path)[0], batch_bytes=16 << 10):
            seen.extend(batch.column("n").to_pylist())
    assert info.value.path == path
    last_good = int(str(info.value).split("after line ")[1].split(" ")[0])
    assert seen == list(range(len(seen)))  # no row skipped before the cut
    assert last_good == len(seen)  # the message names the last line actually read
    assert 0 < last_good < len(rows)


def test_truncated_multi_member_gzip(tmp_path):
    packed = gzip.compress(b'{"a":1}\n', mtime=0) + gzip.compress(b'{"a":2}\n' * 1000, mtime=0)
    path = _write(tmp_path / "x.jsonl.gz", packed[:-12])
    with pytest.raises(InputError, match="truncated gzip"):
        list(read_shard(list_shards(path)[0]))


def test_multi_member_and_multi_frame_read_fully(tmp_path, read_all):
    gz = gzip.compress(b'{"a":1}\n', mtime=0) + gzip.compress(b'{"a":2}\n', mtime=0)
    zs = zstandard.ZstdCompressor().compress(b'{"a":1}\n') + zstandard.ZstdCompressor().compress(b'{"a":2}\n')
    assert read_all(_write(tmp_path / "x.jsonl.gz", gz)).column("a").to_pylist() == [1, 2]
    assert read_all(_write(tmp_path / "x.jsonl.zst", zs)).column("a").to_pylist() == [1, 2]


def test_corrupt_gzip_names_the_file(tmp_path):
    packed = bytearray(gzip.compress(_lines(ROWS), mtime=0))
    packed[40:60] = b"\x00" * 20
    path = _write(tmp_path / "x.jsonl.gz", bytes(packed))
    with pytest.raises(InputError) as info:
        list(read_shard(list_shards(path)[0]))
    assert info.value.path == path


# -- big lines -------------------------------------------------------------------------------------------------


def test_fifty_megabyte_single_line(tmp_path, read_shards):
    text = "x" * (50 << 20)
    path = tmp_path / "big.jsonl"
    with open(path, "wb") as f:
        f.write(b'{"i": 0}\n{"i": 1, "text": "')
        f.write(text.encode())
        f.write(b'"}\n{"i": 2}\n')
    table = read_shards(list_shards(str(path)), batch_bytes=1 << 20)
    assert table.column("i").to_pylist() == [0, 1, 2]
    assert len(table.column("text")[1].as_py()) == 50 << 20


# -- schema ----------------------------------------------------------------------------------------------------


def test_types_promote_across_blocks(tmp_path):
    rows = [{"a": None, "b": 1}] * 200 + [{"a": "text", "b": 2.5, "c": True}] * 200
    path = _write(tmp_path / "x.jsonl", _lines(rows))
    batches = list(read_shard(list_shards(path)[0], batch_bytes=2000))
    assert len(batches) > 2
    last = batches[-1].schema
    assert last.field("a").type == pa.string()
    assert last.field("b").type == pa.float64()
    assert last.names == ["a", "b", "c"]
    # schemas only widen: every batch casts losslessly into the last one
    table = pa.concat_tables([pa.Table.from_batches([b]) for b in batches], promote_options="permissive")
    assert table.column("b").to_pylist()[:1] == [1]
    assert table.num_rows == 400


def test_type_conflict_across_blocks_is_schema_error(tmp_path):
    rows = [{"id": 1}] * 300 + [{"id": "x"}] * 300
    path = _write(tmp_path / "x.jsonl", _lines(rows))
    with pytest.raises(
        SchemaError, match=r"lines \d+-\d+: column 'id' is int64 in earlier rows but string.*schema="
    ):
        list(read_shard(list_shards(path)[0], batch_bytes=1000))


def test_type_conflict_within_block_names_line(tmp_path):
    path = _write(tmp_path / "x.jsonl", _lines([{"id": 1}, {"id": 2}, {"id": "three"}, {"id": 4}]))
    with pytest.raises(SchemaError) as info:
        list(read_shard(list_shards(path)[0]))
    message = str(info.value)
    assert path in message and "'id'" in message and "line 3" in message and "schema=" in message


def test_conflict_even_in_quarantine_mode_is_schema_error(tmp_path, quarantine):
    path = _write(tmp_path / "x.jsonl", _lines([{"id": 1}, {"id": "x"}]))
    with pytest.raises(SchemaError):
        list(read_shard(list_shards(path)[0], on_error="quarantine", quarantine=quarantine))


def test_explicit_schema_is_used_and_misfits_are_bad_lines(tmp_path, quarantine):
    schema = pa.schema([("id", pa.string()), ("n", pa.int64())])
    rows = [{"id": "a", "n": 1, "extra": 1}, {"id": "b", "n": 1.5}, {"id": 3, "n": 2}, {"id": "d"}]
    path = _write(tmp_path / "x.jsonl", _lines(rows))
    batches = list(
        read_shard(list_shards(path)[0], schema=schema, on_error="quarantine", quarantine=quarantine)
    )
    table = pa.Table.from_batches(batches)
    assert table.schema == schema
    assert table.to_pylist() == [{"id": "a", "n": 1}, {"id": "d", "n": None}]
    assert quarantine.table.column("line").to_pylist() == [2, 3]
    with pytest.raises(InputError, match=r":2: rejected by the JSON parser"):
        list(read_shard(list_shards(path)[0], schema=schema))


def test_dates_stay_strings(tmp_path, read_all):
    rows = [
        {"d": "2020-01-01", "nested": {"t": "2021-02-03T04:05:06"}},
        {"d": "not a date", "nested": {"t": "x"}},
    ]
    path = _write(tmp_path / "x.jsonl", _lines(rows[:1]) * 50 + _lines(rows[1:]))
    table = read_all(path, batch_bytes=512)
    assert table.column("d").to_pylist()[0] == "2020-01-01"
    assert table.column("d").to_pylist()[-1] == "not a date"
    assert table.column("nested").to_pylist()[0] == {"t": "2021-02-03T04:05:06"}


def test_columns_projection(tmp_path, read_all):
    path = _write(tmp_path / "x.jsonl", _lines(ROWS[:10]))
    table = read_all(path, columns=["text", "id", "absent"])
    assert table.column_names == ["text", "id", "absent"]
    assert table.column("id").to_pylist() == list(range(10))
    assert table.column("absent").null_count == 10


def test_empty_objects_count_as_rows(tmp_path, read_all):
    path = _write(tmp_path / "x.jsonl", b"{}\n{}\n{}\n")
    assert read_all(path).num_rows == 3


# -- byte ranges -------------------------------------------------------------------------------------------------


def test_byte_range_error_reports_byte_offset(tmp_path):
    lines = [json.dumps({"n": n}).encode() for n in range(100)]
    lines[80] = b"{oops"
    data = b"\n".join(lines) + b"\n"
    path = _write(tmp_path / "x.jsonl", data)
    offset = data.index(b"{oops")
    shard = Shard(path=path, format="jsonl", index=0, byte_range=(offset - 20, len(data)))
    with pytest.raises(InputError) as info:
        list(read_shard(shard))
    assert f"byte offset {offset}" in str(info.value)
    assert "line number unknown" in str(info.value)
    first = Shard(path=path, format="jsonl", index=0, byte_range=(0, offset + 3))
    with pytest.raises(InputError, match=":81:"):
        list(read_shard(first))


def test_byte_range_on_compressed_file_is_refused(tmp_path):
    path = _write(tmp_path / "x.jsonl.gz", gzip.compress(_lines(ROWS)))
    with pytest.raises(ConfigError):
        list(read_shard(Shard(path=path, format="jsonl", index=0, byte_range=(0, 10))))


# -- arguments ---------------------------------------------------------------------------------------------------


def test_quarantine_mode_needs_a_callback(tmp_path):
    path = _write(tmp_path / "x.jsonl", _lines(ROWS[:2]))
    with pytest.raises(ConfigError, match="quarantine"):
        read_shard(list_shards(path)[0], on_error="quarantine")
    with pytest.raises(ConfigError):
        read_shard(list_shards(path)[0], on_error="ignore")


def test_missing_file_after_listing(tmp_path):
    path = _write(tmp_path / "x.jsonl", _lines(ROWS[:2]))
    shard = list_shards(path)[0]
    os.remove(path)
    with pytest.raises(InputError, match="not found"):
        list(read_shard(shard))
