"""Shared fixtures: leak guard, executor matrix, the benchmark corpus built on demand."""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
SHARED = Path(os.environ.get("ZEPHYR_SHARED_DIR", REPO.parent / "shared"))
CORPUS_CACHE = Path(os.environ.get("ZEPHYR_CORPUS_CACHE", Path.home() / ".cache" / "zephyr" / "corpus"))
# test data writers and models that live beside the benchmarks (warc_pages, dupes_synthetic, shuffle_model)
sys.path.insert(0, str(REPO / "benchmarks"))


def _is_resource_tracker(process) -> bool:
    """multiprocessing's resource tracker: one per interpreter that ever spawned, by design not a leak."""
    try:
        return "resource_tracker" in " ".join(process.cmdline())
    except Exception:
        return False


@pytest.fixture(scope="session", autouse=True)
def _private_logs(tmp_path_factory):
    """Failing commands log their tracebacks under this session's own folder (``XDG_STATE_HOME``, which CLI
    subprocesses inherit), not the user's: each folder keeps its newest 20 logs, and a test reads the log its
    command named, so a suite run beside another must not prune it."""
    saved = os.environ.get("XDG_STATE_HOME")
    os.environ["XDG_STATE_HOME"] = str(tmp_path_factory.mktemp("state"))
    yield
    if saved is None:
        os.environ.pop("XDG_STATE_HOME", None)
    else:
        os.environ["XDG_STATE_HOME"] = saved


@pytest.fixture(autouse=True)
def _leak_guard():
    """Fail a test that leaves threads or child processes running (Marin's thread check, extended)."""
    import psutil

    before_threads = {t.ident for t in threading.enumerate()}
    me = psutil.Process()
    before_children = {p.pid for p in me.children(recursive=True)}
    yield
    deadline = time.monotonic() + 10
    while True:
        threads = [
            t
            for t in threading.enumerate()
            if t.ident not in before_threads and t.is_alive() and not t.daemon
        ]
        children = [
            p
            for p in me.children(recursive=True)
            if p.pid not in before_children
            and p.is_running()
            and p.status() != psutil.STATUS_ZOMBIE
            and not _is_resource_tracker(p)
        ]
        if not threads and not children:
            return
        if time.monotonic() > deadline:
            break
        time.sleep(0.1)
    names = [t.name for t in threads] + [f"pid {p.pid}: {' '.join(p.cmdline()[:3])}" for p in children]
    pytest.fail(f"test leaked threads/processes: {names}")


@pytest.fixture(params=[pytest.param("inprocess", id="inprocess"), pytest.param("local", id="local")])
def executor(request) -> str:
    """Run a test once per local executor kind (the dask matrix lives in tests/test_dask.py)."""
    return request.param


def _build_corpus(scale: str) -> Path:
    out = CORPUS_CACHE / scale
    if (out / "MANIFEST.json").exists():
        return out
    build = SHARED / "corpus" / "build.py"
    if not build.exists():
        pytest.skip(f"corpus builder not found at {build} (set ZEPHYR_SHARED_DIR)")
    CORPUS_CACHE.mkdir(parents=True, exist_ok=True)
    with open(CORPUS_CACHE / f".{scale}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (out / "MANIFEST.json").exists():
            subprocess.run(
                [
                    sys.executable,
                    str(build),
                    "--out",
                    str(out),
                    "--scale",
                    scale,
                    "--raw",
                    str(CORPUS_CACHE / "raw"),
                ],
                check=True,
                stdout=subprocess.DEVNULL,
            )
    return out


@pytest.fixture(scope="session")
def corpus_small() -> Path:
    """The small benchmark corpus (≈25 MB of text, dupes with ground truth), built once and cached.

    Set ZEPHYR_CORPUS_DIR to an existing build to skip building.
    """
    given = os.environ.get("ZEPHYR_CORPUS_DIR")
    if given:
        return Path(given)
    return _build_corpus("small")


@pytest.fixture(scope="session")
def sample_corpus() -> Path:
    """The embedded sample corpus committed in the repo (public-domain text)."""
    return REPO / "data" / "sample"
