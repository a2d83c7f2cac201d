"""Where zephyr keeps what it writes about an output: the data folder holds data only, the rest lives beside it.

The layout of every folder a command or ``Dataset.write_*`` writes (``OUT``; for ``s3://b/x/out`` the sidecar
is ``s3://b/x/out.zephyr``)::

    OUT/                      the data, nothing else: part-00000.parquet, part-00001.parquet, ...
    OUT.zephyr/               everything zephyr keeps about OUT (``sidecar``)
        manifest.json         written last when a run has published in full: the claim "a finished zephyr run
                              wrote OUT" (``zephyr.io.claim``): each file with its size and checksum, the
                              command, the time
        lock.json             held for the whole run: host, pid, start time, command (``zephyr.io.claim``)
        staging/              parts being written; published by swapping in the complete new folder
                              (``zephyr.io.claim``)
        stats.json            the command's statistics
        quarantine/           rows set aside (bad input; ``zephyr filter``'s quarantined rows)
        dropped/              rows a rule removed, with ``drop_reason`` (``zephyr filter``, ``--dropped-output``
                              elsewhere when asked)
        report.json, report.md, ...   reports, and scratch folders of multi-job commands

Why beside and not inside: every reader people use takes a folder as one dataset only when it holds nothing
else. pyarrow skips ``_`` names, but polars refuses a folder with files of other extensions, HF ``datasets``
reads ``_*.json`` and ``_quarantine/*.parquet`` as data (and fails on their columns), and a duckdb glob
``OUT/**/*.parquet`` adds the dropped and quarantined rows. A sidecar folder needs no reader to skip anything.

Folders zephyr writes inside a sidecar (``OUT.zephyr/dropped``) follow the same rule: their own sidecar is
``OUT.zephyr/dropped.zephyr``. A ``zephyr run`` step folder ``JOB/NN-STEP`` is a data folder like any other:
its record, markers, engine work dirs and side outputs live in ``JOB/NN-STEP.zephyr`` (``zephyr.pipelines.runner``).
"""

from __future__ import annotations

import os
import posixpath

SIDECAR_SUFFIX = ".zephyr"
MANIFEST = "manifest.json"
LOCK = "lock.json"
STATS = "stats.json"


def sidecar(output: str | os.PathLike) -> str:
    """The sidecar folder of the data folder ``output`` (a path or fsspec URL), in the same parent.

    >>> sidecar("out/dedup/")
    'out/dedup.zephyr'
    >>> sidecar("s3://bucket/x/out")
    's3://bucket/x/out.zephyr'
    """
    return str(output).rstrip("/") + SIDECAR_SUFFIX


def side_path(output: str | os.PathLike, *names: str) -> str:
    """A path inside the sidecar of ``output``: ``side_path("out", "report.md")`` is ``out.zephyr/report.md``;
    also a multi-job command's scratch folder, never among the data and gone with the sidecar (or with
    ``remove_folder`` when the command is done)."""
    return posixpath.join(sidecar(output), *names) if names else sidecar(output)


def manifest_path(output: str | os.PathLike) -> str:
    return side_path(output, MANIFEST)


def lock_path(output: str | os.PathLike) -> str:
    return side_path(output, LOCK)


def staging_dir(output: str | os.PathLike) -> str:
    return side_path(output, "staging")


def stats_path(output: str | os.PathLike) -> str:
    return side_path(output, STATS)


def quarantine_dir(output: str | os.PathLike) -> str:
    return side_path(output, "quarantine")


def dropped_dir(output: str | os.PathLike) -> str:
    return side_path(output, "dropped")


def remove_folder(folder: str) -> None:
    """Remove a data folder zephyr wrote and its sidecar (a scratch folder when its command is done)."""
    import contextlib

    from zephyr.io.paths import filesystem

    for path in (folder, sidecar(folder)):
        fs, root = filesystem(path)
        with contextlib.suppress(FileNotFoundError):
            fs.rm(root, recursive=True)
