"""Decode a task's next input batch on a thread while the current one is processed.

A task run in the driver process (the ``inprocess`` executor: small jobs, and the tokenize writer's single
process) has no other task beside it to keep a second core busy. Its input is Parquet or JSONL decoding,
which releases the GIL, so a thread can decode batch ``n + 1`` while the task's ops work on batch ``n``:
for the tokenize writer at 320 MB on 2 cores, 5.06 s → 4.24 s (median of 3, benchmarks/RESULTS.md). Worker
processes do not read ahead: the other workers already use the cores, and each would hold one more batch.

What it costs: one more decoded batch in memory (``Budget.read_batch_bytes``; ``zephyr.budget`` states it).
What it keeps: the order of batches, every exception (raised in the consumer at the batch where it
happened), and the task's context (``zephyr.counters``, the running budget and the quarantine callback run
inside a copy of the caller's ``contextvars`` context).
"""

from __future__ import annotations

import contextvars
import queue
import threading
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from contextvars import ContextVar
from typing import TypeVar

__all__ = ["enabled", "read_ahead", "reading_ahead"]

T = TypeVar("T")

_ENABLED: ContextVar[bool] = ContextVar("zephyr_read_ahead", default=False)
_END = object()
_POLL_SECONDS = 0.05


def enabled() -> bool:
    """Whether tasks started in this context read one batch ahead (``reading_ahead``)."""
    return _ENABLED.get()


@contextmanager
def reading_ahead() -> Iterator[None]:
    """Tasks run inside this block read their input one batch ahead (the in-process executor sets it)."""
    token = _ENABLED.set(True)
    try:
        yield
    finally:
        _ENABLED.reset(token)


def read_ahead(items: Iterator[T]) -> Iterator[T]:
    """``items``, produced one item ahead on a daemon thread. Closing the returned generator early (an op
    that stops reading, an error downstream) stops the thread after at most the item it is producing."""
    slot: queue.Queue[tuple[object, BaseException | None]] = queue.Queue(maxsize=1)
    stop = threading.Event()

    def produce() -> None:
        try:
            for item in items:
                while not stop.is_set():
                    try:
                        slot.put((item, None), timeout=_POLL_SECONDS)
                        break
                    except queue.Full:
                        continue
                if stop.is_set():
                    return
            slot.put((_END, None))
        except BaseException as exc:  # handed to the consumer, raised where it reads the failed batch
            slot.put((_END, exc))
        finally:
            close = getattr(items, "close", None)
            if close is not None:
                close()

    context = contextvars.copy_context()
    thread = threading.Thread(target=context.run, args=(produce,), name="zephyr-read-ahead", daemon=True)
    thread.start()
    try:
        while True:
            item, error = slot.get()
            if item is _END:
                if error is not None:
                    raise error
                return
            yield item  # type: ignore[misc]
    finally:
        stop.set()
        while thread.is_alive():  # unblock a producer waiting on the full slot, then let it finish
            with suppress(queue.Empty):
                slot.get_nowait()
            thread.join(_POLL_SECONDS)
