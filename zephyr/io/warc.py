"""WARC/ARC input: each HTML response record of a ``.warc[.gz]`` / ``.arc[.gz]`` file becomes one row.

Contract (format ``"warc"`` of ``zephyr.io.sources``; ``zephyr.read(paths, format="warc")``):

- One shard per file (a gzip stream cannot be entered mid-file). Records stream: memory holds one record
  (at most ``MAX_RECORD_BYTES`` decompressed) and one output batch of about ``batch_bytes`` of HTML.
- Rows (``WARC_SCHEMA``): ``id`` (WARC-Record-ID without ``<>``; ARC: ``<file>@<offset>``), ``url``,
  ``fetch_time`` (UTC), ``content_type`` (the HTTP MIME type), ``charset`` (the one the HTML was decoded
  with), ``html`` (text), ``html_bytes`` (payload bytes after HTTP content decoding) and ``warc_offset``
  (the byte offset of the record's gzip member, or of the record in an uncompressed file).
- Records that are not documents are skipped and counted, never quarantined: ``warcinfo``, ``request``,
  ``metadata``, ``revisit`` … (counter ``warc/skipped_<type>``), responses of another protocol than HTTP
  (``dns:`` lookups: ``warc/skipped_not_http``) and responses whose HTTP status is not 2xx
  (``warc/skipped_http_status``).
- Bad records never stop the file: each is quarantined (``zephyr.io.quarantine``, ``line`` = its byte offset)
  and reading resumes at the next record. The kinds: a truncated or corrupt gzip member, a Content-Length
  that does not end the record (too long or too short), a response whose payload is not HTML, and HTML that
  does not decode (an unknown charset, or more than ``MAX_INVALID_FRACTION`` of its bytes invalid in the
  declared charset). With ``on_error="raise"`` the first one raises ``InputError`` naming file, offset and
  the fix. rows yielded + rows quarantined = HTML response records + bad records.
- A file that is UTF-16 or UTF-32 text (``zephyr.io.text_encoding``) is refused, or quarantined as one entry,
  naming its encoding and the conversion: none of it is a record.

Framing is done below (``_from_members``, ``_plain_records``: gzip members with ``zlib``, the WARC header's
Content-Length checked against the record end), so a damaged record can be skipped without losing the rest; warcio parses each record's WARC
and HTTP headers and decodes chunked / gzip payloads.

Framing of WARC/ARC files: where each record starts and ends, so a damaged one is skipped, not fatal.

``_from_members`` splits a ``.warc.gz`` into gzip members with zlib (a WARC writer compresses each record as
its own member); a truncated or corrupt member becomes a ``_BadRecord`` at its offset and the next member is
found by its magic bytes and a trial decompression. ``_plain_records`` reads an uncompressed file (or one member's
bytes) a record at a time. Within either, each WARC record must end where its Content-Length says, followed by CRLF CRLF (ARC:
the length of its header line); otherwise it is a ``_BadRecord`` and reading resumes at the next line that
starts ``WARC/1.``. Memory: one record (at most ``MAX_RECORD_BYTES``) and a 1 MiB read buffer.
"""

from __future__ import annotations

import codecs
import io
import logging
import math
import re
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, BinaryIO

import pyarrow as pa

from zephyr import counters
from zephyr.io.paths import open_input
from zephyr.io.quarantine import refuse_or_set_aside, refuse_wide_text
from zephyr.io.text_encoding import SAMPLE_BYTES

log = logging.getLogger(__name__)

WARC_SCHEMA = pa.schema(
    [
        pa.field("id", pa.string()),
        pa.field("url", pa.string()),
        pa.field("fetch_time", pa.timestamp("us", tz="UTC")),
        pa.field("content_type", pa.string()),
        pa.field("charset", pa.string()),
        pa.field("html", pa.large_string()),
        pa.field("html_bytes", pa.int64()),
        pa.field("warc_offset", pa.int64()),
    ]
)

