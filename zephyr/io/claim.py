"""Outputs are claimed, not clobbered: what a command checks before it writes a folder, and the manifest that
says a finished zephyr run wrote it.

Before any work, for each folder a command writes (``--output``, ``--dropped-output``, ``Dataset.write_*``'s
directory; ``claimed``):

1. **Not an input.** The output (and its sidecar ``OUT.zephyr``, ``zephyr.io.layout``) may not equal, contain
   or lie inside any input: ``zephyr dedup exact c3/ --output c3/`` would publish the deduplicated part beside
   the original file, and reading ``c3/`` would give every duplicate back. Paths are compared after resolving
   symlinks (local) and URLs (``fsspec``); a glob counts as the paths it matches.
2. **Locked.** ``OUT.zephyr/lock.json`` is taken for the whole run (``zephyr.io.lock``): a second command on the
   same output is refused naming the first.
3. **Zephyr's own files only.** Under the lock, every file in ``OUT`` must be named in
   ``OUT.zephyr/manifest.json`` (``foreign_files``): a folder holding anything else (a stale part, the user's
   own data, an older layout) is refused naming one such file, unless ``overwrite=True`` (``--overwrite``),
   which replaces the folder's content. An empty or missing folder is fine. A listed part whose bytes changed
   is not refused: it is zephyr's, and a resume recomputes it (its task's checksum no longer matches).

The manifest (``MANIFEST_VERSION`` 1)::

    {"version": 1, "command": "zephyr sort data/ --by url --output sorted/", "finished": 1767000000.0,
     "host": "node-3", "files": [{"name": "part-00000.parquet", "size_bytes": 1234, "xxh3_128": "..."}]}

It is written last, when a run has published in full (``zephyr.io.publish``), so its presence is the claim "a
finished zephyr run wrote OUT". Sizes and checksums are those each task recorded while writing the file
(xxh3-128, ``zephyr.io.checksum``): nothing is read back. A file without such a record (a token-shard set
built by its own writer) is hashed once locally, or named with its store's ETag (``etag``) on object stores.
Before publishing, the run
writes ``OUT.zephyr/staging/manifest.json`` (``PENDING``): the files of both the old and the new content, so a
crash in the middle of a publish never leaves files the next run would refuse as foreign; a claim that finds
OUT matching the pending list exactly promotes it.

Claims nest within a process: a command claims its output once (``zephyr.cli.main``) and the engine jobs that
write into it (``zephyr.job.run_write``) find it claimed and skip the checks.
"""

from __future__ import annotations

import contextlib
import glob as globlib
import json
import logging
import os
import posixpath
import socket
import threading
import time
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from zephyr.errors import ClaimError
from zephyr.io import layout, lock
from zephyr.io.checksum import ALGORITHM, file_checksum
from zephyr.io.paths import check_output_dir, filesystem, is_local, path_key

log = logging.getLogger(__name__)

MANIFEST_VERSION = 1
PENDING = "manifest.json"
"""The pending manifest's name inside ``OUT.zephyr/staging/``."""

_REWRITTEN = ("quarantine", "dropped", "staging", "unreadable")
"""Sidecar folders a run rewrites: an input inside one of them would be replaced while it is read."""

_CLAIMED: dict[str, bool] = {}
"""Outputs this process has claimed: key (``path_key``) → whether the claim replaces foreign files."""
_CLAIMED_LOCK = threading.Lock()


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
            matches = globlib.glob(path, recursive=True) if is_local(fs) else fs.glob(path)
            keys.extend((text, path_key(fs.unstrip_protocol(m) if not is_local(fs) else m)) for m in matches)
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
def file_entry(url: str) -> dict[str, Any]:
    """A manifest entry for the published file ``url``: name, size and checksum (see the module docstring)."""
    fs, path = filesystem(url)
    name = path.rstrip("/").rsplit("/", 1)[-1]
    if is_local(fs):
        size, digest = file_checksum(path)
        return {"name": name, "size_bytes": size, ALGORITHM: digest}
    info = fs.info(path)
    etag = info.get("ETag") or info.get("etag") or info.get("md5Hash") or info.get("generation")
    return {
        "name": name,
        "size_bytes": int(info.get("size") or 0),
        "etag": str(etag).strip('"') if etag else None,
    }


