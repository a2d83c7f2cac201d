"""How one task's memory budget divides: the one place that states every share.

``--memory-budget`` is per task (a worker process runs one task at a time; the ``threads`` executor runs
``--workers`` tasks in one process, so that process holds ``workers × budget``). Every buffer a task or the
driver sizes from the budget reads its size here, so the whole division can be printed
(``python -m zephyr.budget 256MB``) and checked against measured peaks (benchmarks/RESULTS.md).

What a task holds at once, at most, for a budget B:

- reading: one decoded batch (``read_batch_bytes``, B/8), and per column one read buffer
  (``read_buffer_bytes``, B/64, 1–8 MiB) through which the compressed column chunk streams a page at a time —
  a row group larger than the budget is read in batches, never whole; a row cannot be split, so a budget
  whose batch cannot hold the widest row group's average row is refused before any task, naming the smallest
  that works (``smallest_for_row``, ``zephyr.physical.check_row_width``). A task in the driver process
  (``inprocess`` executor: small jobs) decodes the next batch while the current one is processed
  (``zephyr.tasks``), so it holds two read batches; worker tasks hold one;
- computing: a kernel's scratch (``kernel_scratch_bytes``, B/2). Kernels whose scratch is a multiple of their
  input (the quality filters' token lists and joins: ~30× the text) work on row slices of the batch
  (``kernel_slices``) sized so that multiple × slice fits the share;
- writing: one row group being encoded (``row_group_bytes``, B/4, capped at 128 MiB);
- the map side of a shuffle: the sort buffer (``shuffle_buffer_bytes``, B/4) plus its sorted copy and Parquet
  encoding while it spills (about twice that again), written as row groups of ``spill_row_group_bytes``
  (B/64, 256 KiB–4 MiB) so that a reducer can stream many parts at once;
- coalescing runs (on object stores, ``zephyr.shuffle.runs.coalesce_plan``): one window of fetched run bytes
  (``coalesce_window_bytes``, B/4) and one upload part (``upload_part_bytes``, B/16, 5–64 MiB: S3's smallest
  part is 5 MiB), plus the indexes of its group (48 bytes per run and partition); nothing is decoded;
- the reduce side: a partition read whole when its stored bytes × ``EXPANSION`` fit ``in_memory_reduce_bytes``
  (0.4·B); otherwise ``merge_fan_in`` parts streamed at once, one decoded spill row group each, 4× headroom; either way
  run bytes are fetched a chunk of consecutive blobs at a time, ``spill_row_group_bytes`` at most, and an open
  part keeps at most one such chunk undecoded;
- planning: shuffle partitions of ``partition_target_bytes`` (B/4, capped at 64 MiB) of estimated input;
- allocators: Arrow's pool and glibc's heap keep freed memory for reuse; task processes hand it back after
  every task (``zephyr.executors.base``), so retention never stacks across tasks and is not a share;
- the driver's in-memory shares, used by dedup: candidate pairs up to ``driver_rows`` (B/4 at 64 bytes a
  pair), endpoint sets up to ``driver_set_bytes`` (B/16), a verified graph up to ``driver_graph_edges``
  (48 bytes an edge), and sets broadcast with a task up to ``broadcast_bytes`` (B/8); substring dedup's
  shared windows, held by the driver and every task, up to ``shared_window_rows`` (B/4 at 48 bytes a window).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pyarrow as pa


MIB = 1 << 20
EXPANSION = 5
"""Decoded Arrow bytes per stored (compressed Parquet) byte assumed when a reducer decides to read whole."""
READ_BATCH_SHARE = 8
"""A decoded read batch is budget / this: one row must fit it (``zephyr.physical.check_row_width``)."""
MAX_FAN_IN = 64
"""Run parts merged at once, at most, whatever the budget."""
PARTITION_TARGET_CAP = 64 << 20
"""Estimated input bytes per shuffle partition, at most: more partitions keep the reducers' work even."""
PAIR_BYTES = 64
"""Driver bytes per candidate pair held in memory (two int64 ends, Arrow and sort scratch)."""
GRAPH_BYTES_PER_EDGE = 48
"""Driver bytes per verified edge when the graph is clustered in memory (pairs, similarity, sort scratch)."""
DRIVER_SET_SHARE = 16
"""The driver verifies candidate pairs itself only when the endpoints' shingle sets fit budget / this."""
BROADCAST_SHARE = 8
"""Data broadcast with a stage to every task (e.g. a giant bucket's hot sets) takes at most budget / this."""
SHARED_WINDOW_BYTES = 48
"""Bytes per window substring dedup holds in memory, in the driver and every task (its hash, its first row and
the Arrow table they came in)."""


_SHARES: dict[str, str] = {}
"""Every share of a budget, by name: its rule in words (``Budget.table``)."""


def _share(rule: str) -> Callable[[Callable[..., int]], Any]:
    """Declare a share of ``Budget`` (a property) with its rule."""

    def declare(fn: Callable[..., int]) -> Any:
        _SHARES[fn.__name__] = rule
        return property(fn)

    return declare


