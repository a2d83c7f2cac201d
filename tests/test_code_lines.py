"""scripts/code_lines.py: which lines count as library code (the yardstick of issue 32) on a tiny tree."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def _load():
    spec = importlib.util.spec_from_file_location("code_lines", REPO / "scripts" / "code_lines.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses resolve annotations through sys.modules
    spec.loader.exec_module(module)
    return module


code_lines = _load()

# Line by line: D docstring, C code, # comment-only, _ blank.
SAMPLE = '''\
"""Module docstring,
over two lines."""

import os  # a trailing comment keeps the line code

# a comment-only line

X = """not a docstring:

# nor is this a comment"""


class A:
    """Class docstring."""

    y = 1

    def f(self):
        """Function docstring,

        with a blank line inside."""
        # comment
        return os.sep


async def g():
    """Async function docstring."""
    return "# a string"


def h():
    return 1
    "a string after the first statement is code"
'''
EXPECTED_CODE = [4, 8, 9, 10, 13, 16, 18, 23, 26, 28, 31, 32, 33]
EXPECTED_DOCSTRING = [1, 2, 14, 19, 20, 21, 27]
EXPECTED_COMMENT = [6, 22]


def test_each_line_is_classified() -> None:
    c = code_lines.count_source(SAMPLE)
    n_lines = len(SAMPLE.splitlines())
    assert c.lines == n_lines
    assert c.code == len(EXPECTED_CODE)
    assert c.docstring == len(EXPECTED_DOCSTRING)
    assert c.comment == len(EXPECTED_COMMENT)
    assert c.blank == n_lines - len(EXPECTED_CODE) - len(EXPECTED_DOCSTRING) - len(EXPECTED_COMMENT)
    assert code_lines.docstring_lines(__import__("ast").parse(SAMPLE)) == set(EXPECTED_DOCSTRING)


def _tree(root: Path) -> None:
    (root / "dedup" / "sub").mkdir(parents=True)
    (root / "dedup" / "__init__.py").write_text('"""Doc."""\n\nfrom .a import f\n')
    (root / "dedup" / "sub" / "a.py").write_text("def f():\n    # why\n    return 1\n")
    (root / "dedup" / "notes.txt").write_text("x = 1\n")  # not a .py file: not counted
    (root / "zephyr" / "__pycache__").mkdir(parents=True)
    (root / "zephyr" / "__pycache__" / "stale.py").write_text("x = 1\n")
    (root / "zephyr" / "core.py").write_text("x = 1\ny = 2\n")
    (root / "benchmarks").mkdir()
    (root / "benchmarks" / "b.py").write_text("x = 1\n")  # not a library package: not counted


def test_packages_and_total(tmp_path: Path) -> None:
    _tree(tmp_path)
    report = code_lines.count_tree(tmp_path)
    assert set(report.packages) == set(code_lines.PACKAGES)
    assert (report.packages["dedup"].code, report.packages["dedup"].docstring) == (3, 1)
    assert report.packages["dedup"].files == 2
    assert (report.packages["zephyr"].code, report.packages["zephyr"].files) == (2, 1)
    assert report.packages["trainer"].lines == 0  # a missing package counts as empty
    total = report.total
    assert (total.code, total.docstring, total.comment, total.blank, total.lines) == (5, 1, 1, 1, 8)
    assert total.docstring_share == 1 / 8


def test_command_line_json(tmp_path: Path) -> None:
    _tree(tmp_path)
    out = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "code_lines.py"), str(tmp_path), "--json"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    counts = json.loads(out)
    assert counts["total"]["code"] == 5
    assert counts["dedup"]["code"] == 3
