"""Streaming gzip/zstd readers that fail loudly on a cut stream, and deterministic compressing writers.

Why not ``zstandard.stream_reader`` or fsspec's ``compression=``: a zstd stream cut mid-frame reads as a clean
end of file through them (checked with zstandard 0.25), which would turn a truncated download into a silent
short read. Here a stream that ends inside a gzip member or zstd frame raises ``TruncatedStream``; corrupt data
raises ``CorruptStream``. Multi-member gzip and multi-frame zstd are read to the end. Empty input (0 bytes) reads
as empty. (A cut exactly between two gzip members or zstd frames cannot be told from a shorter file: each member
is complete and checksummed. Single-stream files, what gzip/zstd and our writers produce, are always caught.)

Memory: ``read(n)`` returns at most ``n`` bytes; the zstd reader feeds the decompressor 64 KiB of compressed
input at a time, so its buffer holds at most ``n`` plus one chunk's expansion.

Writers are deterministic: gzip with ``mtime=0`` and no file name in the header, zstd level 3 single-threaded.
"""

from __future__ import annotations

import gzip
import zlib
from typing import IO, Protocol

import zstandard

from zephyr.errors import ConfigError

__all__ = [
    "ByteReader",
    "TruncatedStream",
    "CorruptStream",
    "open_decompressed",
    "open_compressed_writer",
    "GZIP_MAGIC",
    "ZSTD_MAGIC",
]

GZIP_MAGIC = b"\x1f\x8b"
ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
_ZSTD_FEED_BYTES = 64 << 10


class ByteReader(Protocol):
    def read(self, n: int, /) -> bytes: ...


class TruncatedStream(Exception):
    """The compressed stream ended inside a gzip member or zstd frame."""


class CorruptStream(Exception):
    """The compressed stream holds data its codec cannot decode."""


class _GzipReader:
    def __init__(self, raw: IO[bytes]):
        self._file = gzip.GzipFile(fileobj=raw, mode="rb")

    def read(self, n: int) -> bytes:
        try:
            return self._file.read(n)
        except EOFError as exc:
            raise TruncatedStream(f"gzip stream ends before its end-of-stream marker ({exc})") from exc
        except (gzip.BadGzipFile, zlib.error) as exc:
            raise CorruptStream(f"corrupt gzip data: {exc}") from exc


class _ZstdReader:
    def __init__(self, raw: IO[bytes]):
        self._raw = raw
        self._dctx = zstandard.ZstdDecompressor()
        self._frame = None  # the decompressor of the frame in progress; None between frames
        self._pending: list[bytes] = []  # decompressed, not yet returned
        self._pending_bytes = 0
        self._at_eof = False

    def read(self, n: int) -> bytes:
        while self._pending_bytes < n and not self._at_eof:
            chunk = self._raw.read(_ZSTD_FEED_BYTES)
            if not chunk:
                self._at_eof = True
                if self._frame is not None:
                    raise TruncatedStream("zstd stream ends inside a frame")
                break
            self._feed(chunk)
        data = self._pending[0] if len(self._pending) == 1 else b"".join(self._pending)
        out, rest = (data, b"") if len(data) <= n else (data[:n], data[n:])
        self._pending = [rest] if rest else []
        self._pending_bytes = len(rest)
        return out

    def _feed(self, data: bytes) -> None:
        while data:
            if self._frame is None:
                self._frame = self._dctx.decompressobj()
            try:
                out = self._frame.decompress(data)
            except zstandard.ZstdError as exc:
                raise CorruptStream(f"corrupt zstd data: {exc}") from exc
            if out:
                self._pending.append(out)
                self._pending_bytes += len(out)
            if self._frame.eof:
                data = self._frame.unused_data
                self._frame = None
            else:
                data = b""


def open_decompressed(raw: IO[bytes], compression: str | None) -> ByteReader:
    """A reader of the decompressed bytes of ``raw`` (which stays owned, and closed, by the caller)."""
    if compression is None:
        return raw
    if compression == "gzip":
        return _GzipReader(raw)
    if compression == "zstd":
        return _ZstdReader(raw)
    raise ConfigError(f"unknown compression {compression!r}; use None, 'gzip' or 'zstd'")


def open_compressed_writer(raw: IO[bytes], compression: str | None) -> IO[bytes]:
    """A writer compressing into ``raw``; closing it ends the stream but leaves ``raw`` open."""
    if compression is None:
        return raw
    if compression == "gzip":
        # filename="" keeps the temporary file name out of the header; mtime=0 keeps the clock out.
        return gzip.GzipFile(filename="", mode="wb", fileobj=raw, compresslevel=6, mtime=0)
    if compression == "zstd":
        return zstandard.ZstdCompressor(level=3).stream_writer(raw, closefd=False)
    raise ConfigError(f"unknown compression {compression!r}; use None, 'gzip' or 'zstd'")
