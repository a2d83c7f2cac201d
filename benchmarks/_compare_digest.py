"""Output digests for ``revision_compare.py``: a sha256 per output file, which files are not compared by
content and why, and the comparison of two revisions' digests.

A run's digest maps each file's path relative to the run folder (POSIX separators) to its sha256. A file that
legitimately differs between two identical runs (it holds durations, dates or absolute paths) matches a pattern
in ``IGNORED``: its digest is the word ``ignored``, so the file must still exist on both sides (a layout
change shows) but its bytes are not compared. A JSON file matching ``STRIPPED`` is compared without the keys
that hold times. The command's standard output is one more entry, ``<stdout>``.
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


IGNORED = (
    Ignored("*_stats.json", "job stats (_stats.json, _dedup_stats.json, ...): seconds per job and stage"),
    Ignored("*/stats.json", "`zephyr run`'s stats: seconds per step, start and end times"),
    Ignored("*/report.html", "`zephyr run`'s report: wall times and dates (and its time plot, embedded)"),
    Ignored("*/report.md", "`zephyr run`'s Markdown report: the same wall times and dates"),
    Ignored("*/plots/time.png", "`zephyr run`'s plot of the seconds per step"),
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
        relative = path.relative_to(root).as_posix()
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
