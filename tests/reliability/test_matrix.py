"""The bad-input matrix: every kind of input below through every command that reads input.

Each case builds its input in a tmp dir and says what a demanding user expects from it:

- ``Ok(rows, bad)``: the command succeeds with ``--on-error quarantine``; ``rows`` rows are read and ``bad``
  unreadable lines or rows are set aside, and the command's own stats balance: in = kept + dropped +
  quarantined, with in = rows + bad (``count`` counts ``rows`` and says how many it set aside); every
  command's ``--json`` summary says the same as its stats files.
- ``Fails(names)``: the command exits 1 with one line on stderr (plus the "full traceback: LOG" pointer; a
  configuration error lists one problem per indented line instead) that names the file (each of
  ``names``), and no traceback.

Commands: ``count``, ``dedup exact``, ``dedup fuzzy``, ``filter``, ``tokenize`` and ``zephyr run`` (a read +
normalize pipeline), run in this process through ``zephyr.cli.main`` with the in-process executor (the CLI
in a subprocess, and the local worker processes, are covered by test_error_lines.py and test_faults.py).
"""

from __future__ import annotations

import gzip
import json
import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from zephyr.cli import main
from zephyr.io.layout import stats_path

from .conftest import GOOD

FAST = ["--executor", "inprocess"]
PROGRESS = re.compile(r"^\[\d+/\d+\] ")
"""``zephyr run``'s stage progress lines ("[1/2] read (read): running"), not part of an error."""
COMMANDS = ["count", "dedup-exact", "dedup-fuzzy", "filter", "tokenize", "run"]


@dataclass(frozen=True)
class Ok:
    rows: int
    bad: int = 0


@dataclass(frozen=True)
class Fails:
    names: tuple[str, ...]
    words: tuple[str, ...] = field(default=())
    count_rows: int | None = None
    """For a text-column problem: ``count`` reads no text, so it counts these rows instead of failing."""


def _texts(n: int, start: int = 0) -> list[dict]:
    return [{"id": f"d{start + i}", "text": f"{GOOD} Document number {start + i}."} for i in range(n)]


def _jsonl_bytes(rows: list[dict], newline: bytes = b"\n") -> bytes:
    return b"".join(json.dumps(r).encode() + newline for r in rows)


def _parquet(path: Path, table: pa.Table) -> list[str]:
    pq.write_table(table, path)
    return [str(path)]


# -- the cases: (tmp dir) -> (input paths, expectation) -----------------------------------------------------
def good_jsonl(d: Path):
    (d / "in.jsonl").write_bytes(_jsonl_bytes(_texts(10)))
    return [str(d / "in.jsonl")], Ok(10)


def empty_jsonl(d: Path):
    (d / "in.jsonl").write_bytes(b"")
    return [str(d / "in.jsonl")], Ok(0)


def empty_parquet(d: Path):
    schema = pa.schema([("id", pa.string()), ("text", pa.string())])
    return _parquet(d / "in.parquet", schema.empty_table()), Ok(0)


def utf8_bom(d: Path):
    (d / "in.jsonl").write_bytes(b"\xef\xbb\xbf" + _jsonl_bytes(_texts(10)))
    return [str(d / "in.jsonl")], Ok(10)


def crlf_lines(d: Path):
    (d / "in.jsonl").write_bytes(_jsonl_bytes(_texts(10), newline=b"\r\n"))
    return [str(d / "in.jsonl")], Ok(10)


def blank_lines(d: Path):
    rows = _jsonl_bytes(_texts(10)).split(b"\n")
    (d / "in.jsonl").write_bytes(b"\n\n".join(rows[:5]) + b"\n  \n" + b"\n".join(rows[5:]))
    return [str(d / "in.jsonl")], Ok(10)


def no_final_newline(d: Path):
    (d / "in.jsonl").write_bytes(_jsonl_bytes(_texts(10)).rstrip(b"\n"))
    return [str(d / "in.jsonl")], Ok(10)


