"""How ``write_token_shards`` reads its inputs: paths to an engine dataset, and how they are cut into tasks.

``plan_tasks`` takes the read split (``approx_shard_bytes``), the task count and the small-job decision from
the engine (``zephyr.read_plan``) and decides only how many tokenize tasks run at once on one machine (the worker
pool's size; each task encodes on every core, see ``encode_step.TokenizeBatch``). Outputs never depend on it: shard bytes are
a function of the data, the seed and the shard size only.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from zephyr.errors import ZephyrError

if TYPE_CHECKING:
    from zephyr.dataset import Dataset
    from zephyr.options import ExecutionOptions
    from zephyr.read_plan import ReadPlan

__all__ = ["input_paths", "input_dataset", "plan_tasks", "input_columns", "detect_column"]


def input_paths(data: Any) -> tuple[list[str], str]:
    """(files, format) of path inputs (``zephyr.io.paths.input_files``: globs and folders expanded)."""
    from zephyr.io.paths import input_files

    return input_files(
        [os.fspath(p) for p in ([data] if isinstance(data, str | os.PathLike) else list(data))]
    )


def input_dataset(
    data: Any, columns: list[str], approx_shard_bytes: int | None, on_error: str, **schema: Any
) -> Dataset:
    """The inputs as a ``Dataset``, read in shards of about ``approx_shard_bytes`` (the engine's read plan)."""
    import zephyr

    paths, fmt = input_paths(data)
    if fmt == "jsonl":
        return zephyr.read_jsonl(paths, approx_shard_bytes=approx_shard_bytes, on_error=on_error, **schema)
    return zephyr.read_parquet(
        paths, columns=columns, approx_shard_bytes=approx_shard_bytes, on_error=on_error, **schema
    )


def plan_tasks(data: Any, options: ExecutionOptions) -> tuple[ReadPlan | None, int]:
    """(the engine's read plan of path inputs, tokenize tasks that run at once on one machine).

    The read split, the task count and whether the writer's jobs run in this process are the engine's
    (``zephyr.read_plan.plan_read``, the rule every job follows). What stays here is tokenize's own: no more
    tasks at once (worker processes) than the plan has tasks, since each worker loads the tokenizer; every
    task encodes on all cores (``encode_step.TokenizeBatch``). In-process tasks run one at a time (all cores
    each); a ``Dataset`` input is read as it is (no plan, one task per worker at once); unreadable inputs
    fail later, with the engine's own message (no plan).
    """
    workers = options.num_workers
    if options.executor == "inprocess":
        return None, 1
    if _is_dataset(data):
        return None, workers
    from zephyr.read_plan import plan_read

    paths = [os.fspath(p) for p in ([data] if isinstance(data, str | os.PathLike) else list(data))]
    try:
        plan = plan_read(paths, options, split=True)
    except (OSError, ValueError, ZephyrError):
        return None, workers
    return plan, max(1, min(workers, plan.tasks))


def input_columns(data: Any) -> list[str] | None:
    """Column names of the first Parquet input (``None``: not Parquet paths, or unreadable)."""
    if not isinstance(data, str | os.PathLike | list | tuple):
        return None
    import fsspec
    import pyarrow.parquet as pq

    paths = [data] if isinstance(data, str | os.PathLike) else list(data)
    try:
        fs, first = fsspec.core.url_to_fs(os.fspath(paths[0]))
        if fs.isdir(first):
            found = sorted(p for p in fs.find(first) if p.endswith(".parquet"))
            first = found[0]
        with fs.open(first, "rb") as handle:
            return pq.read_schema(handle).names
    except (IndexError, OSError, ValueError):
        return None


def detect_column(names: list[str] | None, wanted: str | None, default: str) -> str | None:
    """``"auto"`` → ``default`` when the first Parquet input has that column, else ``None``."""
    if wanted != "auto":
        return wanted
    return default if names and default in names else None


def _is_dataset(data: Any) -> bool:
    import zephyr

    return isinstance(data, zephyr.Dataset)
