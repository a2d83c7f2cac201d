"""Run the examples in zephyr.io's docstrings."""

from __future__ import annotations

import doctest
import importlib

import pytest

MODULES = ["zephyr.io.paths", "zephyr.io.sinks", "zephyr.io.quarantine", "zephyr.io.text_encoding"]


@pytest.mark.parametrize("name", MODULES)
def test_doctests(name):
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0
    assert result.failed == 0
