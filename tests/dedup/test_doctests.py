"""Run the docstring examples of every dedup module (they are the user-facing documentation)."""

from __future__ import annotations

import doctest
import importlib

import pytest

MODULES = [
    "zephyr.dedup",
    "zephyr.dedup.bloom",
    "zephyr.dedup._hashing",
    "zephyr.dedup._minhash",
    "zephyr.dedup._graph",
    "zephyr.dedup.config",
    "zephyr.dedup.exact",
    "zephyr.dedup.fuzzy",
    "dedup_evaluate",  # benchmarks/: the benchmarks' scoring rule (tests/dedup/conftest.py puts it on the path)
]


@pytest.mark.parametrize("name", MODULES)
def test_doctests(name):
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0, f"{name} has no examples"
    assert result.failed == 0
