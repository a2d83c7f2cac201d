"""Errors a person can act on: the CLI prints one line (class, file, fix) and where the full traceback is.

Each test runs the real ``zephyr`` command in a subprocess, as a user would. Faults that cannot be produced
for real here (a full disk, a read-only file system: the tests may run as root) come from
``faults/sitecustomize.py``, which every process of the run (workers included) imports at start-up.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from zephyr.io.layout import stats_path

from .conftest import FAST, zephyr_cli

FAULTS = Path(__file__).parent / "faults"
BAD_LINE = '{"id": 2, "text": bad}'


def _jsonl(path: Path, rows: int = 3, *, bad_at: int | None = 1, pad: int = 0) -> Path:
    """``rows`` JSON lines (texts long enough for the filters to judge), one of them invalid at ``bad_at``."""
    lines = [
        json.dumps({"id": i, "text": f"document number {i} " + "word " * (20 + pad)}) for i in range(rows)
    ]
    if bad_at is not None:
        lines[bad_at] = BAD_LINE
    path.write_text("\n".join(lines) + "\n")
    return path


def _faulty_cli(tmp_path: Path, code: str, *args: str) -> tuple[subprocess.CompletedProcess, list[str]]:
    """``zephyr ARGS`` with the ``faulty://`` filesystem raising ``code`` on writes; returns the run and the
    write attempts that met the fault."""
    log = tmp_path / "fault-attempts.log"
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(FAULTS), os.environ.get("PYTHONPATH", "")]),
        "ZEPHYR_FAULT": f"errno:{code}",
        "ZEPHYR_FAULT_LOG": str(log),
    }
    run = subprocess.run([sys.executable, "-m", "zephyr.cli", *args], capture_output=True, text=True, env=env)
    return run, log.read_text().splitlines() if log.exists() else []


def _assert_one_line(run: subprocess.CompletedProcess, *must: str) -> str:
    """A failed run whose stderr is the error line and the log file's line, and nothing like a traceback."""
    assert run.returncode == 1, run.stderr
    assert "Traceback" not in run.stderr, run.stderr
    lines = [line for line in run.stderr.splitlines() if " WARNING " not in line]
    assert len(lines) == 2, run.stderr
    error, where = lines
    assert error.startswith("zephyr "), error
    for text in must:
        assert text in error, error
    match = re.fullmatch(r"full traceback: (\S+)", where)
    assert match, where
    logged = Path(match.group(1)).read_text()
    assert "Traceback (most recent call last)" in logged
    return error


# -- 1. one line by default, the traceback with -v and always in the log ------------------------------------
@pytest.mark.parametrize("executor", ["inprocess", "local"])
def test_bad_input_is_one_line_naming_file_line_and_flag(tmp_path, executor):
    # local: 5 MB, above small_job_bytes, so a worker process reads it and its traceback travels as text
    bad = _jsonl(tmp_path / "in.jsonl", rows=20000 if executor == "local" else 3, pad=40)
    args = ("convert", str(bad), "--output", str(tmp_path / "out"), "--executor", executor, "--workers", "1")
    run = zephyr_cli(*args)
    error = _assert_one_line(run, "InputError", f"{bad}:2", "invalid JSON", "--on-error quarantine")
    assert "on_error=" not in error  # the library's keyword, spelled as the flag on the command line
    verbose = zephyr_cli(*args, "-v")
    assert verbose.returncode == 1
    assert "Traceback (most recent call last)" in verbose.stderr and "io/jsonl.py" in verbose.stderr
    assert verbose.stderr.rstrip().splitlines()[-1].startswith("full traceback: ")


def test_driver_errors_are_one_line_too(tmp_path):
    run = zephyr_cli("convert", str(tmp_path / "missing-*.jsonl"), "--output", str(tmp_path / "o"), *FAST)
    _assert_one_line(run, "missing-*.jsonl")


