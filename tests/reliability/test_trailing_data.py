"""A .jsonl.gz / .jsonl.zst with bytes after its complete compressed stream (trailing garbage: an appended
log line, a second download glued on, a torn copy): every line of the stream is kept, and the tail is named
with its byte offset, as one quarantine entry under ``--on-error quarantine``, else as one error line.

Valid multi-member gzip (with gzip's zero padding between members) and multi-frame zstd (skippable frames
included) are not a tail: they decode in full, as before.
"""

from __future__ import annotations

import gzip
import json
import struct
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import zstandard

from zephyr.errors import InputError
from zephyr.io.sources import list_shards, read_shard

from .conftest import FAST, zephyr_cli

ROWS = [{"id": i, "text": f"line {i} " + "x" * (i % 50)} for i in range(20000)]  # ~1 MB: several zstd blocks
DATA = b"".join(json.dumps(r).encode() + b"\n" for r in ROWS)
TAILS = {
    "text": b"garbage appended by a log\n",
    "binary": b"\xff\x00\x00" + bytes(range(256)) * 400,  # ~100 KB, more than one read of the input
}


@pytest.fixture(params=[pytest.param("gzip", id="gz"), pytest.param("zstd", id="zst")])
def codec(request) -> str:
    return request.param


def _compress(codec: str, data: bytes) -> bytes:
    if codec == "gzip":
        return gzip.compress(data, mtime=0)
    return zstandard.ZstdCompressor(level=3).compress(data)


def _with_tail(tmp_path: Path, codec: str, tail: bytes) -> tuple[Path, int]:
    """(the file: the stream then ``tail``, the tail's offset)."""
    packed = _compress(codec, DATA)
    path = tmp_path / ("tail.jsonl.gz" if codec == "gzip" else "tail.jsonl.zst")
    path.write_bytes(packed + tail)
    return path, len(packed)


def _read(path: Path, **kwargs) -> tuple[list[int], list[pa.Table]]:
    quarantined: list[pa.Table] = []
    ids: list[int] = []
    for batch in read_shard(list_shards(str(path))[0], quarantine=quarantined.append, **kwargs):
        ids.extend(batch.column("id").to_pylist())
    return ids, quarantined


@pytest.mark.parametrize("tail", list(TAILS), ids=list(TAILS))
def test_quarantine_keeps_every_line_and_records_the_tail(tmp_path, codec, tail):
    path, offset = _with_tail(tmp_path, codec, TAILS[tail])
    ids, quarantined = _read(path, on_error="quarantine")
    assert ids == list(range(len(ROWS)))
    (entry,) = pa.concat_tables(quarantined).to_pylist()
    size = path.stat().st_size - offset
    assert entry["source"] == str(path) and entry["line"] is None
    assert (
        f"{size:,} bytes after the end of its {codec} stream, from byte {offset:,} of the file"
        in entry["reason"]
    )
    assert f"its {len(ROWS):,} lines decompressed and were read" in entry["reason"]
    assert path.read_bytes()[offset:].startswith(entry["raw"]) and 0 < len(entry["raw"]) <= 64 << 10


def test_raise_names_the_file_and_the_offset(tmp_path, codec):
    path, offset = _with_tail(tmp_path, codec, TAILS["text"])
    seen: list[int] = []
    with pytest.raises(InputError) as info:
        for batch in read_shard(list_shards(str(path))[0]):
            seen.extend(batch.column("id").to_pylist())
    assert seen == list(range(len(ROWS)))  # the lines came, and the error still ends the read
    assert info.value.path == str(path)
    message = str(info.value)
    assert f"from byte {offset:,} of the file" in message and f"head -c {offset} FILE" in message
    assert "on_error='quarantine'" in message and "trailing garbage" in message


def test_members_frames_and_padding_are_not_a_tail(tmp_path):
    half = DATA.index(b"\n", len(DATA) // 2) + 1
    skippable = bytes([0x5A, 0x2A, 0x4D, 0x18]) + struct.pack("<I", 6) + b"ignore"
    files = {
        "members.jsonl.gz": _compress("gzip", DATA[:half])
        + b"\0" * 9
        + _compress("gzip", DATA[half:])
        + b"\0",
        "frames.jsonl.zst": _compress("zstd", DATA[:half]) + skippable + _compress("zstd", DATA[half:]),
    }
    for name, packed in files.items():
        (tmp_path / name).write_bytes(packed)
        ids, quarantined = _read(tmp_path / name, on_error="quarantine")
        assert ids == list(range(len(ROWS))) and quarantined == [], name


@pytest.mark.parametrize("command", [("convert",), ("dedup", "exact")], ids=["convert", "dedup-exact"])
def test_cli_keeps_the_rows_and_counts_the_tail_once(tmp_path, codec, command):
    path, offset = _with_tail(tmp_path, codec, TAILS["text"])
    args = (*command, str(path), *FAST)
    run = zephyr_cli(*args, "--output", str(tmp_path / "out"), "--on-error", "quarantine", "--json")
    assert run.returncode == 0, run.stderr
    summary = json.loads(run.stdout)
    assert (summary["rows_in"], summary["rows_kept"], summary["rows_quarantined"]) == (
        len(ROWS) + 1,
        len(ROWS),
        1,
    )
    assert summary["balanced"]
    kept = pa.concat_tables(pq.read_table(p) for p in (tmp_path / "out").glob("*.parquet"))
    assert sorted(kept.column("id").to_pylist()) == list(range(len(ROWS)))
    # dedup exact reads its input twice (hash, then keep), and each pass sets the tail aside: one entry
    entries = pa.concat_tables(
        pq.read_table(p) for p in Path(summary["quarantine_output"]).rglob("*.parquet")
    )
    assert {(e["source"], e["line"], e["reason"]) for e in entries.to_pylist()} == {
        (str(path), None, next(iter(entries.column("reason").to_pylist())))
    }

    run = zephyr_cli(*args, "--output", str(tmp_path / "out2"))
    assert run.returncode == 1
    error = run.stderr.strip().splitlines()[0]
    assert error.startswith(f"zephyr {' '.join(command)}: error: InputError: {path}: ")
    assert f"from byte {offset:,} of the file" in error and "--on-error quarantine" in error
