"""The package layout: one import root, and the standard library's tokenize never shadowed."""

from __future__ import annotations

import ast
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
CHECK = (
    "import tokenize, zephyr.tokenize; assert tokenize.open and zephyr.tokenize.__name__ == 'zephyr.tokenize'"
)


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
    """A subpackage missing from pyproject's list would import in a checkout but vanish from the wheel; one
    listed whose folder is gone makes ``pip install`` fail."""
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
    missing = []
    for name in declared:
        root = max((n for n in mapping if name == n or name.startswith(n + ".")), key=len)
        folder = (
            REPO / mapping[root] / Path(*name[len(root) :].lstrip(".").split(".") if name != root else ())
        )
        if not folder.is_dir():
            missing.append(name)
    assert not missing, f"remove from [tool.setuptools].packages (no such folder): {sorted(missing)}"


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
        "import zephyr.tokenize._samples, zephyr.tokenize.mixing, zephyr.tokenize._storage, zephyr.tokenize.loader\n"
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


def _package_folders() -> dict[str, Path]:
    """Import package → its folder, from pyproject's ``package-dir`` (``zephyr.dedup`` → ``dedup/``)."""
    mapping = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"]
    return {package: REPO / folder for package, folder in mapping.items()}


def _modules(folders: dict[str, Path]) -> dict[str, Path]:
    """Module name → source file, for every ``.py`` under the mapped folders."""
    modules = {}
    for package, root in folders.items():
        for path in sorted(root.rglob("*.py")):
            parts = list(path.relative_to(root).with_suffix("").parts)
            if any(part.startswith(".") or part == "__pycache__" for part in parts):
                continue
            if parts[-1] == "__init__":
                parts.pop()
            modules[".".join([package, *parts])] = path
    return modules


def import_graph(folders: dict[str, Path]) -> dict[str, set[str]]:
    """Module → the project modules it imports, read from the source with ``ast``: every ``import`` and
    ``from ... import`` anywhere in the file, inside functions and ``if TYPE_CHECKING:`` blocks included.

    A function-level (lazy) import only moves a cycle from import time to call time; the two modules still
    need each other. A TYPE_CHECKING import counts too: a type-only import back still means the lower module
    knows the upper one's classes (the layers are not layers; the seam is a Protocol or a shared lower
    module, as ``zephyr.tokenize.loader.WorkerLoader``), and ``typing.get_type_hints`` (the config
    validators use it) would import it at run time. A module importing a package it lies inside (its
    ``__init__``) is the package's layout, not an edge. The reference is the project's hook
    (``import_cycles.py``), which draws the same graph.
    """
    modules = _modules(folders)

    def resolve(name: str) -> str | None:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parent = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join([*parent, base] if base else parent)
                targets = [base, *(f"{base}.{alias.name}" for alias in node.names)]
            else:
                continue
            for target in targets:
                found = resolve(target)
                if found and found != name and not name.startswith(found + "."):
                    graph[name].add(found)
    return graph