MAX_INVALID_FRACTION = 0.01
"""HTML whose bytes are invalid in its charset beyond this share is quarantined as undecodable; below it the
invalid bytes become U+FFFD (counter ``warc/replaced_bytes``), as browsers do."""
HTML_TYPES = frozenset({"text/html", "application/xhtml+xml"})
_RAW_LIMIT = 4096  # bytes of a bad record's header kept in the quarantine's ``raw``
_META_CHARSET = re.compile(rb"""<meta[^>]{0,200}?charset\s*=\s*["']?\s*([A-Za-z0-9_.:\-]+)""", re.IGNORECASE)
_HTML_START = re.compile(rb"^\s*(<!--.*?-->\s*)*<(!doctype\s+html|html|head|body)", re.IGNORECASE | re.DOTALL)


# -- one record → one row ----------------------------------------------------------------------------------
def decode_html(payload: bytes, header_charset: str | None) -> tuple[str, str, int]:
    """(text, charset used, invalid bytes replaced) of an HTML payload.

    The charset is the HTTP header's, else a ``<meta charset>`` in the first 4 KiB, else a BOM, else UTF-8
    with windows-1252 as the fallback for undeclared pages that are not UTF-8 (what browsers do). Raises
    ``LookupError`` for an unknown charset and ``UnicodeDecodeError`` when more than
    ``MAX_INVALID_FRACTION`` of the bytes are invalid in it.

    >>> decode_html("café".encode("latin-1"), None)[:2]
    ('café', 'cp1252')
    """
    declared = header_charset
    if declared is None:
        match = _META_CHARSET.search(payload[:4096])
        declared = match.group(1).decode("ascii") if match else None
    if declared is None:
        for bom, name in (
            (codecs.BOM_UTF8, "utf-8-sig"),
            (codecs.BOM_UTF16_LE, "utf-16"),
            (codecs.BOM_UTF16_BE, "utf-16"),
        ):
            if payload.startswith(bom):
                declared = name
    if declared is not None:
        name = codecs.lookup(declared.strip().lower()).name  # LookupError: unknown charset
        if name == "iso8859-1" or name == "ascii":  # labels browsers read as windows-1252 (WHATWG encoding)
            name = "cp1252"
        candidates = [name]
    else:
        candidates = ["utf-8", "cp1252"]
    for name in candidates:
        try:
            return payload.decode(name), name, 0
        except UnicodeDecodeError:
            continue
    name = candidates[-1]
    text = payload.decode(name, errors="replace")
    invalid = text.count("\ufffd")
    if invalid > max(1, MAX_INVALID_FRACTION * len(payload)):
        raise UnicodeDecodeError(name, payload[:1], 0, 1, f"{invalid} of {len(payload)} bytes are invalid")
    return text, codecs.lookup(name).name, invalid


def _fetch_time(value: str | None) -> datetime | None:
    if not value:
        return None
    try:
        if value.isdigit() and len(value) >= 14:  # ARC: YYYYMMDDhhmmss
            return datetime.strptime(value[:14], "%Y%m%d%H%M%S").replace(tzinfo=UTC)
        stamp = datetime.fromisoformat(value)
        return stamp.replace(tzinfo=UTC) if stamp.tzinfo is None else stamp.astimezone(UTC)
    except ValueError:
        return None


def _mime(content_type: str | None) -> tuple[str | None, str | None]:
    """(lower-case MIME type, charset parameter) of a Content-Type header value."""
    if not content_type:
        return None, None
    parts = [p.strip() for p in content_type.split(";")]
    charset = None
    for p in parts[1:]:
        key, _, value = p.partition("=")
        if key.strip().lower() == "charset" and value.strip():
            charset = value.strip().strip("\"'")
    return parts[0].lower() or None, charset


