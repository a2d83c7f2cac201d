"""A quarantined row is counted and stored once, however many passes of a job read it.

A sort reads its input twice: a sample pass for the range boundaries and the map pass. Both meet the same bad
lines; before, each stored them (two quarantine folders) and the job counted them twice ("6 rows quarantined"
for 3 bad lines) while the command's summary said 3.
"""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest

import zephyr
from zephyr.cli import main

LINES = [
    '{"id": 1, "text": "alpha", "url": "u2"}',
    '{"id": 2, "text": ',
    '{"id": 3, "text": "beta", "url": "u0"}',
    "{bad",
    '{"id": 4, "text": "gamma", "url": "u1"}',
    '{"x": ',
]
BAD = 3


def _input(tmp_path: Path) -> Path:
    path = tmp_path / "in.jsonl"
    path.write_text("\n".join(LINES) + "\n")
    return path


def _stored(folder: Path) -> int:
    return sum(pq.read_table(p).num_rows for p in folder.rglob("*.parquet"))


@pytest.mark.parametrize("executor", ["inprocess", "local"])
def test_sort_counts_and_stores_each_bad_line_once(tmp_path, capsys, caplog, executor):
    out = tmp_path / "sorted"
    argv = ["sort", str(_input(tmp_path)), "--by", "url", "--output", str(out), "--on-error", "quarantine"]
    assert main([*argv, "--executor", executor, "--json"]) == 0
    record = json.loads(capsys.readouterr().out)
    assert (record["rows_in"], record["rows_kept"], record["rows_quarantined"]) == (6, 3, BAD)
    assert _stored(out.parent / "sorted.zephyr" / "quarantine") == BAD
    warned = [r.getMessage() for r in caplog.records if "quarantined under" in r.getMessage()]
    assert warned and all(m.startswith(f"{BAD} rows quarantined") for m in warned), warned


def test_the_python_sort_counts_each_bad_line_once(tmp_path):
    quarantine = tmp_path / "q"
    result = (
        zephyr.read_jsonl(str(_input(tmp_path)), on_error="quarantine")
        .sort("url")
        .write_parquet(str(tmp_path / "out"), executor="inprocess", quarantine_dir=str(quarantine))
    )
    assert result.stats["rows_quarantined"] == BAD == _stored(quarantine)
    assert pq.read_table(tmp_path / "out").column("url").to_pylist() == ["u0", "u1", "u2"]
