"""Publishing a write: the output directory gets dense part names and nothing else of ours but ``_`` sidecars.

Contract of a directory written by ``Dataset.write_*`` (``zephyr.job.run_write``):

- its data files are ``part-00000.<ext>``, ``part-00001.<ext>``, ... with no gap, in task (shard) order; a task
  that keeps no row writes no file, and the names close up over it;
- everything else zephyr puts there starts with ``_`` (``_staging/`` while the job runs, a command's
  ``_stats.json``, ``_dropped/``, ``_quarantine/``), which pyarrow, polars, duckdb and
  ``zephyr.io.paths.expand_paths`` skip, so reading the directory gives exactly the written rows;
- HF ``datasets`` skips only names that start with ``.`` or ``__``, and would read ``_quarantine/*.parquet``
  with the parts (and fail on their other columns). So a Parquet or JSON Lines directory also gets
  ``.huggingface.yaml`` (``HF_CONFIG``), the standalone dataset-card YAML that ``load_dataset(DIR)`` reads,
  naming the part files as the data; the other readers skip it as a hidden file.

How. A task writes ``DIR/_staging/part-<task index>.<ext>`` (``SinkOutput(staged=True)``); after the last task,
the driver renames the non-empty ones to their dense names in task order (``publish_dense``) and rewrites each
task's marker with its published name (and its recorded size and checksum under that name), so a rerun with
the same ``work_dir`` finds its finished tasks and checks their bytes.
Renaming in task order never overwrites a file still to be renamed: task ``i`` becomes ``part-k`` with
``k <= i``. A crash between a rename and its marker leaves a marker naming a missing staged file; that task
reruns into ``_staging/`` and is renamed again, so the published bytes and names do not depend on crashes.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence

import fsspec

from zephyr.errors import ConfigError
from zephyr.io import paths
from zephyr.io.paths import check_output_dir, is_local

__all__ = [
    "HF_CONFIG",
    "STAGING_DIR",
    "check_side_dir",
    "prune_quarantine",
    "publish_dense",
    "remove_stale_parts",
    "write_hf_config",
]

STAGING_DIR = "_staging"
"""Where staged sink tasks write inside the output directory; readers skip it (``_`` prefix)."""

HF_CONFIG = ".huggingface.yaml"
"""The dataset-card YAML HF ``datasets`` reads beside a local folder's data: it names the part files."""

_PART_FILE = re.compile(r"^part-\d{5}\.")
_HF_READS = ("parquet", "jsonl")
"""Formats HF ``datasets`` has a builder for (Vortex has none: no config is written)."""


def publish_dense(
    directory: str, markers: Sequence[dict], marker_paths: Sequence[str], fmt: str, compression: str | None
) -> list[str]:
    """Rename the staged files of ``markers`` (one per task, in task order) to ``part-00000``, ``part-00001``,
    ... in ``directory``; return the published files, named in the form the tasks name theirs (a plain path for
    local files, a URL otherwise)."""
    from zephyr.io.sinks import output_name

    fs, root = fsspec.core.url_to_fs(directory)
    root = root.rstrip("/")
    prefix = directory.rstrip("/")
    published: list[str] = []
    for marker, marker_path in zip(markers, marker_paths, strict=True):
        names = []
        checksums = dict(marker.get("checksums") or {})
        for url in marker.get("files", []):
            name = output_name(len(published), fmt, compression)
            source, target = fsspec.core.url_to_fs(url)[1], f"{root}/{name}"
            if source != target:
                if is_local(fs):
                    os.replace(source, target)  # atomic, and replaces a stale file of an older run
                else:
                    fs.mv(source, target)
            names.append(f"{prefix}/{name}")
            published.append(f"{prefix}/{name}")
            if url in checksums:  # the bytes did not change, only their name: a resume checks them there
                checksums[f"{prefix}/{name}"] = checksums.pop(url)
        if names != marker.get("files", []):
            paths.write_json_atomic(marker_path, {**marker, "files": names, "checksums": checksums})
    staging = f"{root}/{STAGING_DIR}"
    fs.invalidate_cache(root)
    if fs.exists(staging):  # every task is published: what is left is an aborted attempt's or another plan's
        fs.rm(staging, recursive=True)
    write_hf_config(directory, fmt, compression)
    return published


