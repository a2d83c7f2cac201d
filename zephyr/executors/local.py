"""Runs tasks in spawned worker processes on this machine (the default executor).

Why not ``ProcessPoolExecutor``: when one of its workers dies, the whole pool breaks and every task in flight
fails with it, so a single poisoned shard would be charged to its neighbours. Here each worker runs one task at
a time over its own pipe; the driver waits on pipes and process sentinels together, so a death (SIGKILL, OOM
killer) is charged to exactly the task that worker was running, and a fresh worker takes its place.

Workers use the ``spawn`` start method (no inherited locks or threads) and are kept for the whole job. Each
worker's polars/Arrow thread pools are sized to its share of the cores, so W workers do not oversubscribe.

A batch's ``Shared`` value (a stage) goes down a worker's pipe with the first task of that batch the worker
gets, as cloudpickle bytes, and only its key after: the driver keeps, per worker, the keys that worker holds
(the same last-``SHARED_KEEP`` rule as ``executors.base.shared_value``, applied to the same sequence of
messages, so both sides agree without asking).

No worker outlives the driver, however the driver ends. A normal exit or an exception stops them through
``close()``; but SIGKILL or an unhandled SIGTERM runs no Python code in the driver, and a worker busy in a long
task would otherwise finish it (seconds to hours) before noticing, holding its memory and writing files nobody
collects. So each worker watches its parent twice: on Linux the kernel sends it SIGKILL when the driver dies
(``prctl(PR_SET_PDEATHSIG)``, set only for workers started from the main thread, because the kernel ties it to
the thread that started the child); everywhere, a daemon thread blocks on a lifeline pipe whose only write end
the driver holds and exits the worker on end-of-file, which the OS delivers when the driver dies.
"""

from __future__ import annotations

import contextlib
import importlib
import logging
import multiprocessing
import os
import signal
import sys
import threading
from collections import OrderedDict, deque
from collections.abc import Callable, Iterator, Sequence
from multiprocessing.connection import Connection, wait
from typing import Any

from zephyr.executors.base import SHARED_KEEP, Executor, Outcome, Shared, failure, shared_value

__all__ = ["LocalExecutor"]


_PR_SET_PDEATHSIG = 1  # from <linux/prctl.h>


def _die_with_parent(parent_pid: int, lifeline: Connection, pdeathsig: bool) -> None:
    """Exit this worker as soon as the driver ``parent_pid`` is gone (see the module docstring)."""
    if pdeathsig and sys.platform.startswith("linux"):
        import ctypes

        with contextlib.suppress(OSError, AttributeError):  # no libc / no prctl: the lifeline still works
            ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent_pid:  # the driver died before we got here: nobody will send us work
        os._exit(1)

    def watch() -> None:
        with contextlib.suppress(EOFError, OSError):
            lifeline.recv_bytes()  # the driver never writes: this returns only at end-of-file
        os._exit(1)

    threading.Thread(target=watch, name="zephyr-lifeline", daemon=True).start()


def _worker_main(
    conn: Connection,
    preload: tuple[str, ...] = (),
    lifeline: Connection | None = None,
    parent_pid: int | None = None,
    pdeathsig: bool = False,
) -> None:
    if lifeline is not None and parent_pid is not None:  # first, before the imports below (~1 s)
        _die_with_parent(parent_pid, lifeline, pdeathsig)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the driver handles Ctrl-C and stops us
    from zephyr.executors.heap import fix_mmap_threshold, release_freed_memory

    fix_mmap_threshold()  # before the imports' first large allocations
    import zephyr.tasks  # noqa: F401  (pyarrow, polars: imported while the driver is still planning)

    with contextlib.suppress(ImportError):  # pyarrow imports pandas (if installed) on first use: pay now
        import pandas  # noqa: F401
    for spec in preload:  # "module:function", e.g. loading compiled kernels the coming tasks will call
        module, _, name = spec.partition(":")
        try:
            getattr(importlib.import_module(module), name)()
        except Exception:  # only a head start: the task that needs it will raise the real error
            logging.getLogger(__name__).warning("worker preload %s failed", spec, exc_info=True)
    while True:
        try:
            message = conn.recv()
        except (EOFError, OSError):
            return
        if message is None:
            # every result went back and every task closed its files: skip the interpreter teardown
            # (~0.4 s with pyarrow/polars/numba loaded), which the driver would otherwise wait for
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(0)
        fn, task, key, blob = message
        try:
            reply = (True, fn(task) if key is None else fn(shared_value(key, blob), task), True)
        except BaseException as exc:  # everything goes back to the driver, which decides
            reply = (False, failure(exc), False)
        release_freed_memory()  # the next task starts from the baseline, not from this one's peak
        try:
            conn.send(reply)
        except Exception as exc:  # e.g. an unpicklable return value
            text = f"could not send the task result back: {exc!r}"
            conn.send((False, Outcome(False, error=text, retryable=False, summary=text), False))


