"""The output protocol. Outputs are claimed, not clobbered: what a command checks before it writes a folder,
the lock it holds for the whole run, how it publishes the folder whole, and the manifest that says a finished
zephyr run wrote it. (Where each of these files lives: ``zephyr.io.layout``.)

Before any work, for each folder a command writes (``--output``, ``--dropped-output``, ``Dataset.write_*``'s
directory; ``claimed``):

1. **Not an input.** The output (and its sidecar ``OUT.zephyr``, ``zephyr.io.layout``) may not equal, contain
   or lie inside any input: ``zephyr dedup exact c3/ --output c3/`` would publish the deduplicated part beside
   the original file, and reading ``c3/`` would give every duplicate back. Paths are compared after resolving
   symlinks (local) and URLs (``fsspec``); a glob counts as the paths it matches.
2. **Locked.** ``OUT.zephyr/lock.json`` is taken for the whole run (below, "The lock"): a second command on the
   same output is refused naming the first.
3. **Zephyr's own files only.** Under the lock, every file in ``OUT`` must be named in
   ``OUT.zephyr/manifest.json`` (``foreign_files``): a folder holding anything else (a stale part, the user's
   own data, an older layout) is refused naming one such file, unless ``overwrite=True`` (``--overwrite``),
   which replaces the folder's content. An empty or missing folder is fine. A listed part whose bytes changed
   is not refused: it is zephyr's, and a resume recomputes it (its task's checksum no longer matches).

The manifest (``MANIFEST_VERSION`` 2)::

    {"version": 2, "command": "zephyr sort data/ --by url --output sorted/", "finished": 1767000000.0,
     "host": "node-3", "files": {"part-00000.parquet": {"bytes": 1234, "xxh3_128": "..."}}}

It is written last, when a run has published in full (below, "Publishing"), so its presence is the claim "a
finished zephyr run wrote OUT". Each file's record is the checksum record its task made while writing it and
keeps in its marker (``zephyr.io.checksum``: one record format for both, which ``zephyr.resume.check_files``
verifies): nothing is read back. A file without such a record (a token-shard set built by its own writer) is
hashed once locally, or named by its store's version stamp (``version``: an ETag or generation,
``zephyr.io.paths.file_stat``) on object stores.
Before publishing, the run
writes ``OUT.zephyr/staging/manifest.json`` (``PENDING``): the files of both the old and the new content, so a
crash in the middle of a publish never leaves files the next run would refuse as foreign; a claim that finds
OUT matching the pending list exactly promotes it.

Claims nest within a process: a command claims its output once (``zephyr.cli.main``) and the engine jobs that
write into it (``zephyr.job.run_write``) find it claimed and skip the checks.

The lock (``held``) on a folder a command writes (its output, its work dir, a ``zephyr run`` job folder), for its
whole run.

Why: two commands on one output both exited 0 and the folder held the second's unsorted parts under the first's
summary; two ``zephyr run`` on one job folder died on each other's files. A lock makes the second command stop
before any work, in one line naming the holder.

The lock is one small JSON file (``OUT.zephyr/lock.json``, ``WORK/lock.json``, ``JOB/lock.json``)::

    {"host": "node-3", "pid": 4242, "process_started": 1767000000.12, "since": 1767000100.5,
     "command": "zephyr sort data/ --by url --output sorted/", "token": "9f0c..."}

- **Local: a kernel lock.** The command opens the file and takes an exclusive ``flock(2)`` on it, then
  writes itself into it. The kernel drops the lock when the process ends, however it ends (a crash, ``kill
  -9``), so a lock file that nobody holds is a dead command's: it is taken over, with a warning naming the
  command it names. On NFS, Linux clients map ``flock`` to NFS byte-range locks, which the server keeps for
  every client (a mount with ``nolock`` or ``local_lock`` keeps them per client, and then two hosts can both
  hold one); a crashed host's lock is dropped by the server when its lease ends.
- **Object stores: created exclusively.** A conditional write (``If-None-Match: *``,
  ``fs.pipe_file(mode="create")``): S3 and S3-compatible stores that implement it (AWS since 2024, MinIO,
  moto) refuse the second writer with 412. An ``fsspec`` filesystem without conditional writes does
  ``mode="create"`` as a check-then-write (fsspec's own), which two commands started within the same second
  can both pass. A lock whose holder ran on this
  host and is gone (its pid is not alive, or is alive with another process start time: the pid was reused)
  is taken over with a warning; a lock of another host is never taken over: its process cannot be checked
  from here, and the message says to remove the file when that command is known to be gone.
- **Released on exit**, on success, errors and Ctrl-C alike (a ``with`` block), and only if it is still
  ours (the file we lock; on object stores the record we wrote, ``token`` included).
- **Per process.** Several jobs of one command take the lock of the same folder (a dedup writes its output
  from a few engine jobs; ``zephyr run`` steps write into their job folder): the first takes the file, the
  others count themselves in (``held``), and the last to leave removes it.

Publishing (``publish``, ``publish_folder``): the output folder gets dense part names and nothing else, once
every task is done.

Contract of a folder written by ``Dataset.write_*`` (``zephyr.job.run_write``; layout: ``zephyr.io.layout``):

- its files are ``part-00000.<ext>``, ``part-00001.<ext>``, ... with no gap, in task (shard) order; a task that
  keeps no row writes no file, and the names close up over it. Nothing else is in it, so pyarrow, polars,
  duckdb (``OUT/**/*.parquet``) and HF ``datasets`` read it as exactly the written rows;
- the content a finished run published stays readable until the new run has published in full (a failed run
  never touches it).

How, on a local disk. Tasks write ``OUT.zephyr/staging/part-<task index>.<ext>`` (``SinkOutput.staging``). After
the last task, ``publish`` builds the complete new folder ``OUT.zephyr/staging/publish-<id>/``: staged parts
are renamed into it, in task order, under their dense names; parts of tasks resumed from a previous publish
(their markers name ``OUT/part-k``) are hard-linked (copied where links are refused). It writes the pending
manifest (``write_pending``), removes ``manifest.json``, swaps the new folder with ``OUT`` in one
``renameat2(2)`` call with ``RENAME_EXCHANGE`` (Linux 3.15+; elsewhere two renames, between which ``OUT`` is
briefly missing), rewrites each task's marker with its published name and its recorded size and checksum under
that name (a rerun with the same ``work_dir`` then finds its finished tasks and checks their bytes,
``zephyr.resume.check_files``), writes ``OUT.zephyr/manifest.json`` (sizes and checksums taken from the markers,
``zephyr.io.checksum``: nothing is read back) and removes the old folder. A crash before the swap leaves ``OUT``
as it was; after it, ``OUT`` is the complete new content, and a marker still naming a staged file makes its task
rerun.

How, on an object store (no rename, no folder swap), or a local ``OUT`` on another filesystem than its sidecar
(a mount or a link). The pending manifest is written and ``manifest.json`` removed, then each part is moved to
its final name in task order (``fs.mv``: a copy on an object store, where an object appears complete or not at
all; a name of the previous run is replaced whole), the markers rewritten, the previous run's files not named
again deleted, ``manifest.json`` written and the staging folder removed. During the moves a reader of ``OUT``
may see a mix of old and new parts (a crash there leaves the mix, which the pending manifest lists, until the
next run publishes); a reader that needs a finished run reads ``manifest.json`` and the files it lists.
"""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import errno
import fcntl
import json
import logging
import os
import posixpath
import shutil
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