# -- 2 and 6. a full disk: not retried, the path named -------------------------------------------------------
@pytest.mark.parametrize("executor", ["inprocess", "local"])
def test_disk_full_names_the_path_and_is_not_retried(tmp_path, executor):
    data = _jsonl(tmp_path / "in.jsonl", rows=20000 if executor == "local" else 3, bad_at=None, pad=40)
    out = tmp_path / "out"
    run, attempts = _faulty_cli(
        tmp_path,
        "ENOSPC",
        "convert",
        str(data),
        "--output",
        f"faulty://{out}",
        "--executor",
        executor,
        "--workers",
        "1",
        "--max-retries",
        "3",
    )
    _assert_one_line(
        run, "disk full", f"{out}.zephyr/staging/part-00000.parquet", "not retried"
    )  # renamed when whole
    assert len(attempts) == 1, attempts  # one try: a full disk stays full
    if executor == "local":
        assert int(attempts[0].split()[0]) != run_pid_of(run)


def run_pid_of(run: subprocess.CompletedProcess) -> int:
    """The driver's pid, from the log file name it printed (``zephyr-<pid>-<random>.log``)."""
    return int(re.search(r"zephyr-(\d+)-\w+\.log", run.stderr).group(1))


@pytest.mark.parametrize("code", ["EROFS", "EACCES"])
def test_unwritable_output_mid_write_is_one_line_not_retried(tmp_path, code):
    data = _jsonl(tmp_path / "in.jsonl", bad_at=None)
    run, attempts = _faulty_cli(
        tmp_path,
        code,
        "convert",
        str(data),
        "--output",
        f"faulty://{tmp_path / 'out'}",
        *FAST,
        "--max-retries",
        "3",
    )
    words = {"EROFS": "read-only file system", "EACCES": "permission denied"}[code]
    _assert_one_line(run, words, str(tmp_path / "out"))
    assert len(attempts) == 1


def test_dask_does_not_retry_a_full_disk(tmp_path):
    pytest.importorskip("distributed")
    data = _jsonl(tmp_path / "in.jsonl", rows=20000, bad_at=None, pad=40)
    run, attempts = _faulty_cli(
        tmp_path,
        "ENOSPC",
        "convert",
        str(data),
        "--output",
        f"faulty://{tmp_path / 'out'}",
        "--executor",
        "dask",
        "--workers",
        "1",
        "--max-retries",
        "2",
    )
    # the workers' own "Compute Failed" records are silenced (the driver reports the failure): two lines
    assert run.returncode == 1
    assert "Traceback" not in run.stderr, run.stderr
    error, where = run.stderr.rstrip().splitlines()[-2:]
    assert "disk full" in error and f"{tmp_path / 'out'}.zephyr/staging/part-00000.parquet" in error, error
    assert where.startswith("full traceback: ")
    assert len(attempts) == 1


# -- 3. output paths that cannot be written, found before any work -------------------------------------------
COMMANDS = {
    "convert": ("convert",),
    "dedup-exact": ("dedup", "exact"),
    "dedup-fuzzy": ("dedup", "fuzzy"),
    "filter": ("filter",),
    "tokenize": ("tokenize",),
}


@pytest.mark.parametrize("command", list(COMMANDS))
@pytest.mark.parametrize("kind", ["existing-file", "dev-full", "under-a-file"])
def test_output_path_problems_are_one_line(tmp_path, tokenizer_json, command, kind):
    data = _jsonl(tmp_path / "in.jsonl", bad_at=None)
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    output = {"existing-file": str(blocker), "dev-full": "/dev/full", "under-a-file": str(blocker / "out")}[
        kind
    ]
    extra = ("--tokenizer", str(tokenizer_json)) if command == "tokenize" else ()
    run = zephyr_cli(*COMMANDS[command], str(data), "--output", output, *extra, *FAST)
    words = "not a directory" if kind == "under-a-file" else "a file is in the way"
    _assert_one_line(run, "OutputError", output, words)
    assert blocker.read_text() == "not a directory"


def test_read_only_output_dir_is_found_before_any_work(tmp_path):
    if os.geteuid() == 0:
        pytest.skip("root writes into read-only directories (the faulty:// tests cover the error line)")
    data = _jsonl(tmp_path / "in.jsonl", bad_at=None)
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o555)
    try:
        run = zephyr_cli("convert", str(data), "--output", str(locked / "out"), *FAST)
        _assert_one_line(run, "permission denied", str(locked / "out"))
    finally:
        locked.chmod(0o755)