def read_manifest(url: str) -> dict[str, Any] | None:
    """The manifest at ``url`` (a ``manifest.json``), or None when missing or not one."""
    fs, path = filesystem(url)
    try:
        data = json.loads(fs.cat_file(path))
    except (FileNotFoundError, NotADirectoryError, ValueError):
        return None
    return data if isinstance(data, dict) and isinstance(data.get("files"), list) else None


def _manifest_entries(output: str) -> dict[str, set[int]]:
    """Name (relative to ``output``) → sizes zephyr published under it, by the manifest and a pending one."""
    listed: dict[str, set[int]] = {}
    for url in (layout.manifest_path(output), posixpath.join(layout.staging_dir(output), PENDING)):
        manifest = read_manifest(url)
        for entry in (manifest or {}).get("files", []):
            if isinstance(entry, dict) and "name" in entry:
                listed.setdefault(str(entry["name"]), set()).add(int(entry.get("size_bytes", -1)))
    return listed


def _manifest(entries: Sequence[dict[str, Any]]) -> dict[str, Any]:
    return {
        "version": MANIFEST_VERSION,
        "command": lock.command_line(),
        "finished": time.time(),
        "host": socket.gethostname(),
        "files": list(entries),
    }


def write_manifest(output: str, entries: Sequence[dict[str, Any]]) -> None:
    """Write ``OUT.zephyr/manifest.json`` listing ``entries`` (``file_entry``): the last write of a publish."""
    from zephyr.io.paths import write_json_atomic

    write_json_atomic(layout.manifest_path(output), _manifest(entries))


def write_pending(output: str, entries: Sequence[dict[str, Any]]) -> None:
    """Before a publish touches ``output``: the pending manifest, the old manifest's files and ``entries``."""
    from zephyr.io.paths import write_json_atomic

    old = (read_manifest(layout.manifest_path(output)) or {}).get("files", [])
    write_json_atomic(posixpath.join(layout.staging_dir(output), PENDING), _manifest([*old, *entries]))


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
    """Files in ``output`` under names no zephyr manifest lists: what a claim refuses to replace. A listed
    name whose bytes changed is zephyr's part, damaged: a resume checks it against its task's checksum and
    recomputes it (``zephyr.resume.check_files``), so it is not refused here."""
    present = _listing(output)
    if not present:
        return []
    listed = _manifest_entries(output)
    return sorted(name for name in present if name not in listed)


def _promote_pending(output: str) -> None:
    """A publish that swapped its folder in but died before writing its manifest left the pending one, whose
    new files are exactly what ``output`` holds: write the manifest it would have written."""
    pending = read_manifest(posixpath.join(layout.staging_dir(output), PENDING))
    if pending is None:
        return
    present = _listing(output)
    entries = {}
    for entry in pending["files"]:
        if present.get(entry.get("name")) == entry.get("size_bytes"):
            entries[entry["name"]] = entry  # the later (new) entry of a name wins
    if present and set(entries) == set(present):
        log.info("%s: the last run published in full; writing the manifest it did not finish", output)
        write_manifest(output, [entries[name] for name in sorted(entries)])


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
    counts itself in."""
    key = path_key(output)
    with _CLAIMED_LOCK:
        nested = key in _CLAIMED
    if nested:
        with lock.held(layout.lock_path(output), flag, output):
            yield
        return
    check_not_inputs(output, inputs, flag=flag)
    if work_dir is not None:
        relation = _relation(path_key(work_dir), key)
        if relation in ("is", "lies inside"):
            raise ClaimError(
                f"the work dir {work_dir} {relation} {flag} {output}, which holds its data only (and is replaced "
                "when the run publishes); choose a work dir outside the output"
            )
    if _blocked(output):  # a file in the way: one line, before the sidecar (``/dev/full.zephyr``) is made
        check_output_dir(output)
    with lock.held(layout.lock_path(output), flag, output):
        check_output_dir(output)  # a read-only place: one line now, not in every task
        _promote_pending(output)
        if not overwrite:
            foreign = foreign_files(output)
            if foreign:
                more = f" and {len(foreign) - 1} more" if len(foreign) > 1 else ""
                raise ClaimError(
                    f"{flag} {output} holds files zephyr did not write ({foreign[0]}{more}); pass "
                    "overwrite=True to replace its content, or choose another output folder"
                )
        with _CLAIMED_LOCK:
            _CLAIMED[key] = overwrite
        try:
            yield
        finally:
            with _CLAIMED_LOCK:
                _CLAIMED.pop(key, None)