import fsspec

from zephyr.errors import ClaimError, ConfigError, OutputError, describe_os_error
from zephyr.io import layout, paths
from zephyr.io.checksum import checksum_record, file_checksum
from zephyr.io.paths import check_output_dir, filesystem, is_local, path_key, public_path, write_json_atomic

log = logging.getLogger(__name__)

MANIFEST_VERSION = 2
PENDING = "manifest.json"
"""The pending manifest's name inside ``OUT.zephyr/staging/``."""

_REWRITTEN = ("quarantine", "dropped", "staging", "unreadable")
"""Sidecar folders a run rewrites: an input inside one of them would be replaced while it is read."""


# -- where a path is -----------------------------------------------------------------------------------------
def _relation(a: tuple[str, str], b: tuple[str, str]) -> str | None:
    """How path ``a`` relates to path ``b``: "is", "contains", "lies inside", or None."""
    if a[0] != b[0]:
        return None
    pa, pb = a[1].rstrip("/") or "/", b[1].rstrip("/") or "/"
    if pa == pb:
        return "is"
    if pb.startswith(pa.rstrip("/") + "/"):
        return "contains"
    if pa.startswith(pb.rstrip("/") + "/"):
        return "lies inside"
    return None


def _input_keys(inputs: Iterable[str]) -> list[tuple[str, tuple[str, str]]]:
    """(as given, key) of each input path; a glob stands for the paths it matches now."""
    keys = []
    for given in inputs:
        text = str(given)
        fs, path = filesystem(text)
        if any(ch in path for ch in "*?["):
            keys.extend((text, path_key(public_path(fs, m))) for m in fs.glob(path))
        else:
            keys.append((text, path_key(text)))
    return keys


