"""LazyKernels: a module's plain-Python kernels become numba dispatchers on the first compile, once."""

from __future__ import annotations

import threading

import pytest
from zephyr.dedup._compiled import LazyKernels

numba = pytest.importorskip("numba")


def _double(x):
    return 2 * x


def _quadruple(x):
    return _double(_double(x))


def test_compile_replaces_the_marked_kernels_once_callees_first():
    namespace = {"_double": _double, "_quadruple": _quadruple}
    kernels = LazyKernels(namespace)
    assert kernels.kernel(_double) is _double and kernels.kernel(_quadruple) is _quadruple
    assert not kernels.compiled and namespace["_quadruple"] is _quadruple  # nothing before the first call
    threads = [threading.Thread(target=kernels.compile) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    first = namespace["_quadruple"]
    assert kernels.compiled and isinstance(first, numba.core.dispatcher.Dispatcher)
    assert first.py_func is _quadruple  # wrapped once, not a dispatcher of a dispatcher
    kernels.compile()
    assert namespace["_quadruple"] is first
