"""The runnable examples in the engine's docstrings are tests too."""

from __future__ import annotations

import doctest
import importlib

import pytest

MODULES = [
    "zephyr",
    "zephyr.dataset",
    "zephyr.sizes",
    "zephyr.options",
    "zephyr.shuffle.aggregate",
    "zephyr.executors",
    "zephyr.job_stats",
    "zephyr.io.added_columns",
    "zephyr.config",
    "zephyr.config_types",
    "zephyr.config_text",
    "zephyr.flags",
    "zephyr.read_plan",
    "zephyr.pipelines.markdown",
    "zephyr.pipelines.steps",
    "zephyr.io.text_encoding",
    "zephyr.errors",
]


@pytest.mark.parametrize("name", MODULES)
def test_doctests(name: str) -> None:
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0, f"{name} has no examples"
    assert result.failed == 0