def check_not_inputs(output: str, inputs: Iterable[str], *, flag: str = "the output") -> None:
    """Refuse (``ClaimError``) an ``output`` that is, contains or lies inside an input, or whose sidecar does;
    ``flag`` names the output in the message (``--output``)."""
    keys = _input_keys(inputs)
    if not keys:
        return
    side = layout.sidecar(output)
    for folder in (output, side):
        mine = path_key(folder)
        for given, key in keys:
            relation = _relation(mine, key)
            if relation is None:
                continue
            if folder == side and relation == "contains":
                below = key[1][len(mine[1].rstrip("/")) + 1 :].split("/", 1)[0]
                if below not in _REWRITTEN:
                    continue  # a command's own scratch rows (OUT.zephyr/annotated): read, then written to OUT
            what = "" if folder == output else f" (its sidecar {folder})"
            raise ClaimError(
                f"{flag} {output}{what} {relation} the input {given}: writing there would replace or mix with the data it "
                "reads; choose an output folder outside every input"
            )


def input_paths_of(ops: Sequence[Any]) -> list[str]:
    """The input paths a plan's ops read (``ReadFiles``, also inside a join's right side)."""
    from zephyr.ops import Join, ReadFiles

    found: list[str] = []
    for op in ops:
        if isinstance(op, ReadFiles):
            found.extend(op.paths)
        elif isinstance(op, Join):
            found.extend(input_paths_of(op.right))
    return found


# -- the manifest ---------------------------------------------------------------------------------------------
def file_record(url: str) -> dict[str, Any]:
    """The checksum record of the published file ``url`` that no task recorded (see the module docstring)."""
    fs, path = filesystem(url)
    if is_local(fs):
        return checksum_record(*file_checksum(path))
    size, version = paths.file_stat(url)  # an object store's ETag or generation stands in for the checksum
    return {"bytes": size, "version": version}


def _json_file(url: str) -> Any:
    """The JSON value of the file at ``url``, or None when it is missing or not JSON."""
    fs, path = filesystem(url)
    try:
        return json.loads(fs.cat_file(path))
    except (FileNotFoundError, NotADirectoryError, ValueError):
        return None


def read_manifest(url: str) -> dict[str, Any] | None:
    """The manifest at ``url`` (a ``manifest.json``), or None when missing or not one."""
    data = _json_file(url)
    return data if isinstance(data, dict) and isinstance(data.get("files"), dict) else None


def _pending_path(output: str) -> str:
    return posixpath.join(layout.staging_dir(output), PENDING)


def _manifest(files: dict[str, dict]) -> dict[str, Any]:
    return {
        "version": MANIFEST_VERSION,
        "command": command_line(),
        "finished": time.time(),
        "host": socket.gethostname(),
        "files": files,
    }


