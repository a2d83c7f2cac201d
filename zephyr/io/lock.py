"""A lock on a folder a command writes (its output, its work dir, a ``zephyr run`` job folder) for its whole run.

Why: two commands on one output both exited 0 and the folder held the second's unsorted parts under the first's
summary; two ``zephyr run`` on one job folder died on each other's files. A lock makes the second command stop
before any work, in one line naming the holder.

The lock is one small JSON file (``OUT.zephyr/lock.json``, ``WORK/lock.json``, ``JOB/lock.json``)::

    {"host": "node-3", "pid": 4242, "process_started": 1767000000.12, "since": 1767000100.5,
     "command": "zephyr sort data/ --by url --output sorted/", "token": "9f0c..."}

- **Created exclusively.** Locally the complete file is hard-linked to its name (``link(2)`` fails when the
  name exists), so no reader ever sees a torn lock; where links are refused, ``O_CREAT|O_EXCL``. On object
  stores a conditional write (``If-None-Match: *``, ``fs.pipe_file(mode="create")``): S3 and S3-compatible
  stores that implement it (AWS since 2024, MinIO, moto) refuse the second writer with 412. A store or
  ``fsspec`` filesystem without conditional writes refuses ``mode="create"`` with another error, and the lock
  falls back to a check-then-write, which two commands started within the same second can both pass
  (logged once per filesystem).
- **A dead holder's lock is taken over, with a warning.** Same host, and its pid is not alive, or is alive
  with another process start time (the pid was reused): the lock is moved aside (a rename, so of two commands
  taking over at once one wins; the other finds the winner's lock and is refused) and created again. A lock
  of another host is never taken over: its process cannot be checked from here, and the message says to
  remove the file when that command is known to be gone.
- **Released on exit**, on success, errors and Ctrl-C alike (a ``with`` block), and only if it is still
  ours (its ``token``).
- **Per process.** Several jobs of one command take the lock of the same folder (a dedup writes its output
  from a few engine jobs; ``zephyr run`` steps write into their job folder): the first takes the file, the
  others count themselves in (``held``), and the last to leave removes it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

from zephyr.errors import ClaimError, OutputError, describe_os_error
from zephyr.io.paths import filesystem, is_local, path_key

log = logging.getLogger(__name__)

_COUNTS: dict[tuple[str, str], int] = {}
"""Locks this process holds: URL → how many ``held`` blocks are inside it."""
_COUNTS_LOCK = threading.Lock()
_TOKEN = uuid.uuid4().hex
"""This process's mark in its lock files: a lock with another token is not ours to remove."""
_COMMAND: list[str] = []
_NO_CONDITIONAL: set[str] = set()


def set_command_line(text: str) -> None:
    """The command a lock names as its holder (``zephyr.cli.main`` sets the command line it runs)."""
    _COMMAND[:] = [text]


def command_line() -> str:
    """The command set by ``set_command_line``, else the Python program's (``python train.py``)."""
    if _COMMAND:
        return _COMMAND[0]
    import sys

    return "python " + " ".join(sys.argv) if sys.argv and sys.argv[0] else "python"


@dataclasses.dataclass(frozen=True)
class _Holder:
    """Who holds a lock, as its file says."""

    host: str
    pid: int
    process_started: float | None
    since: float
    command: str
    token: str = ""

    @classmethod
    def me(cls) -> _Holder:
        return cls(
            socket.gethostname(),
            os.getpid(),
            _process_started(os.getpid()),
            time.time(),
            command_line(),
            _TOKEN,
        )

    @classmethod
    def parse(cls, data: bytes) -> _Holder | None:
        try:
            raw = json.loads(data)
            return cls(
                str(raw["host"]),
                int(raw["pid"]),
                None if raw.get("process_started") is None else float(raw["process_started"]),
                float(raw["since"]),
                str(raw.get("command", "?")),
                str(raw.get("token", "")),
            )
        except (ValueError, KeyError, TypeError):
            return None

    def to_bytes(self) -> bytes:
        return (json.dumps(dataclasses.asdict(self), indent=1) + "\n").encode()

    def alive(self) -> bool | None:
        """Whether the holding process still runs: None when that cannot be told from here (another host)."""
        if self.host != socket.gethostname():
            return None
        import psutil

        try:
            started = psutil.Process(self.pid).create_time()
        except (psutil.NoSuchProcess, psutil.ZombieProcess):
            return False
        except psutil.Error:  # another user's process: it runs, and its start time is not ours to read
            return True
        # a pid reused by another process has another start time (psutil reads it to 10 ms or better)
        return self.process_started is None or abs(started - self.process_started) < 1.0

    def describe(self) -> str:
        since = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(self.since))
        return f"{self.command!r} (pid {self.pid} on {self.host}, since {since})"


def _process_started(pid: int) -> float | None:
    import psutil

    try:
        return psutil.Process(pid).create_time()
    except psutil.Error:
        return None


def _holder_of(url: str) -> _Holder | None:
    """The holder named by the lock file ``url``; None when there is none (or it is not a lock)."""
    fs, path = filesystem(url)
    try:
        return _Holder.parse(fs.cat_file(path))
    except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
        return None


