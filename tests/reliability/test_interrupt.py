"""Ctrl-C: the command prints one line ("interrupted; rerun ..."), exits 130, and leaves no worker behind.

Each test starts the real ``zephyr`` in its own session (as a shell starts a job), waits until a task is
running for sure (the ``hold:`` fault of ``faults/sitecustomize.py`` holds every task that opens the input,
and says so with a file), then sends SIGINT the way a terminal does (to every process of the command) or the
way ``kill -INT`` does (to the driver only). Every process the command had started must be gone once it
exits: workers, dask's nannies and workers, multiprocessing's helpers.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil
import pytest

FAULTS = Path(__file__).parent / "faults"
ROWS = 3000


def _corpus(folder: Path) -> Path:
    """A JSONL corpus with near-duplicates (fuzzy dedup has work to do)."""
    folder.mkdir()
    path = folder / "docs.jsonl"
    words = [f"w{i}" for i in range(700)]
    with path.open("w") as f:
        for i in range(ROWS):
            text = " ".join(words[(i * 7 + k * 13) % 700] for k in range(60))
            f.write(json.dumps({"id": i, "text": text if i % 10 else text + " again"}) + "\n")
    return path


def _interrupt(tmp_path: Path, executor: str, *, whole_group: bool, work_dir: bool) -> tuple[int, str, list]:
    """Run ``zephyr dedup fuzzy`` with its tasks held, SIGINT it once a task runs; (exit code, stderr, the
    processes it had started)."""
    data = _corpus(tmp_path / "data")
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(FAULTS), os.environ.get("PYTHONPATH", "")]),
        "ZEPHYR_FAULT": f"hold:{data.parent}",
    }
    args = [
        "dedup",
        "fuzzy",
        str(data),
        "--mode",
        "remove",
        "--output",
        str(tmp_path / "out"),
        "--executor",
        executor,
    ]
    args += ["--workers", "2", "--small-job-bytes", "0"]
    if work_dir:
        args += ["--work-dir", str(tmp_path / "work")]
    err = tmp_path / "stderr.txt"
    with err.open("w") as stderr:
        command = subprocess.Popen(
            [sys.executable, "-m", "zephyr.cli", *args], stderr=stderr, env=env, start_new_session=True
        )
    try:
        deadline = time.monotonic() + 120
        while not list(data.parent.glob(".held-*")):
            assert command.poll() is None, err.read_text()
            assert time.monotonic() < deadline, "no task started"
            time.sleep(0.1)
        started = psutil.Process(command.pid).children(recursive=True)
        if whole_group:
            os.killpg(command.pid, signal.SIGINT)
        else:
            command.send_signal(signal.SIGINT)
        code = command.wait(timeout=120)
    finally:
        if command.poll() is None:
            os.killpg(command.pid, signal.SIGKILL)
            command.wait()
    return code, err.read_text(), started


def _survivors(started: list) -> list[str]:
    """Processes of ``started`` still running a few seconds on (``is_running`` compares start times, so a
    recycled pid is not taken for a survivor)."""
    deadline = time.monotonic() + 10
    while True:
        alive = [p for p in started if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
        if not alive or time.monotonic() > deadline:
            return [f"{p.pid}: {' '.join(p.cmdline()[:4])}" for p in alive]
        time.sleep(0.2)


@pytest.mark.parametrize(
    ("executor", "whole_group"),
    [
        pytest.param("local", True, id="local-terminal"),
        pytest.param("local", False, id="local-kill"),
        pytest.param("threads", True, id="threads-terminal"),
    ],
)
def test_ctrl_c_is_one_line_exit_130_and_no_worker_left(tmp_path, executor, whole_group):
    code, stderr, started = _interrupt(tmp_path, executor, whole_group=whole_group, work_dir=False)
    assert code == 130, stderr
    assert stderr.splitlines() == [
        "zephyr dedup fuzzy: interrupted; rerun the same command to start again (with --work-dir DIR, a rerun "
        "resumes)"
    ]
    if executor == "local":
        assert len(started) >= 2  # its workers (and multiprocessing's resource tracker)
    assert _survivors(started) == []


@pytest.mark.dask
def test_ctrl_c_with_dask_closes_its_cluster(tmp_path):
    pytest.importorskip("distributed")
    code, stderr, started = _interrupt(tmp_path, "dask", whole_group=True, work_dir=True)
    assert code == 130, stderr
    assert stderr.splitlines() == ["zephyr dedup fuzzy: interrupted; rerun the same command to resume"]
    assert len(started) >= 2  # the LocalCluster's workers
    assert _survivors(started) == []


def test_interrupted_run_resumes_to_the_same_output(tmp_path):
    """With --work-dir, the rerun after Ctrl-C finishes and gives the output of an uninterrupted run (both
    on threads: outputs do not depend on the executor, and these runs need no workers to start)."""
    code, stderr, started = _interrupt(tmp_path, "local", whole_group=True, work_dir=True)
    assert (code, stderr.splitlines()) == (
        130,
        ["zephyr dedup fuzzy: interrupted; rerun the same command to resume"],
    )
    assert _survivors(started) == []
    data = tmp_path / "data" / "docs.jsonl"
    args = ["dedup", "fuzzy", str(data), "--mode", "remove", "--executor", "threads", "--json"]
    for output, extra in (("out", ["--work-dir", str(tmp_path / "work")]), ("fresh", [])):
        run = subprocess.run(
            [sys.executable, "-m", "zephyr.cli", *args, "--output", str(tmp_path / output), *extra],
            capture_output=True,
            text=True,
        )
        assert run.returncode == 0, run.stderr
        summary = json.loads(run.stdout)
        assert summary["rows_in"] == ROWS and summary["balanced"] and summary["rows_dropped"] > 0
    parts = {name: sorted(p.name for p in (tmp_path / name).glob("*.parquet")) for name in ("out", "fresh")}
    assert parts["out"] == parts["fresh"] and parts["out"]
    for part in parts["out"]:
        assert (tmp_path / "out" / part).read_bytes() == (tmp_path / "fresh" / part).read_bytes()


def test_ctrl_c_reaching_a_task_thread_still_interrupts_the_threads_executor(tmp_path):
    """The kernel hands a process's SIGINT to any of its threads; when a task thread takes it, the main thread
    (waiting for tasks) must still wake up and raise ``KeyboardInterrupt`` instead of waiting for the task."""
    code = textwrap.dedent(
        """
        import signal, sys, threading, time
        from zephyr.executors.base import ThreadExecutor

        def task(n):
            if n == 0:
                time.sleep(1)  # the main thread waits for the tasks by now
                signal.pthread_kill(threading.get_ident(), signal.SIGINT)  # Ctrl-C lands on this thread
            time.sleep(600)  # a task that would hold the command for ten minutes

        try:
            list(ThreadExecutor(2).run(task, [0, 1]))
        except KeyboardInterrupt:
            print("interrupted", flush=True)
            import os; os._exit(0)
        """
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert result.stdout.startswith("interrupted"), result.stderr
