"""User counters: ``zephyr.counters.increment("name", n)`` inside any op; summed per stage into the job stats.

Calls outside a running task are no-ops, so library code can count unconditionally (Marin's counters do the
same). Counters merge by addition, so per-task values sum to the job total whatever the worker count.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

# Per thread (context), not per process: a dask worker with several threads runs several tasks at once.
_active: ContextVar[dict[str, int] | None] = ContextVar("zephyr_counters", default=None)


def increment(name: str, value: int = 1) -> None:
    """Add ``value`` to counter ``name`` of the running task (no-op outside a task)."""
    active = _active.get()
    if active is not None:
        active[name] = active.get(name, 0) + int(value)


@contextmanager
def collecting() -> Iterator[dict[str, int]]:
    """Collect the counters incremented while the block runs (used by the task runner)."""
    active: dict[str, int] = {}
    token = _active.set(active)
    try:
        yield active
    finally:
        _active.reset(token)
