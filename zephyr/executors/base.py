"""The executor interface: run a batch of tasks somewhere, report each outcome as it arrives.

Executors know nothing of stages, retries or markers (the job driver owns those); they run a picklable,
importable function on small task specs and say, per task, whether it returned or failed and why. A worker
that dies (SIGKILL, OOM) fails only the task it was running.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["Executor", "Outcome", "is_retryable"]


@dataclass(frozen=True)
class Outcome:
    """The result of one task: ``ok`` with ``value``, or not with ``error`` text."""

    ok: bool
    value: Any = None
    error: str = ""
    worker_died: bool = False
    retryable: bool = True
    """False for errors that another try cannot fix (unreadable input, a missing column, bad config)."""


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
