"""Cut a JSONL stream (plain, .gz, .zst, or a byte range of a plain file) into blocks of whole lines.

Steps 1, 5, 6 and 7 of the ``zephyr.io.jsonl_source`` contract: blocks of about ``block_bytes`` cut after
the last newline (a longer line grows its block), a byte-range shard starting at the line after
``start - 1``, a truncated compressed stream ending in ``StreamCut`` after the last whole line, and bytes
after a complete compressed stream ending in ``StreamTail`` after the stream's last line. A file that is
UTF-16 or UTF-32 text (``zephyr.io.text_encoding``) is ``WideText`` before any block, from the shard that
starts at byte 0; the file's other byte-range shards yield nothing, so it is reported once.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from zephyr.errors import InputError
from zephyr.io.compression import (
    GZIP_MAGIC,
    ZSTD_MAGIC,
    CorruptStream,
    TrailingData,
    TruncatedStream,
    open_decompressed,
)
from zephyr.io.paths import open_input
from zephyr.io.text_encoding import SAMPLE_BYTES, wide_encoding

__all__ = ["Block", "StreamCut", "StreamTail", "WideText", "iter_blocks"]

_MIN_READ_BYTES = 64 << 10
_UTF8_BOM = b"\xef\xbb\xbf"


class StreamCut(Exception):
    """A compressed stream ended mid-way, after the whole lines already yielded; ``partial`` is the cut line."""

    def __init__(self, codec: str, line: int | None, offset: int, partial: bytes, detail: str):
        super().__init__(detail)
        self.codec, self.line, self.offset, self.partial, self.detail = codec, line, offset, partial, detail

    def where(self) -> str:
        """``after line 48`` (the last whole line), or the byte offset when line numbers are unknown."""
        return f"after line {self.line - 1}" if self.line is not None else f"after byte {self.offset}"


class StreamTail(Exception):
    """A compressed stream ended complete and bytes that are not the codec's follow it (``TrailingData``):
    every line of the stream has been yielded; ``lines`` counts them."""

    def __init__(self, trailing: TrailingData, lines: int | None):
        super().__init__(str(trailing))
        self.codec, self.offset, self.head, self.lines = trailing.codec, trailing.offset, trailing.head, lines


class WideText(Exception):
    """The file is UTF-16 or UTF-32 text (``encoding``: what ``text_encoding.wide_encoding`` says)."""

    def __init__(self, encoding: tuple[str, str]):
        super().__init__(encoding[0])
        self.encoding = encoding


@dataclass
class Block:
    data: bytes
    """Whole lines; ends with a newline except possibly the file's last line."""
    first_line: int | None
    """1-based line number of the first line, None when unknown (byte-range shard not starting at 0)."""
    offset: int
    """Byte offset of ``data[0]`` in the uncompressed file."""
    newlines: int
    """``data.count(b"\\n")``, counted once."""


def _codec_name(compression: str | None) -> str:
    return {"gzip": "gzip", "zstd": "zstd"}.get(compression or "", "compressed")


def iter_blocks(
    path: str, compression: str | None, byte_range: tuple[int, int] | None, block_bytes: int
) -> Iterator[Block]:
    with open_input(path) as raw:
        stream = open_decompressed(raw, compression)
        start, stop = byte_range if byte_range is not None else (0, None)
        pos = start
        if start > 0:
            if wide_encoding(raw.read(SAMPLE_BYTES)) is not None:
                return  # not UTF-8 at all: the shard at byte 0 reports the file
            raw.seek(start - 1)
            skipped = _skip_line(raw)
            if skipped is None:
                return
            pos = start - 1 + skipped
            if stop is not None and pos >= stop:
                return
        line = 1 if start == 0 else None
        block_start = pos
        parts: list[bytes] = []
        first = True
        while True:
            if stop is None:
                want = block_bytes
            elif pos < stop:
                want = min(block_bytes, stop - pos)
            else:  # past the range: only looking for the end of its last line
                want = min(block_bytes, _MIN_READ_BYTES)
            try:
                chunk = stream.read(want)
            except TruncatedStream as exc:
                # every whole line before the cut has been yielded; what is left is the start of a cut line
                raise StreamCut(
                    _codec_name(compression), line, block_start, b"".join(parts), str(exc)
                ) from exc
            except CorruptStream as exc:
                last = f"after line {line - 1}" if line is not None else f"after byte {block_start}"
                raise InputError(f"{exc} {last}", path=path) from exc
            except (
                TrailingData
            ) as exc:  # the stream ended whole: its last line (if unterminated) is whole too
                tail = b"".join(parts)
                if tail:
                    yield Block(tail, line, block_start, tail.count(b"\n"))
                if line is not None:
                    line += tail.count(b"\n") + (0 if tail.endswith(b"\n") or not tail else 1)
                raise StreamTail(exc, None if line is None else line - 1) from exc
            if first and chunk and start == 0:
                if compression is None:
                    _check_not_compressed(chunk, path)
                encoding = wide_encoding(chunk[:SAMPLE_BYTES])
                if encoding is not None:
                    raise WideText(encoding)
                if chunk.startswith(_UTF8_BOM):  # written by some Windows tools; not part of line 1's JSON
                    chunk = chunk[len(_UTF8_BOM) :]
                    block_start += len(_UTF8_BOM)
            first = False
            if not chunk:
                tail = b"".join(parts)
                if tail:
                    yield Block(tail, line, block_start, tail.count(b"\n"))
                return
            pos += len(chunk)
            cut = chunk.rfind(b"\n")
            if cut < 0:
                parts.append(chunk)
                continue
            if parts:
                parts.append(chunk[: cut + 1])
                data = b"".join(parts)
            else:
                data = chunk[: cut + 1]  # no copy when the chunk ends with its newline
            carry = chunk[cut + 1 :]
            done = False
            if stop is not None and block_start + len(data) >= stop:
                # the last line we own is the one holding byte stop-1: it ends at the first newline from there
                end = data.index(b"\n", max(0, stop - 1 - block_start))
                data = data[: end + 1]
                done = True
            block = Block(data, line, block_start, data.count(b"\n"))
            yield block
            if done:
                return
            if line is not None:
                line += block.newlines
            block_start += len(data)
            parts = [carry] if carry else []


def _skip_line(raw) -> int | None:
    """Read past the next newline; return the bytes consumed, or None at end of file."""
    consumed = 0
    while True:
        chunk = raw.read(_MIN_READ_BYTES)
        if not chunk:
            return None
        index = chunk.find(b"\n")
        if index >= 0:
            consumed += index + 1
            raw.seek(raw.tell() - (len(chunk) - index - 1))
            return consumed
        consumed += len(chunk)


def _check_not_compressed(chunk: bytes, path: str) -> None:
    for magic, codec, ext in ((GZIP_MAGIC, "gzip", ".gz"), (ZSTD_MAGIC, "zstd", ".zst")):
        if chunk.startswith(magic):
            raise InputError(
                f"looks {codec}-compressed but its name has no {ext} extension; rename it to end in {ext}",
                path=path,
            )
