"""Runs tasks in worker processes on this machine (the default executor).

Why not ``ProcessPoolExecutor``: when one of its workers dies, the whole pool breaks and every task in flight
fails with it, so a single poisoned shard would be charged to its neighbours. Here each worker runs one task at
a time over its own pipe; the driver waits on pipes and process sentinels together, so a death (SIGKILL, OOM
killer) is charged to exactly the task that worker was running, and a fresh worker takes its place.

Each worker is a fresh interpreter running zephyr's own entry point (``executors/worker.py``), started with
``subprocess`` rather than multiprocessing's ``spawn``: spawn re-imports the driver's ``__main__`` in every
worker, which re-runs a script that has no ``if __name__ == "__main__":`` guard and fails for code read from
stdin. A worker imports nothing of the user's but what a task's cloudpickle bytes name; it gets the driver's
``sys.path``, so modules beside a script import as they do in the driver. Workers are kept for the whole job.
Each worker's polars/Arrow thread pools are sized to its share of the cores, so W workers do not
oversubscribe; jemalloc is Arrow's pool there.

A batch's ``Shared`` value (a stage) goes down a worker's pipe with the first task of that batch the worker
gets, as cloudpickle bytes, and only its key after: the driver keeps, per worker, the key of the value that
worker holds (its last, as ``executors.base.shared_value`` keeps it), so both sides agree without asking.

No worker outlives the driver, however the driver ends. A normal exit or an exception stops them through
``close()``; but SIGKILL or an unhandled SIGTERM runs no Python code in the driver, and a worker busy in a long
task would otherwise finish it (seconds to hours) before noticing, holding its memory and writing files nobody
collects. So each worker watches its parent twice: on Linux the kernel sends it SIGKILL when the driver dies
(``prctl(PR_SET_PDEATHSIG)``, set only for workers started from the main thread, because the kernel ties it to
the thread that started the child); everywhere, a daemon thread blocks on a lifeline pipe whose only write end
the driver holds and exits the worker on end-of-file, which the OS delivers when the driver dies. A worker
ignores SIGINT: the driver handles Ctrl-C and stops them.
"""

from __future__ import annotations

import contextlib
import json
import os
import pickle
import signal
import subprocess
import sys
import threading
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from multiprocessing import Pipe
from multiprocessing.connection import wait
from typing import Any

from zephyr.executors.base import Executor, Outcome, Shared


class _Worker:
    def __init__(self, threads: int, preload: tuple[str, ...] = ()):
        import cloudpickle

        from zephyr.errors import ConfigError
        from zephyr.executors import worker

        if not sys.executable:
            raise ConfigError(
                "the local executor starts workers with sys.executable, which is empty in this interpreter: "
                "pass executor='threads' or 'inprocess'"
            )
        self._dumps = cloudpickle.dumps
        self.conn, child = Pipe()
        # The lifeline's write end stays here and is never written: the worker sees end-of-file when this
        # process dies. The sentinel's write end lives only in the worker: it reads end-of-file here when the
        # worker exits, however it ends (multiprocessing's own sentinel works the same way). subprocess passes
        # a child only the descriptors named in pass_fds, so no sibling holds a copy.
        lifeline, self._lifeline = os.pipe()
        self.sentinel, sentinel = os.pipe()
        env = dict(os.environ)
        env.setdefault("POLARS_MAX_THREADS", str(threads))
        env.setdefault("OMP_NUM_THREADS", str(threads))
        # jemalloc returns freed pages to the OS sooner than Arrow's default mimalloc: lower worker RSS
        # between batches (measured -50..80 MiB per worker in benchmarks/engine_bench.py's out-of-core run).
        env.setdefault("ARROW_DEFAULT_MEMORY_POOL", "jemalloc")
        config = {
            "conn": child.fileno(),
            "lifeline": lifeline,
            "sentinel": sentinel,
            "parent_pid": os.getpid(),
            "pdeathsig": threading.current_thread() is threading.main_thread(),
            "preload": list(preload),
        }
        try:
            self.process = subprocess.Popen(
                worker.command(worker.BOOTSTRAP, json.dumps(config)),
                pass_fds=(child.fileno(), lifeline, sentinel),
                env=env,
                stdin=subprocess.DEVNULL,  # the driver's stdin (a script piped in) is not the workers'
            )
        except BaseException:
            self.conn.close()
            os.close(self._lifeline)
            os.close(self.sentinel)
            raise
        finally:
            child.close()
            os.close(lifeline)
            os.close(sentinel)
        self._stop_sent = False
        self.holds: str | None = None
        """The key of the shared value this worker holds (mirrors its ``shared_value``)."""

    def is_alive(self) -> bool:
        return self.process.poll() is None

    def send_task(self, fn: Callable[..., Any], task: Any, shared: Shared) -> None:
        """Send one task; the shared value's bytes only if this worker does not hold it yet. cloudpickle,
        not the pipe's plain pickle: ``fn`` or the task may come from ``__main__``, which the worker never
        imports."""
        blob = None if self.holds == shared.key else shared.blob
        self.holds = shared.key
        self.conn.send_bytes(self._dumps((fn, task, shared.key, blob)))

    def request_stop(self) -> None:
        if self.is_alive() and not self._stop_sent:
            with contextlib.suppress(OSError):
                self.conn.send_bytes(self._dumps(None))
            self._stop_sent = True

    def join(self, timeout: float | None = None) -> int | None:
        """The exit code (negative: the signal), or None if still running after ``timeout`` seconds."""
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(timeout)
        return self.process.returncode

    def stop(self, *, kill: bool = False) -> None:
        if self.conn.closed:
            return
        if self.is_alive():
            if kill:
                self.process.kill()
            else:
                self.request_stop()
        if self.join(timeout=10) is None:
            self.process.kill()
            self.process.wait()
        self.conn.close()
        os.close(self._lifeline)
        os.close(self.sentinel)


