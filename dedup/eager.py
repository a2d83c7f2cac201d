"""The eager phase of the engine dedup stages: execution options as keyword arguments, the memory budget
they imply, the driver's in-memory limit, and a scratch folder for intermediate Parquet.

Exact and fuzzy dedup run some jobs while the plan is built (hashes, candidate pairs, verified edges) and
decide from their sizes whether the rest runs in the driver; these helpers are what both paths share.
"""

from __future__ import annotations

import contextlib
import dataclasses
import tempfile
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from zephyr.budget import Budget

if TYPE_CHECKING:
    from zephyr.options import ExecutionOptions

__all__ = ["budget_of", "execution_kwargs", "in_memory_limit", "memory_budget_bytes", "scratch_folder"]


def execution_kwargs(execution: ExecutionOptions | dict[str, Any] | None) -> dict[str, Any]:
    """``execution`` as the keyword arguments every eager ``Dataset`` call takes (empty: run lazily)."""
    if execution is None:
        return {}
    if isinstance(execution, dict):
        return dict(execution)
    return {f.name: getattr(execution, f.name) for f in dataclasses.fields(execution)}


def memory_budget_bytes(kw: dict[str, Any]) -> int:
    from zephyr.options import ExecutionOptions

    return ExecutionOptions.from_kwargs(**kw).memory_budget_bytes


def budget_of(kw: dict[str, Any]) -> Budget:
    """The engine's ``Budget`` for these execution options: every size the eager phase decides by is one of
    its shares (``zephyr.budget``), never a fraction computed here."""
    return Budget(memory_budget_bytes(kw))


def in_memory_limit(kw: dict[str, Any], given: int | None) -> int:
    """Row (pair) count up to which the work runs in the driver: ``given``, or 64 bytes a row within a
    quarter of the memory budget."""
    if given is not None:
        return given
    return budget_of(kw).driver_pair_rows


@contextlib.contextmanager
def scratch_folder(kw: dict[str, Any]) -> Iterator[str]:
    """A folder for the eager phase's intermediate Parquet, removed when the block ends: under ``work_dir``
    when one is given (remote workers see it), else a local temporary folder."""
    import uuid

    import fsspec

    work_dir = kw.get("work_dir")
    if work_dir:
        url = f"{str(work_dir).rstrip('/')}/dedup-scratch-{uuid.uuid4().hex[:12]}"
    else:
        url = tempfile.mkdtemp(prefix="zephyr-dedup-")
    try:
        yield url
    finally:
        fs, path = fsspec.core.url_to_fs(url)
        with contextlib.suppress(FileNotFoundError):
            fs.rm(path, recursive=True)
