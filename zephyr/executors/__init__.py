"""zephyr.executors: where tasks run — in-process, local spawned processes, dask.distributed."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from zephyr.executors.base import Executor
    from zephyr.options import ExecutionOptions

__all__ = ["make_executor", "reuse_workers"]


def make_executor(options: ExecutionOptions, *, preload: Sequence[str] = ()) -> Executor:
    """The executor ``options.executor`` names (an ``ExecutionOptions``), or the ``Executor`` it already is;
    each executor module is imported only when chosen. ``preload``: ``"module:function"`` names the workers of
    a ``threads`` or ``local`` executor call at start (see ``LocalExecutor``)."""
    from zephyr.errors import ConfigError
    from zephyr.executors.base import Executor, InProcessExecutor, ThreadExecutor

    executor = options.executor
    if isinstance(executor, Executor):
        return executor
    if executor == "inprocess":
        return InProcessExecutor()
    if executor == "threads":
        return ThreadExecutor(options.num_workers, preload=preload)
    if executor == "local":
        from zephyr.executors.local import LocalExecutor

        return LocalExecutor(options.num_workers, preload=preload)
    if executor == "dask" or type(executor).__name__ == "Client":
        from zephyr.errors import require
        from zephyr.executors.dask import DaskExecutor

        require("distributed", "dask", "executor='dask'")

        return DaskExecutor.from_options(options)
    raise ConfigError(f"unknown executor {executor!r}")


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

    options = ExecutionOptions(executor=executor, workers=execution.get("workers"))
    with make_executor(options, preload=preload) as pool:
        yield {**execution, "executor": pool}
