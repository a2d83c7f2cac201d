"""Safety: outputs are claimed, not clobbered (``zephyr.io.claim``).

- An output that is, contains or lies inside an input (paths resolved: relative spellings, globs, symlinks;
  also when its sidecar ``OUT.zephyr`` would be) is refused in one line before any work, on every command.
- An output folder holding files zephyr did not write is refused unless ``--overwrite`` (naming a file and
  the flag); with it, the folder's content is replaced.
- A folder a finished run wrote keeps all its parts, readable, when the next run fails mid-way.
- A second command on the same output, work dir or ``zephyr run`` job folder is refused in one line naming
  the first (command, pid, host, since); a lock file nobody holds (its process is gone) is taken over with a
  warning; locks are released on success, errors and Ctrl-C. (The S3 lock case is in tests/test_s3.py, with its server.)
"""

from __future__ import annotations

import fcntl
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

import zephyr
from zephyr.cli import main
from zephyr.errors import ClaimError

from ..held_command import held_command
from .conftest import FAST, GOOD, zephyr_cli


def _corpus(folder: Path, rows: int = 40, name: str = "c.jsonl") -> Path:
    """A JSONL file of ``rows`` documents, every fifth an exact duplicate of the one before."""
    folder.mkdir(parents=True, exist_ok=True)
    texts = [f"{GOOD} Number {i - i % 5 if i % 5 == 4 else i}." for i in range(rows)]
    path = folder / name
    path.write_text(
        "".join(json.dumps({"id": i, "url": f"u{i % 7}", "text": t}) + "\n" for i, t in enumerate(texts))
    )
    return path


