"""Read JSON Lines shards (plain, .gz, .zst): vectorized parsing, exact line accounting, bad-line isolation.

How a shard is read:

1. **Blocks.** The (decompressed) stream is read ``batch_bytes`` at a time and cut after the last newline; the
   partial line is carried into the next block. A line longer than a block grows the block until its newline
   (a single 50 MB line works). Memory does not grow with the file: measured peak RSS above the interpreter's
   was ~200 MiB with ``batch_bytes`` = 16 MiB and ~360 MiB with the default 64 MiB, the same for a 130 MB and a
   660 MB file (a block, its parse buffers, the batch, and allocator caching).
2. **Fast path.** Each block is checked for UTF-8 (one vectorized Arrow cast) and parsed by
   ``pyarrow.json.read_json`` in parallel 8 MiB chunks (a line longer than that makes the block parse as one
   chunk); each chunk is yielded as a record batch without copying. The parse is accepted only when it
   produced exactly one row per non-blank line (blank = only spaces, tabs, CRs), so a line holding two objects
   can't slip through. A UTF-8 byte-order mark at the start of the file is skipped.
   JSON has no timestamps: columns Arrow infers as ``timestamp`` are re-read as strings, text stays as written.
3. **Fallback, for a failing block only.** Lines are screened one by one (UTF-8 decode, ``json.loads``, must be an
   object); then the remaining lines are parsed by Arrow again, and lines it alone rejects (duplicate keys, a
   value that does not fit ``schema=``) are found from the row it names or, failing that, line by line.
   With ``on_error="raise"`` the first bad line raises ``InputError(path, line=N)`` with the reason; with
   ``"quarantine"`` bad lines go to the callback with their line numbers and raw bytes, and the good lines of
   the block are yielded in order. Blank lines are skipped, never errors.
4. **Schema.** ``schema=`` given: used as Arrow's explicit schema (fields not in it are ignored; a value that
   does not fit is a bad line). Otherwise types are inferred per block and promoted across blocks
   (``zephyr.io.schema``): each batch is cast to the running schema, so batch schemas only ever widen (null →
   a type, int64 → double, new columns appended). A real conflict (string vs number in one column) raises
   ``SchemaError`` naming file, line range, column and the fix (pass ``schema=``). With ``planned=`` (the
   schema a job decided for all its files, ``zephyr.io.schema``), each inferred batch is then cast to
   it; a type the plan does not hold raises ``SchemaError`` naming the lines, the column and both types.
5. **Byte ranges** (plain files only): a shard ``[start, stop)`` seeks to ``start - 1``, skips to the next
   newline (unless at 0) and reads every line that *starts* before ``stop``. Absolute line numbers are unknown
   past byte 0 without reading the prefix, so such shards report "byte offset N" (and a null quarantine
   ``line``), and say so in the message.
6. **Truncated .gz/.zst.** Every whole line that decompresses before the cut is read (with zstd, up to one
   128 KiB block before the cut does not decompress). Then, with ``on_error="raise"``, ``InputError`` names
   the file and the last whole line (rows before it have already been yielded, but the error is always
   raised); with ``"quarantine"``, the cut goes to the callback as one entry: the cut line's number, a reason
   naming the last whole line, and the cut line's bytes as ``raw``. An empty file
   (0 bytes, or a compressed empty stream) yields no rows.
7. **UTF-16 or UTF-32 text** (a byte-order mark, or the NUL pattern of such text: ``zephyr.io.text_encoding``)
   is not read line by line as broken UTF-8: with ``on_error="raise"``, ``InputError`` names the file, what
   it is and the ``iconv`` line that converts it; with ``"quarantine"``, the file is one entry (null line and
   raw). No row of it is yielded.
8. **Bytes after a complete .gz/.zst stream** (trailing garbage: a tail that starts no gzip member or zstd
   frame). Every line of the stream is read; then, with ``on_error="raise"``, ``InputError`` names the file,
   the tail's byte offset (in the compressed file) and the fix; with ``"quarantine"``, the tail goes to the
   callback as one entry: a null line, a reason naming the offset and the tail's size, and its first bytes
   (up to 64 KiB) as ``raw``. The stream's rows are kept either way: each member was decoded and checked.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence

import pyarrow as pa

from zephyr.errors import ConfigError, InputError
from zephyr.io.jsonl_blocks import StreamCut, StreamTail, WideText, iter_blocks
from zephyr.io.jsonl_parse import BlockParser
from zephyr.io.paths import filesystem, infer_compression
from zephyr.io.quarantine import QuarantineFn, quarantine_table
from zephyr.io.text_encoding import wide_text_message

__all__ = ["read_jsonl_shard", "split_byte_ranges"]

logger = logging.getLogger(__name__)


def split_byte_ranges(path: str, approx_shard_bytes: int) -> list[tuple[int, int] | None]:
    """Byte ranges of about ``approx_shard_bytes`` covering the file; ``[None]`` when one range would do."""
    fs, stripped = filesystem(path)
    try:
        size = fs.size(stripped)
    except (FileNotFoundError, OSError) as exc:
        raise InputError(f"cannot stat: {exc}", path=path) from exc
    if size is None or size <= approx_shard_bytes:
        return [None]
    return [(start, min(size, start + approx_shard_bytes)) for start in range(0, size, approx_shard_bytes)]


def read_jsonl_shard(
    shard,
    *,
    columns: Sequence[str] | None,
    schema: pa.Schema | None,
    quarantine: QuarantineFn | None,
    batch_bytes: int,
    planned: pa.Schema | None = None,
) -> Iterator[pa.RecordBatch]:
    compression = infer_compression(shard.path)
    if shard.byte_range is not None and compression is not None:
        raise ConfigError(f"{shard.describe()}: a compressed file cannot be read by byte range")
    parser = BlockParser(shard.path, schema=schema, columns=columns, quarantine=quarantine, planned=planned)
    try:
        for block in iter_blocks(shard.path, compression, shard.byte_range, batch_bytes):
            table = parser.parse(block)
            if table is None or table.num_rows == 0:
                continue
            if table.num_columns == 0:  # rows of `{}`: to_batches() would lose the row count
                yield pa.RecordBatch.from_struct_array(pa.array([{}] * table.num_rows, type=pa.struct([])))
                continue
            # Arrow's parse chunks (about 8 MiB each, see jsonl_parse) are yielded as they are: no copy
            yield from table.to_batches()
    except StreamCut as cut:
        _report_cut(shard.path, cut, quarantine)
    except StreamTail as tail:
        _report_tail(shard.path, tail, quarantine)
    except WideText as wide:
        what = wide_text_message(wide.encoding)
        if quarantine is None:
            raise InputError(
                f"the file is {what}; or pass on_error='quarantine' to set it aside", path=shard.path
            ) from None
        quarantine(quarantine_table(shard.path, [None], [f"the file is {what}"], [None]))


def _report_cut(path: str, cut: StreamCut, quarantine: QuarantineFn | None) -> None:
    """A cut stream: raise naming the last whole line, or quarantine the cut as one entry (the lines before it
    have been yielded)."""
    what = f"truncated {cut.codec} stream: the file is cut off {cut.where()} ({cut.detail})"
    if quarantine is None:
        whole = (cut.line or 1) - 1
        kept = f"lines 1-{whole} decompress" if whole else "no whole line decompresses"
        raise InputError(
            f"{what}; {kept}, the rest of the file is missing. Re-download or re-compress the file, or pass "
            "on_error='quarantine' to keep the whole lines and set the cut aside.",
            path=path,
        ) from cut.__cause__
    partial = f"{len(cut.partial)} bytes of a cut line" if cut.partial else "no bytes of the next line"
    quarantine(
        quarantine_table(
            path, [cut.line], [f"{what}: {partial} and the rest of the file are missing"], [cut.partial]
        )
    )


def _report_tail(path: str, tail: StreamTail, quarantine: QuarantineFn | None) -> None:
    """Bytes after a complete compressed stream: raise naming the offset, or quarantine the tail as one entry
    (the stream's lines have been yielded)."""
    fs, stripped = filesystem(path)
    try:
        size = fs.size(stripped)
    except OSError:
        size = None
    length = f"{size - tail.offset:,} bytes" if size is not None else "the bytes"
    what = (
        f"{length} after the end of its {tail.codec} stream, from byte {tail.offset:,} of the file, are not "
        f"{tail.codec} data (trailing garbage)"
    )
    read = f"its {tail.lines:,} lines decompressed and were read" if tail.lines is not None else "it was read"
    if quarantine is None:
        raise InputError(
            f"{what}; {read}. Cut the file at that byte (head -c {tail.offset} FILE), or pass "
            "on_error='quarantine' to keep the lines and set the tail aside.",
            path=path,
        ) from tail.__cause__
    quarantine(quarantine_table(path, [None], [f"{what}; {read}"], [tail.head]))
