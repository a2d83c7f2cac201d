"""Runs tasks one after another in the calling process: for debugging, tests and tiny jobs."""

from __future__ import annotations

import traceback
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from zephyr.executors.base import Executor, Outcome, is_retryable

__all__ = ["InProcessExecutor"]


class InProcessExecutor(Executor):
    def run(self, fn: Callable[[Any], Any], tasks: Sequence[Any]) -> Iterator[tuple[int, Outcome]]:
        for position, task in enumerate(tasks):
            try:
                value = fn(task)
            except Exception as exc:  # reported to the driver, which retries or fails the job with context
                yield position, Outcome(False, error=_describe(exc), retryable=is_retryable(exc))
            else:
                yield position, Outcome(True, value)


def _describe(exc: BaseException) -> str:
    return "".join(traceback.format_exception(exc)).rstrip()
