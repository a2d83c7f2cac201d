"""The task processes' C heap gives freed arrays back to the OS (zephyr.executors.base)."""

from __future__ import annotations

import os
import platform
import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.skipif(
    platform.system() != "Linux" or platform.libc_ver()[0] != "glibc", reason="glibc's mallopt"
)

# 40 arrays of 8 MiB with small live blocks (10 MiB in all) between them, freed: the memory that stays resident (MiB)
_RETAINED = textwrap.dedent(
    """
    import sys, numpy as np, psutil
    from zephyr.executors.base import fix_mmap_threshold
    print(fix_mmap_threshold() if sys.argv[1] == "fix" else "skipped")
    rss = lambda: psutil.Process().memory_info().rss
    big = np.ones(20 << 20, np.uint8)
    del big  # one freed 20 MiB array: glibc's dynamic threshold now puts 8 MiB arrays on the heap
    base = rss()
    arrays, pins = [], []
    for _ in range(40):
        arrays.append(np.ones(8 << 20, np.uint8))
        pins.append(np.ones(256 << 10, np.uint8))  # too big for a hole the imports left: on top of the array
    del arrays
    print((rss() - base) >> 20)
    """
)


def _retained_mib(mode: str, env: dict[str, str] | None = None) -> tuple[str, int]:
    out = subprocess.run(
        [sys.executable, "-c", _RETAINED, mode],
        capture_output=True,
        text=True,
        check=True,
        # glibc's MALLOC_* variables (dask sets MALLOC_TRIM_THRESHOLD_ in this process when it starts a
        # cluster) turn the dynamic threshold off too: the child starts without them
        env={**{k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")}, **(env or {})},
    ).stdout.split()
    return out[0], int(out[1])


def test_fixed_threshold_returns_freed_arrays_to_the_os():
    assert _retained_mib("nofix")[1] >= 160  # the failure the fix is for: half the 320 MiB stays, or more
    set_, retained = _retained_mib("fix")
    assert set_ == "True" and retained < 32


def test_the_users_own_malloc_setting_wins():
    set_, _ = _retained_mib("fix", {"MALLOC_MMAP_THRESHOLD_": str(64 << 20)})
    assert set_ == "False"


def test_task_processes_fix_the_threshold(tmp_path):
    """The threads executor's process and a local worker run with the fixed threshold."""
    code = textwrap.dedent(
        """
        import zephyr.executors.base as heap
        from zephyr.executors.base import ThreadExecutor
        from zephyr.executors.local import LocalExecutor
        assert not heap._done
        ThreadExecutor(2)
        print(heap._done)
        ex = LocalExecutor(1)
        try:
            print(list(ex.run(_probe, [0]))[0][1].value)
        finally:
            ex.close()
        """
    )
    probe = tmp_path / "probe.py"
    probe.write_text("def probe(_):\n    import zephyr.executors.base as h\n    return h._done\n")
    code = f"import sys; sys.path.insert(0, {str(tmp_path)!r}); from probe import probe as _probe\n" + code
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["True", "True"]


_POOL_RETAINED = textwrap.dedent(
    """
    import sys, pyarrow as pa, pyarrow.compute as pc, psutil
    from zephyr.executors.base import fix_mmap_threshold, release_freed_memory
    fix_mmap_threshold()
    rss = lambda: psutil.Process().memory_info().rss
    base = pa.array(["x" * 100] * 100_000)
    before = rss()
    arrays = [pc.binary_join_element_wise(base, base, "") for _ in range(16)]  # 320 MiB in Arrow's pool
    del arrays
    freed = rss()
    if sys.argv[1] == "release":
        release_freed_memory()
    print((freed - before) >> 20, (rss() - before) >> 20)
    """
)


def test_release_between_tasks_hands_back_what_the_arrow_pool_kept():
    """mimalloc (Arrow's default pool, the threads executor's) keeps freed pages; a task's end releases them."""
    env = {**os.environ, "ARROW_DEFAULT_MEMORY_POOL": "mimalloc"}

    def run(mode: str) -> list[int]:
        out = subprocess.run(
            [sys.executable, "-c", _POOL_RETAINED, mode], capture_output=True, text=True, check=True, env=env
        )
        return [int(x) for x in out.stdout.split()]

    kept_after_free, _ = run("keep")
    assert kept_after_free >= 160  # the retention the release is for
    _, after_release = run("release")
    assert after_release < 64
