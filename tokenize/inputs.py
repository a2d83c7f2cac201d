"""How ``write_token_shards`` reads its inputs: paths to an engine dataset, and how they are cut into tasks.

``plan_tasks`` decides the read split (``approx_shard_bytes``) and how many tokenize tasks run at once on
one machine, which sets each task's encoder threads (``cores // concurrent tasks``). Outputs never depend
on it: shard bytes are a function of the data, the seed and the shard size only.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from zephyr.errors import ZephyrError

if TYPE_CHECKING:
    from zephyr.dataset import Dataset

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
    """The inputs as a ``Dataset``, read in shards of about ``approx_shard_bytes`` (``plan_tasks``)."""
    import zephyr

    paths, fmt = input_paths(data)
    if fmt == "jsonl":
        return zephyr.read_jsonl(paths, approx_shard_bytes=approx_shard_bytes, on_error=on_error, **schema)
    return zephyr.read_parquet(
        paths, columns=columns, approx_shard_bytes=approx_shard_bytes, on_error=on_error, **schema
    )


# Worker processes cost their start-up, imports and loading and proving the tokenizer (~1-2 CPU-s each for
# GPT-2 with fastokens); an input under twice this stays one task (in the driver when it is one file).
_MIN_SPLIT_BYTES = 64 << 20
# Once the input is split, each process pays that cost once (the tokenizer is cached per process), so a task
# only costs the engine's bookkeeping (~10 ms): small tasks keep both workers busy to the end (5 tasks of
# 64 MB on 2 workers left one idle for a fifth of the step).
_MIN_TASK_BYTES = 16 << 20


def plan_tasks(data: Any, options: Any) -> tuple[int | None, int]:
    """(``approx_shard_bytes`` for reading the inputs, tokenize tasks that run at once on one machine).

    With worker processes and fewer input files than ~8 per worker, files are split into runs of row groups
    (Parquet) or byte ranges (plain JSONL) of about ``input bytes / (8 x workers)`` (at least
    ``_MIN_TASK_BYTES``), so every worker has work and the last tasks are short; an input under twice
    ``_MIN_SPLIT_BYTES`` is not worth worker processes and keeps tasks of that size. The encoder threads of a task are ``cores // concurrent tasks``: a single
    unsplittable file still gets every core, and two workers never run 2 x 2 threads on 2 cores.
    In-process (one task at a time, all cores each) and ``Dataset`` inputs are left as they are.
    """
    workers = options.num_workers
    if options.executor == "inprocess":
        return None, 1
    if _is_dataset(data):
        return None, workers
    from zephyr.io.estimate import estimated_bytes
    from zephyr.io.paths import filesystem
    from zephyr.io.sources import list_shards

    paths = [os.fspath(p) for p in ([data] if isinstance(data, str | os.PathLike) else list(data))]
    try:
        shards = list_shards(paths)
        approx_shard_bytes = None
        if len(shards) < 8 * workers:
            total = 0
            for shard in shards:
                fs, path = filesystem(shard.path)
                size = int(fs.size(path) or 0)
                total += estimated_bytes(shard.path, size, shard.format)  # the engine's own rule
            approx_shard_bytes = (
                _MIN_SPLIT_BYTES
                if total < 2 * _MIN_SPLIT_BYTES
                else max(min(_MIN_TASK_BYTES, _MIN_SPLIT_BYTES), total // (8 * workers))
            )
            shards = list_shards(paths, approx_shard_bytes=approx_shard_bytes)
    except (OSError, ValueError, ZephyrError):  # unreadable inputs fail later, with the engine's own message
        return None, workers
    return approx_shard_bytes, max(1, min(workers, len(shards)))


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
