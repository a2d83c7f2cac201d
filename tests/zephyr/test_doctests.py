"""The runnable examples in the engine's docstrings are tests too."""

from __future__ import annotations

import doctest
import importlib

import pytest

MODULES = [
    "zephyr",
    "zephyr.dataset",
    "zephyr.config",
    "zephyr.options",
    "zephyr.shuffle.reduce",
    "zephyr.shuffle.runs",
    "shuffle_model",
    "zephyr.executors",
    "zephyr.job_stats",
    "zephyr.removal",
    "zephyr.flags",
    "zephyr.physical",
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
