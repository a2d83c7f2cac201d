"""Run a command, measuring wall time and peak RSS of its whole process tree (sampled every 0.1 s)."""

from __future__ import annotations

import platform
import subprocess
import time

import psutil

__all__ = ["run_measured", "machine"]


def run_measured(cmd: list[str], *, log_path: str, env: dict | None = None, timeout: float = 3600) -> dict:
    start = time.perf_counter()
    with open(log_path, "w") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env)
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


def machine() -> str:
    return f"{platform.machine()} {psutil.cpu_count()} cores, {psutil.virtual_memory().total / 2**30:.0f} GiB, Python {platform.python_version()}"


def publish(text: str, *, append: bool) -> None:
    """Print a result table and, unless told not to, append it to benchmarks/RESULTS.md."""
    from pathlib import Path

    print(text)
    if append:
        with open(Path(__file__).resolve().parent / "RESULTS.md", "a") as f:
            f.write(text)
