"""zephyr.executors: where tasks run — in-process, local spawned processes, dask.distributed."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

__all__ = ["reuse_workers"]


@contextmanager
def reuse_workers(execution: dict[str, Any], *, preload: Sequence[str] = ()) -> Iterator[dict[str, Any]]:
    """Execution keywords whose ``local`` executor is one worker pool kept for the whole block.

    For callers that run many engine jobs in a row (a pipeline, iterative connected components): each job would
    otherwise start and import its own worker processes. Other executors pass through unchanged.
    ``preload``: ``"module:function"`` names each local worker calls at start (see ``LocalExecutor``).

    >>> with reuse_workers({"executor": "inprocess"}) as kw:
    ...     kw["executor"]
    'inprocess'
    """
    executor = execution.get("executor", "local")
    if executor not in ("local", "threads"):
        yield dict(execution)
        return
    from zephyr.options import ExecutionOptions

    workers = ExecutionOptions(workers=execution.get("workers")).num_workers
    if executor == "threads":
        from zephyr.executors.threads import ThreadExecutor

        yield {**execution, "executor": ThreadExecutor(workers, preload=preload)}
        return
    from zephyr.executors.local import LocalExecutor

    with LocalExecutor(workers, preload=preload) as pool:
        yield {**execution, "executor": pool}
