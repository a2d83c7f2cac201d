"""The traceback log of a failing command: the user's own folder (0700), else the temp directory; a new file
of a random name each time (0600, never through a link someone planted), the newest 20 kept, and the error's
second line names it.

The log names the user's files and data; in a shared temp directory anyone can create the name a log is
about to be opened under.
"""

from __future__ import annotations

import argparse
import os
import re
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from zephyr.cli import report_failure
from zephyr.errors import InputError

KEEP_LOGS = 20
"""Logs a folder keeps (the promise of the docs: the last 20)."""


def _fail_in_process(capsys) -> str | None:
    """``report_failure`` for an input error, as ``zephyr convert`` prints it; the log path it names."""
    code = report_failure(
        InputError("bad line", path="in.jsonl", line=2), argparse.Namespace(command="convert")
    )
    assert code == 1
    lines = capsys.readouterr().err.splitlines()
    assert lines[0] == "zephyr convert: error: InputError: in.jsonl:2: bad line"
    match = re.fullmatch(r"full traceback: (\S+)", lines[1])
    return match.group(1) if match else None


def _cli_log(tmp_path: Path, env: dict[str, str]) -> Path:
    """Run a ``zephyr convert`` that fails (its input is missing) and return the log file it names."""
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "zephyr.cli",
            "convert",
            str(tmp_path / "missing.jsonl"),
            "--output",
            str(tmp_path / "out"),
            "--executor",
            "inprocess",
        ],
        capture_output=True,
        text=True,
        env={**os.environ, **env},
    )
    assert run.returncode == 1, run.stderr
    error, where = run.stderr.strip().splitlines()
    assert "missing.jsonl" in error
    return Path(re.fullmatch(r"full traceback: (\S+)", where).group(1))


@pytest.fixture
def folders(tmp_path, monkeypatch) -> tuple[Path, Path]:
    """(the log folder, the temp directory) of this test: XDG_STATE_HOME and tempfile's directory moved here."""
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    return tmp_path / "state" / "zephyr" / "logs", tmp_path / "tmp"


def test_a_planted_symlink_is_never_followed(tmp_path, folders, capsys):
    logs, tmp = folders
    victim = tmp_path / "victim.txt"
    victim.write_text("the user's file\n")
    name = f"zephyr-{os.getpid()}.log"
    logs.mkdir(parents=True, mode=0o700)
    for folder in (logs, tmp):  # wherever a log of this pid could go
        (folder / name).symlink_to(victim)
    path = _fail_in_process(capsys)
    assert victim.read_text() == "the user's file\n"  # not appended to, not truncated
    assert path is not None and not Path(path).is_symlink() and "bad line" in Path(path).read_text()
    assert Path(path).parent == logs and all((f / name).is_symlink() for f in (logs, tmp))


def test_log_and_folder_are_private(tmp_path):
    state = tmp_path / "state"
    log = _cli_log(tmp_path, {"XDG_STATE_HOME": str(state)})
    assert log.parent == state / "zephyr" / "logs"
    assert stat.S_IMODE(log.stat().st_mode) == 0o600
    assert stat.S_IMODE(log.parent.stat().st_mode) == 0o700
    assert "Traceback (most recent call last)" in log.read_text()


def test_only_the_newest_logs_are_kept(tmp_path):
    logs = tmp_path / "state" / "zephyr" / "logs"
    logs.mkdir(parents=True, mode=0o700)
    old = [logs / f"zephyr-{n}.log" for n in range(1, KEEP_LOGS + 6)]
    for age, path in enumerate(reversed(old), start=1):  # zephyr-1.log the oldest
        path.write_text("old")
        os.utime(path, (1_000_000 - age, 1_000_000 - age))
    (logs / "notes.txt").write_text("not a log: left alone")
    log = _cli_log(tmp_path, {"XDG_STATE_HOME": str(tmp_path / "state")})
    kept = sorted(p.name for p in logs.glob("zephyr-*.log"))
    assert len(kept) == KEEP_LOGS and log.name in kept
    assert sorted(kept) == sorted([log.name, *(p.name for p in old[-(KEEP_LOGS - 1) :])])
    assert (logs / "notes.txt").exists()


def test_temp_folder_fallback_is_private(tmp_path, folders, capsys, monkeypatch):
    """When the state folder cannot be made (here: a file is in its way), the temp directory takes the log: a
    new file of a random name that only the user can read, so nothing another user planted there is opened."""
    _, tmp = folders
    (tmp_path / "blocker").write_text("")
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "blocker" / "state"))
    victim = tmp_path / "victim.txt"
    victim.write_text("the user's file\n")
    (tmp / f"zephyr-{os.getpid()}.log").symlink_to(victim)
    path = _fail_in_process(capsys)
    assert path is not None and Path(path).parent == tmp and not Path(path).is_symlink()
    assert stat.S_IMODE(Path(path).stat().st_mode) == 0o600 and "bad line" in Path(path).read_text()
    assert victim.read_text() == "the user's file\n"


def test_a_log_that_cannot_be_written_is_named(tmp_path, folders, capsys, monkeypatch):
    """Neither folder can take the log (a file is in the way of both): the error line says why and where the
    traceback is still to be seen."""
    (tmp_path / "blocker").write_text("")
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "blocker" / "state"))
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "blocker"))
    code = report_failure(InputError("bad", path="a.jsonl"), argparse.Namespace(command="count"))
    assert code == 1
    error, where = capsys.readouterr().err.splitlines()
    assert error == "zephyr count: error: InputError: a.jsonl: bad"
    assert where.startswith("full traceback: not written (") and where.endswith("rerun with -v to see it")