def write_manifest(output: str, files: dict[str, dict]) -> None:
    """Write ``OUT.zephyr/manifest.json`` naming ``files`` (name → checksum record): the last write of a
    publish."""
    write_json_atomic(layout.manifest_path(output), _manifest(files))


def write_pending(output: str, files: dict[str, dict]) -> None:
    """Before a publish touches ``output``: the pending manifest, naming the old manifest's files and ``files``."""
    old = (read_manifest(layout.manifest_path(output)) or {"files": {}})["files"]
    write_json_atomic(_pending_path(output), _manifest({**old, **files}))


def _listing(output: str) -> dict[str, int]:
    """Relative name → size of every file in ``output`` now ({} when it is missing or not a folder)."""
    fs, root = filesystem(output)
    root = root.rstrip("/")
    fs.invalidate_cache(root)
    try:
        if not fs.isdir(root):
            return {}
        found = fs.find(root, detail=True)
    except (FileNotFoundError, NotADirectoryError):
        return {}
    return {name[len(root) + 1 :]: int(info.get("size") or 0) for name, info in found.items() if name != root}


def foreign_files(output: str) -> list[str]:
    """Files in ``output`` under names neither the manifest nor a pending one lists: what a claim refuses to
    replace. A listed name whose bytes changed is zephyr's part, damaged: a resume checks it against its
    task's checksum and recomputes it (``zephyr.resume.check_files``), so it is not refused here."""
    present = _listing(output)
    if not present:
        return []
    listed: set[str] = set()
    for url in (layout.manifest_path(output), _pending_path(output)):
        listed.update((read_manifest(url) or {"files": {}})["files"])
    return sorted(name for name in present if name not in listed)


def _promote_pending(output: str) -> None:
    """A publish that moved its files in but died before writing its manifest left the pending one, whose
    new files are exactly what ``output`` holds: write the manifest it would have written."""
    pending = read_manifest(_pending_path(output))
    if pending is None:
        return
    present = _listing(output)
    files = {
        n: r for n, r in pending["files"].items() if isinstance(r, dict) and present.get(n) == r.get("bytes")
    }
    if present and files.keys() == present.keys():
        log.info("%s: the last run published in full; writing the manifest it did not finish", output)
        write_manifest(output, dict(sorted(files.items())))


def _blocked(output: str) -> bool:
    """Whether a local ``output`` or the nearest of its folders that exists is not a folder."""
    fs, path = filesystem(output)
    if not is_local(fs):
        return False
    while path not in ("", "/"):
        if os.path.lexists(path):
            return not os.path.isdir(path)
        path = os.path.dirname(path)
    return False


# -- the claim --------------------------------------------------------------------------------------------------
@contextlib.contextmanager
def claimed(
    output: str,
    *,
    inputs: Iterable[str] = (),
    overwrite: bool = False,
    work_dir: str | None = None,
    flag: str = "the output",
) -> Iterator[None]:
    """Claim the folder ``output`` for the block (see the module docstring): refuse it when it overlaps an
    input (or ``work_dir`` lies inside it), hold its lock, and refuse it when it holds files zephyr did not
    write unless ``overwrite``. Within a claim of this process, a nested claim of the same folder only
    counts itself in (this process holds the folder's lock: only a claim takes it)."""
    lock = layout.lock_path(output)
    with _HELD_LOCK:
        nested = path_key(lock) in _HELD
    if nested:
        with held(lock, flag, output):
            yield
        return
    check_not_inputs(output, inputs, flag=flag)
    if work_dir is not None:
        relation = _relation(path_key(work_dir), path_key(output))
        if relation in ("is", "lies inside"):
            raise ClaimError(
                f"the work dir {work_dir} {relation} {flag} {output}, which holds its data only (and is replaced "
                "when the run publishes); choose a work dir outside the output"
            )
    if _blocked(output):  # a file in the way: one line, before the sidecar (``/dev/full.zephyr``) is made
        check_output_dir(output)
    with held(lock, flag, output):
        check_output_dir(output)  # a read-only place: one line now, not in every task
        _promote_pending(output)
        if not overwrite:
            foreign = foreign_files(output)
            if foreign:
                more = f" and {len(foreign) - 1} more" if len(foreign) > 1 else ""
                # the manifest's version in whatever format it has: an earlier format's folder is not foreign
                data = _json_file(layout.manifest_path(output))
                version = data.get("version") if isinstance(data, dict) else None
                held_by = (
                    f"was written by an earlier zephyr (manifest version {version}, now {MANIFEST_VERSION})"
                    if version not in (None, MANIFEST_VERSION)
                    else f"holds files zephyr did not write ({foreign[0]}{more})"
                )
                raise ClaimError(
                    f"{flag} {output} {held_by}; pass overwrite=True to replace its content, or choose another "
                    "output folder"
                )
        yield


