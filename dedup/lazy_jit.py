"""numba compilation on first use, for the modules of plain-Python kernels (``compiled``, ``substring_kernels``).

Contract: a module lists its kernels by name and calls ``LazyKernels.compile()`` at each entry point. The first
call imports numba (~0.5 s, so never at import time) and replaces each named function in the module's globals
by ``numba.njit(cache=True, nogil=True, boundscheck=False)`` of it, callees first, so that a compiled caller
resolves its callees as compiled; numba caches the machine code on disk beside the module. Later calls return
at once, and threads racing the first call compile once (a lock).

``NUMBA_ENABLED`` is whether numba is installed and not turned off by ``ZEPHYR_NO_NUMBA=1``; without it the
kernels run as Python (the slow reference path the tests compare the compiled code against).
"""

from __future__ import annotations

import importlib.util
import os
import threading
from collections.abc import Sequence
from typing import Any

__all__ = ["NUMBA_ENABLED", "LazyKernels"]

NUMBA_ENABLED = importlib.util.find_spec("numba") is not None and os.environ.get("ZEPHYR_NO_NUMBA", "") in (
    "",
    "0",
)


class LazyKernels:
    """The kernels ``names`` (callees first) of the module whose ``globals()`` is ``namespace``."""

    def __init__(self, namespace: dict[str, Any], names: Sequence[str]) -> None:
        self._namespace = namespace
        self._names = tuple(names)
        self._lock = threading.Lock()
        self.compiled = False
        """True once every kernel in the namespace is a numba dispatcher."""

    def compile(self) -> None:
        """Replace the kernels by numba dispatchers, once (loaded from numba's disk cache after the first run)."""
        if self.compiled:
            return
        with self._lock:
            if self.compiled:
                return
            import numba

            for name in self._names:
                self._namespace[name] = numba.njit(cache=True, nogil=True, boundscheck=False)(
                    self._namespace[name]
                )
            self.compiled = True
