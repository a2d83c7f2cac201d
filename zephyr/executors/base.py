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

__all__ = ["Executor", "Outcome"]


@dataclass(frozen=True)
class Outcome:
    """The result of one task: ``ok`` with ``value``, or not with ``error`` text."""

    ok: bool
    value: Any = None
    error: str = ""
    worker_died: bool = False


class Executor(ABC):
    @abstractmethod
    def run(self, fn: Callable[[Any], Any], tasks: Sequence[Any]) -> Iterator[tuple[int, Outcome]]:
        """Run ``fn(task)`` for every task; yield (position in ``tasks``, outcome) in completion order."""

    def close(self) -> None:
        """Release workers. Safe to call twice."""

    def __enter__(self) -> Executor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
