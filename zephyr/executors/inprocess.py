"""Runs tasks one after another in the calling process: for debugging, tests and tiny jobs."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any

from zephyr.executors.base import Executor, Outcome, failure

__all__ = ["InProcessExecutor"]


class InProcessExecutor(Executor):
    def run(self, fn: Callable[[Any], Any], tasks: Sequence[Any]) -> Iterator[tuple[int, Outcome]]:
        for position, task in enumerate(tasks):
            try:
                value = fn(task)
            except Exception as exc:  # reported to the driver, which retries or fails the job with context
                yield position, failure(exc)
            else:
                yield position, Outcome(True, value)
