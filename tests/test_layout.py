"""The package layout: one import root, and the standard library's tokenize never shadowed."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
CHECK = "import tokenize, zephyr.tokenize; assert tokenize.open and zephyr.tokenize.__name__ == 'zephyr.tokenize'"


@pytest.mark.parametrize("cwd", [REPO, Path("/")], ids=["repo-root", "elsewhere"])
def test_stdlib_tokenize_not_shadowed(cwd: Path) -> None:
    result = subprocess.run([sys.executable, "-c", CHECK], cwd=cwd, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize("cwd", [REPO, Path("/")], ids=["repo-root", "elsewhere"])
def test_traceback_and_inspect_work(cwd: Path) -> None:
    code = "import traceback, inspect, linecache; import zephyr.tokenize\ntry:\n 1/0\nexcept ZeroDivisionError:\n traceback.format_exc()"
    result = subprocess.run([sys.executable, "-c", code], cwd=cwd, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


def test_pytest_runs_from_repo_root(tmp_path: Path) -> None:
    test_file = tmp_path / "test_probe.py"
    test_file.write_text("import tokenize\n\ndef test_probe():\n    assert hasattr(tokenize, 'open')\n")
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(test_file)],
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_every_package_folder_is_declared() -> None:
    """A subpackage missing from pyproject's list would import in a checkout but vanish from the wheel."""
    config = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]
    declared = set(config["packages"])
    mapping = config["package-dir"]
    found = set()
    for name, folder in mapping.items():
        for init in (REPO / folder).rglob("__init__.py"):
            rel = init.parent.relative_to(REPO / folder)
            if any(part.startswith((".", "_")) for part in rel.parts):
                continue
            found.add(".".join([name, *rel.parts]) if rel.parts else name)
    assert found <= declared, f"add to [tool.setuptools].packages: {sorted(found - declared)}"


def test_training_side_imports_without_data_stack() -> None:
    """zephyr.tokenize's loader and zephyr.trainer need only torch, numpy and fsspec."""
    code = (
        "import sys\n"
        "class Block:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] in {'pyarrow','polars','dask','distributed','fasttext','vortex','duckdb','datasketch','tokenizers'}:\n"
        "            raise ImportError('blocked ' + name)\n"
        "sys.meta_path.insert(0, Block())\n"
        "import zephyr, zephyr.tokenize, zephyr.trainer\n"
        "from zephyr.tokenize import TokenLoader, TokenDataLoader, RepetitionFilter, read_documents\n"
        "import zephyr.tokenize.packing, zephyr.tokenize.mixing, zephyr.tokenize.prefetch, zephyr.tokenize.gather\n"
    )
    result = subprocess.run([sys.executable, "-c", code], cwd="/", capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


def test_cli_help() -> None:
    result = subprocess.run([sys.executable, "-m", "zephyr.cli", "--help"], capture_output=True, text=True)
    assert result.returncode == 0 and "zephyr" in result.stdout


def test_every_documented_top_level_name_resolves() -> None:
    """``zephyr.Name`` in the docs and README (a class or function a user is told to use) is importable."""
    import importlib
    import re

    import zephyr

    root = Path(__file__).resolve().parent.parent
    texts = [p.read_text() for p in [root / "README.md", *sorted((root / "docs").glob("*.md"))]]
    names = {m for text in texts for m in re.findall(r"\bzephyr\.([A-Za-z_]\w*)\b(?![.*])", text)}
    missing = []
    for name in sorted(names):
        try:
            getattr(zephyr, name)
        except AttributeError:
            try:
                importlib.import_module(f"zephyr.{name}")  # a subpackage or module named in prose
            except ImportError:
                missing.append(name)
    assert not missing, f"documented but not importable: {missing}"
    assert set(zephyr.__all__) <= set(dir(zephyr))
