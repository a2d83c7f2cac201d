"""Deprecated: renamed ``zephyr.pipelines.step_configs`` (a ``zephyr run`` pipeline's entries are steps; "stage" means one
engine stage, see the Vocabulary of docs/architecture.md). This path re-exports it, and serves the old names
(``zephyr.pipelines.step_renames.OLD_NAMES``), until the next release."""

from __future__ import annotations

from zephyr.pipelines.step_configs import *  # noqa: F403
from zephyr.pipelines.step_configs import __all__  # noqa: F401
from zephyr.pipelines.step_renames import old_names_getattr, warn_moved_module

warn_moved_module("zephyr.pipelines.stage_configs", "zephyr.pipelines.step_configs")
__getattr__ = old_names_getattr(__name__, "zephyr.pipelines.step_configs")
