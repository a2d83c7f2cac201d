"""Deprecated: renamed ``zephyr.pipelines.quality.batch_ops`` (its callables are batch ops, not engine stages;
see the Vocabulary of docs/architecture.md). This path re-exports it until the next release."""

from __future__ import annotations

import warnings

from zephyr.pipelines.quality.batch_ops import *  # noqa: F403
from zephyr.pipelines.quality.batch_ops import __all__  # noqa: F401

from zephyr.config import ZephyrDeprecationWarning

warnings.warn(
    "zephyr.pipelines.quality.stages is renamed zephyr.pipelines.quality.batch_ops; the old path goes away in the "
    "next release",
    ZephyrDeprecationWarning,
    stacklevel=2,
)
