"""The progress line: off without a terminal, on under a pty or with --progress, one line per command."""

from __future__ import annotations

import os

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from zephyr.cli import main

from ..terminal import cli_under_pty


@pytest.fixture
def corpus(tmp_path):
    """JSON lines: counting them reads every row (a Parquet count reads only footers, and runs no task)."""
    path = tmp_path / "in.jsonl"
    texts = [f"document {i} " + "word " * (i % 40) for i in range(3000)]
    pq.write_table(pa.table({"id": list(range(3000)), "text": texts}), tmp_path / "in.parquet")
    path.write_text("".join(f'{{"id": {i}, "text": "{t}"}}\n' for i, t in enumerate(texts)))
    return path


def test_nothing_shown_when_stderr_is_not_a_terminal(corpus, capsys):
    assert main(["count", str(corpus), "--executor", "inprocess"]) == 0
    assert "rows," not in capsys.readouterr().err


def test_no_progress_wins_and_jobs_open_no_display_of_their_own(corpus, capsys):
    assert main(["count", str(corpus), "--executor", "inprocess", "--no-progress"]) == 0
    assert capsys.readouterr().err.startswith("zephyr count: done in")  # the summary alone, no progress line


def test_one_line_for_a_command_of_many_steps(corpus, tmp_path, capsys):
    argv = [
        "dedup",
        "fuzzy",
        str(corpus.with_suffix(".parquet")),
        "--output",
        str(tmp_path / "out"),
        "--executor",
        "inprocess",
    ]
    assert main([*argv, "--progress"]) == 0
    err = capsys.readouterr().err.split("zephyr dedup fuzzy: done in")[0]  # the progress, before the summary
    lines = [line for line in err.replace("\r", "\n").splitlines() if line.startswith("zephyr dedup fuzzy")]
    assert lines, err
    final = lines[-1]
    steps = int(final.split("[")[1].split(" steps")[0])
    assert steps > 3  # many engine steps ...
    assert err.count("\n") == 1  # ... one line left behind
    assert "3,000 rows" in final or "rows" in final and "read" in final and "/s" in final


def test_shown_on_a_terminal(corpus):
    """Under a pty (stderr is a terminal) the command shows its line, naming the command and the rows read."""
    argv = ["count", str(corpus), "--executor", "inprocess"]
    returncode, out, text = cli_under_pty(argv, env={**os.environ, "COLUMNS": "160"}, timeout_s=120)
    assert returncode == 0 and out.strip().endswith(b"3000")
    assert "zephyr count" in text and "3,000 rows" in text and "read" in text