def import_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The groups of modules that import each other, directly or through others (strongly connected
    components of more than one module), each sorted."""
    reach = {}
    for start in graph:
        seen, todo = set(), list(graph[start])
        while todo:
            node = todo.pop()
            if node not in seen:
                seen.add(node)
                todo.extend(graph[node])
        reach[start] = seen
    groups = {frozenset({m} | {n for n in reach[m] if m in reach[n]}) for m in graph}
    return sorted(sorted(group) for group in groups if len(group) > 1)


def test_import_cycles_are_found(tmp_path: Path) -> None:
    """The check itself: a cycle closed by a lazy import on one side and a TYPE_CHECKING one on the other."""
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("from pkg.a import f\n")
    (tmp_path / "pkg" / "a.py").write_text("def f():\n    from pkg import b\n    return b\n")
    (tmp_path / "pkg" / "b.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .a import f\n"
    )
    (tmp_path / "pkg" / "c.py").write_text("import pkg.b\nfrom . import a\n")  # imports without a way back
    graph = import_graph({"pkg": tmp_path / "pkg"})
    assert graph["pkg.c"] == {"pkg.a", "pkg.b"}
    assert import_cycles(graph) == [["pkg.a", "pkg.b"]]


def test_no_import_cycles() -> None:
    """No two project modules import each other, directly or through others (lazy and type-only imports
    counted: see ``import_graph``). Break a cycle by moving the shared piece into a module below both."""
    cycles = import_cycles(import_graph(_package_folders()))
    assert not cycles, "import cycles (move what both sides use into a module below them): " + "; ".join(
        " <-> ".join(group) for group in cycles
    )


def test_no_private_names_imported_across_modules() -> None:
    """``from zephyr.x import _name`` couples a module to another's internals: a helper two modules need is
    public in the module where it belongs (or moves there)."""
    found = []
    for path in _modules(_package_folders()).values():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if isinstance(node, ast.ImportFrom) and (
                node.level or (node.module or "").split(".")[0] == "zephyr"
            ):
                private = [
                    a.name for a in node.names if a.name.startswith("_") and not a.name.startswith("__")
                ]
                found += [
                    f"{path.relative_to(REPO)}:{node.lineno} imports {n} from {node.module}" for n in private
                ]
    assert not found, "\n".join(found)


def _sources() -> dict[str, str]:
    """Repo-relative path → text of every module of the packages."""
    return {
        str(p.relative_to(REPO)): p.read_text(encoding="utf-8") for p in _modules(_package_folders()).values()
    }


def test_argparse_only_in_cli_modules() -> None:
    """No ``argparse.Namespace`` below the command line: flags become configs in ``zephyr/cli.py``,
    ``zephyr/flags.py`` and each package's ``cli.py``, and the library takes keyword arguments."""
    found = [
        path
        for path, text in _sources().items()
        if "argparse" in text and not path.endswith("/cli.py") and path != "zephyr/flags.py"
    ]
    assert not found, f"argparse outside the CLI modules: {found}"


def test_all_only_in_package_inits() -> None:
    """A package's public surface is its ``__init__``'s ``__all__``; a module inside it declares none."""
    found = []
    for path, text in _sources().items():
        if path.endswith("__init__.py"):
            continue
        tree = ast.parse(text)
        if any(
            isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "__all__" for t in node.targets)
            for node in tree.body
        ):
            found.append(path)
    assert not found, f"__all__ outside a package __init__: {found}"


def test_no_history_in_the_code_and_docs() -> None:
    """Nothing is released: no "until the next release", "was called" or "deprecated" text in the six packages,
    README.md and docs/, and no deprecation warning class; history goes to CHANGELOG.md. (A comment on a
    third-party library's own deprecation, as in trainer/check.py, names no zephyr history.)"""
    phrases = (
        "next release",
        "was called",
        "were called",
        "for one release",
        "until this release",
        "zephyr: deprecated",
        "is deprecated",
        "deprecated alias",
        "deprecated name",
        "deprecated key",
        "deprecated flag",
        "zephyrdeprecationwarning",
        "renamed_keys",
        "renamed_value",
    )
    texts = _sources()
    for path in [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]:
        texts[str(path.relative_to(REPO))] = path.read_text(encoding="utf-8")
    found = [
        f"{path}: {phrase}" for path, text in texts.items() for phrase in phrases if phrase in text.lower()
    ]
    assert not found, "history text (move it to CHANGELOG.md): " + "; ".join(found)


def test_train_command_line_needs_no_data_stack() -> None:
    """``zephyr train`` imports only the trainer's command module: a training machine without pyarrow or polars
    parses its command line (``COMMAND_MODULES`` maps the command's word to its module)."""
    code = (
        "import sys\n"
        "class Block:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] in {'pyarrow', 'polars', 'numba', 'zstandard', 'dask', 'distributed'}:\n"
        "            raise ImportError('blocked ' + name)\n"
        "sys.meta_path.insert(0, Block())\n"
        "from zephyr.cli import main\n"
        "main(['train', '--help'])\n"
    )
    result = subprocess.run([sys.executable, "-c", code], cwd="/", capture_output=True, text=True)
    assert result.returncode == 0 and "--lr" in result.stdout, result.stderr