# -- the lock ---------------------------------------------------------------------------------------------------

_HELD: dict[tuple[str, str], list] = {}
"""Locks this process holds: key → [how many ``held`` blocks are inside it, the function that releases it]."""
_HELD_LOCK = threading.Lock()
_TOKEN = uuid.uuid4().hex
"""This process's mark in its lock files: a lock with another token is not ours to remove."""
_COMMAND: list[str] = []


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
        import psutil

        started = psutil.Process().create_time()
        return cls(socket.gethostname(), os.getpid(), started, time.time(), command_line(), _TOKEN)

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


@contextlib.contextmanager
def held(url: str, what: str, folder: str) -> Iterator[None]:
    """Hold the lock file ``url`` for the block; ``what`` and ``folder`` name the locked folder in the refusal
    ("the output sorted/ is in use by ..."). Re-entrant within a process (see the module docstring)."""
    key = path_key(url)  # one key per lock file: ``out/`` and ``/abs/out/`` are one lock
    with _HELD_LOCK:
        entry = _HELD.get(key)
        if entry is not None:
            entry[0] += 1
    if entry is None:
        release = _acquire(url, what, folder)
        with _HELD_LOCK:
            entry = _HELD.setdefault(key, [0, release])
            entry[0] += 1
    try:
        yield
    finally:
        with _HELD_LOCK:
            entry[0] -= 1
            last = entry[0] == 0
            if last:
                del _HELD[key]
        if last:
            entry[1]()


def _acquire(url: str, what: str, folder: str) -> Callable[[], None]:
    """Take the lock file ``url`` (or raise ``ClaimError`` naming its holder); the function that releases it."""
    fs, path = filesystem(url)
    parent = path.rstrip("/").rsplit("/", 1)[0]
    try:
        fs.makedirs(parent, exist_ok=True)
    except OSError as exc:
        raise OutputError(
            f"cannot create the lock of {what} {folder}: {describe_os_error(exc, exc.filename or parent)}"
        ) from exc
    if is_local(fs):
        return _acquire_local(path, what, folder)
    for _ in range(3):  # a takeover races at most a couple of times before one command wins
        me = _Holder.me()
        if _create(fs, path, me.to_bytes()):
            return lambda: _release(fs, path, me)
        holder = _holder_of(fs, path)
        if holder is None:
            # a lock file that is not a whole lock: a writer without conditional writes is between its check
            # and its write, or a torn file of a crash; the second look decides
            time.sleep(0.05)
            holder = _holder_of(fs, path)
        alive = None if holder is None else holder.alive()
        if holder is not None and alive is not False:
            where = "" if alive else f"; if that command is gone, remove {url}"
            raise ClaimError(
                f"{what} {folder} is in use by another zephyr command: {holder.describe()}; wait for it to "
                f"finish{where}"
            )
        _take_over(what, folder, holder, url)
        fs.invalidate_cache(path)
        with contextlib.suppress(FileNotFoundError):
            if _Holder.parse(fs.cat_file(path)) == holder:  # still the lock read: not a winner's new one
                fs.rm(path)
    raise ClaimError(f"{what} {folder}: could not take its lock {url} (other commands kept taking it over)")


