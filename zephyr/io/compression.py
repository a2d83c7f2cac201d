"""Streaming gzip/zstd readers that fail loudly on a cut stream, and deterministic compressing writers.

Why not ``zstandard.stream_reader`` or fsspec's ``compression=``: a zstd stream cut mid-frame reads as a clean
end of file through them (checked with zstandard 0.25), which would turn a truncated download into a silent
short read. And ``gzip.GzipFile.read(n)`` raises on a cut without returning the bytes it decoded before it, so
a cut file read 64 MiB at a time loses all of its first 64 MiB. Here a stream that ends inside a gzip member or
zstd frame raises ``TruncatedStream`` and corrupt data raises ``CorruptStream``, each only after every byte
decoded before the damage has been returned (zstd decodes whole blocks of up to 128 KiB, so up to one block
before a cut is lost with it). Multi-member gzip and multi-frame zstd are read to the end. Empty input (0 bytes) reads
as empty. (A cut exactly between two gzip members or zstd frames cannot be told from a shorter file: each member
is complete and checksummed. Single-stream files, what gzip/zstd and our writers produce, are always caught.)

Bytes after a complete member or frame that do not start another one (its magic number; gzip's zero padding
is skipped, a zstd skippable frame is a frame) are a tail that is not part of the stream, as ``gzip -d`` says
of "trailing garbage": every byte before it decoded and checked, so the reader returns them all and then
raises ``TrailingData`` with the tail's offset in the compressed file, not ``CorruptStream``.

Memory: ``read(n)`` returns at most ``n`` bytes; the readers feed their decompressor 64 KiB of compressed input
at a time, so the buffer holds at most ``n`` plus one chunk's expansion.

Writers are deterministic: gzip with ``mtime=0`` and no file name in the header, zstd level 3 single-threaded.
"""

from __future__ import annotations

import contextlib
import gzip
import zlib
from typing import IO

from zstandard import ZstdCompressor, ZstdDecompressor, ZstdError

GZIP_MAGIC = b"\x1f\x8b"
ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
_FEED_BYTES = 64 << 10  # compressed bytes handed to a decompressor at a time
_ZSTD_FRAME_MAGICS = (ZSTD_MAGIC, *(bytes([0x50 + i]) + b"\x2a\x4d\x18" for i in range(16)))
"""A zstd frame starts with its magic number, a skippable frame with one of 0x184D2A50-5F (little-endian)."""


class TruncatedStream(Exception):
    """The compressed stream ended inside a gzip member or zstd frame."""


class CorruptStream(Exception):
    """The compressed stream holds data its codec cannot decode."""


class TrailingData(Exception):
    """The stream ended complete, and bytes that start no member or frame follow it: from ``offset`` (in the
    compressed file) on; ``head`` is their first bytes (up to one read of the compressed input)."""

    def __init__(self, codec: str, offset: int, head: bytes):
        super().__init__(
            f"bytes after the end of the {codec} stream, from byte {offset}, are not {codec} data"
        )
        self.codec, self.offset, self.head = codec, offset, head


_CODECS = {  # codec: (what its stream is made of, their magic numbers, padding between two, its error, a decoder)
    "gzip": ("member", (GZIP_MAGIC,), b"\x00", zlib.error, lambda: zlib.decompressobj(wbits=31)),
    "zstd": ("frame", _ZSTD_FRAME_MAGICS, b"", ZstdError, lambda: ZstdDecompressor().decompressobj()),
}
"""gzip members are decoded by zlib (``wbits=31``: gzip header, deflate, CRC-32 and length checked). Unlike
``gzip.GzipFile``, whose ``read(n)`` drops everything it decoded when the stream turns out to be cut, the bytes
before a cut are returned. Zero bytes after a member are padding, as ``gzip.GzipFile`` reads them."""