class _Worker:
    def __init__(self, context, threads: int, preload: tuple[str, ...] = ()):
        parent, child = context.Pipe()
        # The lifeline's write end stays here and is never written: the worker sees end-of-file when this
        # process dies. spawn passes a child only the descriptors it is given, so no sibling holds a copy.
        lifeline, self._lifeline = context.Pipe(duplex=False)
        pdeathsig = threading.current_thread() is threading.main_thread()
        saved = {
            k: os.environ.get(k)
            for k in ("POLARS_MAX_THREADS", "OMP_NUM_THREADS", "ARROW_DEFAULT_MEMORY_POOL")
        }
        os.environ.setdefault("POLARS_MAX_THREADS", str(threads))
        os.environ.setdefault("OMP_NUM_THREADS", str(threads))
        # jemalloc returns freed pages to the OS sooner than Arrow's default mimalloc: lower worker RSS
        # between batches (measured -50..80 MiB per worker in benchmarks/engine_bench.py's out-of-core run).
        os.environ.setdefault("ARROW_DEFAULT_MEMORY_POOL", "jemalloc")
        try:
            self.process = context.Process(
                target=_worker_main, args=(child, preload, lifeline, os.getpid(), pdeathsig), daemon=True
            )
            self.process.start()
        finally:
            for key, value in saved.items():
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value
        child.close()
        lifeline.close()
        self.conn = parent
        self._stop_sent = False
        self.holds: OrderedDict[str, None] = OrderedDict()
        """Keys of the shared values this worker holds (mirrors its ``shared_value`` cache)."""

    def send_task(self, fn: Callable[..., Any], task: Any, shared: Shared | None) -> None:
        """Send one task; the shared value's bytes only if this worker does not hold it yet."""
        if shared is None:
            self.conn.send((fn, task, None, None))
            return
        blob = None
        if shared.key in self.holds:
            self.holds.move_to_end(shared.key)
        else:
            blob = shared.blob
            self.holds[shared.key] = None
            while len(self.holds) > SHARED_KEEP:
                self.holds.popitem(last=False)
        self.conn.send((fn, task, shared.key, blob))

    def request_stop(self) -> None:
        if self.process.is_alive() and not self._stop_sent:
            with contextlib.suppress(OSError):
                self.conn.send(None)
            self._stop_sent = True

    def stop(self, *, kill: bool = False) -> None:
        if self.process.is_alive():
            if kill:
                self.process.kill()
            else:
                self.request_stop()
        self.process.join(timeout=10)
        if self.process.is_alive():
            self.process.kill()
            self.process.join()
        self.conn.close()
        self._lifeline.close()


class LocalExecutor(Executor):
    """``workers`` spawned processes, started at once and reused across stages.

    ``preload``: ``"module:function"`` names each worker calls once at start, before its first task (e.g.
    loading compiled kernels while the driver is still importing and planning).
    """

    def __init__(self, workers: int, *, preload: Sequence[str] = ()):
        self.workers = max(1, workers)
        self._context = multiprocessing.get_context("spawn")
        self._threads = max(1, (os.cpu_count() or 1) // self.workers)
        self._preload = tuple(preload)
        self._pool: list[_Worker] = []
        self._ensure(self.workers)  # start now: their imports overlap with the driver's planning

    def _ensure(self, count: int) -> None:
        while len(self._pool) < count:
            self._pool.append(_Worker(self._context, self._threads, self._preload))

    def run(
        self, fn: Callable[..., Any], tasks: Sequence[Any], shared: Shared | None = None
    ) -> Iterator[tuple[int, Outcome]]:
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
                handles = {}
                for worker, _ in busy.values():
                    handles[worker.conn] = worker
                    handles[worker.process.sentinel] = worker
                for handle in wait(list(handles)):
                    worker = handles[handle]
                    if id(worker) not in busy:
                        continue  # already handled through its other handle this round
                    _, position = busy.pop(id(worker))
                    outcome = self._collect(worker)
                    if outcome.worker_died:
                        self._replace(worker)
                        idle.append(self._pool[-1])
                    else:
                        if not outcome.ok and shared is not None:  # it may have failed unpickling: resend
                            worker.holds.pop(shared.key, None)
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
                ok, value, _ = worker.conn.recv()  # a failure arrives as its Outcome (executors.base.failure)
                return Outcome(True, value) if ok else value
        except (EOFError, OSError):
            pass
        worker.process.join(timeout=5)
        code = worker.process.exitcode
        pid = worker.process.pid
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

    def _replace(self, worker: _Worker) -> None:
        worker.stop(kill=True)
        self._pool.remove(worker)
        self._pool.append(_Worker(self._context, self._threads, self._preload))

    def close(self) -> None:
        for worker in self._pool:  # ask all to exit first, then wait: they shut down in parallel
            worker.request_stop()
        for worker in self._pool:
            worker.stop()
        self._pool.clear()
