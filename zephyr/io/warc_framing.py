"""Framing of WARC/ARC files: where each record starts and ends, so a damaged one is skipped, not fatal.

``from_members`` splits a ``.warc.gz`` into gzip members with zlib (a WARC writer compresses each record as
its own member); a truncated or corrupt member becomes a ``BadRecord`` at its offset and the next member is
found by its magic bytes and a trial decompression. ``plain_records`` reads an uncompressed file a record at a
time. Within either, each WARC record must end where its Content-Length says, followed by CRLF CRLF (ARC:
the length of its header line); otherwise it is a ``BadRecord`` and reading resumes at the next line that
starts ``WARC/1.``. Memory: one record (at most ``MAX_RECORD_BYTES``) and a 1 MiB read buffer.
"""

from __future__ import annotations

import re
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import BinaryIO

__all__ = ["BadRecord", "MAX_RECORD_BYTES", "Record", "from_members", "plain_records"]

MAX_RECORD_BYTES = 64 << 20
"""A record (or gzip member) that decompresses to more than this is quarantined: per-record gzip keeps
records small (Common Crawl truncates payloads at 1 MiB); a larger one is a whole-file gzip or garbage."""
_GZIP_MAGIC = b"\x1f\x8b\x08"
_CHUNK = 1 << 20
_RAW_LIMIT = 4096  # bytes of a bad record's header kept in the quarantine's ``raw``


class BadRecord(Exception):
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
def _gzip_members(f: BinaryIO) -> Iterator[tuple[int, bytes] | BadRecord]:
    """(offset, decompressed bytes) of each gzip member, or a ``BadRecord`` for a damaged stretch, after which
    the next member is found by its magic bytes and a trial decompression."""
    buf = bytearray()
    base = 0  # file offset of buf[0]
    eof = False

    def fill(need: int) -> bool:
        nonlocal eof
        while len(buf) < need and not eof:
            chunk = f.read(_CHUNK)
            if not chunk:
                eof = True
            buf.extend(chunk)
        return len(buf) >= need

    def resync(start: int) -> int:
        """Index in buf of the next member after ``start`` that begins a valid gzip stream, else len(buf)."""
        at = start
        while True:
            fill(at + 1 + _CHUNK)
            found = buf.find(_GZIP_MAGIC, at + 1)
            if found < 0:
                if eof:
                    return len(buf)
                at = max(at, len(buf) - len(_GZIP_MAGIC))
                continue
            probe = zlib.decompressobj(31)
            try:
                probe.decompress(bytes(buf[found : found + 4096]), 64)
                return found
            except zlib.error:
                at = found

    while fill(1):
        fill(3)
        if not buf.startswith(_GZIP_MAGIC):
            skip = resync(0)
            yield BadRecord(
                base, f"{skip} bytes that are not a gzip member", bytes(buf[: min(skip, _RAW_LIMIT)])
            )
            del buf[:skip]
            base += skip
            continue
        d = zlib.decompressobj(31)
        out: list[bytes] = []
        size = 0
        pos = 0  # bytes of buf fed to d
        error: str | None = None
        while not d.eof:
            if pos >= len(buf):
                fill(pos + _CHUNK)
            if pos >= len(buf):
                error = f"truncated gzip member: the file ends {len(buf)} bytes after its start"
                break
            piece = bytes(buf[pos : pos + _CHUNK])
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
            skip = resync(0)
            yield BadRecord(base, error, b"".join(out)[:_RAW_LIMIT] or None)
            del buf[:skip]
            base += skip
            continue
        used = pos - len(d.unused_data)
        yield base, b"".join(out)
        del buf[:used]
        base += used


def _records(data: bytes, base: int, *, one_member: bool) -> Iterator[Record | BadRecord]:
    """The records in ``data`` (a gzip member's bytes, or a whole uncompressed file read by
    ``plain_records``): each must end where its Content-Length says, followed by CRLF CRLF (ARC: LF)."""
    pos = 0
    n = len(data)
    while pos < n:
        while pos < n and data[pos] in b"\r\n":  # blank lines between records
            pos += 1
        if pos >= n:
            return
        try:
            end, next_pos, arc = _frame(data, pos, base)
        except BadRecord as bad:
            yield bad
            if one_member:
                return
            pos = _next_record(data, pos + 1)
            continue
        yield Record(base + pos, data[pos:end], arc)
        pos = next_pos


