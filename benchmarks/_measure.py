"""Measuring commands: wall time and peak RSS of a whole process tree (``run_measured``), or of every process
in it by role — the driver, its worker processes — with a timeline to find the phase of a peak
(``run_sampled``); the machine line and the notebook appender every benchmark shares: a run's write-up goes to
the month's ``benchmarks/history/<YYYY-MM>.md`` (``append_history``), so that ``benchmarks/RESULTS.md`` stays one
page of current figures, each row updated in place by hand."""

from __future__ import annotations

import contextlib
import datetime
import os
import platform
import re
import subprocess
import sys
import time
from pathlib import Path

import psutil

__all__ = [
    "run_measured",
    "run_sampled",
    "stage_peaks",
    "budget_mib",
    "machine",
    "publish",
    "history_file",
    "append_history",
]

MIB = 2**20
HISTORY = Path(__file__).resolve().parent / "history"
HISTORY_INTRO = (
    "The benchmark runs of the month, each as its script wrote it (machine, load, command, tables) with the "
    "author's notes, newest last. The current figure of each benchmark is a row of [../RESULTS.md](../RESULTS.md), "
    "updated in place from the run here that supersedes it.\n"
)


def run_measured(
    cmd: list[str],
    *,
    log_path: str,
    env: dict | None = None,
    timeout: float = 3600,
    stdout_path: str | None = None,
    cwd: str | None = None,
) -> dict:
    """Run ``cmd``; its wall time and the peak of its process tree's summed RSS (sampled every 0.1 s).

    Output goes to ``log_path``; with ``stdout_path``, standard output goes there and only stderr to the log."""
    start = time.perf_counter()
    with open(log_path, "w") as log, open(stdout_path or os.devnull, "w") as out:
        stdout = out if stdout_path else log
        stderr = log if stdout_path else subprocess.STDOUT
        proc = subprocess.Popen(cmd, stdout=stdout, stderr=stderr, env=env, cwd=cwd)
        ps = psutil.Process(proc.pid)
        peak = 0
        while proc.poll() is None:
            try:
                procs = [ps, *ps.children(recursive=True)]
                peak = max(peak, sum(p.memory_info().rss for p in procs if p.is_running()))
            except psutil.Error:
                pass
            if time.perf_counter() - start > timeout:
                proc.kill()
                break
            time.sleep(0.1)
    return {"rc": proc.wait(), "wall_s": time.perf_counter() - start, "peak_rss_mb": peak / 1e6}


def process_role(proc: psutil.Process, root_pid: int) -> str:
    if proc.pid == root_pid:
        return "driver"
    try:
        cmd = " ".join(proc.cmdline())
    except psutil.Error:
        return "other"
    if "resource_tracker" in cmd:
        return "tracker"
    return "worker"  # multiprocessing spawn children (and anything they start)


def run_sampled(
    cmd: list[str], *, log_path: Path, timeout_s: float, interval_s: float = 0.05, env: dict | None = None
) -> dict:
    """Run ``cmd``; wall time, and the peak RSS of every process of its tree (each pid's maximum, by role).

    ``timeline`` holds one ``(seconds, {role: summed RSS MiB, role_max: the largest process's})`` per sample,
    to find the phase of a peak (``stage_peaks``). ``write_bytes``: what the tree's processes sent to storage
    (``/proc/PID/io``, the last sample of each: a process' writes in its last interval are missed)."""
    peak: dict[int, int] = {}
    written: dict[int, int] = {}
    timeline: list[tuple[float, dict[str, float]]] = []
    role: dict[int, str] = {}
    tree_peak = 0
    timed_out = False
    start = time.perf_counter()
    with open(log_path, "w") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env)
        root = psutil.Process(proc.pid)
        while proc.poll() is None:
            try:
                procs = [root, *root.children(recursive=True)]
            except psutil.Error:
                procs = []
            total = 0
            now: dict[str, float] = {}
            for p in procs:
                try:
                    rss = p.memory_info().rss
                except psutil.Error:
                    continue
                with contextlib.suppress(psutil.Error):  # a write count we cannot read costs no RSS sample
                    written[p.pid] = p.io_counters().write_bytes
                if p.pid not in role:
                    role[p.pid] = process_role(p, proc.pid)
                peak[p.pid] = max(peak.get(p.pid, 0), rss)
                now[role[p.pid]] = now.get(role[p.pid], 0) + rss / MIB
                now[role[p.pid] + "_max"] = max(now.get(role[p.pid] + "_max", 0), rss / MIB)
                total += rss
            timeline.append((round(time.perf_counter() - start, 3), now))
            tree_peak = max(tree_peak, total)
            if time.perf_counter() - start > timeout_s:
                timed_out = True
                for p in reversed(procs):  # children first, then the driver
                    with contextlib.suppress(psutil.Error):
                        p.kill()
                break
            time.sleep(interval_s)
        rc = proc.wait()
    wall = time.perf_counter() - start
    by_role: dict[str, list[int]] = {}
    for pid, rss in peak.items():
        by_role.setdefault(role[pid], []).append(rss)
    return {
        "rc": rc,
        "timed_out": timed_out,
        "wall_s": wall,
        "tree_peak_mib": tree_peak / MIB,
        "peak_mib": {r: max(v) / MIB for r, v in by_role.items()},
        "processes": {r: len(v) for r, v in by_role.items()},
        "write_bytes": sum(written.values()),
        "timeline": timeline,
    }


