"""Keeps a task process's C heap from holding on to memory that its tasks freed.

Why: glibc serves a large ``malloc`` (numpy arrays, numba kernels' scratch, Parquet decode buffers outside
Arrow's pool) from ``mmap`` and gives it back on ``free`` — until the first such free, after which it raises
its *dynamic* mmap threshold (up to 32 MiB on 64-bit) and serves arrays of that size from the heap arenas.
Freed there, they fragment the arenas and stay resident, so a process that runs many tasks grows with the
data rather than with the budget. Fixing the threshold (``mallopt(M_MMAP_THRESHOLD)``, which also turns the
dynamic adjustment off) keeps every array above it on ``mmap``.

Measured (2 task threads, ``zephyr dedup fuzzy``, 256 MB budget): the giant-bucket run at 160k documents
peaks at ~850 MiB instead of ~1040 MiB, and the medium docs (382 MB) at ~880-920 MiB instead of ~1030-1060
MiB, at the same wall time within noise (benchmarks/dedup_giant_bucket.py, benchmarks/dedup_fuzzy.py). A
threshold of 1-16 MiB gave the same peaks; 4 MiB keeps the number of ``mmap`` calls small.

Between tasks, ``release_freed_memory`` hands back what the allocators still hold for reuse: Arrow's pool
(jemalloc in local workers, mimalloc elsewhere) keeps freed pages until they decay, and glibc keeps the free
top of its heap. A task then starts from the process's baseline rather than from its predecessor's peak, so
one task's retention never adds to the next task's data (``zephyr.budget`` counts on this).

The opposite holds for one hot loop that frees and allocates the same large buffers batch after batch: the
tokenize writer in the driver, where fastokens hands back each batch's ids in a fresh ~8 MB Rust buffer and a
fresh ``bytes`` copy of it (half of the run's page faults, perf). ``reusing_freed_memory`` lets such a loop
keep what it freed, up to its memory budget, for the length of a block: 320 MB on 2 cores took 0.64 s less
CPU and 0.36 s less wall time (median of 5 interleaved runs).
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import platform
import threading
from collections.abc import Iterator
from typing import Any

__all__ = ["MMAP_THRESHOLD_BYTES", "fix_mmap_threshold", "release_freed_memory", "reusing_freed_memory"]

MMAP_THRESHOLD_BYTES = 4 << 20
REUSE_MMAP_THRESHOLD_BYTES = 64 << 20
"""Inside ``reusing_freed_memory``: buffers up to this size come from the heap arenas (and go back to them)."""
_M_TRIM_THRESHOLD, _M_TOP_PAD, _M_MMAP_THRESHOLD = -1, -2, -3  # <malloc.h>
_GLIBC_DEFAULT_BYTES = 128 << 10  # mallopt(3): the default of M_TRIM_THRESHOLD and M_TOP_PAD
_USER_SETTINGS = ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "MALLOC_TOP_PAD_")
_done = False
_reusing = 0  # blocks of reusing_freed_memory open in this process
_reusing_lock = threading.Lock()


def fix_mmap_threshold(threshold: int = MMAP_THRESHOLD_BYTES) -> bool:
    """Fixes glibc's mmap threshold once per process; True if it was set by this or an earlier call.

    A no-op (False) where the C library is not glibc, and where the user set ``MALLOC_MMAP_THRESHOLD_``
    themselves (their setting wins, as glibc read it at start-up)."""
    global _done
    if _done:
        return True
    mallopt = _glibc_mallopt()
    if mallopt is None or "MALLOC_MMAP_THRESHOLD_" in os.environ:
        return False
    _done = bool(mallopt(_M_MMAP_THRESHOLD, int(threshold)))
    return _done


def _glibc_mallopt() -> Any:
    """glibc's ``mallopt`` (None elsewhere: another C library, or no libc.so.6 to load)."""
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return None
    try:
        return ctypes.CDLL("libc.so.6").mallopt
    except (OSError, AttributeError):  # a glibc without mallopt, or no libc.so.6 to load: nothing to tune
        logging.getLogger(__name__).debug("mallopt unavailable; heap growth not bounded", exc_info=True)
        return None


@contextlib.contextmanager
def reusing_freed_memory(retain_bytes: int) -> Iterator[bool]:
    """For the block: glibc keeps up to ``retain_bytes`` of freed heap memory for reuse instead of handing it
    back to the OS, and serves buffers up to ``REUSE_MMAP_THRESHOLD_BYTES`` from the heap (see the module
    docstring). Yields whether the setting applies: not where the C library is not glibc, nor where the user set
    any of ``MALLOC_MMAP_THRESHOLD_``, ``MALLOC_TRIM_THRESHOLD_`` or ``MALLOC_TOP_PAD_`` (theirs wins).

    At the end of the outermost block the process gets the task processes' setting (``fix_mmap_threshold``:
    glibc has no way back to its dynamic threshold once one is set) and glibc's default trim threshold and top
    pad, and the freed memory goes back to the OS (``release_freed_memory``)."""
    global _reusing
    mallopt = _glibc_mallopt()
    if mallopt is None or any(name in os.environ for name in _USER_SETTINGS):
        yield False
        return
    with _reusing_lock:
        _reusing += 1
        mallopt(_M_MMAP_THRESHOLD, REUSE_MMAP_THRESHOLD_BYTES)
        mallopt(_M_TOP_PAD, REUSE_MMAP_THRESHOLD_BYTES)
        mallopt(_M_TRIM_THRESHOLD, max(int(retain_bytes), _GLIBC_DEFAULT_BYTES))
    try:
        yield True
    finally:
        with _reusing_lock:
            _reusing -= 1
            if not _reusing:
                mallopt(_M_TRIM_THRESHOLD, _GLIBC_DEFAULT_BYTES)
                mallopt(_M_TOP_PAD, _GLIBC_DEFAULT_BYTES)
                global _done
                _done = bool(mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES))
        if not _reusing:
            release_freed_memory()


def release_freed_memory() -> None:
    """Return memory freed by the finished task to the OS: Arrow's pool, then glibc's heap (see the module
    docstring). Cheap (milliseconds); safe while other threads allocate."""
    import sys

    pyarrow = sys.modules.get("pyarrow")
    if pyarrow is not None:  # no task imported it: nothing to release
        pyarrow.default_memory_pool().release_unused()
    if _done:  # glibc, and mallopt worked: malloc_trim exists too
        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL("libc.so.6").malloc_trim(0)