def _frame(data: bytes, pos: int, base: int) -> tuple[int, int, bool]:
    """(end of the record's block, start of what follows, is ARC) for the record at ``pos``."""
    if data.startswith(b"WARC/", pos):
        head_end = data.find(b"\r\n\r\n", pos)
        if head_end < 0:
            raise BadRecord(base + pos, "WARC header without its blank line", data[pos : pos + _RAW_LIMIT])
        header = data[pos:head_end]
        match = re.search(rb"\r\ncontent-length:[ \t]*(\d+)[ \t]*(?=\r\n|$)", header, re.IGNORECASE)
        if match is None:
            raise BadRecord(base + pos, "WARC header without a valid Content-Length", header[:_RAW_LIMIT])
        length = int(match.group(1))
        end = head_end + 4 + length
        if end > len(data):
            raise BadRecord(
                base + pos,
                f"wrong Content-Length: {length} but the record has only {len(data) - head_end - 4} bytes",
                header[:_RAW_LIMIT],
            )
        if data[end : end + 4] != b"\r\n\r\n" and end != len(data):
            raise BadRecord(
                base + pos,
                f"wrong Content-Length: {length} does not end the record (no CRLF CRLF after it)",
                header[:_RAW_LIMIT],
            )
        return end, end + 4, False
    line_end = data.find(b"\n", pos)
    fields = data[pos : line_end if line_end >= 0 else len(data)].split()
    if line_end < 0 or len(fields) < 3 or not fields[-1].isdigit():
        raise BadRecord(
            base + pos, "neither a WARC record nor an ARC record header", data[pos : pos + _RAW_LIMIT]
        )
    length = int(fields[-1])
    end = line_end + 1 + length
    if end > len(data):
        raise BadRecord(
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

    def __init__(self, f: BinaryIO):
        self.f, self.buf, self.base, self.eof = f, bytearray(), 0, False

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


def plain_records(f: BinaryIO) -> Iterator[Record | BadRecord]:
    """Records of an uncompressed file, read a record at a time (a record is at most ``MAX_RECORD_BYTES``)."""
    s = _Stream(f)
    while True:
        s.skip_blank()
        if not s.buf:
            return
        s.fill(_CHUNK)
        need = _needed_bytes(s.buf)
        if need is not None and need > MAX_RECORD_BYTES:
            yield BadRecord(
                s.base, f"record of {need} bytes exceeds {MAX_RECORD_BYTES}", bytes(s.buf[:_RAW_LIMIT])
            )
            s.skip_to_next_record()
            continue
        if need is not None:
            s.fill(need + 4)
        window = bytes(s.buf[: need + 4] if need is not None else s.buf)
        item = next(_records(window, s.base, one_member=True))
        yield item
        if isinstance(item, BadRecord):
            s.skip_to_next_record()
        else:
            s.consume(len(item.data) + (0 if item.arc else 4))


def _needed_bytes(buf: bytes) -> int | None:
    """Bytes the record at the start of ``buf`` spans by its own header (None: not known from the header)."""
    if buf.startswith(b"WARC/"):
        head_end = buf.find(b"\r\n\r\n")
        match = re.search(rb"\r\ncontent-length:[ \t]*(\d+)", buf[: max(head_end, 0)], re.IGNORECASE)
        return None if head_end < 0 or match is None else head_end + 4 + int(match.group(1))
    line_end = buf.find(b"\n")
    fields = buf[: max(line_end, 0)].split()
    if line_end < 0 or not fields or not fields[-1].isdigit():
        return None
    return line_end + 1 + int(fields[-1])


def from_members(f: BinaryIO) -> Iterator[Record | BadRecord]:
    for member in _gzip_members(f):
        if isinstance(member, BadRecord):
            yield member
            continue
        offset, data = member
        yield from _records(data, offset, one_member=False)
