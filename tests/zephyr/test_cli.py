"""The engine's CLI commands, run as a user would (a subprocess), with global options after the subcommand."""

from __future__ import annotations

import json
import subprocess
import sys

import pyarrow as pa
import pyarrow.parquet as pq


def _zephyr(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "zephyr.cli", *args], capture_output=True, text=True)


def test_convert_sort_count(tmp_path):
    lines = [json.dumps({"id": i, "url": f"u{(i * 7) % 10}"}) for i in range(10)]
    (tmp_path / "in.jsonl").write_text("\n".join(lines) + "\n")
    out = _zephyr(
        "convert",
        str(tmp_path / "in.jsonl"),
        "--output",
        str(tmp_path / "pq"),
        "--workers",
        "1",
        "--executor",
        "inprocess",
        "--json",
    )
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["rows_kept"] == 10
    out = _zephyr(
        "sort",
        str(tmp_path / "pq"),
        "--by",
        "url",
        "--output",
        str(tmp_path / "sorted"),
        "--executor",
        "inprocess",
        "--memory-budget",
        "8MB",
    )
    assert out.returncode == 0, out.stderr
    table = pa.concat_tables(pq.read_table(p) for p in sorted((tmp_path / "sorted").glob("part-*.parquet")))
    assert table.column("url").to_pylist() == sorted(f"u{(i * 7) % 10}" for i in range(10))
    out = _zephyr("count", str(tmp_path / "sorted"), "--executor", "inprocess")
    assert out.returncode == 0 and out.stdout.strip() == "10"


def test_bad_input_is_a_clear_error_not_a_traceback(tmp_path):
    (tmp_path / "bad.jsonl").write_text('{"a": 1}\n{"a": \n')
    out = _zephyr("count", str(tmp_path / "bad.jsonl"), "--executor", "inprocess", "--max-retries", "0")
    assert out.returncode == 1
    assert (
        "bad.jsonl:2" in out.stderr and "Traceback (most recent call last)" not in out.stderr.splitlines()[0]
    )
    out = _zephyr("count", str(tmp_path / "bad.jsonl"), "--executor", "inprocess", "--on-error", "quarantine")
    assert out.returncode == 0 and out.stdout.strip() == "1"