def _acquire_local(path: str, what: str, folder: str) -> Callable[[], None]:
    """An exclusive ``flock(2)`` on the local lock file ``path``, which then names this process. The kernel
    drops the lock when its process ends, however it ends: a lock file nobody holds is a dead command's, and
    taken over."""
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0), 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _Holder.parse(os.pread(fd, 1 << 16, 0))
            os.close(fd)
            who = holder.describe() if holder is not None else "one that is starting"
            raise ClaimError(
                f"{what} {folder} is in use by another zephyr command: {who}; wait for it to finish"
            ) from None
        if _same_file(fd, path):  # else its last holder removed it between our open and our lock
            break
        os.close(fd)
    stale = os.pread(fd, 1 << 16, 0)
    if stale:
        _take_over(what, folder, _Holder.parse(stale), path)
    os.ftruncate(fd, 0)
    os.pwrite(fd, _Holder.me().to_bytes(), 0)

    def release() -> None:
        if _same_file(fd, path):
            os.unlink(path)  # while still locked: the next command creates and locks a new file
        else:
            log.warning("%s: the lock was removed or replaced while this command ran", path)
        os.close(fd)

    return release


def _same_file(fd: int, path: str) -> bool:
    try:
        return os.path.samestat(os.fstat(fd), os.stat(path, follow_symlinks=False))
    except FileNotFoundError:
        return False


def _take_over(what: str, folder: str, holder: _Holder | None, url: str) -> None:
    who = "an unreadable lock file" if holder is None else holder.describe()
    log.warning("%s %s: taking over the lock of %s, whose process is gone (%s)", what, folder, who, url)


def _holder_of(fs: Any, path: str) -> _Holder | None:
    """The holder named by the lock file ``path``; None when there is none (or it is not a lock)."""
    fs.invalidate_cache(path)
    try:
        return _Holder.parse(fs.cat_file(path))
    except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
        return None


def _create(fs: Any, path: str, data: bytes) -> bool:
    """Create the object ``path`` holding ``data`` unless it exists (``mode="create"``: a conditional write
    where the store has one, fsspec's check-then-write elsewhere); whether this call created it."""
    try:
        fs.pipe_file(path, data, mode="create")
        return True
    except FileExistsError:
        return False


def _release(fs: Any, path: str, me: _Holder) -> None:
    """Remove the lock ``path`` if it is still the one this process wrote (a takeover is left alone)."""
    try:
        fs.invalidate_cache(path)
        if _Holder.parse(fs.cat_file(path)) == me:
            fs.rm(path)
        else:
            log.warning("%s: the lock is no longer this command's; left as it is", path)
    except FileNotFoundError:
        log.warning("%s: the lock was removed while this command ran", path)
    except OSError as exc:  # releasing must not turn a finished run into a failure
        log.warning("%s: could not remove the lock (%s); remove it by hand", path, exc)


# -- publishing ------------------------------------------------------------------------------------------------

_RENAME_EXCHANGE = 2
_AT_FDCWD = -100
_Plan = list[list[tuple[str, str]]]
"""Per task, the (source URL, published name) of each of its files."""


def publish(
    directory: str, markers: Sequence[dict], marker_paths: Sequence[str], fmt: str, compression: str | None
) -> list[str]:
    """Publish the files of ``markers`` (one per task, in task order) into ``directory`` as ``part-00000``,
    ``part-00001``, ... (see the module docstring); return the published files, named in the form the tasks
    name theirs (a plain path for local files, a URL otherwise)."""
    from zephyr.io.sinks import output_name

    plan: _Plan = []
    for marker in markers:
        files = marker.get("files", [])
        done = sum(map(len, plan))
        plan.append([(url, output_name(done + i, fmt, compression)) for i, url in enumerate(files)])
    return _publish(directory, plan, markers, marker_paths)


def publish_folder(built: str, output: str) -> None:
    """Publish the complete folder ``built`` (in ``output``'s staging folder) as ``output``, for writers whose
    files are not engine task outputs (the token shards): the same moves and manifest as ``publish``, with each
    file's checksum read from it (it has no task record)."""
    fs, built_path = filesystem(built)
    built_path = built_path.rstrip("/")
    names = sorted(name[len(built_path) + 1 :] for name in fs.find(built_path))
    _publish(output, [[(public_path(fs, f"{built_path}/{n}"), n) for n in names]], [{}], [None])


