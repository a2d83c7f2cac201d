"""Resume: how the engine knows a unit of work is finished, and what a rerun keeps or clears.

A unit is a task (``zephyr.tasks``: its marker ``_done/task-NNNNN.json``) or a folder of work bigger than a job,
such as one ``zephyr run`` pipeline step. Each has a fingerprint (``fingerprint_of`` over what decides its
output: its config and the fingerprints of what it reads), and finished work is known by a marker holding
that fingerprint, written last and atomically (``zephyr.io.paths.write_json_atomic``). Finished means: the
marker is whole, holds the same fingerprint, and every file it names still exists and, where the marker
recorded them, still has the size and checksum it had when written (``check_files``). Anything else reruns.

Markers and records live in folders others may be able to write (a shared work directory, a job folder), so
nothing in them is executed, and a path they name is used only inside the folders its unit owns (``inside``).

A folder unit carries two markers: ``_STARTED.json`` (the fingerprint its files belong to, written before the
work) and ``_SUCCESS.json`` (written after it). ``begin`` clears a folder that belongs to another fingerprint
and keeps an unfinished one of the same fingerprint, so the engine work directories inside it resume their
finished tasks. There is one driver: callers decide *which* unit runs; this module says *how* resume works.
"""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from fsspec.core import url_to_fs

from zephyr.io.paths import is_local, write_json_atomic
from zephyr.plan import fingerprint_of

SUCCESS = "_SUCCESS.json"
"""A folder unit's done marker: ``{"fingerprint": ..., "finished": <unix time>}``."""
STARTED = "_STARTED.json"
"""A folder unit's started marker: ``{"fingerprint": ...}``, the config its files belong to."""


def unit_fingerprint(config: Any, *upstream: str) -> str:
    """The fingerprint of a unit of work: its config (JSON-able; keys sorted, so their order does not matter)
    and the fingerprints of the units it reads.

    >>> unit_fingerprint({"a": 1, "b": 2}, "up") == unit_fingerprint({"b": 2, "a": 1}, "up")
    True
    >>> unit_fingerprint({"a": 1}, "up") == unit_fingerprint({"a": 1}, "other")
    False
    """
    return fingerprint_of("unit", json.dumps(config, sort_keys=True, default=str), *upstream)


def files_fingerprint(paths: Sequence[str]) -> str:
    """The fingerprint of input files: their paths, sizes and version stamps (mtime, or ETag on object stores:
    ``zephyr.io.paths.file_stat``, as the engine's read plans use). New, removed or changed files change it."""
    from zephyr.io.paths import expand_paths, file_stat

    items = [[f, *file_stat(f)] for f in expand_paths(list(paths))]
    return fingerprint_of("files", json.dumps(items))


def read_marker(url: str | Path, fingerprint: str) -> dict[str, Any] | None:
    """The marker at ``url`` if it exists, is whole JSON and holds ``fingerprint``; else None (a torn marker
    or one of another fingerprint is no marker: the unit reruns)."""
    marker = _read_any(str(url))
    return marker if marker is not None and marker.get("fingerprint") == fingerprint else None


def inside(path: str, folders: Iterable[tuple[str, str | None]]) -> bool:
    """Whether ``path`` lies in one of ``folders``: ``(folder, pattern)`` admits a file directly in ``folder``
    whose name matches the regular expression ``pattern``, ``(folder, None)`` any file below it. No ``.`` or
    ``..`` step and no empty one; a local path must stay inside the folder once symbolic links are resolved
    (a link planted in an owned folder does not lead out of it).

    >>> inside("/w/stage/_staging/part-00001.parquet", [("/w/stage/_staging", "part-[0-9]{5}[.]parquet")])
    True
    >>> inside("/w/stage/_staging/../../home/me/data.parquet", [("/w/stage/_staging", None)])
    False
    >>> inside("/home/me/data.parquet", [("/w/stage/_staging", None)])
    False
    """
    fs, stripped = url_to_fs(path)
    for folder, pattern in folders:
        folder_fs, root = url_to_fs(folder)
        root = root.rstrip("/")
        if type(folder_fs) is not type(fs) or not stripped.startswith(root + "/"):
            continue
        steps = stripped[len(root) + 1 :].split("/")
        if any(step in ("", ".", "..") for step in steps):
            continue
        if pattern is not None and (len(steps) > 1 or not re.fullmatch(pattern, steps[0])):
            continue
        if is_local(fs) and not os.path.realpath(stripped).startswith(os.path.realpath(root) + os.sep):
            continue
        return True
    return False


