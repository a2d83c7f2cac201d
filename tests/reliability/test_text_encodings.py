"""UTF-16 and UTF-32 inputs are named for what they are, with the conversion that fixes them, and count as one
bad input (the file), not as "invalid UTF-8 at byte 0" plus a line of invalid JSON per line (and one line
too many: the NUL after the last newline).

Told by a byte-order mark or, without one, by the NUL pattern of such text; JSON lines, .jsonl.gz, WARC and
a file whose name does not say its format; whole files and byte-range shards of one file.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pyarrow as pa
import pytest

from zephyr.errors import InputError
from zephyr.io.paths import input_files
from zephyr.io.sources import list_shards, read_shard

from .conftest import FAST, zephyr_cli

LINES = "".join(
    json.dumps({"id": i, "text": f"ligne {i}: été, naïve"}, ensure_ascii=False) + "\n" for i in range(300)
)
ENCODINGS = {
    # LINES as each encoding writes them (with or without a byte-order mark)
    "utf-16-bom-le": ("\ufeff" + LINES).encode("utf-16-le"),
    "utf-16-bom-be": ("\ufeff" + LINES).encode("utf-16-be"),
    "utf-16le": LINES.encode("utf-16-le"),
    "utf-16be": LINES.encode("utf-16-be"),
    "utf-32-bom-le": ("\ufeff" + LINES).encode("utf-32-le"),
    "utf-32be": LINES.encode("utf-32-be"),
}
SAID = {
    "utf-16-bom-le": ("UTF-16 (little-endian)", "UTF-16"),
    "utf-16-bom-be": ("UTF-16 (big-endian)", "UTF-16"),
    "utf-16le": ("UTF-16 (little-endian)", "UTF-16LE"),
    "utf-16be": ("UTF-16 (big-endian)", "UTF-16BE"),
    "utf-32-bom-le": ("UTF-32 (little-endian)", "UTF-32"),
    "utf-32be": ("UTF-32 (big-endian)", "UTF-32BE"),
}


def _said(kind: str) -> str:
    name, iconv = SAID[kind]
    return f"the file is {name} text; zephyr reads UTF-8: convert it with iconv -f {iconv} -t UTF-8"


def _read_all(path: Path, **kwargs) -> tuple[int, list[dict]]:
    quarantined: list[pa.Table] = []
    rows = 0
    for shard in list_shards(str(path), **kwargs):
        for batch in read_shard(shard, on_error="quarantine", quarantine=quarantined.append):
            rows += batch.num_rows
    return rows, [r for t in quarantined for r in t.to_pylist()]


@pytest.mark.parametrize("kind", list(ENCODINGS))
def test_jsonl_in_utf16_or_utf32_is_one_bad_file(tmp_path, kind):
    path = tmp_path / "wide.jsonl"
    path.write_bytes(ENCODINGS[kind])
    rows, bad = _read_all(path)
    assert rows == 0 and len(bad) == 1
    assert bad[0]["source"] == str(path) and bad[0]["line"] is None
    assert bad[0]["reason"].startswith(_said(kind))
    with pytest.raises(InputError) as info:
        list(read_shard(list_shards(str(path))[0]))
    assert str(info.value).startswith(f"{path}: {_said(kind)}") and "on_error='quarantine'" in str(info.value)


def test_byte_range_shards_report_the_file_once(tmp_path):
    path = tmp_path / "wide.jsonl"
    path.write_bytes(ENCODINGS["utf-16le"] * 20)  # ~400 KB, read as several byte ranges
    assert len(list_shards(str(path), approx_shard_bytes=64 << 10)) > 3
    rows, bad = _read_all(path, approx_shard_bytes=64 << 10)
    assert rows == 0 and [b["reason"].startswith(_said("utf-16le")) for b in bad] == [True]


def test_compressed_and_unnamed_inputs(tmp_path):
    packed = tmp_path / "wide.jsonl.gz"
    packed.write_bytes(gzip.compress(ENCODINGS["utf-16-bom-le"], mtime=0))
    rows, bad = _read_all(packed)
    assert rows == 0 and len(bad) == 1 and bad[0]["reason"].startswith(_said("utf-16-bom-le"))
    unnamed = tmp_path / "rows"  # no extension: the format comes from the first bytes
    unnamed.write_bytes(ENCODINGS["utf-16be"])
    with pytest.raises(InputError, match=r"rows: the file is UTF-16 \(big-endian\) text; zephyr reads UTF-8"):
        input_files(str(unnamed))  # as commands list their inputs


def test_warc_in_utf16_is_one_bad_file(tmp_path):
    pytest.importorskip("warcio")
    path = tmp_path / "crawl.warc"
    path.write_bytes("WARC/1.0\r\nWARC-Type: warcinfo\r\nContent-Length: 0\r\n\r\n\r\n\r\n".encode("utf-16"))
    quarantined: list[pa.Table] = []
    shard = list_shards(str(path), "warc")[0]
    assert list(read_shard(shard, on_error="quarantine", quarantine=quarantined.append)) == []
    (bad,) = pa.concat_tables(quarantined).to_pylist()
    assert bad["reason"].startswith(_said("utf-16-bom-le"))


def test_a_utf8_line_with_a_nul_byte_is_still_one_bad_line(tmp_path):
    """The NUL pattern is of a whole text: one raw NUL in a UTF-8 file is that line's problem, not the file's."""
    path = tmp_path / "nul.jsonl"
    lines = LINES.splitlines()
    lines[5] = '{"id": 5, "text": "a\x00b"}'
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    rows, bad = _read_all(path)
    assert rows == 299 and [b["line"] for b in bad] == [6]


@pytest.mark.parametrize("command", [("convert",), ("dedup", "exact")], ids=["convert", "dedup-exact"])
def test_cli_names_the_encoding_and_counts_the_file_once(tmp_path, command):
    path = tmp_path / "wide.jsonl"
    path.write_bytes(ENCODINGS["utf-16-bom-le"])
    run = zephyr_cli(*command, str(path), "--output", str(tmp_path / "out"), *FAST)
    assert run.returncode == 1
    error = run.stderr.splitlines()[0]
    assert f"InputError: {path}: {_said('utf-16-bom-le')}" in error and "--on-error quarantine" in error
    assert "invalid UTF-8" not in run.stderr
    run = zephyr_cli(
        *command, str(path), "--output", str(tmp_path / "q"), "--on-error", "quarantine", "--json", *FAST
    )
    assert run.returncode == 0, run.stderr
    summary = json.loads(run.stdout)
    assert (summary["rows_in"], summary["rows_kept"], summary["rows_quarantined"]) == (1, 0, 1)
