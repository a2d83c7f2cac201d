"""Runs tasks one after another in the calling process: for debugging, tests and tiny jobs.

Nothing else runs beside such a task, so it decodes its input one batch ahead on a thread
(``zephyr.read_ahead``): the decoding releases the GIL and uses the core the task's ops leave idle."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any

from zephyr.executors.base import Executor, Outcome, Shared, failure
from zephyr.read_ahead import reading_ahead

__all__ = ["InProcessExecutor"]


class InProcessExecutor(Executor):
    def run(
        self, fn: Callable[..., Any], tasks: Sequence[Any], shared: Shared | None = None
    ) -> Iterator[tuple[int, Outcome]]:
        value_of = shared.copy() if shared is not None and tasks else None
        for position, task in enumerate(tasks):
            try:
                with reading_ahead():
                    value = fn(task) if shared is None else fn(value_of, task)
            except Exception as exc:  # reported to the driver, which retries or fails the job with context
                yield position, failure(exc)
            else:
                yield position, Outcome(True, value)
