"""Small WARC files for tests and benchmarks (a fixture, outside the library), written with warcio from generated or given HTML.

``sample_pages(n, seed)`` makes HTML pages with boilerplate (navigation, footer) around paragraphs of text;
``write_warc(path, pages, broken=...)`` writes them as per-record-gzip WARC response records (with a
``warcinfo`` and a ``request`` record, as crawlers write), and appends damaged records of the kinds named in
``broken``. Nothing is downloaded: the text comes from a seeded word list.
"""

from __future__ import annotations

import gzip
import io
import random
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

BROKEN_KINDS = (
    "truncated_gzip",
    "content_length_short",
    "content_length_long",
    "non_html",
    "unknown_charset",
    "invalid_bytes",
)
"""Damaged records ``write_warc`` can plant; each is quarantined by ``zephyr.io.warc``."""

_WORDS = [
    "the",
    "of",
    "and",
    "to",
    "in",
    "is",
    "that",
    "it",
    "was",
    "for",
    "on",
    "are",
    "as",
    "with",
    "his",
    "they",
    "at",
    "be",
    "this",
    "from",
    "have",
    "or",
    "by",
    "one",
    "had",
    "not",
    "but",
    "what",
    "all",
    "were",
    "when",
    "we",
    "there",
    "can",
    "an",
    "your",
    "which",
    "their",
    "said",
    "if",
    "do",
    "will",
    "each",
    "about",
    "how",
    "up",
    "out",
    "them",
    "then",
    "she",
    "many",
    "some",
    "so",
    "these",
    "would",
    "other",
    "into",
    "has",
    "more",
    "her",
    "two",
    "like",
    "him",
    "see",
    "time",
    "could",
    "no",
    "make",
    "than",
    "first",
    "been",
    "its",
    "who",
    "now",
    "people",
    "my",
    "made",
    "over",
    "did",
    "down",
    "only",
    "way",
    "find",
    "use",
    "may",
    "water",
    "long",
    "little",
    "very",
    "after",
    "words",
    "called",
    "just",
    "where",
    "most",
    "know",
    "river",
    "garden",
    "market",
    "library",
    "window",
    "engine",
    "harbor",
    "mountain",
    "village",
    "letter",
    "summer",
    "winter",
    "morning",
    "evening",
]


@dataclass(frozen=True)
class Page:
    url: str
    html: str
    """The page; encoded with ``charset`` when written."""
    charset: str = "utf-8"


def _paragraph(rng: random.Random, words: int) -> str:
    text = " ".join(rng.choice(_WORDS) for _ in range(words))
    return text[0].upper() + text[1:] + "."


def sample_pages(n: int, seed: int = 0, *, paragraphs: int = 4, words: int = 60) -> list[Page]:
    """``n`` HTML pages on a few hosts, each with a nav bar, a footer and ``paragraphs`` paragraphs."""
    rng = random.Random(seed)
    hosts = ("www.example.com", "blog.example.org", "news.example.co.uk", "docs.example.net")
    pages = []
    for i in range(n):
        body = "\n".join(f"<p>{_paragraph(rng, words)}</p>" for _ in range(paragraphs))
        html = (
            '<!DOCTYPE html><html><head><meta charset="utf-8"><title>Page {i}</title></head><body>'
            '<nav><a href="/">Home</a> | <a href="/about">About</a> | <a href="/contact">Contact</a></nav>'
            f"<main><article><h1>Article {i}</h1>\n{body}\n</article></main>"
            "<footer>Copyright 2024 Example Ltd. All rights reserved.</footer></body></html>"
        ).replace("{i}", str(i))
        pages.append(Page(f"http://{hosts[i % len(hosts)]}/page/{i}?utm_source=feed#top", html))
    return pages


def _record_bytes(
    url: str, payload: bytes, content_type: str, *, gzip_member: bool, record_type: str = "response"
) -> bytes:
    from warcio.statusandheaders import StatusAndHeaders
    from warcio.warcwriter import WARCWriter

    out = io.BytesIO()
    writer = WARCWriter(out, gzip=gzip_member)
    if record_type == "response":
        http = StatusAndHeaders(
            "200 OK",
            [("Content-Type", content_type), ("Content-Length", str(len(payload)))],
            protocol="HTTP/1.1",
        )
        record = writer.create_warc_record(url, "response", payload=io.BytesIO(payload), http_headers=http)
    else:
        record = writer.create_warc_record(
            url, record_type, payload=io.BytesIO(payload), warc_content_type=content_type
        )
    writer.write_record(record)
    return out.getvalue()


