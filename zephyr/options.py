"""Execution options shared by every action (``to_arrow``, ``write_*``, ``count``) and every CLI command.

>>> opts = ExecutionOptions(executor="inprocess", memory_budget="64MB")
>>> opts.memory_budget_bytes
64000000
"""

from __future__ import annotations

import dataclasses
import os
import typing
from dataclasses import dataclass, field
from typing import Any, Literal

from zephyr.config import ConfigProblems, describe_type, field_problems, fits, parse_bytes, ranged_field

ExecutorName = Literal["inprocess", "threads", "local", "dask"]
DEFAULT_MEMORY_BUDGET = "1GiB"


@dataclass(frozen=True)
class ExecutionOptions:
    """How a plan runs. Plain data: safe to log, compare and ship to workers."""

    executor: ExecutorName | Any = field(
        default="local",
        metadata={"choices": typing.get_args(ExecutorName), "show_default": False},
    )
    """Where tasks run: worker processes (local, the default), threads of this process (threads: the default of
    the dedup commands, whose work releases the GIL), one task at a time (inprocess), or dask.

    An ``Executor`` instance or a ``dask.distributed.Client`` is accepted too."""
    workers: int | None = ranged_field(1, default=None)
    """Workers (default: one per core).

    Worker processes (``local``) or threads (``threads``); ``None`` means one per CPU core. Ignored by
    ``inprocess``."""
    memory_budget: int | str = field(default=DEFAULT_MEMORY_BUDGET, metadata={"bytes": True})
    """Bytes of data per worker before spilling (e.g. 512MB, 4GiB).

    Bytes of Arrow data one worker may hold. Shuffle buffers spill to disk when they reach their share of it;
    partition counts are derived from it. Per worker process, so the outputs do not depend on the worker
    count."""
    work_dir: str | None = None
    """fsspec URL for spills and task markers; given, reruns resume.

    Shuffle spills, task markers and stats go there, and a rerun skips finished tasks; ``None`` uses a
    temporary directory that is removed afterwards."""
    cluster: str | None = None
    """Dask scheduler address, e.g. tcp://127.0.0.1:8786.

    ``None`` starts a LocalCluster on 127.0.0.1."""
    max_retries: int = ranged_field(0, default=2)
    """Extra tries per failing task (then the job fails naming its shard)."""
    progress: bool | None = None
    """One progress line on stderr: rows and bytes read (training: steps), rate, ETA (default: only on a
    terminal)."""
    quarantine_dir: str | None = field(default=None, metadata={"flag": False})
    """fsspec URL for the rows set aside (``on_error="quarantine"``, a ``BatchOutput``'s quarantined rows), as
    ``stage-<fp16>/task-NNNNN.parquet`` under it; ``None``: ``DIR.zephyr/quarantine`` for ``write_*(DIR)``
    (the output's sidecar, ``zephyr.io.layout``), else ``<work_dir>/quarantine``, or a new temporary folder
    (kept: its rows are data) when there is no ``work_dir``. Commands that write a directory pass
    ``OUTPUT.zephyr/quarantine``."""
    small_job_bytes: int | str = field(default="4MiB", metadata={"bytes": True})
    """With --executor local, inputs estimated below this run in this process (0: always use workers).

    Starting worker processes would take longer than the work (``zephyr.physical.plan_read``, which also moves in a
    job whose engine-made read split leaves one task). Outputs are identical."""
    coalesce_runs: Literal["auto", "always", "never"] = "auto"
    """Concatenate each group of map tasks' shuffle runs before the reducers read them: fewer requests on an
    object store (auto: there, when the runs' parts are small).

    A reducer then makes about two requests per group instead of two per spill of every map task
    (``zephyr.shuffle.runs.coalesce_plan``). Outputs are identical either way."""

    def __post_init__(self) -> None:
        from zephyr.io.paths import absolute

        for name in ("work_dir", "quarantine_dir"):  # workers may run in another working directory
            value = getattr(self, name)
            if value is not None:
                object.__setattr__(self, name, absolute(value))
        problems = field_problems(self, "")  # the fields' types and ranges, as every config checks them
        if isinstance(self.executor, str) and not fits(self.executor, ExecutorName):
            problems.append(f"executor must be {describe_type(ExecutorName)}, got {self.executor!r}")
        if not problems and self.memory_budget_bytes < 1 << 20:
            problems.append(f"memory_budget must be at least 1 MiB, got {self.memory_budget!r}")
        if problems:
            raise ConfigProblems(problems, what="execution options")

    @property
    def memory_budget_bytes(self) -> int:
        return parse_bytes(self.memory_budget)

    @property
    def small_job_bytes_value(self) -> int:
        return parse_bytes(self.small_job_bytes)

    @property
    def num_workers(self) -> int:
        if self.executor == "inprocess":
            return 1
        return self.workers or os.cpu_count() or 1

    def as_kwargs(self) -> dict[str, Any]:
        """The options as action keywords (``ds.write_parquet(out, **options.as_kwargs())``)."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}

    def replace(self, **changes: Any) -> ExecutionOptions:
        return dataclasses.replace(self, **changes)

    @classmethod
    def from_kwargs(cls, **kwargs: Any) -> ExecutionOptions:
        """Build from action keywords, rejecting unknown ones with the list of valid names."""
        from zephyr.config import unknown_keys

        if unknown := unknown_keys(kwargs, [f.name for f in dataclasses.fields(cls)], "", " of the options"):
            raise ConfigProblems(unknown, what="execution options")
        return cls(**{k: v for k, v in kwargs.items() if v is not None})  # None: the field's default
