"""The executor interface: run a batch of tasks somewhere, report each outcome as it arrives.

Executors know nothing of stages, retries or markers (the job driver owns those); they run a picklable,
importable function on small task specs and say, per task, whether it returned or failed and why. A worker
that dies (SIGKILL, OOM) fails only the task it was running.
"""

from __future__ import annotations

import dataclasses
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["Executor", "Outcome", "is_retryable", "explain_worker_death"]


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


def is_retryable(exc: BaseException) -> bool:
    """Deterministic failures — bad input, schema, config — fail the job at once instead of being retried."""
    from zephyr.errors import ConfigError, InputError, SchemaError

    return not isinstance(exc, InputError | SchemaError | ConfigError)


class Executor(ABC):
    @abstractmethod
    def run(self, fn: Callable[[Any], Any], tasks: Sequence[Any]) -> Iterator[tuple[int, Outcome]]:
        """Run ``fn(task)`` for every task; yield (position in ``tasks``, outcome) in completion order."""

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

    from zephyr.sizes import format_bytes

    if not outcome.worker_died or outcome.signal != signal.SIGKILL:
        return outcome
    hint = (
        f"the memory budget in force is {format_bytes(memory_budget_bytes)} per task (--memory-budget) with "
        f"{workers} worker(s) (--workers); if memory ran out, lower --memory-budget, or give the workers more "
        "memory or run fewer --workers"
    )
    return dataclasses.replace(outcome, error=f"{outcome.error}; {hint}")
