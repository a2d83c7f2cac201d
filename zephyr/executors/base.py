"""The executor interface: run a batch of tasks somewhere, report each outcome as it arrives.

Executors know nothing of stages, retries or markers (the job driver owns those); they run a picklable,
importable function on small task specs and say, per task, whether it returned or failed and why. A worker
that dies (SIGKILL, OOM) fails only the task it was running.

What every task of a batch needs (a stage: its ops, reducer, output and the reducer's input list) is one
``Shared`` value, handed by the driver to each worker once, never per task and never through storage: a
worker runs only code the driver sent it, nothing it found in a work directory that others may write. An
executor whose workers are other processes sends ``cloudpickle.dumps(value)`` once to each (over the worker's
pipe, or scattered through the dask scheduler), and the worker keeps the last ``SHARED_KEEP`` values it got,
by key (``shared_value``); executors of this process use the value itself, copied once per batch so that
tasks never mutate the driver's plan, as workers in other processes could not either.
"""

from __future__ import annotations

import dataclasses
import sys
import threading
import traceback
from abc import ABC, abstractmethod
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "Executor",
    "Outcome",
    "SHARED_KEEP",
    "Shared",
    "call_shared",
    "is_retryable",
    "failure",
    "explain_worker_death",
    "shared_value",
]

SHARED_KEEP = 4
"""Shared values a worker process keeps (the stages of the last few batches: a retry round reuses its own)."""


@dataclass(frozen=True)
class Shared:
    """One value every task of a ``run`` needs; the executor calls ``fn(value, task)`` for each task.

    ``key`` names this value and nothing else (the driver makes a new one per stage it runs, even for a stage
    of the same fingerprint in another work directory): workers cache the value under it."""

    key: str
    value: Any
    _blob: list = field(default_factory=list, compare=False, repr=False)

    @property
    def blob(self) -> bytes:
        """``cloudpickle.dumps(value)``, made once (the ops may be lambdas and closures, which plain pickle
        refuses)."""
        if not self._blob:
            import cloudpickle

            self._blob.append(cloudpickle.dumps(self.value))
        return self._blob[0]

    def copy(self) -> Any:
        """A copy of the value, as a worker process would get it."""
        import cloudpickle

        return cloudpickle.loads(self.blob)


_cache: OrderedDict[str, Any] = OrderedDict()
_cache_lock = threading.Lock()


def shared_value(key: str, blob: bytes | None) -> Any:
    """In a worker process: the shared value ``key``, unpickled from ``blob`` the first time (the driver
    sends it then, and ``None`` after), kept among the last ``SHARED_KEEP``."""
    with _cache_lock:
        if key in _cache:
            _cache.move_to_end(key)
            return _cache[key]
    if blob is None:
        raise RuntimeError(f"shared value {key} was never sent to this worker")
    import cloudpickle

    value = cloudpickle.loads(blob)
    with _cache_lock:
        _cache[key] = value
        _cache.move_to_end(key)
        while len(_cache) > SHARED_KEEP:
            _cache.popitem(last=False)
    return value


def call_shared(fn: Callable[[Any, Any], Any], key: str, blob: bytes | None, task: Any) -> Any:
    """``fn(shared value, task)`` in a worker process (``shared_value``)."""
    return fn(shared_value(key, blob), task)


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
    missing column, and OS errors that recur on every try (disk full, permission denied, read-only file
    system, a file where a directory should be: ``errors.PERMANENT_ERRNOS``). The exception's causes are
    looked at too, since a reader may wrap the ``OSError`` it met."""
    from zephyr.errors import PERMANENT_ERRNOS, ConfigError, InputError, OutputError, SchemaError

    permanent: tuple[type, ...] = (
        InputError,
        SchemaError,
        ConfigError,
        OutputError,
        *_library_schema_errors(),
    )
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, permanent):
            return False
        if isinstance(exc, OSError) and exc.errno in PERMANENT_ERRNOS:
            return False
        exc = exc.__cause__ or exc.__context__
    return True


def _library_schema_errors() -> tuple[type, ...]:
    """polars' missing-column and schema errors, if polars is already imported (never import it for this)."""
    polars_exceptions = sys.modules.get("polars.exceptions")
    if polars_exceptions is None:
        return ()
    names = ("ColumnNotFoundError", "SchemaError", "SchemaFieldNotFoundError")
    return tuple(getattr(polars_exceptions, n) for n in names if hasattr(polars_exceptions, n))


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


def _os_cause(exc: BaseException | None) -> OSError | None:
    """The first ``OSError`` with a permanent errno in ``exc``'s cause chain, ``exc`` included."""
    from zephyr.errors import PERMANENT_ERRNOS

    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, OSError) and exc.errno in PERMANENT_ERRNOS:
            return exc
        exc = exc.__cause__ or exc.__context__
    return None


class Executor(ABC):
    @abstractmethod
    def run(
        self, fn: Callable[..., Any], tasks: Sequence[Any], shared: Shared | None = None
    ) -> Iterator[tuple[int, Outcome]]:
        """Run ``fn(task)`` for every task, or ``fn(shared.value, task)`` when ``shared`` is given (see the
        module docstring); yield (position in ``tasks``, outcome) in completion order."""

    def close(self) -> None:  # noqa: B027 (optional hook: executors without workers have nothing to release)
        """Release workers. Safe to call twice."""

    def __enter__(self) -> Executor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def explain_worker_death(outcome: Outcome, *, memory_budget_bytes: int, workers: int) -> Outcome:
    """``outcome``, with the memory settings in force and how to change them when its worker got SIGKILL.

    SIGKILL with nobody asking for it is what the kernel's out-of-memory killer sends; the executor cannot
    know the budget (a pool of workers serves jobs with different budgets), the driver can, so it adds this.
    """
    import signal

    from zephyr.config import format_bytes

    if not outcome.worker_died or outcome.signal != signal.SIGKILL:
        return outcome
    hint = (
        f"the memory budget in force is {format_bytes(memory_budget_bytes)} per task (--memory-budget) with "
        f"{workers} worker(s) (--workers); if memory ran out, lower --memory-budget, or give the workers more "
        "memory or run fewer --workers"
    )
    return dataclasses.replace(outcome, error=f"{outcome.error}; {hint}")
