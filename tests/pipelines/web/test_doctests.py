"""The runnable examples in the web package's docstrings are tests too."""

from __future__ import annotations

import doctest
import importlib

import pytest

MODULES = [
    "zephyr.io.warc",
    "zephyr.pipelines.web.extract",
    "zephyr.pipelines.web.urls",
    "zephyr.dedup.exact",
]


@pytest.mark.parametrize("name", MODULES)
def test_doctests(name: str) -> None:
    pytest.importorskip("resiliparse")
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0, f"{name} has no examples"
    assert result.failed == 0
