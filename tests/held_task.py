"""Kill the worker that runs one chosen task: the map ``hold_once`` logs every task it starts and holds one
task (the batch whose first ``id`` is ``held_id``) the first time it runs; ``kill_the_holder``, on a thread of
the test, SIGKILLs the process holding it. The retry then runs it to the end (the flag file says it was held)."""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


def hold_once(log: Path, flag: Path, held_id: int) -> Callable[[Any], Any]:
    """A ``map_batches`` function: touches ``log/<first id>-<pid>`` for every batch; the first batch starting
    at ``held_id`` creates ``flag`` and sleeps 120 s (its worker is killed meanwhile; reaching the end means it
    was not). Captures only paths and an int, so it pickles by value to any worker."""

    def hold(table):
        first = table.column("id")[0].as_py()
        (log / f"{first}-{os.getpid()}").write_text("")
        if first == held_id and not flag.exists():
            flag.write_text("")
            time.sleep(120)
        return table

    return hold


def kill_the_holder(
    log: Path,
    flag: Path,
    held_id: int,
    victim: list[int],
    stop: threading.Event,
    *,
    timeout_s: float,
    poll_s: float,
) -> None:
    """Wait (until ``stop`` or ``timeout_s``) for the held task to start, then SIGKILL its process and append
    the pid to ``victim``."""
    deadline = time.monotonic() + timeout_s
    while not stop.is_set() and time.monotonic() < deadline:
        holders = [p for p in log.iterdir() if p.name.startswith(f"{held_id}-")]
        if holders and flag.exists():
            victim.append(int(holders[0].name.split("-")[1]))
            os.kill(victim[0], signal.SIGKILL)
            return
        time.sleep(poll_s)


@dataclass
class HeldTask:
    log: Path
    """One empty file ``<first id>-<pid>`` per task run."""
    map: Callable[[Any], Any]
    """The ``map_batches`` function to run (``hold_once``)."""
    victim: list[int] = field(default_factory=list)
    """The pid killed, once it was."""


@contextlib.contextmanager
def killing_the_holder(
    tmp_path: Path, held_id: int, *, timeout_s: float, poll_s: float
) -> Iterator[HeldTask]:
    """A ``HeldTask`` (its log and flag under ``tmp_path``) with ``kill_the_holder`` running on a thread for
    the duration of the block; leaving the block stops and joins the thread."""
    log, flag = tmp_path / "log", tmp_path / "held-once"
    log.mkdir()
    held = HeldTask(log, hold_once(log, flag, held_id))
    stop = threading.Event()
    killer = threading.Thread(
        target=kill_the_holder,
        args=(log, flag, held_id, held.victim, stop),
        kwargs={"timeout_s": timeout_s, "poll_s": poll_s},
        name="test-killer",
    )
    killer.start()
    try:
        yield held
    finally:
        stop.set()
        killer.join()