def _wrong_length(url: str, payload: bytes, delta: int, gzip_member: bool) -> bytes:
    """A record whose WARC Content-Length is off by ``delta`` (gzipped as its own member if asked)."""
    raw = _record_bytes(url, payload, "text/html; charset=utf-8", gzip_member=False)
    head, sep, rest = raw.partition(b"\r\n\r\n")
    lines = []
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            line = b"Content-Length: " + str(int(line.split(b":", 1)[1]) + delta).encode()
        lines.append(line)
    record = b"\r\n".join(lines) + sep + rest
    return gzip.compress(record, mtime=0) if gzip_member else record


def _broken(kind: str, i: int, gzip_member: bool = True) -> bytes:
    page = sample_pages(1, seed=1000 + i)[0]
    url = f"http://broken.example.com/{kind}/{i}"
    if kind == "truncated_gzip":
        if not gzip_member:
            raise ValueError("a truncated gzip member needs gzip_members=True")
        member = _record_bytes(url, page.html.encode(), "text/html; charset=utf-8", gzip_member=True)
        return member[: len(member) // 2]
    if kind == "content_length_short":
        return _wrong_length(url, page.html.encode(), -25, gzip_member)
    if kind == "content_length_long":
        return _wrong_length(url, page.html.encode(), +25, gzip_member)
    if kind == "non_html":
        png = b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 4
        return _record_bytes(url, png, "image/png", gzip_member=gzip_member)
    if kind == "unknown_charset":
        return _record_bytes(
            url, page.html.encode(), "text/html; charset=x-no-such-charset", gzip_member=gzip_member
        )
    if kind == "invalid_bytes":
        rng = random.Random(i)
        garbage = bytes(rng.randrange(0x80, 0x100) for _ in range(2000))
        return _record_bytes(
            url,
            b"<html><body><p>" + garbage + b"</p></body></html>",
            "text/html; charset=utf-8",
            gzip_member=gzip_member,
        )
    raise ValueError(f"unknown broken record kind {kind!r}; choose from {BROKEN_KINDS}")


def write_warc(
    path: str,
    pages: Iterable[Page],
    *,
    broken: Sequence[str] = (),
    gzip_members: bool = True,
) -> dict[str, int]:
    """Write ``pages`` as WARC response records (one gzip member each unless ``gzip_members=False``), a
    damaged record of each kind in ``broken`` after every third page, and return the byte offset of each
    damaged record by kind (what the reader must report)."""
    pages = list(pages)
    offsets: dict[str, int] = {}
    pending = list(broken)
    with open(path, "wb") as f:
        f.write(
            _record_bytes(
                "",
                b"software: zephyr tests\r\nformat: WARC File Format 1.1\r\n",
                "application/warc-fields",
                gzip_member=gzip_members,
                record_type="warcinfo",
            )
        )
        for i, page in enumerate(pages):
            request = f"GET / HTTP/1.1\r\nHost: {page.url.split('/')[2]}\r\n\r\n".encode()
            f.write(
                _record_bytes(
                    page.url,
                    request,
                    "application/http; msgtype=request",
                    gzip_member=gzip_members,
                    record_type="request",
                )
            )
            content_type = f"text/html; charset={page.charset}"
            f.write(
                _record_bytes(
                    page.url, page.html.encode(page.charset), content_type, gzip_member=gzip_members
                )
            )
            if pending and i % 3 == 2:
                kind = pending.pop(0)
                offsets[kind] = f.tell()
                f.write(_broken(kind, i, gzip_members))
        for kind in pending:
            offsets[kind] = f.tell()
            f.write(_broken(kind, len(offsets), gzip_members))
    return offsets


def pages_from_html_files(paths: Sequence[str], host: str = "docs.example.org") -> list[Page]:
    """Pages for the given HTML files (e.g. Debian documentation under /usr/share/doc), one URL each."""
    pages = []
    for i, path in enumerate(paths):
        with open(path, "rb") as f:
            html = f.read().decode("utf-8", errors="replace")
        name = path.rstrip("/").rsplit("/", 1)[-1]
        pages.append(Page(f"https://{host}/{i}/{name}", html))
    return pages
