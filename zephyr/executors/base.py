"""The executor interface: run a batch of tasks somewhere, report each outcome as it arrives.

Executors know nothing of stages, retries or markers (the job driver owns those); they run a picklable,
importable function on small task specs and say, per task, whether it returned or failed and why. A worker
that dies (SIGKILL, OOM) fails only the task it was running.

What every task of a batch needs (a stage: its ops, reducer, output and the reducer's input list) is one
``Shared`` value, handed by the driver to each worker once, never per task and never through storage: a
worker runs only code the driver sent it, nothing it found in a work directory that others may write. An
executor whose workers are other processes sends ``cloudpickle.dumps(value)`` once to each (over the worker's
pipe, or scattered through the dask scheduler), and the worker keeps the last value it got, by key
(``shared_value``); executors of this process use the value itself, copied once per batch so that
tasks never mutate the driver's plan, as workers in other processes could not either.

``InProcessExecutor`` runs tasks one after another in the calling process: for debugging, tests and tiny
jobs.

Nothing else runs beside such a task, so the driver has it decode its input one batch ahead on a thread
(``zephyr.tasks.StageSpec.read_ahead``): the decoding releases the GIL and uses the core the task's ops
leave idle.

``ThreadExecutor`` runs tasks on threads of the calling process: no worker start-up, one copy of every import.

Why: zephyr's hot paths release the GIL — Arrow compute and Parquet I/O, polars, and the numba kernels (compiled
``nogil``) — so threads of one process use several cores. On a few cores and inputs of a few hundred MB, spawned
workers spend as long importing (pyarrow, polars, numba and its cached kernels: ~1.5 s of CPU each) as the job
computes; threads pay that once. What threads give up: a task that crashes the interpreter or runs out of
memory takes the job with it (the ``local`` executor isolates tasks in processes), and per-row Python ops
(``map``, ``filter``) hold the GIL, so they run one at a time.

``fix_mmap_threshold`` and ``release_freed_memory`` keep a task process's C heap from holding on to memory
that its tasks freed.

Why: glibc serves a large ``malloc`` (numpy arrays, numba kernels' scratch, Parquet decode buffers outside
Arrow's pool) from ``mmap`` and gives it back on ``free`` — until the first such free, after which it raises
its *dynamic* mmap threshold (up to 32 MiB on 64-bit) and serves arrays of that size from the heap arenas.
Freed there, they fragment the arenas and stay resident, so a process that runs many tasks grows with the
data rather than with the budget. Fixing the threshold (``mallopt(M_MMAP_THRESHOLD)``, which also turns the
dynamic adjustment off) keeps every array above it on ``mmap``.

Measured (2 task threads, ``zephyr dedup fuzzy``, 256 MB budget): the giant-bucket run at 160k documents
peaks at ~850 MiB instead of ~1040 MiB, and the medium docs (382 MB) at ~880-920 MiB instead of ~1030-1060
MiB, at the same wall time within noise (benchmarks/dedup_giant_bucket.py, benchmarks/dedup_fuzzy.py). A
threshold of 1-16 MiB gave the same peaks; 4 MiB keeps the number of ``mmap`` calls small.

Between tasks, ``release_freed_memory`` hands back what the allocators still hold for reuse: Arrow's pool
(jemalloc in local workers, mimalloc elsewhere) keeps freed pages until they decay, and glibc keeps the free
top of its heap. A task then starts from the process's baseline rather than from its predecessor's peak, so
one task's retention never adds to the next task's data (``zephyr.budget`` counts on this).
"""

from __future__ import annotations

import concurrent.futures as futures
import contextlib
import ctypes
import functools
import importlib
import logging
import operator
import os
import platform
import sys
import threading
import traceback
import uuid
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Shared:
    """One value every task of a ``run`` needs; the executor calls ``fn(value, task)`` for each task.

    ``key`` names this value and nothing else (the driver makes a new one per stage it runs, even for a stage
    of the same fingerprint in another work directory): workers cache the value under it."""

    key: str
    value: Any

    @functools.cached_property
    def blob(self) -> bytes:
        """``cloudpickle.dumps(value)``, made once (the ops may be lambdas and closures, which plain pickle
        refuses)."""
        import cloudpickle

        return cloudpickle.dumps(self.value)

    def copy(self) -> Any:
        """A copy of the value, as a worker process would get it."""
        import cloudpickle

        return cloudpickle.loads(self.blob)


_held: tuple[str, Any] = ("", None)
"""The shared value a worker process holds, by key: the last one it got (a retry round reuses it)."""


