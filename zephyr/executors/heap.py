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
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import platform

__all__ = ["MMAP_THRESHOLD_BYTES", "fix_mmap_threshold", "release_freed_memory"]

MMAP_THRESHOLD_BYTES = 4 << 20
_M_MMAP_THRESHOLD = -3  # <malloc.h>
_done = False


def fix_mmap_threshold(threshold: int = MMAP_THRESHOLD_BYTES) -> bool:
    """Fixes glibc's mmap threshold once per process; True if it was set by this or an earlier call.

    A no-op (False) where the C library is not glibc, and where the user set ``MALLOC_MMAP_THRESHOLD_``
    themselves (their setting wins, as glibc read it at start-up)."""
    global _done
    if _done:
        return True
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return False
    if "MALLOC_MMAP_THRESHOLD_" in os.environ:
        return False
    try:
        libc = ctypes.CDLL("libc.so.6")
        _done = bool(libc.mallopt(_M_MMAP_THRESHOLD, int(threshold)))
    except (OSError, AttributeError):  # a glibc without mallopt, or no libc.so.6 to load: nothing to tune
        logging.getLogger(__name__).debug("mallopt unavailable; heap growth not bounded", exc_info=True)
        return False
    return _done


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
