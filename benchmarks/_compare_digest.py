"""Output digests for ``revision_compare.py``: a sha256 per output file, which files are not compared by
content and why, and the comparison of two revisions' digests.

A run's digest maps each file's path relative to the run folder (POSIX separators) to its sha256. A file that
legitimately differs between two identical runs (it holds durations, dates or absolute paths) matches a pattern
in ``IGNORED``: its digest is the word ``ignored``, so the file must still exist on both sides (a layout
change shows) but its bytes are not compared. A JSON file matching ``STRIPPED`` is compared without the keys
that hold times. The command's standard output is one more entry, ``<stdout>``.

Both revisions' files are named in one layout before they are compared (``canonical``): the sidecar layout of
``zephyr.io.layout`` (``OUT/`` holds the data only, the rest is in ``OUT.zephyr/``). A revision of the older
layout kept the rest inside ``OUT`` under ``_`` names (``OUT/_dedup_stats.json``, ``OUT/_quarantine/``, a step's
``NN-NAME/_work/``), which map onto their sidecar names, so a data file that only changed folders compares by
its bytes. Files that exist in one layout only and hold no data (``LAYOUT_ONLY``: the claim manifest, the old
HF card) are left out.
"""

from __future__ import annotations

import fnmatch
import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "Ignored",
    "IGNORED",
    "Stripped",
    "STRIPPED",
    "STDOUT",
    "LAYOUT_ONLY",
    "canonical",
    "digest_tree",
    "digest_bytes",
    "differing",
    "ignored_pattern",
]

STDOUT = "<stdout>"
"""The digest key of a command's standard output (its data, e.g. ``zephyr count``'s number)."""


@dataclass(frozen=True)
class Ignored:
    pattern: str
    """``fnmatch`` pattern on the path relative to the run folder (``*`` also crosses ``/``)."""
    why: str


LAYOUT_ONLY = (
    Ignored(
        "*.zephyr/manifest.json", "the claim manifest of the sidecar layout: names, sizes, a finish time"
    ),
    Ignored("*.zephyr/lock.json", "a lock a killed run left (none after a finished run)"),
    Ignored("*/.huggingface.yaml", "the HF card the older layout wrote to keep HF off its _ folders"),
)

_KEPT_NAMES = {"_SUCCESS.json", "_STARTED.json"}
"""Sidecar files that keep their ``_`` name in the sidecar layout (``zephyr.resume``'s markers)."""
_RENAMED = {"dedup_stats.json": "stats.json", "quarantine/_unreadable": "unreadable"}


def canonical(relative: str) -> str:
    """``relative`` in the sidecar layout: ``out/_dedup_stats.json`` → ``out.zephyr/stats.json``,
    ``out/_quarantine/_unreadable/x`` → ``out.zephyr/unreadable/x``, ``job/01-f/_work/main/y`` →
    ``job/01-f.zephyr/work/main/y``; a path of the sidecar layout is returned as it is.

    >>> canonical("out/_quarantine/stage-1/task-00000.parquet")
    'out.zephyr/quarantine/stage-1/task-00000.parquet'
    >>> canonical("job/02-f/_SUCCESS.json"), canonical("out.zephyr/stats.json")
    ('job/02-f.zephyr/_SUCCESS.json', 'out.zephyr/stats.json')
    """
    parts = relative.split("/")
    for i, part in enumerate(parts):
        if i and part.startswith("_") and not part.startswith("__") and not parts[i - 1].endswith(".zephyr"):
            rest = "/".join(parts[i:])
            for old, new in _RENAMED.items():
                if rest.startswith("_" + old):
                    rest = new + rest[len(old) + 1 :]
                    break
            else:
                rest = rest if parts[i] in _KEPT_NAMES else rest[1:]
            return "/".join(parts[: i - 1] + [parts[i - 1] + ".zephyr", rest])
    return relative


IGNORED = (
    Ignored(
        "*/stats.json",
        "job stats (stats.json; _stats.json, _dedup_stats.json before): seconds per job and stage",
    ),
    Ignored("out/report.html", "`zephyr run`'s report: wall times and dates (and its time plot, embedded)"),
    Ignored("out/report.md", "`zephyr run`'s Markdown report: the same wall times and dates"),
    Ignored("out/plots/time.png", "`zephyr run`'s plot of the seconds per step"),
)


@dataclass(frozen=True)
class Stripped:
    pattern: str
    keys: tuple[str, ...]
    """Top-level keys of the JSON object left out of the digest; the rest is compared."""
    why: str


STRIPPED = (
    Stripped(
        "*_SUCCESS.json",
        ("finished",),
        "`zephyr run`'s step marker: its plan fingerprint is compared (a changed one makes a resumed run redo "
        "the step), its finish time is not",
    ),
)


def ignored_pattern(relative: str, ignored: tuple[Ignored, ...] = IGNORED) -> str | None:
    """The first pattern of ``ignored`` that ``relative`` matches, else None."""
    for rule in ignored:
        if fnmatch.fnmatch(relative, rule.pattern):
            return rule.pattern
    return None


def digest_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _digest_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _digest_stripped(path: Path, keys: tuple[str, ...]) -> str:
    data = json.loads(path.read_text())
    kept = {k: v for k, v in data.items() if k not in keys} if isinstance(data, dict) else data
    return digest_bytes(json.dumps(kept, sort_keys=True).encode())


def digest_tree(
    root: Path, ignored: tuple[Ignored, ...] = IGNORED, stripped: tuple[Stripped, ...] = STRIPPED
) -> dict[str, str]:
    """Relative path → sha256 of every file under ``root`` (``"ignored"`` for a file matching ``ignored``;
    of the JSON without the ``keys`` of a ``stripped`` rule for a file matching it)."""
    digests = {}
    for path in sorted(p for p in Path(root).rglob("*") if p.is_file()):
        relative = canonical(path.relative_to(root).as_posix())
        if ignored_pattern(relative, LAYOUT_ONLY):
            continue
        strip = next((rule for rule in stripped if fnmatch.fnmatch(relative, rule.pattern)), None)
        if ignored_pattern(relative, ignored):
            digests[relative] = "ignored"
        elif strip is not None:
            digests[relative] = _digest_stripped(path, strip.keys)
        else:
            digests[relative] = _digest_file(path)
    return digests


def differing(base: dict[str, str], head: dict[str, str]) -> list[str]:
    """The paths whose digests differ, sorted; a path on one side only is named with ``(only base)`` or
    ``(only head)``."""
    names = []
    for relative in sorted(set(base) | set(head)):
        if relative not in head:
            names.append(f"{relative} (only base)")
        elif relative not in base:
            names.append(f"{relative} (only head)")
        elif base[relative] != head[relative]:
            names.append(relative)
    return names