def shared_value(key: str, blob: bytes | None) -> Any:
    """In a worker process: the shared value ``key``, unpickled from ``blob`` the first time (the driver
    sends it then, and ``None`` while the worker still holds it: the last value it got)."""
    global _held
    if _held[0] == key:
        return _held[1]
    if blob is None:
        raise RuntimeError(f"shared value {key} was never sent to this worker")
    import cloudpickle

    value = cloudpickle.loads(blob)
    _held = (key, value)
    return value


@dataclass(frozen=True)
class Outcome:
    """The result of one task: ``ok`` with ``value``, or not with ``error`` text."""

    ok: bool
    value: Any = None
    error: str = ""
    worker_died: bool = False
    retryable: bool = True
    """False for errors that another try cannot fix (unreadable input, a missing column, bad config)."""
    signal: int | None = None
    """The signal that ended the worker process, when ``worker_died`` and the executor knows it."""
    summary: str = ""
    """The error on one line (``zephyr.errors.one_line``), made where the exception object still exists: the
    driver only gets ``error`` as text, and its last line may lack the words (\"disk full\") or the path."""


def is_retryable(exc: BaseException) -> bool:
    """Deterministic failures fail the job at once instead of being retried: bad input, schema or config, a
    missing column, a module that is not installed (an extra: ``ModuleNotFoundError``), and OS errors that
    recur on every try (disk full, permission denied, read-only file system, a file where a directory should
    be: ``errors.PERMANENT_ERRNOS``). The exception's causes are looked at too, since a reader may wrap the
    ``OSError`` it met."""
    from zephyr.errors import ConfigError, InputError, OutputError, SchemaError

    polars = sys.modules.get("polars.exceptions")  # its schema errors, once imported (never import it here)
    names = ("ColumnNotFoundError", "SchemaError", "SchemaFieldNotFoundError")
    permanent = (InputError, SchemaError, ConfigError, OutputError, ModuleNotFoundError)
    permanent += tuple(getattr(polars, name) for name in names if hasattr(polars, name))
    return _os_cause(exc) is None and not any(isinstance(e, permanent) for e in _chain(exc))


def failure(exc: BaseException, tb: Any = None) -> Outcome:
    """The ``Outcome`` of a task that raised ``exc``: its full traceback as text (for the log), one summary
    line and whether a retry can help. Every executor reports failures through this, so a disk-full error is
    classified the same way in-process, in a worker process and on a dask worker."""
    from zephyr.errors import InputError, one_line

    if tb is None:
        text = "".join(traceback.format_exception(exc))
    else:
        text = "".join(traceback.format_exception(type(exc), exc, tb))
    summary = one_line(exc)
    cause = _os_cause(exc)
    # a wrapper's message may not say the disk is full: add it (an input's error names its own, e.g. a read
    # permission, which describe_os_error would word as a writer's)
    if cause is not None and cause is not exc and not isinstance(exc, InputError):
        summary = f"{summary} (because: {one_line(cause)})"
    return Outcome(False, error=text.rstrip(), retryable=is_retryable(exc), summary=summary)


def _chain(exc: BaseException | None) -> Iterator[BaseException]:
    """``exc`` and its causes (``__cause__``, else ``__context__``), each once."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        yield exc
        exc = exc.__cause__ or exc.__context__


def _os_cause(exc: BaseException | None) -> OSError | None:
    """The first ``OSError`` with a permanent errno in ``exc``'s cause chain, ``exc`` included."""
    from zephyr.errors import PERMANENT_ERRNOS

    return next((e for e in _chain(exc) if isinstance(e, OSError) and e.errno in PERMANENT_ERRNOS), None)


class Executor(ABC):
    def run(
        self, fn: Callable[..., Any], tasks: Sequence[Any], shared: Shared | None = None
    ) -> Iterator[tuple[int, Outcome]]:
        """Run ``fn(task)`` for every task, or ``fn(shared.value, task)`` when ``shared`` is given (see the
        module docstring); yield (position in ``tasks``, outcome) in completion order.

        A plain batch is one whose shared value is ``fn`` itself, so executors and workers know one shape."""
        if shared is None:  # operator.call(fn, task) is fn(task)
            fn, shared = operator.call, Shared(f"plain-{uuid.uuid4().hex}", fn)
        return self._run(fn, tasks, shared)

    @abstractmethod
    def _run(self, fn: Callable, tasks: Sequence, shared: Shared) -> Iterator[tuple[int, Outcome]]:
        """``run``, with every task called as ``fn(shared value, task)``."""

    def close(self) -> None:  # noqa: B027 (optional hook: executors without workers have nothing to release)
        """Release workers. Safe to call twice."""

    def __enter__(self) -> Executor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def call(task: Callable[[], Any]) -> Outcome:
    """``task()`` as an ``Outcome``, wherever tasks run: every executor (in this process, its threads, a local
    worker process, a dask worker) calls each task through this, so a failure is reported alike (``failure``).
    Then what the task freed goes back (``release_freed_memory``): the next task starts from the baseline, not
    from this one's peak."""
    try:
        return Outcome(True, task())
    except Exception as exc:  # reported to the driver, which retries or fails the job with context
        return failure(exc)
    finally:
        release_freed_memory()


