"""Inputs that cannot be read and paths through symbolic link loops are named for what they are: "cannot
read PATH: permission denied" (not an output's "choose a location you can write to"), "symlink loop at
LINK" (not "no such file or directory"); a folder below an input folder that cannot be listed is refused, not
skipped with its files.

Permissions: root reads what ``chmod 000`` closes, so as root each command runs as ``nobody`` (``setpriv``,
on a copy of the files in a folder that user can reach); as another user it runs as that user. Symlink loops
need no other user.
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from .conftest import FAST, zephyr_cli

ROWS = "".join(json.dumps({"id": i, "text": f"document {i} " + "word " * 20}) + "\n" for i in range(20))


def _as_other_user() -> list[str]:
    """The command prefix that runs a command as a user whom permissions bind (none when this one is)."""
    if os.geteuid() != 0:
        return []
    setpriv = shutil.which("setpriv")
    try:
        nobody = pwd.getpwnam("nobody")
    except KeyError:
        nobody = None
    if setpriv is None or nobody is None:
        pytest.skip(
            "running as root, and no setpriv or no user 'nobody' to run as: chmod cannot stop root reading"
        )
    prefix = [setpriv, f"--reuid={nobody.pw_uid}", f"--regid={nobody.pw_gid}", "--clear-groups"]
    probe = subprocess.run([*prefix, sys.executable, "-c", "import zephyr"], capture_output=True, text=True)
    if probe.returncode != 0:
        pytest.skip(f"user nobody cannot run this Python: {probe.stderr.strip()[-200:]}")
    return prefix


@pytest.fixture
def shared() -> Iterator[Path]:
    """A folder every user can reach and write (tmp_path is root's own), removed afterwards."""
    root = Path(tempfile.mkdtemp(prefix="zephyr-perm-"))
    root.chmod(0o777)
    (root / "state").mkdir(mode=0o777)
    (root / "state").chmod(0o777)
    try:
        yield root
    finally:
        for path in root.rglob("*"):
            if not path.is_symlink():
                path.chmod(0o777)
        shutil.rmtree(root)


def _zephyr_as(prefix: list[str], folder: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "XDG_STATE_HOME": str(folder / "state"), "HOME": str(folder)}
    return subprocess.run(
        [*prefix, sys.executable, "-m", "zephyr.cli", *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=folder,
    )


def _error(run: subprocess.CompletedProcess) -> str:
    assert run.returncode == 1, run.stderr
    assert "Traceback" not in run.stderr, run.stderr
    return run.stderr.strip().splitlines()[0]


def _readable_tree(root: Path) -> None:
    root.mkdir(mode=0o755)
    root.chmod(0o755)


@pytest.mark.parametrize("command", [("convert",), ("dedup", "exact")], ids=["convert", "dedup-exact"])
def test_unreadable_input_file_is_a_read_permission(shared, command):
    prefix = _as_other_user()
    data = shared / "data"
    _readable_tree(data)
    (data / "ok.jsonl").write_text(ROWS)
    (data / "closed.jsonl").write_text(ROWS)
    (data / "ok.jsonl").chmod(0o644)
    (data / "closed.jsonl").chmod(0o000)
    for given in (data / "closed.jsonl", data):  # the file named, or found in its folder
        run = _zephyr_as(prefix, shared, *command, str(given), "--output", str(shared / "out"), *FAST)
        error = _error(run)
        assert f"cannot read {data / 'closed.jsonl'}: permission denied" in error, error
        assert "write to" not in error


@pytest.mark.parametrize("where", ["folder", "subfolder", "glob"])
def test_unreadable_input_folder_is_named_not_skipped(shared, where):
    prefix = _as_other_user()
    data = shared / "data"
    _readable_tree(data)
    (data / "a.jsonl").write_text(ROWS)
    (data / "a.jsonl").chmod(0o644)
    _readable_tree(data / "sub")
    (data / "sub" / "b.jsonl").write_text(ROWS)
    closed = data if where != "subfolder" else data / "sub"
    closed.chmod(0o700)  # root's: nobody cannot list it
    given = {"folder": str(data), "subfolder": str(data), "glob": f"{data}/*.jsonl"}[where]
    run = _zephyr_as(prefix, shared, "convert", given, "--output", str(shared / "out"), *FAST)
    error = _error(run)
    assert f"cannot read {closed}: permission denied" in error, error
    assert "no files" not in error and "no such file" not in error


def _loop(folder: Path, name: str = "loop") -> Path:
    """``name`` → ``name-2`` → ``name``: a symbolic link loop."""
    (folder / name).symlink_to(folder / f"{name}-2")
    (folder / f"{name}-2").symlink_to(folder / name)
    return folder / name


@pytest.mark.parametrize("given", ["file", "in-folder", "glob", "on-the-path"])
def test_input_symlink_loop_is_named(tmp_path, given):
    data = tmp_path / "data"
    data.mkdir()
    (data / "a.jsonl").write_text(ROWS)
    loop = _loop(data, "loop.jsonl")
    path = {
        "file": str(loop),
        "in-folder": str(data),
        "glob": f"{data}/*.jsonl",
        "on-the-path": str(loop / "x.jsonl"),
    }[given]
    error = _error(zephyr_cli("convert", path, "--output", str(tmp_path / "out"), *FAST))
    assert f"symlink loop at {loop}" in error or f"symlink loop at {data / 'loop.jsonl-2'}" in error, error
    assert "no such file" not in error


@pytest.mark.parametrize("command", [("convert",), ("dedup", "exact")], ids=["convert", "dedup-exact"])
def test_output_inside_a_symlink_loop_is_named(tmp_path, command):
    data = tmp_path / "in.jsonl"
    data.write_text(ROWS)
    loop = _loop(tmp_path)
    error = _error(zephyr_cli(*command, str(data), "--output", str(loop / "out"), *FAST))
    assert "OutputError" in error and f"symlink loop at {loop}" in error, error
    assert "a symbolic link on this path leads back to itself" in error


def test_a_dangling_link_is_named(tmp_path):
    (tmp_path / "gone.jsonl").symlink_to(tmp_path / "deleted.jsonl")
    error = _error(
        zephyr_cli("convert", str(tmp_path / "gone.jsonl"), "--output", str(tmp_path / "o"), *FAST)
    )
    assert f"is a symbolic link to '{tmp_path / 'deleted.jsonl'}', which does not exist" in error