def _listing(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def _one_line(capsys, *needles: str) -> str:
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    for needle in needles:
        assert needle in err, err
    return err


COMMANDS = {
    "dedup-exact": ("dedup", "exact", "{in}", "--mode", "remove"),
    "convert": ("convert", "{in}"),
    "sort": ("sort", "{in}", "--by", "url"),
    "filter": ("filter", "{in}"),
    "normalize": ("normalize", "{in}"),
    "tokenize": ("tokenize", "{in}", "--tokenizer", "{tok}"),
}


def _argv(command: str, inputs: str, output: Path, tok: Path, *extra: str) -> list[str]:
    words = [w.replace("{in}", inputs).replace("{tok}", str(tok)) for w in COMMANDS[command]]
    return [*words, "--output", str(output), *extra, *FAST]


# -- 1. an output that overlaps an input -------------------------------------------------------------------
@pytest.mark.parametrize("command", list(COMMANDS))
def test_output_equal_to_the_input_folder_is_refused_before_any_work(
    command, tmp_path, capsys, tokenizer_json
):
    """The issue's ``zephyr dedup exact c3/ --output c3/ --mode remove``: main wrote the deduplicated part beside
    the original file, and reading c3/ gave every duplicate back."""
    c3 = tmp_path / "c3"
    _corpus(c3)
    before = _listing(c3)
    assert main(_argv(command, f"{c3}/", c3, tokenizer_json)) == 1
    _one_line(capsys, f"--output {c3}", "is the input", "choose an output folder outside every input")
    assert _listing(c3) == before and not Path(f"{c3}.zephyr").exists()


@pytest.mark.parametrize(
    ("layout", "relation"),
    [
        ("inside", "lies inside the input"),
        ("contains", "contains the input"),
        ("glob", "contains the input"),
        ("symlink", "is the input"),
        ("relative", "is the input"),
        ("quarantine", "contains the input"),
    ],
)
@pytest.mark.parametrize("command", ["convert", "dedup-exact", "filter"])
def test_output_overlapping_an_input_is_refused(layout, relation, command, tmp_path, capsys, monkeypatch):
    data = tmp_path / "data"
    src = _corpus(data)
    inputs, output = str(data), tmp_path / "out"
    if layout == "inside":
        output = data / "out"
    elif layout == "contains":
        inputs, output = str(src), tmp_path
    elif layout == "glob":
        inputs, output = f"{data}/*.jsonl", data
    elif layout == "symlink":
        (tmp_path / "link").symlink_to(data)
        output = tmp_path / "link"
    elif layout == "relative":
        monkeypatch.chdir(tmp_path)
        inputs, output = "./data/../data", Path("data")
    elif layout == "quarantine":  # reading a run's set-aside rows into the same output would delete them
        side = Path(f"{tmp_path / 'out'}.zephyr") / "quarantine"
        side.mkdir(parents=True)
        os.replace(src, side / "c.jsonl")
        inputs = str(side)
    before = _listing(tmp_path)
    assert main(_argv(command, inputs, output, tmp_path / "unused.json")) == 1
    _one_line(capsys, relation)
    assert _listing(tmp_path) == before


def test_dropped_output_inside_an_input_is_refused(tmp_path, capsys):
    data = tmp_path / "data"
    _corpus(data)
    argv = ["dedup", "exact", str(data), "--output", str(tmp_path / "out"), "--mode", "remove"]
    assert main([*argv, "--dropped-output", str(data / "dups"), *FAST]) == 1
    _one_line(capsys, f"--dropped-output {data / 'dups'} lies inside the input")


def test_python_api_refuses_an_output_inside_its_input(tmp_path):
    data = tmp_path / "data"
    _corpus(data)
    with pytest.raises(ClaimError, match="lies inside the input"):
        zephyr.read_jsonl(str(data)).write_parquet(str(data / "out"), executor="inprocess")
    with pytest.raises(ClaimError, match="contains the input"):  # zephyr.read lists its folder: its files
        zephyr.read(str(data)).write_parquet(str(data), executor="inprocess")


# -- 2. files zephyr did not write ---------------------------------------------------------------------------
@pytest.mark.parametrize("command", ["convert", "dedup-exact", "filter", "tokenize"])
def test_a_stale_foreign_file_is_refused_without_overwrite_and_replaced_with_it(
    command, tmp_path, capsys, tokenizer_json
):
    """main deleted a stale part-00007.parquet of the user's without a word (exit 0)."""
    src = _corpus(tmp_path / "in")
    out = tmp_path / "out"
    out.mkdir()
    (out / "part-00007.parquet").write_bytes(b"someone else's data")
    argv = _argv(command, str(src), out, tokenizer_json)
    assert main(argv) == 1
    _one_line(capsys, f"--output {out} holds files zephyr did not write (part-00007.parquet)", "--overwrite")
    assert (out / "part-00007.parquet").read_bytes() == b"someone else's data"
    assert main([*argv, "--overwrite"]) == 0
    assert not (out / "part-00007.parquet").exists()
    assert main(argv) == 0  # what a finished run wrote is replaced without --overwrite
    if command != "tokenize":
        assert pq.read_table(out).num_rows > 0 and pl.scan_parquet(out).collect().height > 0


def test_python_api_refuses_foreign_files_unless_overwrite(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    table = pa.table({"a": list(range(10))})
    with pytest.raises(
        ClaimError, match=r"holds files zephyr did not write \(notes.txt\); pass overwrite=True"
    ):
        zephyr.from_arrow(table).write_parquet(str(out), executor="inprocess")
    zephyr.from_arrow(table).write_parquet(str(out), executor="inprocess", overwrite=True)
    assert sorted(p.name for p in out.iterdir()) == ["part-00000.parquet"]


def test_a_folder_of_an_earlier_manifest_format_is_named_as_such(tmp_path):
    """A folder published with an older manifest format is not called foreign: the refusal says which
    format wrote it and that ``overwrite`` replaces it once."""
    out = tmp_path / "out"
    table = pa.table({"a": list(range(10))})
    zephyr.from_arrow(table).write_parquet(str(out), executor="inprocess")
    manifest = tmp_path / "out.zephyr" / "manifest.json"
    data = json.loads(manifest.read_text())
    data["version"] = 1
    data["files"] = [{"name": n, "size_bytes": r["bytes"]} for n, r in data["files"].items()]
    manifest.write_text(json.dumps(data))
    with pytest.raises(ClaimError, match=r"was written by an earlier zephyr \(manifest version 1, now 2\)"):
        zephyr.from_arrow(table).write_parquet(str(out), executor="inprocess")
    zephyr.from_arrow(table).write_parquet(str(out), executor="inprocess", overwrite=True)
    zephyr.from_arrow(table).write_parquet(str(out), executor="inprocess")  # its own format: no refusal


# -- 3. a finished run's output stays whole until the new one has published ---------------------------------
def _fail_on_shard(table: pa.Table) -> pa.Table:
    if 30 in table.column("n").to_pylist():
        raise ValueError("failing mid-way, on purpose")
    return table


def test_a_failed_run_leaves_the_previous_output_whole_and_readable(tmp_path):
    out = tmp_path / "out"
    data = zephyr.from_arrow(pa.table({"n": list(range(40))}), num_shards=4)
    data.write_parquet(str(out), executor="inprocess")
    before = _listing(out)
    with pytest.raises(
        zephyr.ZephyrError, match="failing mid-way"
    ):  # tasks 0-2 finished before task 3 failed
        data.map_batches(_fail_on_shard).write_parquet(str(out), executor="inprocess", max_retries=0)
    assert _listing(out) == before  # every old part, unchanged, and nothing else
    assert pq.read_table(out).num_rows == pl.scan_parquet(out).collect().height == 40


def test_a_failed_command_leaves_the_previous_output_whole(tmp_path):
    """The rerun fails in its second task, after the first wrote its part: main left that part in the
    output's ``_staging/``, where polars and HF read it (and a duckdb ``**`` glob too)."""
    src = tmp_path / "in"
    _corpus(src, name="a.jsonl")
    _corpus(src, name="b.jsonl")
    out = tmp_path / "out"
    argv = ["convert", str(src), "--output", str(out), *FAST, "--small-job-bytes", "0"]
    assert main(argv) == 0
    before = _listing(out)
    with (src / "b.jsonl").open("a") as f:
        f.write("not json\n")  # the rerun fails on it (--on-error raise), in the task of the second file
    assert main(argv) == 1
    assert _listing(out) == before and not (Path(f"{out}.zephyr") / "lock.json").exists()
    assert pl.scan_parquet(out).collect().height == 80


# -- 4. locks ---------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(("first", "second"), [("sort", "convert"), ("convert", "sort")])
def test_two_commands_on_one_output_the_second_is_refused_naming_the_first(first, second, tmp_path, capsys):
    """The issue's ``zephyr sort ... --output mix &`` then ``zephyr convert ... --output mix``: both exited 0
    and mix held the convert's unsorted parts under the sort's summary."""
    src = _corpus(tmp_path / "in")
    mix = tmp_path / "mix"
    argvs = {
        "sort": ["sort", str(src), "--by", "url", "--output", str(mix), *FAST],
        "convert": ["convert", str(src), "--output", str(mix), *FAST],
    }
    with held_command(argvs[first], "claim", tmp_path) as held:
        assert main(argvs[second]) == 1
        err = _one_line(capsys, f"--output {mix} is in use by another zephyr command", f"pid {held.proc.pid}")
        assert f"'zephyr {first} " in err and socket.gethostname() in err and "since 20" in err
        with pytest.raises(ClaimError, match=f"pid {held.proc.pid}"):  # the Python API takes the same lock
            zephyr.read(str(src)).write_parquet(str(mix), executor="inprocess")
        done = held.release()
    assert done.returncode == 0, done.stderr
    table = pq.read_table(mix)
    assert table.num_rows == 40
    if first == "sort":
        assert table["url"].to_pylist() == sorted(
            table["url"].to_pylist()
        )  # the sort's rows, not the convert's
    assert not (Path(f"{mix}.zephyr") / "lock.json").exists()


def test_two_commands_on_one_work_dir_the_second_is_refused(tmp_path, capsys):
    src = _corpus(tmp_path / "in")
    work = tmp_path / "work"
    first = ["convert", str(src), "--output", str(tmp_path / "a"), "--work-dir", str(work), *FAST]
    with held_command(first, "claim", tmp_path) as held:
        second = ["dedup", "exact", str(src), "--output", str(tmp_path / "b"), "--work-dir", str(work), *FAST]
        assert main(second) == 1
        _one_line(capsys, f"the work dir {work} is in use by another zephyr command", f"pid {held.proc.pid}")
        assert held.release().returncode == 0
    assert not (work / "lock.json").exists()


def _pipeline(tmp_path: Path) -> Path:
    src = _corpus(tmp_path / "in")
    config = {"name": "claims", "steps": [{"step": "read", "paths": [str(src)]}, {"step": "normalize"}]}
    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def test_two_zephyr_runs_on_one_job_folder_the_second_is_refused_in_one_line(tmp_path, capsys):
    """main: one of the two died with a raw FileNotFoundError and left 00-read/_staging/ behind."""
    job = tmp_path / "job"
    argv = ["run", str(_pipeline(tmp_path)), "--job-dir", str(job), "--no-report", *FAST]
    with held_command(argv, "step", tmp_path) as held:
        before = _listing(job)
        assert main(argv) == 1
        _one_line(capsys, f"the job folder {job} is in use by another zephyr command", f"pid {held.proc.pid}")
        assert _listing(job) == before  # the refused run touched nothing
        done = held.release()
    assert done.returncode == 0, done.stderr
    assert not [p for p in job.rglob("*") if "staging" in p.name], sorted(job.rglob("*"))
    assert main(argv) == 0  # and the job resumes afterwards (its steps are skipped)
    assert [s["status"] for s in json.loads((job / "stats.json").read_text())["steps"]] == [
        "skipped",
        "skipped",
    ]


def _plant_lock(folder: Path, **fields) -> Path:
    lock = {
        "host": socket.gethostname(),
        "pid": os.getpid(),
        "process_started": __import__("psutil").Process().create_time(),
        "since": time.time() - 3600,
        "command": "zephyr sort old --output out",
        "token": "another-run",
        **fields,
    }
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "lock.json").write_text(json.dumps(lock))
    return folder / "lock.json"


@pytest.mark.parametrize("how", ["killed", "planted"])
def test_a_lock_nobody_holds_is_taken_over_with_a_warning(how, tmp_path):
    """The kernel drops a lock (``flock``) when its process ends, however it ends: a lock file nobody holds is
    a dead command's, even when it names a live pid (as a pid reused after a crash would)."""
    src = _corpus(tmp_path / "in")
    out = tmp_path / "out"
    lock = Path(f"{out}.zephyr") / "lock.json"
    if how == "killed":
        argv = ["convert", str(src), "--output", str(out), *FAST]
        with held_command(argv, "claim", tmp_path) as held:
            held.proc.kill()  # SIGKILL: no ``finally`` runs, the lock file stays
            held.proc.wait()
        command = f"zephyr convert {src}"
    else:
        _plant_lock(lock.parent)  # this very process's pid: alive, but not holding the lock
        command = "zephyr sort old --output out"
    assert lock.exists()
    run = zephyr_cli(
        "convert", str(src), "--output", str(out), *FAST
    )  # as a user runs it: warnings on stderr
    assert run.returncode == 0, run.stderr
    warning = next(line for line in run.stderr.splitlines() if "WARNING" in line)
    assert f"taking over the lock of '{command}" in warning, run.stderr
    assert "whose process is gone" in warning
    assert not lock.exists() and pq.read_table(out).num_rows == 40


@pytest.mark.parametrize("host", ["this-host", "another-node"])
def test_a_held_lock_is_not_taken_over(host, tmp_path, capsys):
    """A lock file another process holds (``flock``; on NFS also one of another host) is refused naming the
    holder its file names."""
    src = _corpus(tmp_path / "in")
    out = tmp_path / "out"
    host = socket.gethostname() if host == "this-host" else host
    lock = _plant_lock(Path(f"{out}.zephyr"), host=host)
    with lock.open("rb") as f:
        fcntl.flock(f, fcntl.LOCK_EX)  # its own open file: another holder, as far as the kernel knows
        assert main(["convert", str(src), "--output", str(out), *FAST]) == 1
    _one_line(capsys, "in use by another zephyr command: 'zephyr sort old --output out'", f"on {host}, since")
    assert lock.exists() and not out.exists()


def test_the_lock_is_released_on_errors_and_on_ctrl_c(tmp_path):
    src = _corpus(tmp_path / "in")
    out = tmp_path / "out"
    bad = tmp_path / "bad.jsonl"
    bad.write_text("not json\n")
    run = subprocess.run(
        [sys.executable, "-m", "zephyr.cli", "convert", str(bad), "--output", str(out), *FAST],
        capture_output=True,
        text=True,
    )
    assert run.returncode == 1 and not (Path(f"{out}.zephyr") / "lock.json").exists()
    with held_command(["convert", str(src), "--output", str(out), *FAST], "claim", tmp_path) as held:
        assert (Path(f"{out}.zephyr") / "lock.json").exists()
        held.proc.send_signal(signal.SIGINT)
        held.proc.wait(timeout=60)
    assert not (Path(f"{out}.zephyr") / "lock.json").exists()
