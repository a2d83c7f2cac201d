"""Lazy package exports (PEP 562), shared by ``zephyr`` and its subpackages.

A package lists ``{name: "module.path"}``; the name is imported on first attribute access and cached in the
package namespace. This keeps ``import zephyr.tokenize`` (the training side) free of the data stack: nothing
heavy is imported until it is used. Standard library only.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any


def lazy_exports(
    package: str, names: dict[str, str], namespace: dict[str, Any]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``__getattr__`` and ``__dir__`` for ``package`` exporting ``names`` (a name → defining module map).

    A name whose module is ``package.name`` itself exports that module (e.g. ``zephyr.counters``).
    """

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

    return __getattr__, __dir__
