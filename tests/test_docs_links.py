"""Every relative link in the Markdown pages resolves: the file it names exists and so does its ``#anchor``.

benchmarks/RESULTS.md links each current figure to its section of the month's notebook
(benchmarks/history/<YYYY-MM>.md) by anchor; a renamed heading or a moved file would leave the reader at the
top of a 2,600-line page. Anchors are GitHub's: the heading lower-cased, every character that is not a letter,
digit, mark, space, ``-`` or ``_`` dropped, spaces turned into ``-``, and a repeated anchor suffixed ``-1``,
``-2``... in page order.
"""

from __future__ import annotations

import functools
import re
import unicodedata
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGES = sorted(
    [
        ROOT / "README.md",
        *(ROOT / "docs").glob("*.md"),
        *(ROOT / "benchmarks").glob("*.md"),
        *(ROOT / "benchmarks" / "history").glob("*.md"),
    ]
)
INLINE = re.compile(r"(?<!!)\[(?:[^\]\[]|\[[^\]]*\])*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
REFERENCE_USE = re.compile(r"\]\[([^\]]+)\]")
REFERENCE_DEF = re.compile(r"^\s{0,3}\[([^\]]+)\]:\s*(\S+)", re.M)


def slug(heading: str) -> str:
    """GitHub's anchor of a heading's text (before duplicate suffixes)."""
    text = re.sub(r"[`*]", "", heading).strip().lower()
    kept = "".join(c for c in text if c in "-_ " or unicodedata.category(c)[0] in "LNM")
    return kept.replace(" ", "-")


def _unfenced(text: str) -> list[str]:
    """The page's lines, those inside fenced code blocks blanked."""
    lines, fenced = [], False
    for line in text.split("\n"):
        if line.lstrip().startswith("```"):
            fenced = not fenced
            lines.append("")
            continue
        lines.append("" if fenced else line)
    return lines


def _prose(text: str) -> str:
    """The page outside code: fenced blocks and inline code spans blanked (a link there is not a link)."""
    return "\n".join(re.sub(r"`[^`]*`", "``", line) for line in _unfenced(text))


def anchors(text: str) -> set[str]:
    """Every heading anchor of a page, with GitHub's ``-N`` suffixes for repeated headings."""
    seen: dict[str, int] = {}
    found = set()
    for line in _unfenced(text):
        match = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if not match:
            continue
        base = slug(match.group(1))
        count = seen.get(base, 0)
        seen[base] = count + 1
        found.add(base if count == 0 else f"{base}-{count}")
    return found


@functools.cache
def _anchors_of(path: Path) -> frozenset[str]:
    return frozenset(anchors(path.read_text(encoding="utf-8")))


def broken_links(page: Path) -> list[str]:
    """The links of ``page`` that do not resolve, each as ``target (why)``."""
    text = page.read_text(encoding="utf-8")
    prose = _prose(text)
    definitions = {label.lower(): target for label, target in REFERENCE_DEF.findall(prose)}
    targets = INLINE.findall(prose) + list(definitions.values())
    problems = [
        f"[{label}] (no definition)"
        for label in REFERENCE_USE.findall(prose)
        if label.lower() not in definitions
    ]
    for target in targets:
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
            continue
        path_part, _, anchor = target.partition("#")
        resolved = (page.parent / path_part).resolve() if path_part else page
        if not resolved.exists():
            problems.append(f"{target} (no such file)")
        elif (
            anchor
            and resolved.suffix == ".md"
            and anchor not in anchors(resolved.read_text(encoding="utf-8"))
        ):
            problems.append(f"{target} (no such heading)")
    return problems


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(page: Path) -> None:
    assert not broken_links(page), f"{page.relative_to(ROOT)}: {broken_links(page)}"


def test_results_links_every_row_to_the_notebook() -> None:
    """Each table row of RESULTS.md names its notebook section, and every one of those links resolves."""
    text = (ROOT / "benchmarks" / "RESULTS.md").read_text(encoding="utf-8")
    rows = [
        line
        for line in text.split("\n")
        if line.startswith("| ") and not line.startswith("| what ") and not line.startswith("|---")
    ]
    assert len(rows) >= 30
    assert all(re.search(r"\]\[[^\]]+\]", row) for row in rows), [r for r in rows if "][" not in r]
    assert "history/" in text


def test_anchor_rules_follow_github() -> None:
    text = "\n".join(
        [
            "# Tokenization throughput — 2026-11-28, vm (2 cores, 24 GiB)",
            "## Tokenization throughput — 2026-11-28, vm (2 cores, 24 GiB)",
            "```",
            "# not a heading",
            "```",
            "### --dropped-output: what `routing` costs (benchmarks/dropped_output.py)",
            "#### ×/doubling ≥ 1.2",
        ]
    )
    assert anchors(text) == {
        "tokenization-throughput--2026-11-28-vm-2-cores-24-gib",
        "tokenization-throughput--2026-11-28-vm-2-cores-24-gib-1",
        "--dropped-output-what-routing-costs-benchmarksdropped_outputpy",
        "doubling--12",
    }


def test_a_broken_anchor_is_reported(tmp_path: Path) -> None:
    (tmp_path / "notes.md").write_text("# Runs\n\n## Sort — 2026-11-22\n", encoding="utf-8")
    page = tmp_path / "page.md"
    page.write_text(
        "[ok](notes.md#sort--2026-11-22) [gone](notes.md#sort--2026-11-23) [x][sort] [y][missing]\n\n"
        "[sort]: notes.md#runs\n[nowhere]: other.md\n",
        encoding="utf-8",
    )
    assert sorted(broken_links(page)) == [
        "[missing] (no definition)",
        "notes.md#sort--2026-11-23 (no such heading)",
        "other.md (no such file)",
    ]
