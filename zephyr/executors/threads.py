"""Runs tasks on threads of the calling process: no worker start-up, one copy of every import.

Why: zephyr's hot paths release the GIL — Arrow compute and Parquet I/O, polars, and the numba kernels (compiled
``nogil``) — so threads of one process use several cores. On a few cores and inputs of a few hundred MB, spawned
workers spend as long importing (pyarrow, polars, numba and its cached kernels: ~1.5 s of CPU each) as the job
computes; threads pay that once. What threads give up: a task that crashes the interpreter or runs out of
memory takes the job with it (the ``local`` executor isolates tasks in processes), and per-row Python ops
(``map``, ``filter``) hold the GIL, so they run one at a time.
"""

from __future__ import annotations

import concurrent.futures as futures
import importlib
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from zephyr.executors.base import Executor, Outcome, Shared, failure
from zephyr.executors.heap import fix_mmap_threshold, release_freed_memory

__all__ = ["ThreadExecutor"]


class ThreadExecutor(Executor):
    """``workers`` threads; outcomes in completion order, like the process pools'. ``preload``:
    ``"module:function"`` names called once, on a background thread, from construction on (as the local
    executor's workers call them at start): e.g. loading compiled kernels while the driver plans."""

    def __init__(self, workers: int, *, preload: Sequence[str] = ()):
        self.workers = max(1, workers)
        fix_mmap_threshold()  # this process runs the tasks: freed arrays go back to the OS
        if preload:
            threading.Thread(
                target=_preload, args=(tuple(preload),), name="zephyr-preload", daemon=True
            ).start()

    def run(
        self, fn: Callable[..., Any], tasks: Sequence[Any], shared: Shared | None = None
    ) -> Iterator[tuple[int, Outcome]]:
        value = shared.copy() if shared is not None and tasks else None  # one copy, shared by the threads

        def call(task: Any) -> Outcome:
            try:
                return Outcome(True, fn(task) if shared is None else fn(value, task))
            except Exception as exc:  # reported to the driver, which retries or fails the job with context
                return failure(exc)
            finally:
                release_freed_memory()  # what this task freed goes back before the next task's peak

        pool = futures.ThreadPoolExecutor(self.workers, thread_name_prefix="zephyr-task")
        pending = {pool.submit(call, task): position for position, task in enumerate(tasks)}
        interrupted = False
        try:
            for done in futures.as_completed(pending):
                yield pending[done], done.result()
        except KeyboardInterrupt:
            interrupted = True
            raise
        finally:  # the driver gave up (a task exhausted its retries, Ctrl-C): start nothing more
            for future in pending:
                future.cancel()
            # Running tasks finish before the job fails, except on Ctrl-C: a thread cannot be stopped, and
            # the command must end now (its process exits with the threads; see zephyr.cli).
            pool.shutdown(wait=not interrupted)


def _preload(names: tuple[str, ...]) -> None:
    for name in names:
        module, _, function = name.partition(":")
        getattr(importlib.import_module(module), function)()
