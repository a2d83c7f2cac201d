"""Publishing a write: the output folder gets dense part names, nothing else, and changes only when complete.

Contract of a folder written by ``Dataset.write_*`` (``zephyr.job.run_write``; layout: ``zephyr.io.layout``):

- its files are ``part-00000.<ext>``, ``part-00001.<ext>``, ... with no gap, in task (shard) order; a task that
  keeps no row writes no file, and the names close up over it. Nothing else is in it, so pyarrow, polars,
  duckdb (``OUT/**/*.parquet``) and HF ``datasets`` read it as exactly the written rows;
- the content a finished run published stays readable until the new run has published in full.

How, on a local disk. Tasks write ``OUT.zephyr/staging/part-<task index>.<ext>`` (``SinkOutput.staging``). After
the last task, ``publish`` builds the complete new folder ``OUT.zephyr/staging/publish-<id>/``: staged parts
are renamed into it, in task order, under their dense names; parts of tasks resumed from a previous publish
(their markers name ``OUT/part-k``) are hard-linked (copied where links are refused). It writes the pending
manifest (``zephyr.io.claim.write_pending``), swaps the new folder with ``OUT`` in one ``renameat2(2)`` call with
``RENAME_EXCHANGE`` (Linux 3.15+; elsewhere, or where the filesystem refuses it, two renames, between which
``OUT`` is briefly missing), rewrites each task's marker with its published name and its recorded size and
checksum under that name (a rerun with the same ``work_dir`` then finds its finished tasks and checks their
bytes, ``zephyr.resume.check_files``), writes ``OUT.zephyr/manifest.json`` (sizes and checksums taken from the
markers, ``zephyr.io.checksum``: nothing is read back) and removes the old folder. A
crash before the swap leaves ``OUT`` as it was; after it, ``OUT`` is the complete new content, and a marker
still naming a staged file makes its task rerun.

How, on an object store (no rename, no directory swap). ``manifest.json`` is removed first, then each part is
copied to its final name in task order (``fs.mv``; a name of the previous run is overwritten whole: an
object appears complete or not at all), then the previous run's parts not named again are deleted, then
``manifest.json`` is written. During that window a reader of ``OUT`` may see a mix of old and new parts;
a reader that needs a finished run reads ``manifest.json`` and the files it lists.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno as errno_codes
import logging
import os
import shutil
import uuid
from collections.abc import Sequence

import fsspec

from zephyr.errors import ConfigError
from zephyr.io import claim, layout, paths
from zephyr.io.paths import check_output_dir, is_local

log = logging.getLogger(__name__)

_RENAME_EXCHANGE = 2
_AT_FDCWD = -100


def publish(
    directory: str, markers: Sequence[dict], marker_paths: Sequence[str], fmt: str, compression: str | None
) -> list[str]:
    """Publish the files of ``markers`` (one per task, in task order) into ``directory`` as ``part-00000``,
    ``part-00001``, ... (see the module docstring); return the published files, named in the form the tasks
    name theirs (a plain path for local files, a URL otherwise)."""
    fs, root = fsspec.core.url_to_fs(directory)
    if is_local(fs):
        return _publish_local(directory, root.rstrip("/"), markers, marker_paths, fmt, compression)
    return _publish_remote(directory, fs, root.rstrip("/"), markers, marker_paths, fmt, compression)


def _names(markers: Sequence[dict], fmt: str, compression: str | None) -> list[list[tuple[str, str]]]:
    """Per task, (source URL, dense name) of its files."""
    from zephyr.io.sinks import output_name

    out, count = [], 0
    for marker in markers:
        pairs = []
        for url in marker.get("files", []):
            pairs.append((url, output_name(count, fmt, compression)))
            count += 1
        out.append(pairs)
    return out


def _rewrite_markers(
    prefix: str, plan: list[list[tuple[str, str]]], markers: Sequence[dict], marker_paths: Sequence[str]
) -> list[str]:
    """Each task's marker with its files' published names, and their recorded size and checksum under those
    names (the bytes did not change, only their name: a resume checks them there)."""
    published = []
    for pairs, marker, marker_path in zip(plan, markers, marker_paths, strict=True):
        names = [f"{prefix}/{name}" for _, name in pairs]
        published.extend(names)
        if names != marker.get("files", []):
            checksums = dict(marker.get("checksums") or {})
            for (url, _), name in zip(pairs, names, strict=True):
                if url in checksums:
                    checksums[name] = checksums.pop(url)
            paths.write_json_atomic(marker_path, {**marker, "files": names, "checksums": checksums})
    return published


def _entry(url: str, name: str, marker: dict, now_at: str) -> dict:
    """The manifest entry of the file ``url`` published as ``name``: its size and checksum as its task
    recorded them while writing it (``zephyr.io.checksum``), read from the file (now at ``now_at``) only when
    there is no record."""
    record = (marker.get("checksums") or {}).get(url)
    if isinstance(record, dict) and "bytes" in record:
        digests = {k: v for k, v in record.items() if k != "bytes"}
        return {"name": name, "size_bytes": int(record["bytes"]), **digests}
    return {**claim.file_entry(now_at), "name": name}


def _publish_local(
    directory: str,
    root: str,
    markers: Sequence[dict],
    marker_paths: Sequence[str],
    fmt: str,
    compression: str | None,
) -> list[str]:
    staging = fsspec.core.url_to_fs(layout.staging_dir(directory))[1]
    if os.path.islink(root):  # swap the folder the link names, not the link
        root = os.path.realpath(root)
    new = os.path.join(staging, f"publish-{uuid.uuid4().hex[:12]}")
    os.makedirs(new)
    plan = _names(markers, fmt, compression)
    entries = []
    try:
        for pairs, marker in zip(plan, markers, strict=True):
            for url, name in pairs:
                source, target = fsspec.core.url_to_fs(url)[1], os.path.join(new, name)
                if source.startswith(staging.rstrip("/") + "/"):
                    os.replace(source, target)
                else:  # a resumed task's part, published by an earlier run of this plan
                    try:
                        os.link(source, target)
                    except OSError:
                        shutil.copy2(source, target)
                entries.append(_entry(url, name, marker, target))
        claim.write_pending(directory, entries)
        _swap(new, root)
    except BaseException:
        shutil.rmtree(new, ignore_errors=True)  # staged parts moved into it rerun; OUT is untouched
        raise
    published = _rewrite_markers(directory.rstrip("/"), plan, markers, marker_paths)
    claim.write_manifest(directory, entries)
    shutil.rmtree(staging, ignore_errors=True)  # the old content (now at ``new``), and any aborted attempt's
    return published


def publish_folder(built: str, output: str) -> None:
    """Publish the complete folder ``built`` (somewhere in ``output``'s sidecar) as ``output``, for writers
    whose files are not engine task outputs (the token shards): the same swap and manifest as ``publish``."""
    fs, root = fsspec.core.url_to_fs(output)
    built_path = fsspec.core.url_to_fs(built)[1].rstrip("/")
    names = sorted(name[len(built_path) + 1 :] for name in fs.find(built_path))
    if is_local(fs):
        root = root.rstrip("/")
        if os.path.islink(root):
            root = os.path.realpath(root)
        entries = [{**claim.file_entry(f"{built_path}/{n}"), "name": n} for n in names]
        claim.write_pending(output, entries)
        _swap(built_path, root)
        claim.write_manifest(output, entries)
        shutil.rmtree(fsspec.core.url_to_fs(layout.staging_dir(output))[1], ignore_errors=True)
        return
    root = root.rstrip("/")
    claim.write_pending(
        output, [{**claim.file_entry(fs.unstrip_protocol(f"{built_path}/{n}")), "name": n} for n in names]
    )
    with contextlib.suppress(FileNotFoundError):
        fs.rm(fsspec.core.url_to_fs(layout.manifest_path(output))[1])
    entries = []
    for name in names:
        fs.mv(f"{built_path}/{name}", f"{root}/{name}")
        entries.append({**claim.file_entry(fs.unstrip_protocol(f"{root}/{name}")), "name": name})
    _finish(fs, root, set(names), output, entries)


def _finish(fs, root: str, keep: set[str], output: str, entries: list[dict]) -> None:
    """The last steps of a publish: remove what the output folder holds beyond ``keep`` (the previous run's
    files), write the manifest (the claim: last, so a folder without it was never complete) and remove the
    staging folder."""
    fs.invalidate_cache(root)
    with contextlib.suppress(FileNotFoundError):
        for entry in fs.find(root):
            if entry[len(root) + 1 :] not in keep:
                fs.rm(entry)
    claim.write_manifest(output, entries)
    staging = fsspec.core.url_to_fs(layout.staging_dir(output))[1]
    fs.invalidate_cache(staging)
    if fs.exists(staging):
        fs.rm(staging, recursive=True)


def exchange(a: str, b: str) -> bool:
    """Swap the two existing paths ``a`` and ``b`` atomically (``renameat2(RENAME_EXCHANGE)``); False where
    the system or the filesystem has no such call, so the caller falls back to two renames."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        renameat2 = libc.renameat2
    except (OSError, AttributeError):
        return False
    renameat2.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    if renameat2(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) == 0:
        return True
    code = ctypes.get_errno()
    if code in (errno_codes.ENOSYS, errno_codes.EINVAL, errno_codes.ENOTSUP, errno_codes.EOPNOTSUPP):
        return False
    raise OSError(code, os.strerror(code), b)


def _swap(new: str, root: str) -> None:
    """Make the complete folder ``new`` the content of ``root``; the old content ends up at ``new``."""
    if not os.path.lexists(root):
        os.makedirs(os.path.dirname(root) or ".", exist_ok=True)
        os.rename(new, root)
        os.makedirs(new)  # the caller removes the staging folder with whatever is at ``new``
        return
    try:
        if exchange(new, root):
            return
    except OSError as exc:
        if exc.errno != errno_codes.EXDEV:
            raise
        _replace_in_place(new, root)
        return
    aside = f"{new}-old"
    os.rename(root, aside)  # from here until the next rename, ``root`` is missing (no exchange call here)
    os.rename(new, root)
    os.rename(aside, new)


def _replace_in_place(new: str, root: str) -> None:
    """The sidecar is on another filesystem than ``root`` (a mount or a link): move the parts one by one."""
    log.warning("%s: its sidecar is on another filesystem; publishing part by part, not in one swap", root)
    old = set(os.listdir(root))
    for name in sorted(os.listdir(new)):
        shutil.move(os.path.join(new, name), os.path.join(root, name))
        old.discard(name)
    for name in old:
        target = os.path.join(root, name)
        shutil.rmtree(target) if os.path.isdir(target) and not os.path.islink(target) else os.unlink(target)


def _publish_remote(
    directory: str,
    fs: fsspec.AbstractFileSystem,
    root: str,
    markers: Sequence[dict],
    marker_paths: Sequence[str],
    fmt: str,
    compression: str | None,
) -> list[str]:
    plan = _names(markers, fmt, compression)
    prefix = directory.rstrip("/")
    staged_entries = [
        _entry(url, name, marker, url) for pairs, marker in zip(plan, markers) for url, name in pairs
    ]
    claim.write_pending(directory, staged_entries)
    manifest = fsspec.core.url_to_fs(layout.manifest_path(directory))[1]
    with contextlib.suppress(FileNotFoundError):
        fs.rm(manifest)
    entries = []
    for pairs, marker in zip(plan, markers, strict=True):
        for url, name in pairs:
            source, target = fsspec.core.url_to_fs(url)[1], f"{root}/{name}"
            if source != target:
                fs.mv(source, target)  # task order: part-k comes from task i >= k, never one still to move
            entries.append(_entry(url, name, marker, f"{prefix}/{name}"))
    _rewrite_markers(prefix, plan, markers, marker_paths)
    _finish(fs, root, {name for pairs in plan for _, name in pairs}, directory, entries)
    return [f"{prefix}/{name}" for pairs in plan for _, name in pairs]


def check_side_dir(side: str, output: str, option: str) -> None:
    """Refuse a folder for rows set aside (``--dropped-output``) that is the output, lies inside it (the
    output holds its data only, and is replaced whole when it is published) or contains it; then check that
    it can be written (``check_output_dir``), before any work."""
    a, b = paths.path_key(side), paths.path_key(output)
    relation = claim._relation(a, b)
    if relation is not None:
        raise ConfigError(
            f"{option} {side!r} {relation} the output {output!r}: the set-aside rows would mix with the kept "
            f"ones; pick a folder outside it (the default is {layout.dropped_dir(output)})"
        )
    check_output_dir(side)


def prune_quarantine(root: str, jobs: Sequence[dict]) -> None:
    """Remove the ``stage-<fp16>`` folders under a command's quarantine folder ``root`` that none of its
    ``jobs`` (``Job.stats()`` of each, from ``zephyr.job_stats.recording``) ran: rows an earlier run of
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
