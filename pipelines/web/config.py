"""Pipeline step configs of the web package (registered in ``zephyr.pipelines.config.STEP_TYPES``).

``extract`` starts a pipeline from WARC/ARC files, as ``read`` starts one from Parquet/JSONL::

    steps:
      - step: extract
        paths: ["${ZEPHYR_WARC}"]
        extractor: resiliparse      # or trafilatura
      - step: url_filter
        blocklist: blocklist.txt    # optional; one domain per line
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from zephyr.dedup.config import SubstringConfig

from zephyr.config import FieldError, embedded_field, path_field, require_at_least

__all__ = ["ExtractStep", "UrlFilterStep", "UrlDedupStep", "SubstringDedupStep"]


@dataclass(frozen=True)
class ExtractStep:
    """Read WARC/ARC files and extract each HTML page's main text (``zephyr extract``); a first step."""

    paths: list[str] = path_field([], required=True)
    """WARC/ARC files (``.warc``, ``.warc.gz``, ``.arc``, ``.arc.gz``), folders or globs."""
    extractor: Literal["resiliparse", "trafilatura"] = "resiliparse"
    """HTML → text: resiliparse (fast, the default) or trafilatura (datatrove's choice)."""
    min_text_chars: int = 1
    """Pages with less extracted text are dropped (``extract_no_text``)."""
    source: str = "web"
    """The source column's value for every row (per-source retention in the report)."""
    on_error: Literal["raise", "quarantine"] = "quarantine"
    """Bad records (truncated gzip member, wrong Content-Length, non-HTML, undecodable charset): set aside
    in the quarantine with their byte offset (default), or fail the step on the first."""
    num_shards: int | None = None
    """Redistribute rows round-robin into this many shards; ``None`` keeps one shard per WARC file."""

    def __post_init__(self) -> None:
        if not self.paths:
            raise FieldError("paths", "give at least one WARC file, folder or glob")
        require_at_least("min_text_chars", self.min_text_chars, 0)
        require_at_least("num_shards", self.num_shards, 1)


@dataclass(frozen=True)
class UrlFilterStep:
    """Normalize the url column, add ``domain`` (registered domain), and drop rows with an unusable URL or a
    blocked domain/host (``zephyr filter --rules url``; reasons ``url_invalid``, ``url_blocked_domain``,
    ``url_blocked_subdomain``)."""

    blocklist: str | None = path_field(None)
    """A file of blocked domains and hosts, one per line (``pipelines/web/data/blocklist.example.txt``);
    ``None``: only unusable URLs are dropped."""
    url_column: str = "url"
    """The column holding each document's URL."""


@dataclass(frozen=True)
class UrlDedupStep:
    """Keep one document per normalized URL (``zephyr dedup url``; the keep rule of exact dedup)."""

    url_column: str = "url"
    """The column holding each document's URL."""
    priority_column: str | None = None
    """Keep the row with the largest value of this column per URL (ties: smallest id)."""


@dataclass(frozen=True)
class SubstringDedupStep:
    """Remove repeats of byte spans of at least ``min_bytes`` after their first occurrence in corpus order
    (``zephyr dedup substring``): boilerplate, navigation and footers shared across pages. ``min_bytes``,
    ``min_doc_bytes`` and ``anchor_bytes`` are ``zephyr.dedup.config.SubstringConfig``'s, documented there."""

    substring: SubstringConfig = embedded_field(
        SubstringConfig, keys=("min_bytes", "min_doc_bytes", "anchor_bytes")
    )