def _row(record: Record, path: str) -> dict[str, Any] | None:
    """The row of one record; None for a record that is not a document (counted); ``_BadRecord`` when bad."""
    from warcio.recordloader import ArchiveLoadFailed, ArcWarcRecordLoader

    header_raw = record.data[: record.data.find(b"\r\n\r\n") if not record.arc else record.data.find(b"\n")]
    try:
        rec = ArcWarcRecordLoader().parse_record_stream(
            io.BytesIO(record.data), known_format="arc" if record.arc else "warc"
        )
    except (ArchiveLoadFailed, ValueError, EOFError) as exc:
        raise _BadRecord(record.offset, f"unparseable record: {exc}", header_raw[:_RAW_LIMIT]) from None
    kind = rec.rec_type or "unknown"
    if kind != "response":
        counters.increment(f"warc/skipped_{kind}")
        return None
    http = rec.http_headers
    if http is None:  # a response of another protocol (dns:, whois:, ftp:): no page, and no HTTP status
        counters.increment("warc/skipped_not_http")
        return None
    if not str(http.get_statuscode() or "").startswith("2"):
        counters.increment("warc/skipped_http_status")
        return None
    try:
        payload = rec.content_stream().read()
    except Exception as exc:  # a bad chunked / gzip / brotli payload: the record, not the file, is damaged
        raise _BadRecord(
            record.offset, f"undecodable HTTP payload: {type(exc).__name__}: {exc}", header_raw
        ) from None
    mime, charset = _mime(http.get_header("Content-Type"))
    if mime is None and _HTML_START.match(payload[:1024]):
        mime = "text/html"
    if mime not in HTML_TYPES:
        raise _BadRecord(
            record.offset, f"not HTML: content type {mime or 'missing'}", header_raw[:_RAW_LIMIT]
        )
    try:
        html, used, replaced = decode_html(payload, charset)
    except LookupError:
        raise _BadRecord(
            record.offset, f"undecodable: unknown charset {charset!r}", header_raw[:_RAW_LIMIT]
        ) from None
    except UnicodeDecodeError as exc:
        raise _BadRecord(
            record.offset, f"undecodable charset: {exc.reason}", header_raw[:_RAW_LIMIT]
        ) from None
    if replaced:
        counters.increment("warc/replaced_bytes", replaced)
    headers = rec.rec_headers  # warcio gives ARC records WARC headers too, with a random record id
    rid = headers.get_header("WARC-Record-ID") if not record.arc else None
    rid = rid.strip("<>") if rid else f"{path}@{record.offset}"
    url, date = headers.get_header("WARC-Target-URI"), headers.get_header("WARC-Date")
    return {
        "id": rid,
        "url": url,
        "fetch_time": _fetch_time(date),
        "content_type": mime,
        "charset": used,
        "html": html,
        "html_bytes": len(payload),
        "warc_offset": record.offset,
    }


# -- the shard reader --------------------------------------------------------------------------------------
def read_warc_shard(shard, read) -> Iterator[pa.RecordBatch]:
    """Stream a WARC/ARC file's HTML response records as batches of ``WARC_SCHEMA`` (module docstring); of
    ``read`` (a ``zephyr.io.sources.ReadOptions``) the schema options do not apply: WARC rows have one fixed
    schema."""
    path, quarantine = shard.path, read.quarantine
    schema = WARC_SCHEMA if not read.columns else pa.schema([WARC_SCHEMA.field(c) for c in read.columns])
    rows: list[dict[str, Any]] = []
    size = 0
    with open_input(path) as f:
        head = f.read(SAMPLE_BYTES)
        f.seek(0)
        if refuse_wide_text(head, path, quarantine):  # every "record" of a wrong encoding would be garbage
            return
        items = _from_members(f) if head[:2] == b"\x1f\x8b" else _plain_records(f)
        for item in items:
            try:
                if isinstance(item, _BadRecord):
                    raise item
                row = _row(item, path)
            except _BadRecord as bad:
                counters.increment("warc/bad_records")
                refusal = (
                    f"record at byte {bad.offset}: {bad.reason}; pass on_error='quarantine' to set bad records "
                    "aside and keep the rest of the file"
                )
                reason = f"warc record at byte {bad.offset}: {bad.reason}"
                refuse_or_set_aside(quarantine, path, refusal, [reason], [bad.offset], [bad.raw])
                continue
            if row is None:
                continue
            rows.append(row)
            size += row["html_bytes"]
            if size >= read.batch_bytes:
                yield pa.RecordBatch.from_pylist(rows, schema=schema)
                rows, size = [], 0
    if rows:
        yield pa.RecordBatch.from_pylist(rows, schema=schema)