class InProcessExecutor(Executor):
    def _run(self, fn: Callable, tasks: Sequence, shared: Shared) -> Iterator[tuple[int, Outcome]]:
        value = shared.copy() if tasks else None
        for position, task in enumerate(tasks):
            yield position, call(functools.partial(fn, value, task))


class ThreadExecutor(Executor):
    """``workers`` threads; outcomes in completion order, like the process pools'. ``preload``:
    ``"module:function"`` names called once, on a background thread, from construction on (as the local
    executor's workers call them at start): e.g. loading compiled kernels while the driver plans."""

    def __init__(self, workers: int, *, preload: Sequence[str] = ()):
        self.workers = max(1, workers)
        fix_mmap_threshold()  # this process runs the tasks: freed arrays go back to the OS
        if preload:
            threading.Thread(
                target=call_preloads, args=(tuple(preload),), name="zephyr-preload", daemon=True
            ).start()

    def _run(self, fn: Callable, tasks: Sequence, shared: Shared) -> Iterator[tuple[int, Outcome]]:
        value = shared.copy() if tasks else None  # one copy, shared by the threads
        pool = futures.ThreadPoolExecutor(self.workers, thread_name_prefix="zephyr-task")
        calls = (functools.partial(fn, value, task) for task in tasks)
        pending = {pool.submit(call, task): position for position, task in enumerate(calls)}
        interrupted = False
        try:
            waiting = set(pending)
            while waiting:
                # a bounded wait: Ctrl-C may reach another thread of the process, and the main thread runs
                # the handler only when it wakes (an unbounded wait held it until a task ended)
                done, waiting = futures.wait(waiting, timeout=0.5, return_when=futures.FIRST_COMPLETED)
                for future in sorted(done, key=pending.__getitem__):
                    yield pending[future], future.result()
        except KeyboardInterrupt:
            interrupted = True
            raise
        finally:  # the driver gave up (a task exhausted its retries, Ctrl-C): start nothing more
            for future in pending:
                future.cancel()
            # Running tasks finish before the job fails, except on Ctrl-C: a thread cannot be stopped, and
            # the command must end now (its process exits with the threads; see zephyr.cli).
            pool.shutdown(wait=not interrupted)


def call_preloads(names: Sequence[str]) -> None:
    """Call each ``"module:function"`` of ``names`` once, e.g. loading compiled kernels the coming tasks call.
    Only a head start: a failure is logged, and the task that needs it raises the real error."""
    for name in names:
        module, _, function = name.partition(":")
        try:
            getattr(importlib.import_module(module), function)()
        except Exception:
            logging.getLogger(__name__).warning("worker preload %s failed", name, exc_info=True)


MMAP_THRESHOLD_BYTES = 4 << 20
_M_MMAP_THRESHOLD = -3  # <malloc.h>
_done = False


def fix_mmap_threshold(threshold: int = MMAP_THRESHOLD_BYTES) -> bool:
    """Fixes glibc's mmap threshold once per process; True if it was set by this or an earlier call.

    A no-op (False) where the C library is not glibc, and where the user set ``MALLOC_MMAP_THRESHOLD_``
    themselves (their setting wins, as glibc read it at start-up)."""
    global _done
    if _done:
        return True
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return False
    if "MALLOC_MMAP_THRESHOLD_" in os.environ:
        return False
    try:
        libc = ctypes.CDLL("libc.so.6")
        _done = bool(libc.mallopt(_M_MMAP_THRESHOLD, int(threshold)))
    except (OSError, AttributeError):  # a glibc without mallopt, or no libc.so.6 to load: nothing to tune
        logging.getLogger(__name__).debug("mallopt unavailable; heap growth not bounded", exc_info=True)
        return False
    return _done


def release_freed_memory() -> None:
    """Return memory freed by the finished task to the OS: Arrow's pool, then glibc's heap (see the module
    docstring). Cheap (milliseconds); safe while other threads allocate."""
    pyarrow = sys.modules.get("pyarrow")
    if pyarrow is not None:  # no task imported it: nothing to release
        pyarrow.default_memory_pool().release_unused()
    if _done:  # glibc, and mallopt worked: malloc_trim exists too
        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL("libc.so.6").malloc_trim(0)