class LocalExecutor(Executor):
    """``workers`` worker processes, started at once and reused across stages.

    ``preload``: ``"module:function"`` names each worker calls once at start, before its first task (e.g.
    loading compiled kernels while the driver is still importing and planning).
    """

    def __init__(self, workers: int, *, preload: Sequence[str] = ()):
        self.workers = max(1, workers)
        self._threads = max(1, (os.cpu_count() or 1) // self.workers)
        self._preload = tuple(preload)
        self._pool: list[_Worker] = []
        self._ensure(self.workers)  # start now: their imports overlap with the driver's planning

    def _ensure(self, count: int) -> None:
        while len(self._pool) < count:
            self._pool.append(_Worker(self._threads, self._preload))

    def _run(self, fn: Callable, tasks: Sequence, shared: Shared) -> Iterator[tuple[int, Outcome]]:
        queue = deque(enumerate(tasks))
        self._ensure(min(self.workers, len(tasks)))
        idle = list(self._pool)
        busy: dict[int, tuple[_Worker, int]] = {}  # id(worker) -> (worker, task position)
        try:
            while queue or busy:
                while queue and idle:
                    worker = idle.pop()
                    position, task = queue.popleft()
                    worker.send_task(fn, task, shared)
                    busy[id(worker)] = (worker, position)
                handles = {h: worker for worker, _ in busy.values() for h in (worker.conn, worker.sentinel)}
                for handle in wait(list(handles)):
                    worker = handles[handle]
                    if id(worker) not in busy:
                        continue  # already handled through its other handle this round
                    _, position = busy.pop(id(worker))
                    outcome = self._collect(worker)
                    if outcome.worker_died:  # a fresh worker takes its place
                        worker.stop(kill=True)
                        self._pool.remove(worker)
                        self._pool.append(_Worker(self._threads, self._preload))
                        idle.append(self._pool[-1])
                    else:
                        if not outcome.ok:  # it may have failed unpickling the shared value: resend it
                            worker.holds = None
                        idle.append(worker)
                    yield position, outcome
        except BaseException:
            # The driver gave up (a task exhausted its retries, Ctrl-C): stop the workers still busy.
            for worker, _ in busy.values():
                worker.stop(kill=True)
                self._pool.remove(worker)
            raise

    def _collect(self, worker: _Worker) -> Outcome:
        try:
            if worker.conn.poll():
                return pickle.loads(worker.conn.recv_bytes())  # the task's Outcome (executors.base.call)
        except (EOFError, OSError):
            pass
        code, pid = worker.join(timeout=5), worker.process.pid
        if code is None or code >= 0:
            return Outcome(False, error=f"worker process {pid} died (exit code {code})", worker_died=True)
        number = -code
        try:
            name = signal.Signals(number).name
        except ValueError:
            name = "unknown signal"
        if number == signal.SIGKILL:
            name += ", likely the out-of-memory killer"
        return Outcome(
            False,
            error=f"worker process {pid} was killed by signal {number} ({name}) while running the task",
            worker_died=True,
            signal=number,
        )

    def close(self) -> None:
        for worker in self._pool:  # ask all to exit first, then wait: they shut down in parallel
            worker.request_stop()
        for worker in self._pool:
            worker.stop()
        self._pool.clear()