MAX_RECORD_BYTES = 64 << 20
"""A record (or gzip member) that decompresses to more than this is quarantined: per-record gzip keeps
records small (Common Crawl truncates payloads at 1 MiB); a larger one is a whole-file gzip or garbage."""
_GZIP_MAGIC = b"\x1f\x8b\x08"
_CHUNK = 1 << 20


class _BadRecord(Exception):
    """One damaged record: ``offset`` is where it starts, ``raw`` what of it is worth keeping."""

    def __init__(self, offset: int, reason: str, raw: bytes | None = None):
        super().__init__(reason)
        self.offset, self.reason, self.raw = offset, reason, raw


@dataclass
class Record:
    offset: int
    data: bytes
    """The record's bytes: headers and block (without the trailing CRLF CRLF)."""
    arc: bool


# -- framing -----------------------------------------------------------------------------------------------
def _gzip_members(f: BinaryIO) -> Iterator[tuple[int, bytes] | _BadRecord]:
    """(offset, decompressed bytes) of each gzip member, or a ``_BadRecord`` for a damaged stretch, after which
    the next member is found by its magic bytes and a trial decompression."""
    s = _Stream(f)

    def resync() -> int:
        """Index in the buffer of the next member that begins a valid gzip stream, else its length."""
        at = 0
        while True:
            s.fill(at + 1 + _CHUNK)
            found = s.buf.find(_GZIP_MAGIC, at + 1)
            if found < 0:
                if s.eof:
                    return len(s.buf)
                at = max(at, len(s.buf) - len(_GZIP_MAGIC))
                continue
            probe = zlib.decompressobj(31)
            try:
                probe.decompress(bytes(s.buf[found : found + 4096]), 64)
                return found
            except zlib.error:
                at = found

    while True:
        s.fill(3)
        if not s.buf:
            return
        if not s.buf.startswith(_GZIP_MAGIC):
            skip = resync()
            yield _BadRecord(
                s.base, f"{skip} bytes that are not a gzip member", bytes(s.buf[: min(skip, _RAW_LIMIT)])
            )
            s.consume(skip)
            continue
        d = zlib.decompressobj(31)
        out: list[bytes] = []
        size = 0
        pos = 0  # bytes of the buffer fed to d
        error: str | None = None
        while not d.eof:
            if pos >= len(s.buf):
                s.fill(pos + _CHUNK)
            if pos >= len(s.buf):
                error = f"truncated gzip member: the file ends {len(s.buf)} bytes after its start"
                break
            piece = bytes(s.buf[pos : pos + _CHUNK])
            pos += len(piece)
            try:
                chunk = d.decompress(piece)
            except zlib.error as exc:
                error = f"corrupt or truncated gzip member ({exc})"
                break
            size += len(chunk)
            if size > MAX_RECORD_BYTES:
                error = f"gzip member decompresses to over {MAX_RECORD_BYTES} bytes (a whole-file gzip?)"
                break
            out.append(chunk)
        if error is not None:
            skip = resync()
            yield _BadRecord(s.base, error, b"".join(out)[:_RAW_LIMIT] or None)
            s.consume(skip)
            continue
        used = pos - len(d.unused_data)
        yield s.base, b"".join(out)
        s.consume(used)