def _ten_rows_and_a_line(d: Path, before: int, line: bytes) -> list[str]:
    """[``in.jsonl``]: ten good rows, with ``line`` inserted before row ``before``."""
    lines = _jsonl_bytes(_texts(10)).split(b"\n")
    lines.insert(before, line)
    (d / "in.jsonl").write_bytes(b"\n".join(lines))
    return [str(d / "in.jsonl")]


def invalid_json_line(d: Path):
    return _ten_rows_and_a_line(d, 4, b'{"id": "broken", "text": "no end'), Ok(10, bad=1)


def invalid_utf8_line(d: Path):
    return _ten_rows_and_a_line(d, 3, b'{"id": "latin1", "text": "caf\xe9 au lait"}'), Ok(10, bad=1)


def array_line(d: Path):
    return _ten_rows_and_a_line(d, 2, b'["not", "an", "object"]'), Ok(10, bad=1)


def raw_nul_byte_line(d: Path):
    return _ten_rows_and_a_line(d, 6, b'{"id": "nul", "text": "a\x00b"}'), Ok(10, bad=1)


def escaped_nul_in_text(d: Path):
    rows = _texts(10)
    rows[3]["text"] = "before\u0000after " + rows[3]["text"]
    (d / "in.jsonl").write_bytes(_jsonl_bytes(rows))
    return [str(d / "in.jsonl")], Ok(10)


def text_wrong_type_in_one_line(d: Path):
    return _ten_rows_and_a_line(d, 5, b'{"id": "num", "text": 12345}'), Fails(
        ("in.jsonl",), ("text", "line 6", "schema")
    )


def missing_text_key_in_one_line(d: Path):
    rows = _texts(10)
    rows.append({"id": "no-text"})
    (d / "in.jsonl").write_bytes(_jsonl_bytes(rows))
    return [str(d / "in.jsonl")], Ok(11)


