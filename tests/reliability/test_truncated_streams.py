"""A .jsonl.gz / .jsonl.zst cut mid-stream: every whole line that decompresses is read, and the cut is named.

The expected line count comes from an independent decoder (zlib / zstandard's decompressobj over the cut bytes),
and reads use the default 64 MiB batch, the size at which the whole file used to be lost.
"""

from __future__ import annotations

import gzip
import io
import json
import zlib
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from zephyr.errors import InputError
from zephyr.io.compression import TruncatedStream, open_decompressed
from zephyr.io.layout import quarantine_dir
from zephyr.io.sources import list_shards, read_shard

from .conftest import FAST, zephyr_cli

ROWS = [{"id": i, "text": f"line {i} " + "x" * (i % 50)} for i in range(20000)]  # ~1 MB: several zstd blocks
DATA = b"".join(json.dumps(r).encode() + b"\n" for r in ROWS)


@pytest.fixture(params=[pytest.param("gzip", id="gz"), pytest.param("zstd", id="zst")])
def codec(request) -> str:
    if request.param == "zstd":
        pytest.importorskip("zstandard")
    return request.param


def _compress(codec: str, data: bytes) -> bytes:
    if codec == "gzip":
        return gzip.compress(data, mtime=0)
    import zstandard

    return zstandard.ZstdCompressor(level=3).compress(data)


def _decodable(codec: str, packed: bytes) -> bytes:
    """What an independent decoder gets out of ``packed``, a stream cut before its end."""
    if codec == "gzip":
        return zlib.decompressobj(wbits=31).decompress(packed)
    import zstandard

    return zstandard.ZstdDecompressor().decompressobj().decompress(packed)


def _cut_file(tmp_path: Path, codec: str, keep: float = 0.5) -> tuple[Path, int, bytes]:
    """(path of the cut file, whole lines that decompress, bytes of the cut line)."""
    packed = _compress(codec, DATA)
    cut = packed[: int(len(packed) * keep)]
    decoded = _decodable(codec, cut)
    assert DATA.startswith(decoded)
    whole = decoded.count(b"\n")
    assert 0 < whole < len(ROWS)
    path = tmp_path / ("cut.jsonl.gz" if codec == "gzip" else "cut.jsonl.zst")
    path.write_bytes(cut)
    return path, whole, decoded[decoded.rfind(b"\n") + 1 :]


def test_decompressor_returns_every_byte_before_the_cut(codec):
    packed = _compress(codec, DATA)
    cut = packed[: len(packed) // 2]
    reader = open_decompressed(io.BytesIO(cut), codec)
    assert reader.read(64 << 20) == _decodable(codec, cut)
    with pytest.raises(TruncatedStream):
        reader.read(64 << 20)


def test_raise_names_the_true_last_whole_line(tmp_path, codec):
    path, whole, _ = _cut_file(tmp_path, codec)
    seen: list[int] = []
    with pytest.raises(InputError) as info:
        for batch in read_shard(list_shards(str(path))[0]):
            seen.extend(batch.column("id").to_pylist())
    assert seen == list(range(whole))
    assert info.value.path == str(path)
    assert f"cut off after line {whole} " in str(info.value)
    assert f"lines 1-{whole} decompress" in str(info.value)


def test_quarantine_keeps_whole_lines_and_records_the_cut(tmp_path, codec):
    path, whole, partial = _cut_file(tmp_path, codec)
    quarantined: list[pa.Table] = []
    batches = list(
        read_shard(list_shards(str(path))[0], on_error="quarantine", quarantine=quarantined.append)
    )
    assert [i for b in batches for i in b.column("id").to_pylist()] == list(range(whole))
    cut = pa.concat_tables(quarantined).to_pylist()
    assert len(cut) == 1
    assert cut[0]["source"] == str(path) and cut[0]["line"] == whole + 1 and cut[0]["raw"] == partial
    assert f"truncated {codec} stream" in cut[0]["reason"] and f"after line {whole} " in cut[0]["reason"]


@pytest.mark.parametrize("keep", [slice(0, 5), slice(0, -4)], ids=["in-header", "in-trailer"])
def test_cut_at_the_edges(tmp_path, keep):
    """Cut in the gzip header: no whole line, the cut is line 1. Cut in the 8-byte trailer (CRC, length): every
    line decompresses but the file cannot be verified, so the cut still counts as one entry."""
    path = tmp_path / "edge.jsonl.gz"
    path.write_bytes(_compress("gzip", DATA)[keep])
    whole = _decodable("gzip", path.read_bytes()).count(b"\n")
    quarantined: list[pa.Table] = []
    batches = read_shard(list_shards(str(path))[0], on_error="quarantine", quarantine=quarantined.append)
    assert sum(b.num_rows for b in batches) == whole
    assert pa.concat_tables(quarantined)["line"].to_pylist() == [whole + 1]
    assert whole == (0 if keep.stop == 5 else len(ROWS))


def test_padding_and_members_still_read_fully(tmp_path):
    """gzip's zero padding after a member and several members read as before (gzip.GzipFile's behaviour)."""
    packed = (
        gzip.compress(DATA[:1000], mtime=0) + b"\0" * 512 + gzip.compress(DATA[1000:], mtime=0) + b"\0" * 7
    )
    path = tmp_path / "members.jsonl.gz"
    path.write_bytes(packed)
    assert sum(b.num_rows for b in read_shard(list_shards(str(path))[0])) == len(ROWS)


def test_cli_keeps_the_whole_lines_and_counts_the_cut(tmp_path, codec):
    path, whole, _ = _cut_file(tmp_path, codec)
    out, work = tmp_path / "out", tmp_path / "work"
    run = zephyr_cli(
        "convert",
        str(path),
        "--output",
        str(out),
        "--on-error",
        "quarantine",
        "--work-dir",
        str(work),
        *FAST,
        "--json",
    )
    assert run.returncode == 0, run.stderr
    summary = json.loads(run.stdout)
    assert (summary["details"]["files"], summary["rows_kept"], summary["rows_quarantined"]) == (1, whole, 1)
    assert summary["rows_in"] == whole + 1 and summary["balanced"]
    assert pq.read_table(next(out.glob("part-*.parquet"))).column("id").to_pylist() == list(range(whole))
    (quarantine,) = Path(quarantine_dir(out)).rglob("*.parquet")  # beside the output, not in the work dir
    entry = pq.read_table(quarantine).to_pylist()
    assert [(e["source"], e["line"]) for e in entry] == [(str(path), whole + 1)]

    run = zephyr_cli("count", str(path), *FAST)
    assert run.returncode == 1
    assert f"{path}: truncated {codec} stream: the file is cut off after line {whole} " in run.stderr