def _frame(data: bytes, pos: int, base: int, *, complete: bool = True) -> tuple[int, int, bool]:
    """(end of the record's block, start of what follows, is ARC) for the record at ``pos``; ``complete=False``
    checks its header only (``data`` may end before the record does)."""
    if data.startswith(b"WARC/", pos):
        head_end = data.find(b"\r\n\r\n", pos)
        if head_end < 0:
            raise _BadRecord(base + pos, "WARC header without its blank line", data[pos : pos + _RAW_LIMIT])
        header = data[pos:head_end]
        match = re.search(rb"\r\ncontent-length:[ \t]*(\d+)[ \t]*(?=\r\n|$)", header, re.IGNORECASE)
        if match is None:
            raise _BadRecord(base + pos, "WARC header without a valid Content-Length", header[:_RAW_LIMIT])
        length = int(match.group(1))
        end = head_end + 4 + length
        if not complete:
            return end, end + 4, False
        if end > len(data):
            raise _BadRecord(
                base + pos,
                f"wrong Content-Length: {length} but the record has only {len(data) - head_end - 4} bytes",
                header[:_RAW_LIMIT],
            )
        if data[end : end + 4] != b"\r\n\r\n" and end != len(data):
            raise _BadRecord(
                base + pos,
                f"wrong Content-Length: {length} does not end the record (no CRLF CRLF after it)",
                header[:_RAW_LIMIT],
            )
        return end, end + 4, False
    line_end = data.find(b"\n", pos)
    fields = data[pos : line_end if line_end >= 0 else len(data)].split()
    if line_end < 0 or len(fields) < 3 or not fields[-1].isdigit():
        raise _BadRecord(
            base + pos, "neither a WARC record nor an ARC record header", data[pos : pos + _RAW_LIMIT]
        )
    length = int(fields[-1])
    end = line_end + 1 + length
    if end > len(data) and complete:
        raise _BadRecord(
            base + pos,
            f"wrong ARC length: {length} but the record has only {len(data) - line_end - 1} bytes",
            data[pos:line_end][:_RAW_LIMIT],
        )
    return end, end, True


def _next_record(data: bytes, start: int) -> int:
    """Where the next record header after ``start`` begins (a line starting ``WARC/1.``), else the end."""
    found = data.find(b"\nWARC/1.", start)
    return len(data) if found < 0 else found + 1


class _Stream:
    """A read buffer over an uncompressed file: ``buf`` holds the bytes from file offset ``base`` on."""

    def __init__(self, f: BinaryIO, base: int = 0):
        self.f, self.buf, self.base, self.eof = f, bytearray(), base, False

    def fill(self, need: int) -> None:
        while len(self.buf) < need and not self.eof:
            chunk = self.f.read(max(_CHUNK, need - len(self.buf)))
            self.eof = not chunk
            self.buf += chunk

    def consume(self, n: int) -> None:
        del self.buf[:n]
        self.base += n

    def skip_blank(self) -> None:
        while True:
            self.fill(1)
            lead = len(self.buf) - len(self.buf.lstrip(b"\r\n"))
            self.consume(lead)
            if self.buf or self.eof:
                return

    def skip_to_next_record(self) -> None:
        """Drop bytes up to the next line that starts a WARC record, reading on until one or the end."""
        while True:
            found = _next_record(self.buf, 1)
            if found < len(self.buf) or self.eof:
                self.consume(found)
                return
            self.consume(max(0, len(self.buf) - 8))
            self.fill(len(self.buf) + _CHUNK)


def _plain_records(
    f: BinaryIO, base: int = 0, max_bytes: float = MAX_RECORD_BYTES
) -> Iterator[Record | _BadRecord]:
    """Records of an uncompressed file (or of one gzip member's bytes, which start at file offset ``base``),
    read a record at a time: each must end where its Content-Length says, followed by CRLF CRLF (ARC: LF);
    after a bad one, reading resumes at the next record header. A record is at most ``max_bytes``."""
    s = _Stream(f, base)
    while True:
        s.skip_blank()
        if not s.buf:
            return
        s.fill(_CHUNK)
        try:
            need = _frame(s.buf, 0, s.base, complete=False)[0]  # the bytes the record spans by its own header
            if need > max_bytes:
                raise _BadRecord(
                    s.base, f"record of {need} bytes exceeds {MAX_RECORD_BYTES}", bytes(s.buf[:_RAW_LIMIT])
                )
            s.fill(need + 4)
            end, following, arc = _frame(s.buf, 0, s.base)
        except _BadRecord as bad:
            yield bad
            s.skip_to_next_record()
            continue
        yield Record(s.base, bytes(s.buf[:end]), arc)
        s.consume(following)


def _from_members(f: BinaryIO) -> Iterator[Record | _BadRecord]:
    for member in _gzip_members(f):
        if isinstance(member, _BadRecord):
            yield member
            continue
        offset, data = member  # already at most MAX_RECORD_BYTES: a longer Content-Length is a wrong one
        yield from _plain_records(io.BytesIO(data), offset, max_bytes=math.inf)
