"""User counters: ``zephyr.counters.increment("name", n)`` inside any op; summed per stage into the job stats.

Calls outside a running task are no-ops, so library code can count unconditionally (Marin's counters do the
same). Counters merge by addition, so per-task values sum to the job total whatever the worker count.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["increment", "collecting"]

_active: dict[str, int] | None = None


def increment(name: str, value: int = 1) -> None:
    """Add ``value`` to counter ``name`` of the running task (no-op outside a task)."""
    if _active is not None:
        _active[name] = _active.get(name, 0) + int(value)


@contextmanager
def collecting() -> Iterator[dict[str, int]]:
    """Collect the counters incremented while the block runs (used by the task runner)."""
    global _active
    previous, _active = _active, {}
    try:
        yield _active
    finally:
        _active = previous