@dataclass(frozen=True)
class Budget:
    """One task's memory budget, ``bytes``, and its shares (see the module docstring)."""

    bytes: int

    @_share("B/8, ≥ 1 MiB")
    def read_batch_bytes(self) -> int:
        return max(MIB, self.bytes // READ_BATCH_SHARE)

    @staticmethod
    def smallest_for_row(row_bytes: int) -> int:
        """The smallest budget (whole MiB) whose read batch holds a row of ``row_bytes``."""
        return -(-READ_BATCH_SHARE * row_bytes // MIB) * MIB

    @_share("B/64, 1–8 MiB, per column read")
    def read_buffer_bytes(self) -> int:
        return max(MIB, min(8 * MIB, self.bytes // 64))

    @_share("B/2: scratch multiple × kernel slice")
    def kernel_scratch_bytes(self) -> int:
        return max(MIB, self.bytes // 2)

    @_share("B/4, 1–128 MiB")
    def row_group_bytes(self) -> int:
        return max(MIB, min(128 * MIB, self.bytes // 4))

    @_share("B/4, ≥ 1 MiB (+2× while spilling)")
    def shuffle_buffer_bytes(self) -> int:
        return max(MIB, self.bytes // 4)

    @_share("B/64, 256 KiB–4 MiB")
    def spill_row_group_bytes(self) -> int:
        return max(256 << 10, min(4 * MIB, self.bytes // 64))

    @_share("B/4, ≥ 1 MiB of run bytes")
    def coalesce_window_bytes(self) -> int:
        return max(MIB, self.bytes // 4)

    @_share("B/16, 5–64 MiB")
    def upload_part_bytes(self) -> int:
        return max(5 * MIB, min(64 * MIB, self.bytes // 16))

    @_share(f"0.4·B of decoded bytes ({EXPANSION}× stored)")
    def in_memory_reduce_bytes(self) -> int:
        return int(self.bytes * 0.4)

    @_share(f"B / (4 × spill row group), 2–{MAX_FAN_IN} parts")
    def merge_fan_in(self) -> int:
        """Parts streamed at once: each holds about one decoded row group; 4× headroom for the merged batch."""
        return max(2, min(MAX_FAN_IN, self.bytes // max(1, 4 * self.spill_row_group_bytes)))

    @_share("B/4, 1–64 MiB of input")
    def partition_target_bytes(self) -> int:
        return max(MIB, min(self.bytes // 4, PARTITION_TARGET_CAP))

    @_share(f"B/4 at {PAIR_BYTES} bytes a pair")
    def driver_rows(self) -> int:
        return self.bytes // 4 // PAIR_BYTES

    @_share(f"B/{DRIVER_SET_SHARE}")
    def driver_set_bytes(self) -> int:
        return self.bytes // DRIVER_SET_SHARE

    @_share(f"B at {GRAPH_BYTES_PER_EDGE} bytes an edge")
    def driver_graph_edges(self) -> int:
        return self.bytes // GRAPH_BYTES_PER_EDGE

    @_share(f"B/{BROADCAST_SHARE}")
    def broadcast_bytes(self) -> int:
        return self.bytes // BROADCAST_SHARE

    @_share(f"B/4 at {SHARED_WINDOW_BYTES} bytes a window")
    def shared_window_rows(self) -> int:
        """Substring dedup's windows found in two or more documents, looked up in memory by every task (no join,
        no sort) up to this many: a quarter of the budget, like the driver's pairs."""
        return self.bytes // 4 // SHARED_WINDOW_BYTES

    def table(self) -> list[tuple[str, int, str]]:
        """(share, value, rule) for every share, in declaration order: what ``explain`` prints and the docs
        describe."""
        return [(name, getattr(self, name), rule) for name, rule in _SHARES.items()]

    def describe(self) -> str:
        """The table as aligned text lines."""
        rows = self.table()
        width = max(len(name) for name, _, _ in rows)
        return "\n".join(f"{name:<{width}}  {value:>14,}  {rule}" for name, value, rule in rows)


# Per thread (context), like the counters: the threads executor and dask run several tasks in one process.
_running: ContextVar[Budget | None] = ContextVar("zephyr_budget", default=None)


@contextmanager
def running(budget: Budget) -> Iterator[Budget]:
    """Make ``budget`` the running task's (the task runner wraps every task in this)."""
    token = _running.set(budget)
    try:
        yield budget
    finally:
        _running.reset(token)


def running_budget() -> Budget | None:
    """The budget of the task running in this thread; None outside a task (plain-function use)."""
    return _running.get()


def kernel_slices(table: pa.Table, scratch_per_byte: float) -> Iterator[pa.Table]:
    """``table`` as consecutive row slices (zero-copy) whose scratch — ``scratch_per_byte`` × the slice's Arrow
    bytes, the kernel's own measured multiple — fits the running task's ``kernel_scratch_bytes``.

    Outside a task the table comes whole: a caller of a plain function holds its table anyway. Only for
    kernels whose rows are independent, so that the output does not depend on where the slices fall."""
    budget = running_budget()
    nbytes = table.nbytes
    if budget is None or table.num_rows <= 1 or nbytes * scratch_per_byte <= budget.kernel_scratch_bytes:
        yield table
        return
    rows = max(1, int(table.num_rows * budget.kernel_scratch_bytes / (nbytes * scratch_per_byte)))
    for start in range(0, table.num_rows, rows):
        yield table.slice(start, rows)


if __name__ == "__main__":
    import sys

    from zephyr.options import parse_bytes

    print(Budget(parse_bytes(sys.argv[1] if len(sys.argv) > 1 else "1GB")).describe())
