"""Empty input is valid input for every dedup command: exit 0, no rows, stats that balance."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from zephyr.cli import main
from zephyr.io.layout import stats_path

COMMANDS = [["exact"], ["fuzzy"], ["paragraph"]]


def _empty_parquet(path):
    pq.write_table(pa.table({"id": pa.array([], pa.string()), "text": pa.array([], pa.string())}), path)


@pytest.mark.parametrize("kind", ["parquet", "jsonl"])
@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: "-".join(c))
def test_empty_file(tmp_path, kind, command):
    path = tmp_path / f"in.{kind}"
    if kind == "parquet":
        _empty_parquet(path)
    else:
        path.write_bytes(b"")
    out = tmp_path / "out"
    assert (
        main(
            [
                "dedup",
                *command,
                str(path),
                "--output",
                str(out),
                "--executor",
                "inprocess",
                "--mode",
                "remove",
            ]
        )
        == 0
    )
    final = json.loads(Path(stats_path(out)).read_text())["stages"][-1]  # reads the input, writes the output
    assert final["rows_in"] == 0 and final["rows_out"] == 0
    assert not list(out.glob("part-*"))


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: "-".join(c))
def test_one_empty_file_among_others(tmp_path, command):
    _empty_parquet(tmp_path / "a.parquet")
    texts = ["one two three four five six", "one two three four five six", "seven eight nine ten eleven"]
    pq.write_table(pa.table({"id": ["x", "y", "z"], "text": texts}), tmp_path / "b.parquet")
    out = tmp_path / "out"
    argv = ["dedup", *command, str(tmp_path / "a.parquet"), str(tmp_path / "b.parquet"), "--output", str(out)]
    assert main([*argv, "--executor", "inprocess", "--mode", "remove"]) == 0
    kept = pq.read_table(sorted(out.glob("part-*.parquet")))
    stats = json.loads(Path(stats_path(out)).read_text())["stages"][-1]
    assert stats["rows_in"] == 3
    if command == ["paragraph"]:
        assert kept.num_rows == 3 and kept["text"].to_pylist()[1] == ""
    else:
        assert kept["id"].to_pylist() == ["x", "z"]
        assert stats["rows_in"] == stats["rows_out"] + stats["rows_dropped"] + stats["rows_quarantined"] == 3
        assert stats["rows_dropped"] == 1