def _rewrite_markers(
    prefix: str, plan: _Plan, markers: Sequence[dict], marker_paths: Sequence[str | None]
) -> list[str]:
    """Each task's marker with its files' published names, and their recorded size and checksum under those
    names (the bytes did not change, only their name: a resume checks them there)."""
    published = []
    for pairs, marker, marker_path in zip(plan, markers, marker_paths, strict=True):
        names = [f"{prefix}/{name}" for _, name in pairs]
        published.extend(names)
        if marker_path is not None and names != marker.get("files", []):
            checksums = dict(marker.get("checksums") or {})
            for (url, _), name in zip(pairs, names, strict=True):
                if url in checksums:
                    checksums[name] = checksums.pop(url)
            write_json_atomic(marker_path, {**marker, "files": names, "checksums": checksums})
    return published


def _record(url: str, marker: dict, now_at: str) -> dict:
    """The checksum record of the file ``url`` as its task recorded it while writing it (``zephyr.io.checksum``),
    read from the file (now at ``now_at``) only when there is none."""
    record = (marker.get("checksums") or {}).get(url)
    return record if isinstance(record, dict) and "bytes" in record else file_record(now_at)


def _publish(
    directory: str, plan: _Plan, markers: Sequence[dict], marker_paths: Sequence[str | None]
) -> list[str]:
    fs, root = filesystem(directory)
    staging = filesystem(layout.staging_dir(directory))[1]
    if is_local(fs) and _same_device(staging, root):
        return _publish_swapped(directory, staging, plan, markers, marker_paths)
    if is_local(fs):
        log.warning(
            "%s: its sidecar is on another filesystem; publishing part by part, not in one swap", root
        )
    root = root.rstrip("/")
    prefix = directory.rstrip("/")
    write_pending(
        directory, {name: _record(url, m, url) for pairs, m in zip(plan, markers) for url, name in pairs}
    )
    with contextlib.suppress(FileNotFoundError):
        fs.rm(filesystem(layout.manifest_path(directory))[1])
    files = {}
    for pairs, marker in zip(plan, markers, strict=True):
        for url, name in pairs:
            source, target = filesystem(url)[1], f"{root}/{name}"
            if source != target:
                fs.makedirs(posixpath.dirname(target), exist_ok=True)  # a built folder may nest its files
                fs.mv(source, target)  # task order: part-k comes from task i >= k, never one still to move
            files[name] = _record(url, marker, f"{prefix}/{name}")
    published = _rewrite_markers(prefix, plan, markers, marker_paths)
    keep = {name for pairs in plan for _, name in pairs}
    fs.invalidate_cache(root)
    with contextlib.suppress(FileNotFoundError):  # the previous run's files not named again
        for entry in fs.find(root):
            if entry[len(root) + 1 :] not in keep:
                fs.rm(entry)
    write_manifest(directory, files)  # the claim: last, so a folder without it was never complete
    fs.invalidate_cache(staging)
    if fs.exists(staging):
        fs.rm(staging, recursive=True)
    return published


def _same_device(staging: str, root: str) -> bool:
    """Whether the staging folder and the output ``root`` are on one filesystem (a rename between them works;
    the output is a mount or a link to another disk when not)."""
    os.makedirs(staging, exist_ok=True)
    parent = os.path.dirname(os.path.realpath(root)) or "."
    while not os.path.exists(parent):
        parent = os.path.dirname(parent)
    return os.stat(staging).st_dev == os.stat(parent).st_dev