class _StreamReader:
    """Compressed input is fed ``_FEED_BYTES`` at a time to the decoder of ``codec`` (``_CODECS``), decoded
    bytes wait in ``_pending``. An error found while filling the buffer (a cut, corrupt data) is held back until
    the bytes decoded before it have been returned, so a caller sees every byte that decodes and then the error."""

    def __init__(self, raw: IO[bytes], codec: str):
        self._raw, self._codec = raw, codec
        self._unit_name, self._magics, self._padding, self._codec_error, self._decompressor = _CODECS[codec]
        self._pending: list[bytes] = []  # decoded, not yet returned
        self._pending_bytes = 0
        self._at_eof = False
        self._error: TruncatedStream | CorruptStream | TrailingData | None = None
        self._fed_bytes = 0  # compressed bytes fed so far, the current chunk included
        self._between = b""  # after a complete member/frame: the start of the next one, too short to tell
        self._unit = None  # the decompressor of the member or frame in progress; None between them
        self._units = 0  # members or frames finished

    def read(self, n: int) -> bytes:
        while self._pending_bytes < n and not self._at_eof and self._error is None:
            chunk = self._raw.read(_FEED_BYTES)
            try:
                if chunk:
                    self._fed_bytes += len(chunk)
                    self._feed(chunk)
                else:
                    self._at_eof = True
                    if self._between:  # the file ends in a few bytes that start no member or frame
                        raise TrailingData(self._codec, self._fed_bytes - len(self._between), self._between)
                    self._finish()
            except (TruncatedStream, CorruptStream, TrailingData) as exc:
                self._error = exc
        if not self._pending_bytes and self._error is not None:
            raise self._error
        data = self._pending[0] if len(self._pending) == 1 else b"".join(self._pending)
        out, rest = (data, b"") if len(data) <= n else (data[:n], data[n:])
        self._pending = [rest] if rest else []
        self._pending_bytes = len(rest)
        return out

    def _emit(self, data: bytes) -> None:
        if data:
            self._pending.append(data)
            self._pending_bytes += len(data)

    def _feed(self, data: bytes) -> None:
        while data:
            if self._unit is None:
                if self._units:  # after a complete member/frame: padding, then another one or a tail
                    data = data.lstrip(self._padding) if not self._between else data
                    data = self._next_starts(data) if data else data
                    if not data:
                        return
                self._unit = self._decompressor()
            try:
                self._emit(self._unit.decompress(data))
            except self._codec_error as exc:
                raise CorruptStream(f"corrupt {self._codec} data: {exc}") from exc
            if self._unit.eof:
                data = self._unit.unused_data
                self._unit = None
                self._units += 1
            else:
                data = b""

    def _next_starts(self, data: bytes) -> bytes:
        """``data`` (what follows a complete member or frame, the bytes held back from the last chunk first)
        when it starts another one; ``b""`` when it is too short to tell (it is held back); ``TrailingData``
        when it starts none of the codec's magic numbers."""
        data = self._between + data
        self._between = b""
        if any(data.startswith(m) for m in self._magics):
            return data
        if len(data) < max(map(len, self._magics)) and any(m.startswith(data) for m in self._magics):
            self._between = data
            return b""
        raise TrailingData(self._codec, self._fed_bytes - len(data), data)

    def _finish(self) -> None:
        """At the end of the raw input: raise ``TruncatedStream`` when it ends inside a member or frame."""
        if self._unit is not None:
            with contextlib.suppress(self._codec_error):  # what can be decoded is; the cut is reported below
                self._emit(self._unit.flush())
            raise TruncatedStream(f"{self._codec} stream ends inside a {self._unit_name}")


def open_decompressed(raw: IO[bytes], compression: str | None) -> IO[bytes] | _StreamReader:
    """A reader of the decompressed bytes of ``raw`` (which stays owned, and closed, by the caller)."""
    return raw if compression is None else _StreamReader(raw, compression)


def open_compressed_writer(raw: IO[bytes], compression: str | None) -> IO[bytes]:
    """A writer compressing into ``raw``; closing it ends the stream but leaves ``raw`` open."""
    if compression is None:
        return raw
    if compression == "gzip":
        # filename="" keeps the temporary file name out of the header; mtime=0 keeps the clock out.
        return gzip.GzipFile(filename="", mode="wb", fileobj=raw, compresslevel=6, mtime=0)
    return ZstdCompressor(level=3).stream_writer(raw, closefd=False)  # "zstd" (ShardWriter checks)
