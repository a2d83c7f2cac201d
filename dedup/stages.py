"""Deprecated: renamed ``zephyr.dedup.dataset_ops`` (its functions take and return a ``Dataset``; "stage" now
means one engine stage, see the Vocabulary of docs/architecture.md). This path re-exports it until the next
release."""

from __future__ import annotations

import warnings

from zephyr.dedup.dataset_ops import *  # noqa: F403
from zephyr.dedup.dataset_ops import __all__  # noqa: F401

from zephyr.config import ZephyrDeprecationWarning

warnings.warn(
    "zephyr.dedup.stages is renamed zephyr.dedup.dataset_ops; the old path goes away in the next release",
    ZephyrDeprecationWarning,
    stacklevel=2,
)