# -- 5. --on-error quarantine from every command that reads input -------------------------------------------
def _balance(rows: dict) -> None:
    assert rows["in"] == 3 and rows["quarantined"] == 1, rows
    assert rows["in"] == rows["kept"] + rows["dropped"] + rows["quarantined"], rows


@pytest.mark.parametrize(
    "command",
    [
        pytest.param(("dedup", "exact"), id="dedup-exact"),
        pytest.param(("dedup", "paragraph"), id="dedup-paragraph"),
        pytest.param(("dedup", "fuzzy"), id="dedup-fuzzy"),
        pytest.param(("dedup", "exact", "--mode", "remove"), id="dedup-exact-remove"),
    ],
)
def test_dedup_quarantines_a_bad_line(tmp_path, command):
    bad = _jsonl(tmp_path / "in.jsonl")
    out = tmp_path / "out"
    assert zephyr_cli(*command, str(bad), "--output", str(out), *FAST).returncode == 1
    run = zephyr_cli(*command, str(bad), "--output", str(out), *FAST, "--on-error", "quarantine")
    assert run.returncode == 0, run.stderr
    _balance(json.loads(Path(stats_path(out)).read_text())["dedup"]["rows"])


def test_filter_quarantines_a_bad_line(tmp_path):
    bad = _jsonl(tmp_path / "in.jsonl")
    out = tmp_path / "out"
    run = zephyr_cli("filter", str(bad), "--output", str(out), *FAST, "--on-error", "quarantine")
    assert run.returncode == 0, run.stderr
    stats = json.loads(Path(stats_path(out)).read_text())
    _balance(stats["filter"]["rows"])


def test_tokenize_quarantines_a_bad_line(tmp_path, tokenizer_json):
    bad = _jsonl(tmp_path / "in.jsonl")
    run = zephyr_cli(
        "tokenize",
        str(bad),
        "--tokenizer",
        str(tokenizer_json),
        "--output",
        str(tmp_path / "t"),
        *FAST,
        "--on-error",
        "quarantine",
        "--json",
    )
    assert run.returncode == 0, run.stderr
    summary = json.loads(run.stdout)
    _balance({k: summary[f"rows_{k}"] for k in ("in", "kept", "dropped", "quarantined")})
    assert summary["details"]["documents"] == 2


@pytest.mark.parametrize("command", ["normalize", "pii", "langid", "decontaminate", "convert", "count"])
def test_every_reading_command_takes_on_error(tmp_path, command):
    """The flag parses everywhere input is read (a bad line then fails the command for another reason or not
    at all, but never with 'unrecognized arguments')."""
    run = zephyr_cli(command, "--help")
    assert run.returncode == 0 and "--on-error" in run.stdout, run.stdout


# -- 2. the classification itself ----------------------------------------------------------------------------
def test_is_retryable_sees_permanent_errors_through_wrappers():
    import errno

    import polars as pl

    from zephyr.errors import InputError
    from zephyr.executors.base import failure, is_retryable

    def wrapped(inner: BaseException) -> BaseException:
        try:
            try:
                raise inner
            except BaseException as exc:
                raise RuntimeError("while writing a run") from exc
        except RuntimeError as outer:
            return outer

    assert not is_retryable(wrapped(OSError(errno.ENOSPC, "No space left on device", "/spill/run-0")))
    assert not is_retryable(PermissionError(errno.EACCES, "Permission denied", "/out"))
    assert not is_retryable(InputError("bad line", path="a.jsonl", line=2))
    with pytest.raises(pl.exceptions.ColumnNotFoundError) as info:
        pl.DataFrame({"a": [1]}).select("nope")
    assert not is_retryable(info.value)
    assert is_retryable(ConnectionResetError(errno.ECONNRESET, "Connection reset by peer"))
    assert is_retryable(RuntimeError("transient"))
    outcome = failure(wrapped(OSError(errno.ENOSPC, "No space left on device", "/spill/run-0")))
    assert (
        not outcome.retryable and "Traceback" in outcome.error and outcome.summary.startswith("RuntimeError")
    )
    assert "disk full: /spill/run-0" in outcome.summary