def truncated_gzip(d: Path):
    packed = gzip.compress(_jsonl_bytes(_texts(400)), mtime=0)
    (d / "in.jsonl.gz").write_bytes(packed[: len(packed) // 2])
    whole = _whole_lines_gzip(packed[: len(packed) // 2])
    return [str(d / "in.jsonl.gz")], Ok(whole, bad=1)


def _whole_lines_gzip(cut: bytes) -> int:
    import zlib

    return zlib.decompressobj(wbits=31).decompress(cut).count(b"\n")


def truncated_zstd(d: Path):
    zstandard = pytest.importorskip("zstandard")
    packed = zstandard.ZstdCompressor(level=3).compress(_jsonl_bytes(_texts(400)))
    cut = packed[: len(packed) // 2]
    (d / "in.jsonl.zst").write_bytes(cut)
    whole = zstandard.ZstdDecompressor().decompressobj().decompress(cut).count(b"\n")
    return [str(d / "in.jsonl.zst")], Ok(whole, bad=1)


def gz_suffix_plain_text(d: Path):
    (d / "in.jsonl.gz").write_bytes(_jsonl_bytes(_texts(10)))
    return [str(d / "in.jsonl.gz")], Fails(("in.jsonl.gz",))


def corrupt_parquet(d: Path):
    (d / "in.parquet").write_bytes(os.urandom(4096))
    return [str(d / "in.parquet")], Fails(("in.parquet",))


def truncated_parquet(d: Path):
    _parquet(d / "full.parquet", pa.Table.from_pylist(_texts(50)))
    data = (d / "full.parquet").read_bytes()
    (d / "in.parquet").write_bytes(data[: len(data) - 40])
    (d / "full.parquet").unlink()
    return [str(d / "in.parquet")], Fails(("in.parquet",))


def int_text_column(d: Path):
    table = pa.table({"id": [f"d{i}" for i in range(5)], "text": pa.array(range(5), pa.int64())})
    return _parquet(d / "in.parquet", table), Fails(("in.parquet",), ("text",), count_rows=5)


def binary_text_column(d: Path):
    table = pa.table({"id": ["a", "b"], "text": pa.array([b"x y z", b"p q r"], pa.binary())})
    return _parquet(d / "in.parquet", table), Fails(("in.parquet",), ("text",), count_rows=2)


def large_string_text(d: Path):
    table = pa.Table.from_pylist(_texts(10)).cast(
        pa.schema([("id", pa.string()), ("text", pa.large_string())])
    )
    return _parquet(d / "in.parquet", table), Ok(10)


def dictionary_text(d: Path):
    table = pa.Table.from_pylist(_texts(10))
    table = table.set_column(1, "text", table["text"].dictionary_encode())
    return _parquet(d / "in.parquet", table), Ok(10)


def missing_text_column(d: Path):
    table = pa.table({"id": ["a", "b"], "body": ["x", "y"]})
    return _parquet(d / "in.parquet", table), Fails(("in.parquet",), ("text",), count_rows=2)


def null_and_empty_texts(d: Path):
    rows = _texts(8) + [
        {"id": "null", "text": None},
        {"id": "empty", "text": ""},
        {"id": "ws", "text": " \n\t "},
    ]
    return _parquet(d / "in.parquet", pa.Table.from_pylist(rows)), Ok(11)


def huge_row(d: Path):
    rows = _texts(5)
    rows[2]["text"] = " ".join(f"word{i % 5000}" for i in range(1_500_000))  # ~13 MB in one row
    (d / "in.jsonl").write_bytes(_jsonl_bytes(rows))
    return [str(d / "in.jsonl")], Ok(5)


def deep_nesting(d: Path):
    rows = _texts(5)
    deep: dict = {"leaf": 1}
    for _ in range(60):
        deep = {"n": deep}
    for r in rows:
        r["meta"] = deep
    (d / "in.jsonl").write_bytes(_jsonl_bytes(rows))
    return [str(d / "in.jsonl")], Ok(5)


def duplicate_column_names(d: Path):
    table = pa.Table.from_arrays(
        [pa.array(["a", "b"]), pa.array([GOOD, GOOD + " two"]), pa.array(["x", "y"])],
        names=["id", "text", "text"],
    )
    return _parquet(d / "in.parquet", table), Fails(("in.parquet",), ("text", "2 times"))


def non_utf8_file_name(d: Path):
    name = os.fsdecode(b"caf\xe9.jsonl")
    (d / name).write_bytes(_jsonl_bytes(_texts(10)))
    return [str(d)], Ok(10)


def symlink_loop_in_folder(d: Path):
    folder = d / "in"
    folder.mkdir()
    (folder / "a.jsonl").write_bytes(_jsonl_bytes(_texts(10)))
    (folder / "loop.jsonl").symlink_to(folder / "loop.jsonl")
    return [str(folder)], Fails(("loop.jsonl",))


def glob_matching_directories(d: Path):
    (d / "in").mkdir()
    (d / "in" / "a.jsonl").write_bytes(_jsonl_bytes(_texts(6)))
    (d / "in" / "sub.jsonl").mkdir()
    (d / "in" / "sub.jsonl" / "b.jsonl").write_bytes(_jsonl_bytes(_texts(4, start=6)))
    return [str(d / "in" / "*.jsonl")], Ok(10)


def spark_style_folder(d: Path):
    folder = d / "in.parquet"
    folder.mkdir()
    _parquet(folder / "part-0.parquet", pa.Table.from_pylist(_texts(6)))
    _parquet(folder / "part-1.parquet", pa.Table.from_pylist(_texts(4, start=6)))
    (folder / "_SUCCESS").write_bytes(b"")
    return [str(folder)], Ok(10)


def parquet_without_extension(d: Path):
    pq.write_table(pa.Table.from_pylist(_texts(10)), d / "rows")
    return [str(d / "rows")], Ok(10)


def jsonl_without_extension(d: Path):
    (d / "rows").write_bytes(b"\xef\xbb\xbf" + _jsonl_bytes(_texts(10)))
    return [str(d / "rows")], Ok(10)


def gzip_without_codec_extension(d: Path):
    (d / "rows").write_bytes(gzip.compress(_jsonl_bytes(_texts(10)), mtime=0))
    return [str(d / "rows")], Fails(("rows",), (".jsonl.gz",))


def unknown_content_without_extension(d: Path):
    (d / "notes").write_bytes(b"just some words, not rows\n")
    return [str(d / "notes")], Fails(("notes",), ("--format",))


def missing_file(d: Path):
    return [str(d / "nope.jsonl")], Fails(("nope.jsonl",))


def empty_folder(d: Path):
    (d / "in").mkdir()
    return [str(d / "in")], Fails(("in",))


def id_types_disagree(d: Path):
    folder = d / "in"
    folder.mkdir()
    _parquet(folder / "a.parquet", pa.Table.from_pylist(_texts(5)))
    rows = [{"id": i, "text": r["text"]} for i, r in enumerate(_texts(5, start=5))]
    _parquet(folder / "b.parquet", pa.Table.from_pylist(rows))
    return [str(folder)], Fails(("a.parquet", "b.parquet"), ("id",))


def columns_disagree(d: Path):
    folder = d / "in"
    folder.mkdir()
    a = pa.Table.from_pylist([{**r, "url": "http://x"} for r in _texts(5)])
    b = pa.Table.from_pylist([{**r, "extra": 1} for r in _texts(5, start=5)])
    _parquet(folder / "a.parquet", a)
    _parquet(folder / "b.parquet", b)
    return [str(folder)], Ok(10)


def repeated_ids_and_rows(d: Path):
    rows = _texts(8) + _texts(4)
    return _parquet(d / "in.parquet", pa.Table.from_pylist(rows)), Ok(12)


def one_empty_file_among_others(d: Path):
    folder = d / "in"
    folder.mkdir()
    (folder / "a.jsonl").write_bytes(_jsonl_bytes(_texts(6)))
    (folder / "b.jsonl").write_bytes(b"")
    (folder / "c.jsonl").write_bytes(_jsonl_bytes(_texts(4, start=6)))
    return [str(folder)], Ok(10)


CASES: dict[str, Callable[[Path], tuple[list[str], Ok | Fails]]] = {
    f.__name__: f
    for f in (
        good_jsonl,
        empty_jsonl,
        empty_parquet,
        utf8_bom,
        crlf_lines,
        blank_lines,
        no_final_newline,
        invalid_json_line,
        invalid_utf8_line,
        array_line,
        raw_nul_byte_line,
        escaped_nul_in_text,
        text_wrong_type_in_one_line,
        missing_text_key_in_one_line,
        truncated_gzip,
        truncated_zstd,
        gz_suffix_plain_text,
        corrupt_parquet,
        truncated_parquet,
        int_text_column,
        binary_text_column,
        large_string_text,
        dictionary_text,
        missing_text_column,
        null_and_empty_texts,
        huge_row,
        deep_nesting,
        duplicate_column_names,
        non_utf8_file_name,
        symlink_loop_in_folder,
        glob_matching_directories,
        spark_style_folder,
        parquet_without_extension,
        jsonl_without_extension,
        gzip_without_codec_extension,
        unknown_content_without_extension,
        missing_file,
        empty_folder,
        id_types_disagree,
        columns_disagree,
        repeated_ids_and_rows,
        one_empty_file_among_others,
    )
}


# -- running one command -------------------------------------------------------------------------------------
def _argv(command: str, inputs: list[str], out: Path, tokenizer: Path) -> list[str]:
    return [*_command_argv(command, inputs, out, tokenizer), "--json"]  # the summary is checked too


def _command_argv(command: str, inputs: list[str], out: Path, tokenizer: Path) -> list[str]:
    quarantine = ["--on-error", "quarantine"]
    if command == "count":
        return ["count", *inputs, *quarantine, *FAST]
    if command.startswith("dedup-"):
        kind = command.split("-")[1]
        return ["dedup", kind, *inputs, "--output", str(out), "--mode", "remove", *quarantine, *FAST]
    if command == "filter":
        return ["filter", *inputs, "--output", str(out), *quarantine, *FAST]
    if command == "tokenize":
        return ["tokenize", *inputs, "--tokenizer", str(tokenizer), "--output", str(out), *quarantine, *FAST]
    config = {
        "name": "matrix",
        "steps": [{"step": "read", "paths": inputs, "on_error": "quarantine"}, {"step": "normalize"}],
    }
    path = out.parent / "pipeline.yaml"
    path.write_text(yaml.safe_dump(config))
    return ["run", str(path), "--job-dir", str(out), "--no-report", *FAST]


def _parquet_rows(folder: Path) -> int:
    return sum(pq.read_metadata(p).num_rows for p in folder.glob("part-*.parquet"))


def _balance(command: str, out: Path, stdout: str, stderr: str) -> tuple[int, int, int, int, int | None]:
    """(in, kept, dropped, quarantined, rows actually in the output or None) as the command reports them."""
    if command.startswith("dedup-") or command == "filter":
        section = "filter" if command == "filter" else "dedup"
        rows = json.loads(Path(stats_path(out)).read_text())[section]["rows"]
        return rows["in"], rows["kept"], rows["dropped"], rows["quarantined"], _parquet_rows(out)
    if command == "tokenize":
        summary = json.loads(stdout)
        rows = [summary[f"rows_{k}"] for k in ("in", "kept", "dropped", "quarantined")]
        return (*rows, summary["details"]["documents"])
    job = json.loads((out / "stats.json").read_text())
    read = job["steps"][0]
    return read["rows_in"], read["rows_kept"], read["rows_dropped"], read["rows_quarantined"], None


@pytest.mark.parametrize("command", COMMANDS)
@pytest.mark.parametrize("case", list(CASES))
def test_bad_input(case, command, tmp_path, capsys, tokenizer_json):
    (tmp_path / "input").mkdir()
    inputs, expect = CASES[case](tmp_path / "input")
    if command == "count" and isinstance(expect, Fails) and expect.count_rows is not None:
        expect = Ok(expect.count_rows)
    out = tmp_path / "out"
    rc = main(_argv(command, inputs, out, tokenizer_json))
    captured = capsys.readouterr()
    if isinstance(expect, Fails):
        assert rc == 1, (rc, captured.err[-2000:])
        lines = [line for line in captured.err.splitlines() if line.strip() and not PROGRESS.match(line)]
        errors = [line for line in lines if not line.startswith("full traceback:")]
        # one line, or a config error's list: a header ending in ":" and one indented line per problem
        listed = errors[0].endswith(":") and all(line.startswith("  ") for line in errors[1:])
        assert len(errors) == 1 or listed, captured.err[-3000:]
        assert "Traceback" not in captured.err
        for name in (*expect.names, *expect.words):
            assert name in " ".join(errors), (name, errors)
        return
    assert rc == 0, captured.err[-3000:]
    summary = json.loads(captured.out)  # --json: one object, nothing else on stdout
    if command == "count":
        assert summary["rows_kept"] == expect.rows
        assert summary["rows_quarantined"] == expect.bad and summary["balanced"], summary
        return
    rows_in, kept, dropped, quarantined, written = _balance(command, out, captured.out, captured.err)
    assert [summary[f"rows_{k}"] for k in ("in", "kept", "dropped", "quarantined")] == [
        rows_in,
        kept,
        dropped,
        quarantined,
    ], summary  # the summary says what the stats files say
    assert rows_in == kept + dropped + quarantined, (rows_in, kept, dropped, quarantined)
    assert rows_in == expect.rows + expect.bad, (rows_in, expect)
    assert quarantined >= expect.bad
    if written is not None:
        assert written == kept