@contextlib.contextmanager
def held(url: str, what: str, folder: str) -> Iterator[None]:
    """Hold the lock file ``url`` for the block; ``what`` and ``folder`` name the locked folder in the refusal
    ("the output sorted/ is in use by ..."). Re-entrant within a process (see the module docstring)."""
    key = path_key(url)  # one key per lock file: ``out/`` and ``/abs/out/`` are one lock
    with _COUNTS_LOCK:
        mine = _COUNTS.get(key, 0)
        if mine:
            _COUNTS[key] = mine + 1
    if not mine:
        _acquire(url, what, folder)
        with _COUNTS_LOCK:
            _COUNTS[key] = _COUNTS.get(key, 0) + 1
    try:
        yield
    finally:
        with _COUNTS_LOCK:
            _COUNTS[key] -= 1
            last = _COUNTS[key] == 0
            if last:
                del _COUNTS[key]
        if last:
            _release(url)


def _acquire(url: str, what: str, folder: str) -> None:
    fs, path = filesystem(url)
    parent = path.rstrip("/").rsplit("/", 1)[0]
    try:
        fs.makedirs(parent, exist_ok=True)
    except OSError as exc:
        raise OutputError(
            f"cannot create the lock of {what} {folder}: {describe_os_error(exc, exc.filename or parent)}",
            path=parent,
            errno=exc.errno,
        ) from exc
    for _ in range(3):  # a takeover races at most a couple of times before one command wins
        me = _Holder.me()
        if _create(fs, path, me.to_bytes()):
            return
        holder = _holder_of(url)
        if holder is None:
            # a lock file that is not a whole lock: a writer without conditional writes is between its check
            # and its write, or a torn file of a crash; the second look decides
            time.sleep(0.05)
            holder = _holder_of(url)
            if holder is None:
                log.warning("%s: not a zephyr lock (unreadable); taking it over", url)
                _remove_if(fs, path, None)
                continue
        alive = holder.alive()
        if alive is False:
            log.warning(
                "%s %s: taking over the lock of %s, whose process is gone (%s)",
                what,
                folder,
                holder.describe(),
                url,
            )
            _remove_if(fs, path, holder)
            continue
        where = "" if alive else f"; if that command is gone, remove {url}"
        raise ClaimError(
            f"{what} {folder} is in use by another zephyr command: {holder.describe()}; wait for it to "
            f"finish{where}"
        )
    raise ClaimError(f"{what} {folder}: could not take its lock {url} (other commands kept taking it over)")


def _create(fs: Any, path: str, data: bytes) -> bool:
    """Create the file ``path`` holding ``data`` unless it exists; whether this call created it."""
    if is_local(fs):
        tmp = f"{path}.tmp-{uuid.uuid4().hex[:8]}"
        try:
            _create_exclusive(tmp, data)
            try:
                os.link(tmp, path)  # atomic, and never replaces: the whole file appears, or nothing
                return True
            except FileExistsError:
                return False
            except OSError:  # a filesystem without hard links
                return _create_exclusive(path, data)
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
    protocol = fs.protocol if isinstance(fs.protocol, str) else fs.protocol[0]
    if protocol not in _NO_CONDITIONAL:
        try:
            fs.pipe_file(path, data, mode="create")
            return True
        except FileExistsError:
            return False
        except (NotImplementedError, ValueError, TypeError) as exc:
            _NO_CONDITIONAL.add(protocol)
            log.warning(
                "%s: no conditional write (%s); locks are checked, then written (not atomic)", protocol, exc
            )
    fs.invalidate_cache(path)
    if fs.exists(path):
        return False
    fs.pipe_file(path, data)
    return True


def _create_exclusive(path: str, data: bytes) -> bool:
    """Create the local file ``path`` (``O_CREAT|O_EXCL``, no link followed) holding ``data`` unless it exists;
    whether this call created it."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o644)
    except FileExistsError:
        return False
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    return True


def _remove_if(fs: Any, path: str, expected: _Holder | None) -> None:
    """Remove the lock at ``path`` if it is still the one read (``expected``; None: an unreadable one).
    Locally the lock is first renamed aside, so of two commands doing this at once only one removes it; a
    lock found there that is not the expected one (a winner's new lock) is put back."""
    if not is_local(fs):
        fs.invalidate_cache(path)
        with contextlib.suppress(FileNotFoundError):
            current = _Holder.parse(fs.cat_file(path))
            if current == expected:
                fs.rm(path)
        return
    aside = f"{path}.stale-{uuid.uuid4().hex[:8]}"
    try:
        os.rename(path, aside)
    except FileNotFoundError:
        return
    with open(aside, "rb") as f:
        moved = _Holder.parse(f.read())
    if moved != expected:
        with contextlib.suppress(FileExistsError):
            os.link(aside, path)
    os.unlink(aside)


def _release(url: str) -> None:
    """Remove the lock ``url`` if it is still this process's (a takeover by someone else is left alone)."""
    fs, path = filesystem(url)
    try:
        fs.invalidate_cache(path)
        holder = _Holder.parse(fs.cat_file(path))
        if holder is not None and holder.token == _TOKEN and holder.pid == os.getpid():
            fs.rm(path)
        else:
            log.warning("%s: the lock is no longer this command's; left as it is", url)
    except FileNotFoundError:
        log.warning("%s: the lock was removed while this command ran", url)
    except OSError as exc:  # releasing must not turn a finished run into a failure
        log.warning("%s: could not remove the lock (%s); remove it by hand", url, exc)
