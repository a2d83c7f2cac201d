"""zephyr: a data-processing engine for LLM pretraining corpora.

>>> import zephyr
>>> ds = zephyr.from_items([{"k": "a"}, {"k": "b"}, {"k": "a"}])
>>> ds.group_by("k").count().sort("k").to_arrow(executor="inprocess").to_pylist()
[{'k': 'a', 'count': 2}, {'k': 'b', 'count': 1}]

The names below are imported lazily: ``import zephyr.tokenize`` (the training side) must work on a machine
with only torch, numpy and fsspec, so this package's own import pulls in nothing heavy.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from zephyr._lazy import lazy_exports as _lazy_exports

__version__ = "0.1.0"


if TYPE_CHECKING:
    from zephyr import counters
    from zephyr.dataset import (
        Dataset,
        GroupedDataset,
        from_arrow,
        from_items,
        read,
        read_jsonl,
        read_parquet,
    )
    from zephyr.errors import ConfigError, InputError, ResumeError, SchemaError, TaskError, ZephyrError
    from zephyr.job_stats import WriteResult
    from zephyr.ops import BatchOutput
    from zephyr.options import ExecutionOptions
    from zephyr.pipelines.web.extract import read_warc
    from zephyr.shuffle.reduce import Agg


__getattr__, __dir__, __all__ = _lazy_exports(__name__, globals())
