"""Lazy package exports (PEP 562), shared by ``zephyr`` and its subpackages.

A package's public names are the ones its ``if TYPE_CHECKING:`` block imports: the one list of them, read by
type checkers and IDEs, and here, from the package's source, for run time. A name is imported on first
attribute access from the module named there and cached in the package namespace. This keeps ``import
zephyr.tokenize`` (the training side) free of the data stack: nothing heavy is imported until it is used.
Standard library only.
"""

from __future__ import annotations

import ast
import importlib
from collections.abc import Callable
from typing import Any


def lazy_exports(
    package: str, namespace: dict[str, Any]
) -> tuple[Callable[[str], Any], Callable[[], list[str]], list[str]]:
    """``__getattr__``, ``__dir__`` and ``__all__`` for ``package`` (``namespace``: its ``globals()``).

    A name imported from the package itself (``from zephyr import counters``) exports that module.
    """
    with open(namespace["__file__"], encoding="utf-8") as f:
        tree = ast.parse(f.read())
    names = {
        alias.name: f"{package}.{alias.name}" if node.module == package else str(node.module)
        for block in ast.walk(tree)
        if isinstance(block, ast.If) and getattr(block.test, "id", "").endswith("TYPE_CHECKING")
        for node in block.body
        if isinstance(node, ast.ImportFrom)
        for alias in node.names
    }

    def __getattr__(name: str) -> Any:
        module_name = names.get(name)
        if module_name is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        module = importlib.import_module(module_name)
        value = module if module_name == f"{package}.{name}" else getattr(module, name)
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted(set(namespace) | set(names))

    return __getattr__, __dir__, sorted(names)