def check_files(records: Mapping[str, Any]) -> str | None:
    """None when every file of ``records`` (path → ``{"bytes": N, "xxh3_128" | "sha256": hex}``, as
    ``zephyr.io.checksum`` makes them) has that size and checksum now; else what differs, naming the file.
    Sizes are compared first (one ``stat`` each), so a truncated or replaced file costs no read; then each
    file is read once to hash it."""
    from zephyr.io.checksum import file_checksum

    sized = []
    for url, record in records.items():
        if not isinstance(record, dict) or not isinstance(record.get("bytes"), int):
            return f"no checksum recorded for {url}"
        algorithm = next((a for a in ("xxh3_128", "sha256") if isinstance(record.get(a), str)), None)
        if algorithm is None:
            return f"no checksum recorded for {url}"
        fs, path = url_to_fs(url)
        fs.invalidate_cache(path)
        try:
            size = fs.size(path)
        except (FileNotFoundError, NotADirectoryError):
            return f"{url} is missing"
        if size != record["bytes"]:
            return f"{url} has {size} bytes, {record['bytes']} were written"
        sized.append((url, algorithm, record[algorithm]))
    for url, algorithm, digest in sized:
        if file_checksum(url, algorithm)[1] != digest:
            return f"{url} does not hold the bytes written (its {algorithm} differs)"
    return None


def is_complete(folder: str | Path, fingerprint: str, files: Iterable[str] | None) -> bool:
    """Whether the folder unit finished with ``fingerprint`` and its ``files`` still exist (asked now: a cached
    object-store listing may predate another process's change; a deleted output means the unit reruns).
    ``files`` None: the caller found no record of what the unit wrote, so it is not complete either."""
    if files is None or read_marker(f"{folder}/{SUCCESS}", fingerprint) is None:
        return False
    for url in files:
        fs, path = url_to_fs(str(url))
        fs.invalidate_cache(path)
        if not fs.exists(path):
            return False
    return True


def begin(folder: str | Path, fingerprint: str, *, fresh: bool = False) -> bool:
    """Claim ``folder`` for a run of the unit ``fingerprint`` (one the caller found not complete) and write its
    started marker. The folder is cleared first when ``fresh`` (a forced rerun), when its started marker names
    another fingerprint (files of another config), or when it holds a done marker (of another fingerprint, or
    whose files are gone); an unfinished folder of the same fingerprint is kept, so its work resumes.
    Returns whether it was cleared."""
    fs, path = url_to_fs(str(folder))
    started = _read_any(f"{folder}/{STARTED}")
    stale = started is not None and started.get("fingerprint") != fingerprint
    cleared = False
    if fs.exists(path) and (fresh or stale or fs.exists(f"{path}/{SUCCESS}")):
        fs.rm(path, recursive=True)
        cleared = True
    fs.makedirs(path, exist_ok=True)
    write_json_atomic(f"{folder}/{STARTED}", {"fingerprint": fingerprint})
    return cleared


def mark_done(folder: str | Path, fingerprint: str) -> None:
    """Write the folder unit's done marker: the last write of the unit, after every file it names."""
    write_json_atomic(f"{folder}/{SUCCESS}", {"fingerprint": fingerprint, "finished": time.time()})


def drop_scratch(work_dir: str | Path) -> None:
    """Remove the engine scratch (task markers, spills, shuffle runs) of each job folder in ``work_dir``, once
    the unit that ran them is done; its ``quarantine`` folder stays (quarantined rows are data)."""
    fs, path = url_to_fs(str(work_dir))
    if not fs.isdir(path):
        return
    for step in fs.ls(path, detail=True):
        if step["type"] != "directory":
            continue
        for entry in fs.ls(step["name"], detail=False):
            if entry.rstrip("/").rsplit("/", 1)[-1] != "quarantine":
                fs.rm(entry, recursive=True)


def _read_any(url: str) -> dict[str, Any] | None:
    """A marker whatever its fingerprint (None when missing or torn)."""
    fs, path = url_to_fs(url)
    try:
        marker = json.loads(fs.cat_file(path))
    except (FileNotFoundError, json.JSONDecodeError, UnicodeDecodeError):
        return None
    return marker if isinstance(marker, dict) else None
