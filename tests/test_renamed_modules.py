"""Modules renamed in this release still import from their old path for one release, with a
``ZephyrDeprecationWarning``, and give the very objects of the new module."""

from __future__ import annotations

import ast
import importlib
import sys
from pathlib import Path

import pytest

from zephyr.config import ZephyrDeprecationWarning

RENAMED = [
    pytest.param("zephyr.dedup.stages", "zephyr.dedup.dataset_ops", id="dedup-dataset-ops"),
]


@pytest.mark.parametrize(("old", "new"), RENAMED)
def test_old_module_path_warns_and_reexports_the_new_module(old: str, new: str, monkeypatch) -> None:
    monkeypatch.delitem(sys.modules, old, raising=False)
    with pytest.warns(ZephyrDeprecationWarning, match=f"{old} is renamed {new}"):
        legacy = importlib.import_module(old)
    current = importlib.import_module(new)
    assert legacy.__all__ == current.__all__
    for name in current.__all__:
        assert getattr(legacy, name) is getattr(current, name), name


def test_no_project_module_imports_an_old_path() -> None:
    """Every importer moved to the new names (the shims exist only for code outside this repository)."""
    root = Path(__file__).resolve().parents[1]
    old_paths = {old for old, _new in (p.values for p in RENAMED)}
    shims = {root / Path(*old.split(".")[1:]).with_suffix(".py") for old in old_paths}
    offenders = []
    for path in root.rglob("*.py"):
        parts = path.relative_to(root).parts
        if path in shims or parts[0] == "tests" or any(part.startswith(".") for part in parts):
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names = [node.module] if isinstance(node, ast.ImportFrom) else []
            names += [a.name for a in node.names] if isinstance(node, ast.Import) else []
            offenders += [f"{path.relative_to(root)}: {n}" for n in names if n in old_paths]
    assert not offenders
