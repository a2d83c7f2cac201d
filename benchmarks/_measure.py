"""Measuring commands: wall time and peak RSS of a whole process tree (``run_measured``), or of every process
in it by role — the driver, its worker processes — with a timeline to find the phase of a peak
(``run_sampled``); the machine line and the RESULTS.md appender every benchmark shares."""

from __future__ import annotations

import contextlib
import datetime
import os
import platform
import re
import subprocess
import time
from pathlib import Path

import psutil

__all__ = ["run_measured", "run_sampled", "stage_peaks", "budget_mib", "machine", "publish"]

MIB = 2**20


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
    to find the phase of a peak (``stage_peaks``)."""
    peak: dict[int, int] = {}
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


def publish(text: str, *, append: bool) -> None:
    """Print a result table and, unless told not to, append it to benchmarks/RESULTS.md."""
    print(text)
    if append:
        with open(Path(__file__).resolve().parent / "RESULTS.md", "a") as f:
            f.write(text)
