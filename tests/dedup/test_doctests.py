"""Run the docstring examples of every dedup module (they are the user-facing documentation)."""

from __future__ import annotations

import doctest
import importlib

import pytest

MODULES = [
    "zephyr.dedup",
    "zephyr.dedup.bloom",
    "zephyr.dedup.normalize",
    "zephyr.dedup.hashing",
    "zephyr.dedup.shingles",
    "zephyr.dedup.minhash",
    "zephyr.dedup.minhash_torch",
    "zephyr.dedup.lsh",
    "zephyr.dedup.verify",
    "zephyr.dedup.components",
    "zephyr.dedup.config",
    "zephyr.dedup.exact",
    "zephyr.dedup.fuzzy",
    "zephyr.dedup.evaluate",
    "zephyr.dedup.exact_dataset",
    "zephyr.dedup.fuzzy_dataset",
]


@pytest.mark.parametrize("name", MODULES)
def test_doctests(name):
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0, f"{name} has no examples"
    assert result.failed == 0