_STAGE_LINE = re.compile(
    r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) INFO zephyr\.job: stage (.+?): \d+ tasks .*?, ([0-9.]+)s$"
)


def stage_peaks(log_text: str, timeline: list, started_unix: float, role: str = "worker") -> list[dict]:
    """Per engine stage (from the ``-v`` log's ``stage NAME: ... 12.3s`` lines), the largest ``role`` process's
    peak RSS while it ran: where in a job its peak happened."""
    stages = []
    for line in log_text.splitlines():
        match = _STAGE_LINE.match(line)
        if not match:
            continue
        end = datetime.datetime.strptime(match.group(1), "%Y-%m-%d %H:%M:%S,%f").timestamp() - started_unix
        stages.append({"stage": match.group(2), "start_s": end - float(match.group(3)), "end_s": end})
    for stage in stages:
        inside = [
            now.get(role + "_max", 0.0) for t, now in timeline if stage["start_s"] <= t <= stage["end_s"]
        ]
        stage["peak_mib"] = max(inside, default=None)
    return stages


def budget_mib(text: str) -> float:
    """``"256MB"``, ``"64MiB"`` as MiB (zephyr.sizes' parsing: MB is 10**6 bytes, MiB 2**20)."""
    from zephyr.config import parse_bytes

    return parse_bytes(text) / MIB


def machine() -> str:
    return f"{platform.machine()} {psutil.cpu_count()} cores, {psutil.virtual_memory().total / 2**30:.0f} GiB, Python {platform.python_version()}"


def history_file(now: datetime.datetime | None = None, *, folder: Path = HISTORY) -> Path:
    """The notebook of ``now``'s month (UTC; default: this month), ``folder/<YYYY-MM>.md``, created with its
    heading and intro when it does not exist yet. Runs are written up there, not in RESULTS.md: the notebook of
    every run grows without bound, and a reader needs one page with today's figure of each benchmark."""
    now = now or datetime.datetime.now(datetime.UTC)
    path = folder / f"{now:%Y-%m}.md"
    if not path.exists():
        folder.mkdir(parents=True, exist_ok=True)
        path.write_text(f"# Benchmark runs, {now:%Y-%m}\n\n{HISTORY_INTRO}", encoding="utf-8")
    return path


def append_history(text: str, *, now: datetime.datetime | None = None, folder: Path = HISTORY) -> Path:
    """Append a run's Markdown section to the month's notebook (``history_file``), after a blank line so that
    its heading starts a block; returns the file's path."""
    path = history_file(now, folder=folder)
    with open(path, "a", encoding="utf-8") as f:
        f.write(text if text.startswith("\n") else "\n" + text)
    return path


def publish(text: str, *, append: bool) -> None:
    """Print a result table and, unless told not to, append it to the month's notebook
    (benchmarks/history/<YYYY-MM>.md); the figure's row in benchmarks/RESULTS.md is then updated by hand."""
    print(text)
    if append:
        path = append_history(text)
        print(f"appended to {path}; update the benchmark's row in benchmarks/RESULTS.md", file=sys.stderr)


def duckdb_copy(query: str, out: str, *, memory_limit: str, threads: int) -> None:
    """The duckdb peer of an engine op: ``COPY (query) TO OUT/part-00000.parquet`` (zstd) in this process with
    ``memory_limit`` and ``threads``, spilling to ``OUT.tmp`` (removed after). The query reads ``docs`` and
    ``labels`` as the caller's ``read_parquet`` views."""
    import shutil

    import duckdb

    Path(out).mkdir(parents=True)
    con = duckdb.connect()
    con.execute(f"SET memory_limit = '{memory_limit}'")
    con.execute(f"SET threads = {threads}")
    con.execute(f"SET temp_directory = '{out}.tmp'")
    con.execute(f"COPY ({query}) TO '{out}/part-00000.parquet' (FORMAT parquet, COMPRESSION zstd)")
    shutil.rmtree(f"{out}.tmp", ignore_errors=True)