def write_hf_config(directory: str, fmt: str, compression: str | None) -> None:
    """Write ``HF_CONFIG`` into ``directory``: ``load_dataset(directory)`` then reads the part files only.

    >>> import tempfile, pathlib
    >>> d = tempfile.mkdtemp()
    >>> write_hf_config(d, "parquet", None)
    >>> "path: part-*.parquet" in (pathlib.Path(d) / HF_CONFIG).read_text()
    True
    """
    from zephyr.io.sinks import output_name

    if fmt not in _HF_READS:
        return
    pattern = "part-*" + output_name(0, fmt, compression).removeprefix("part-00000")
    text = (
        "# Written by zephyr: HF datasets' load_dataset(DIR) reads the part files only; the folders that start\n"
        "# with _ hold rows set aside (dropped, quarantined) and the run's statistics.\n"
        "configs:\n- config_name: default\n  data_files:\n  - split: train\n"
        f"    path: {pattern}\n"
    )
    paths.write_bytes_atomic(f"{directory.rstrip('/')}/{HF_CONFIG}", text.encode())


def remove_stale_parts(directory: str, files: Sequence[str]) -> None:
    """Drop ``part-NNNNN.*`` files a previous run with more parts left behind, so the directory is exact."""
    keep = {fsspec.core.url_to_fs(f)[1].rsplit("/", 1)[-1] for f in files}
    fs, entries = _fresh_listing(directory)
    for entry, name in entries:
        if _PART_FILE.match(name) and ".tmp-" not in name and name not in keep:
            fs.rm(entry)


def _fresh_listing(directory: str) -> tuple[fsspec.AbstractFileSystem, list[tuple[str, str]]]:
    """(filesystem, [(entry, base name)]) of what ``directory`` holds now, none when it does not exist. The
    cached listing is dropped first: workers wrote here, so one this process listed earlier is stale."""
    fs, root = fsspec.core.url_to_fs(directory)
    fs.invalidate_cache(root)
    try:
        entries = fs.ls(root, detail=False)
    except FileNotFoundError:
        return fs, []
    return fs, [(entry, entry.rstrip("/").rsplit("/", 1)[-1]) for entry in entries]


def check_side_dir(side: str, output: str, option: str) -> None:
    """Refuse a directory for rows set aside (``--dropped-output``) that readers of ``output`` would read:
    ``output`` itself or a folder inside it whose name does not start with ``_`` or ``.``; then check that it
    can be written (``check_output_dir``), before any work."""
    _, side_path = fsspec.core.url_to_fs(side)
    _, out_path = fsspec.core.url_to_fs(output)
    side_path, out_path = side_path.rstrip("/"), out_path.rstrip("/")
    if side_path == out_path:
        raise ConfigError(
            f"{option} {side!r} is the output directory: the set-aside rows would mix with the kept ones; "
            "pick another directory"
        )
    if side_path.startswith(out_path + "/"):
        first = side_path[len(out_path) + 1 :].split("/", 1)[0]
        if not first.startswith(("_", ".")):
            raise ConfigError(
                f"{option} {side!r} is inside the output {output!r}, where readers of the output would read "
                f"its rows too; use {out_path}/_{first} or a directory outside the output"
            )
    check_output_dir(side)


def prune_quarantine(root: str, jobs: Sequence[dict]) -> None:
    """Remove the ``stage-<fp16>`` folders under a command's quarantine folder ``root`` that none of its
    ``jobs`` (``Job.stats()`` of each, from ``zephyr.job_stats.recording``) ran: rows an earlier run of
    another plan set aside, which readers of ``root`` would otherwise take for this run's."""
    keep = {f"stage-{stage['fingerprint']}" for job in jobs for stage in job.get("stages", [])}
    fs, entries = _fresh_listing(root)
    for entry, name in entries:
        if name.startswith("stage-") and name not in keep:
            fs.rm(entry, recursive=True)
