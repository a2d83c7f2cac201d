"""The progress line: off without a terminal, on under a pty or with --progress, one line per command."""

from __future__ import annotations

import os
import re
import sys
import types

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from zephyr import cli
from zephyr.cli import Command, Inputs, main
from zephyr.physical import PlannedJob
from zephyr.summary import Summary

from ..terminal import bytes_done as _bytes_done
from ..terminal import cli_under_pty
from ..terminal import frames as _frames


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


def test_one_line_for_a_command_of_many_jobs(corpus, tmp_path, capsys):
    """A command of several engine jobs (fuzzy dedup) draws one bar that never starts again, and counts the
    rows of its input once, not once per job that reads them."""
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
    frames = _frames(err, "zephyr dedup fuzzy")
    assert len(frames) > 3, err
    done = [_bytes_done(frame)[0] for frame in frames]
    assert done == sorted(done) and done[-1] > 0  # one bar over every job: its work done never goes back
    assert err.count("\n") == 1  # ... one line left behind
    assert re.search(r"(?<![0-9,])3,000 rows read", frames[-1]), frames[-1]


def test_a_planned_command_shows_its_total_from_the_start(corpus, capsys, monkeypatch):
    """A command that declares its jobs (``plans``) announces their estimated bytes before the first: the bar's
    total is the same from the first frame to the last, and its percentage only grows."""
    module = types.ModuleType("twice_cli")

    def twice(inputs: Inputs, execution) -> Summary:
        """Count the rows, then count them again."""
        first = inputs.read().count(**execution.as_kwargs())
        return Summary(first, inputs.read().count(**execution.as_kwargs()))

    plans = lambda inputs, execution: [PlannedJob("job 1", inputs.read()), PlannedJob("job 2", inputs.read())]  # noqa: E731
    module.COMMANDS = [Command("twice", twice, {"inputs": Inputs}, plans=plans)]
    monkeypatch.setitem(sys.modules, "twice_cli", module)
    monkeypatch.setattr(cli, "COMMAND_MODULES", {**cli.COMMAND_MODULES, "twice_cli": ("twice",)})
    assert main(["twice", str(corpus), "--executor", "inprocess", "--progress"]) == 0
    frames = _frames(capsys.readouterr().err.split("zephyr twice: done in")[0], "zephyr twice")
    totals = {_bytes_done(frame)[1] for frame in frames}
    assert len(frames) > 2 and len(totals) == 1 and totals != {0.0}, frames
    percents = [int(re.search(r"([0-9]+)%\|", frame).group(1)) for frame in frames]
    assert percents == sorted(percents) and percents[-1] == 100, frames
    assert re.search(r"(?<![0-9,])3,000 rows read", frames[-1]), frames[
        -1
    ]  # two jobs read them, once counted


def test_shown_on_a_terminal(corpus):
    """Under a pty (stderr is a terminal) the command shows its line, naming the command and the rows read."""
    argv = ["count", str(corpus), "--executor", "inprocess"]
    returncode, out, text = cli_under_pty(argv, env={**os.environ, "COLUMNS": "160"}, timeout_s=120)
    assert returncode == 0 and out.strip().endswith(b"3000")
    assert "zephyr count" in text and "3,000 rows" in text and "read" in text


def test_a_python_action_draws_one_bar_for_its_job(corpus, tmp_path, capsys):
    """``write_parquet(progress=True)`` from Python (no command's bar installed): one bar over the job's
    stages (a sort: sample, map, reduce), not one per stage."""
    import zephyr

    ds = zephyr.read(str(corpus)).sort("id")
    ds.write_parquet(str(tmp_path / "out"), executor="inprocess", progress=True)
    frames = _frames(capsys.readouterr().err, "zephyr")
    done = [_bytes_done(frame)[0] for frame in frames]
    assert len(frames) > 2 and done == sorted(done), frames
    assert re.search(r"(?<![0-9,])3,000 rows read", frames[-1]), frames[-1]