def _publish_swapped(
    directory: str, staging: str, plan: _Plan, markers: Sequence[dict], marker_paths: Sequence[str | None]
) -> list[str]:
    """A local output: the complete new content is built in the ``staging`` folder, then swapped with ``OUT``."""
    root = os.path.realpath(filesystem(directory)[1])  # swap the folder a link names, not the link
    new = os.path.join(staging, f"publish-{uuid.uuid4().hex[:12]}")
    os.makedirs(new)  # even for no file: the empty folder is the new content
    files = {}
    try:
        for pairs, marker in zip(plan, markers, strict=True):
            for url, name in pairs:
                source, target = filesystem(url)[1], os.path.join(new, name)
                os.makedirs(os.path.dirname(target), exist_ok=True)  # a built folder may nest its files
                if source.startswith(staging.rstrip("/") + "/"):
                    os.replace(source, target)
                else:  # a resumed task's part, published by an earlier run of this plan: it stays there
                    try:
                        os.link(source, target)
                    except OSError:
                        shutil.copy2(source, target)
                files[name] = _record(url, marker, target)
        write_pending(directory, files)
        with contextlib.suppress(FileNotFoundError):
            os.remove(filesystem(layout.manifest_path(directory))[1])
        _swap(new, root)
    except BaseException:
        shutil.rmtree(new, ignore_errors=True)  # staged parts moved into it rerun; OUT is untouched
        raise
    published = _rewrite_markers(directory.rstrip("/"), plan, markers, marker_paths)
    write_manifest(directory, files)
    shutil.rmtree(staging, ignore_errors=True)  # the old content (now at ``new``), and any aborted attempt's
    return published


def exchange(a: str, b: str) -> bool:
    """Swap the two existing paths ``a`` and ``b`` atomically (``renameat2(RENAME_EXCHANGE)``); False where
    the system or the filesystem has no such call, so the caller falls back to two renames."""
    try:
        renameat2 = ctypes.CDLL(None, use_errno=True).renameat2
    except (OSError, AttributeError):
        return False
    renameat2.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    if renameat2(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) == 0:
        return True
    code = ctypes.get_errno()
    if code in (errno.ENOSYS, errno.EINVAL, errno.ENOTSUP, errno.EOPNOTSUPP):
        return False
    raise OSError(code, os.strerror(code), b)


def _swap(new: str, root: str) -> None:
    """Make the complete folder ``new`` the content of ``root``; the old content ends up at ``new``."""
    if not os.path.lexists(root):
        os.makedirs(os.path.dirname(root) or ".", exist_ok=True)
        os.rename(new, root)
        os.makedirs(new)  # the caller removes the staging folder with whatever is at ``new``
    elif not exchange(new, root):
        aside = f"{new}-old"
        os.rename(root, aside)  # from here until the next rename, ``root`` is missing (no exchange call here)
        os.rename(new, root)
        os.rename(aside, new)


def check_side_dir(side: str, output: str, option: str) -> None:
    """Refuse a folder for rows set aside (``--dropped-output``) that is the output, lies inside it (the
    output holds its data only, and is replaced whole when it is published) or contains it; then check that
    it can be written (``check_output_dir``), before any work."""
    relation = _relation(path_key(side), path_key(output))
    if relation is not None:
        raise ConfigError(
            f"{option} {side!r} {relation} the output {output!r}: the set-aside rows would mix with the kept "
            f"ones; pick a folder outside it (the default is {layout.dropped_dir(output)})"
        )
    check_output_dir(side)


def prune_quarantine(root: str, jobs: Sequence[dict]) -> None:
    """Remove the ``stage-<fp16>`` folders under a command's quarantine folder ``root`` that none of its
    ``jobs`` (``Job.write_stats()`` of each, from ``zephyr.job_stats.recording``) ran: rows an earlier run of
    another plan set aside, which readers of ``root`` would otherwise take for this run's."""
    keep = {f"stage-{stage['fingerprint']}" for job in jobs for stage in job.get("stages", [])}
    fs, root_path = fsspec.core.url_to_fs(root)
    fs.invalidate_cache(root_path)
    try:
        entries = fs.ls(root_path, detail=False)
    except FileNotFoundError:
        return
    for entry in entries:
        name = entry.rstrip("/").rsplit("/", 1)[-1]
        if name.startswith("stage-") and name not in keep:
            fs.rm(entry, recursive=True)
