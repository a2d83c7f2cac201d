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
   value that does not fit ``schema=``) are found by bisection (``zephyr.io.schema.failing_rows``).
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

Blocks (``_iter_blocks``): a JSONL stream (plain, .gz, .zst, or a byte range of a plain file) cut into blocks of
whole lines.

Steps 1, 5, 6 and 7 of the ``zephyr.io.jsonl`` contract: blocks of about ``block_bytes`` cut after
the last newline (a longer line grows its block), a byte-range shard starting at the line after
``start - 1``, a truncated compressed stream reported (``_report_cut``) after the last whole line, and bytes
after a complete compressed stream reported (``_report_tail``) after the stream's last line: raised, or set
aside by ``quarantine.refuse_or_set_aside``, at the point they are found. A file that is UTF-16 or UTF-32 text
(``zephyr.io.text_encoding``) is reported before any block, from the shard that starts at byte 0; the file's
other byte-range shards yield nothing, so it is reported once.

Parsing (``_BlockParser``): one block of JSONL lines into an Arrow table, steps 2–4 of the ``zephyr.io.jsonl`` contract.

The fast path is one vectorized Arrow parse, accepted only with exactly one row per non-blank line; a block
that fails falls back to screening its lines one by one, so bad lines raise or go to quarantine with their
numbers; the schema only widens across blocks, or is the caller's (``schema=``) or the job's (``planned=``).

``encode_ndjson``, the JSONL writer's (``zephyr.io.sinks.JsonlWriter``): one JSON object per row by polars' vectorized
writer, binary as base64, compressed by ``zephyr.io.compression`` (see the ``zephyr.io.sinks`` contract).
"""

from __future__ import annotations

import io
import json
import logging
import re
from collections.abc import Iterator
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.json as pj
import pyarrow.types as pat

from zephyr.errors import ConfigError, InputError, SchemaError
from zephyr.io.compression import (
    CorruptStream,
    TrailingData,
    TruncatedStream,
    open_decompressed,
)
from zephyr.io.paths import check_not_compressed, filesystem, infer_compression, open_input
from zephyr.io.quarantine import QuarantineFn, refuse_or_set_aside, refuse_wide_text
from zephyr.io.schema import PLANNED_FIX, conform, failing_rows, is_binary_like, map_leaves, promote_or_refuse
from zephyr.io.text_encoding import SAMPLE_BYTES, wide_text

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


def read_jsonl_shard(shard, read) -> Iterator[pa.RecordBatch]:
    """The batches of a JSONL shard (the module docstring), read as ``read`` (a ``zephyr.io.sources.ReadOptions``)
    says; its ``buffer_bytes`` does not apply: JSONL streams through blocks of ``batch_bytes``."""
    compression = infer_compression(shard.path)
    if shard.byte_range is not None and compression is not None:
        raise ConfigError(f"{shard.describe()}: a compressed file cannot be read by byte range")
    parser = _BlockParser(shard.path, read)
    for block in _iter_blocks(shard.path, compression, shard.byte_range, read.batch_bytes, read.quarantine):
        table = parser.parse(block)
        if table is None or table.num_rows == 0:
            continue
        if table.num_columns == 0:  # rows of `{}`: to_batches() would lose the row count
            yield pa.RecordBatch.from_struct_array(pa.array([{}] * table.num_rows, type=pa.struct([])))
            continue
        # Arrow's parse chunks (about 8 MiB each, see jsonl_parse) are yielded as they are: no copy
        yield from table.to_batches()


def _report_cut(
    path: str, quarantine: QuarantineFn | None, codec: str, line: int | None, offset: int, partial: bytes, exc
) -> None:
    """A stream cut after the whole lines already yielded (``line``: the cut line's number, None when
    unknown; ``partial``: its bytes): raise naming the last whole line, or quarantine the cut as one entry."""
    where = f"after line {line - 1}" if line is not None else f"after byte {offset}"
    what = f"truncated {codec} stream: the file is cut off {where} ({exc})"
    whole = (line or 1) - 1
    kept = f"lines 1-{whole} decompress" if whole else "no whole line decompresses"
    partial_text = f"{len(partial)} bytes of a cut line" if partial else "no bytes of the next line"
    refuse_or_set_aside(
        quarantine,
        path,
        f"{what}; {kept}, the rest of the file is missing. Re-download or re-compress the file, or pass "
        "on_error='quarantine' to keep the whole lines and set the cut aside.",
        [f"{what}: {partial_text} and the rest of the file are missing"],
        [line],
        [partial],
    )


def _report_tail(path: str, quarantine: QuarantineFn | None, tail: TrailingData, lines: int | None) -> None:
    """Bytes after a complete compressed stream, whose ``lines`` have been yielded: raise naming the offset, or
    quarantine the tail as one entry."""
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
    read = f"its {lines:,} lines decompressed and were read" if lines is not None else "it was read"
    refuse_or_set_aside(
        quarantine,
        path,
        f"{what}; {read}. Cut the file at that byte (head -c {tail.offset} FILE), or pass "
        "on_error='quarantine' to keep the lines and set the tail aside.",
        [f"{what}; {read}"],
        raws=[tail.head],
    )


_UTF8_BOM = b"\xef\xbb\xbf"


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


def _iter_blocks(
    path: str,
    compression: str | None,
    byte_range: tuple[int, int] | None,
    block_bytes: int,
    quarantine: QuarantineFn | None,
) -> Iterator[Block]:
    with open_input(path) as raw:
        stream = open_decompressed(raw, compression)
        start = pos = byte_range[0] if byte_range is not None else 0
        end = None  # a byte-range shard's: the end of the line holding its last byte
        if byte_range is not None:
            raw.seek(byte_range[1] - 1)
            end = byte_range[1] - 1 + len(raw.readline())
            raw.seek(0)
        if start > 0:
            if wide_text(raw.read(SAMPLE_BYTES)) is not None:
                return  # not UTF-8 at all: the shard at byte 0 reports the file
            raw.seek(start - 1)
            skipped = raw.readline()  # the rest of the line holding byte start - 1: the previous shard's
            pos = start - 1 + len(skipped)
            if not skipped.endswith(b"\n") or pos >= end:
                return
        line = 1 if start == 0 else None
        block_start = pos
        parts: list[bytes] = []
        first = True
        trailing: TrailingData | None = None
        while True:
            try:
                chunk = stream.read(block_bytes if end is None else min(block_bytes, end - pos))
            except TruncatedStream as exc:
                # every whole line before the cut has been yielded; what is left is the start of a cut line
                _report_cut(
                    path, quarantine, compression or "compressed", line, block_start, b"".join(parts), exc
                )
                return
            except CorruptStream as exc:
                last = f"after line {line - 1}" if line is not None else f"after byte {block_start}"
                raise InputError(f"{exc} {last}", path=path) from exc
            except TrailingData as exc:
                chunk, trailing = b"", exc  # the stream ended whole: so did its last line (if unterminated)
            pos += len(chunk)  # raw bytes read (a byte-range shard stops at its end)
            if first and chunk and start == 0:
                if compression is None:
                    check_not_compressed(chunk, path)
                if refuse_wide_text(chunk[:SAMPLE_BYTES], path, quarantine):  # not broken UTF-8 line by line
                    return
                if chunk.startswith(_UTF8_BOM):  # written by some Windows tools; not part of line 1's JSON
                    chunk = chunk[len(_UTF8_BOM) :]
                    block_start += len(_UTF8_BOM)
            first = False
            if not chunk:
                tail = b"".join(parts)
                if tail:
                    yield Block(tail, line, block_start, tail.count(b"\n"))
                if trailing is not None:  # reported after the stream's last line
                    if line is not None:
                        line += tail.count(b"\n") + (0 if tail.endswith(b"\n") or not tail else 1)
                    _report_tail(path, quarantine, trailing, None if line is None else line - 1)
                return
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
            block = Block(data, line, block_start, data.count(b"\n"))
            yield block
            if line is not None:
                line += block.newlines
            block_start += len(data)
            parts = [carry] if carry else []


_PARSE_CHUNK_BYTES = 8 << 20  # Arrow's own block size inside one of our blocks: lets it use several cores
_BLANK_AFTER_NEWLINE = re.compile(rb"\n[ \t\r]*(?=\n)")
_BLANK_FIRST = re.compile(rb"[ \t\r]*(?:\n|\Z)")
_ROW_IN_MESSAGE = re.compile(r"in row (\d+)")
_CONFLICT = re.compile(r"Column\(([^)]*)\) changed from (\w+) to (\w+)")
_WHITESPACE = b" \t\r"
_FIX_SCHEMA = "Pass schema= to read_jsonl with the type you want for it (e.g. pa.string())."


def _content_lines(data: bytes, newlines: int) -> int:
    """Non-blank lines in ``data`` (blank: only spaces, tabs and CRs), with fast C-level scans."""
    terminated = data.endswith(b"\n")
    total = newlines + (0 if terminated else 1)
    blank = len(_BLANK_AFTER_NEWLINE.findall(data))
    if _BLANK_FIRST.match(data):
        blank += 1
    if not terminated and newlines and not data[data.rfind(b"\n") + 1 :].strip(_WHITESPACE):
        blank += 1
    return total - blank


def _utf8_valid(data: bytes) -> bool:
    """One vectorized UTF-8 check of the whole block (Arrow's SIMD validator) without copying it."""
    offsets = pa.array([0, len(data)], pa.int64()).buffers()[1]
    array = pa.Array.from_buffers(pa.large_binary(), 1, [None, offsets, pa.py_buffer(data)])
    try:
        array.cast(pa.large_string())
        return True
    except pa.ArrowInvalid:
        return False


def _timestamps_as_strings(t: pa.DataType) -> pa.DataType:
    return map_leaves(t, lambda x: pa.string() if pat.is_timestamp(x) else x)


_JSON_TYPE_NAMES = {list: "an array", str: "a string", int: "a number", float: "a number", bool: "a boolean"}


def _screen(line: bytes) -> str | None:
    """Why a non-blank line is not one JSON object, or None when it is."""
    try:
        text = line.decode("utf-8")
    except UnicodeDecodeError as exc:
        return f"invalid UTF-8 at byte {exc.start} of the line"
    try:
        value = json.loads(text)
    except (ValueError, RecursionError) as exc:
        return f"invalid JSON: {exc}"
    if not isinstance(value, dict):
        kind = "null" if value is None else _JSON_TYPE_NAMES.get(type(value), type(value).__name__)
        return f"valid JSON but not an object (it is {kind})"
    return None


class _BlockParser:
    def __init__(self, path: str, read):
        self.path = path
        self.columns = columns = read.columns
        self.quarantine = read.quarantine
        schema, planned = read.schema, read.planned
        if schema is not None and columns is not None:
            missing = [c for c in columns if c not in schema.names]
            if missing:
                raise SchemaError(
                    f"{path}: column(s) {missing} are not in the schema passed as schema= ({schema.names}); "
                    "add them to the schema or drop them from columns="
                )
            schema = pa.schema([schema.field(c) for c in columns])
        self.explicit = schema  # the user's schema, projected to `columns`
        if planned is not None and columns is not None:
            planned = pa.schema([planned.field(c) for c in columns if c in planned.names])
        self.planned = planned  # the job's one input schema (zephyr.io.schema): inferred batches fit it
        self.forced: dict[str, pa.DataType] = {}  # inferred fields whose timestamps must stay strings
        self.running: pa.Schema | None = None

    # -- parsing -----------------------------------------------------------------------------------------------
    def _read_json(self, data: bytes, *, whole: bool) -> pa.Table:
        if self.explicit is not None:
            explicit, behavior = self.explicit, "ignore"
        else:
            explicit = pa.schema(list(self.forced.items())) if self.forced else None
            behavior = "infer"
        parse_options = pj.ParseOptions(explicit_schema=explicit, unexpected_field_behavior=behavior)
        # Arrow parses its blocks in parallel; a line longer than one makes it raise "straddling", and then
        # the whole block is parsed as one.
        chunked = not whole and len(data) > _PARSE_CHUNK_BYTES
        block_bytes = _PARSE_CHUNK_BYTES if chunked else max(len(data) + 64, 1 << 16)
        try:
            read_options = pj.ReadOptions(use_threads=True, block_size=block_bytes)
            return pj.read_json(pa.BufferReader(data), read_options=read_options, parse_options=parse_options)
        except pa.ArrowInvalid as exc:
            if not chunked or "straddl" not in str(exc):
                raise
        return self._read_json(data, whole=True)

    def _parse(self, data: bytes, *, whole: bool = False) -> pa.Table:
        """``read_json`` with inferred timestamps turned back into the strings they were.

        ``whole=True`` parses ``data`` as one Arrow block, so a row number in an error is a row of ``data``.
        """
        for _ in range(8):
            table = self._read_json(data, whole=whole)
            if self.explicit is not None:
                return table
            stamped = [f for f in table.schema if not _timestamps_as_strings(f.type).equals(f.type)]
            if not stamped:
                return table
            for field in stamped:
                self.forced[field.name] = _timestamps_as_strings(field.type)
        return table

    def parse(self, block: Block) -> pa.Table | None:
        data = block.data
        content = _content_lines(data, block.newlines)
        if content == 0:
            return None
        table = None
        if _utf8_valid(data):
            try:
                table = self._parse(data)
            except pa.ArrowInvalid:
                table = None
            if table is not None and table.num_rows != content:
                table = None
        if table is None:
            table = self._fallback(block)
            if table is None:
                return None
        return self._finish(table, block)

    # -- the slow path for a block that failed -----------------------------------------------------------------
    def _fallback(self, block: Block) -> pa.Table | None:
        lines = block.data.split(b"\n")
        if block.data.endswith(b"\n"):
            lines.pop()
        good: list[int] = []
        bad: list[tuple[int, str]] = []
        for i, line in enumerate(lines):
            if not line.strip(_WHITESPACE):
                continue
            reason = _screen(line)
            if reason is None:
                good.append(i)
            else:
                if i == 0 and block.first_line == 1 and line.lstrip().startswith(b"["):
                    reason += " (the file looks like one JSON array, not JSON Lines with one object per line)"
                bad.append((i, reason))

        def error(lo: int, hi: int) -> str | None:
            try:
                self._parse(b"\n".join(lines[i] for i in good[lo:hi]), whole=True)
                return None
            except pa.ArrowInvalid as exc:
                return str(exc)

        table: pa.Table | None = None
        while good:
            try:
                table = self._parse(b"\n".join(lines[i] for i in good), whole=True)
                break
            except pa.ArrowInvalid as exc:
                match, conflict = _ROW_IN_MESSAGE.search(str(exc)), _CONFLICT.search(str(exc))
                row = int(match.group(1)) if match else -1
                if conflict and self.explicit is None and 0 <= row < len(good):  # one column, two JSON types
                    earlier, here = (
                        self._parse(b"\n".join(lines[i] for i in part), whole=True)
                        for part in (good[:row], good[row : row + 1])
                    )
                    promote_or_refuse(
                        earlier.schema,
                        here.schema,
                        f"{self.path} {self._where(block, lines, good[row])}",
                        _FIX_SCHEMA,
                    )
                rejected = dict(failing_rows(len(good), error))  # the lines Arrow alone rejects, by bisection
                if not rejected:
                    raise InputError(
                        f"{self._where(block, lines, good[0])}..{self._where(block, lines, good[-1])}: "
                        f"the JSON parser rejects these lines together but accepts each alone: {exc}",
                        path=self.path,
                    ) from exc
                bad += [(good[k], f"rejected by the JSON parser: {m}") for k, m in rejected.items()]
                good = [i for k, i in enumerate(good) if k not in rejected]
        bad.sort()
        self._report(block, lines, bad)
        return table if good else None

    def _where(self, block: Block, lines: list[bytes], index: int) -> str:
        if block.first_line is not None:
            return f"line {block.first_line + index}"
        offset = block.offset + sum(len(line) + 1 for line in lines[:index])
        return f"byte offset {offset} (line number unknown: a byte-range shard)"

    def _report(self, block: Block, lines: list[bytes], bad: list[tuple[int, str]]) -> None:
        numbers = [None if block.first_line is None else block.first_line + i for i, _ in bad]
        reasons = [
            r if block.first_line is not None else f"{r} (at {self._where(block, lines, i)})" for i, r in bad
        ]
        if bad:
            refusal = f"{reasons[0]}. Fix the line, or pass on_error='quarantine' to set bad lines aside."
            raws = [lines[i] for i, _ in bad]
            refuse_or_set_aside(self.quarantine, self.path, refusal, reasons, numbers, raws, line=numbers[0])

    # -- schema ------------------------------------------------------------------------------------------------
    def _finish(self, table: pa.Table, block: Block) -> pa.Table:
        where = self._block_range(block)
        if self.explicit is not None:
            table = conform(table, self.explicit, where=where, fix=_FIX_SCHEMA)
        else:
            if self.columns is not None:
                arrays = [
                    table.column(c) if c in table.column_names else pa.nulls(table.num_rows, pa.null())
                    for c in self.columns
                ]
                table = pa.Table.from_arrays(arrays, names=self.columns)
            self.running = promote_or_refuse(self.running, table.schema, where, _FIX_SCHEMA)
            table = conform(table, self.running, where=where, fix=_FIX_SCHEMA)
            if self.planned is not None:  # inferred types: each must widen into the plan's
                table = conform(table, self.planned, where=where, fix=PLANNED_FIX)
        return table

    def _block_range(self, block: Block) -> str:
        if block.first_line is not None:
            last = block.first_line + block.newlines - (1 if block.data.endswith(b"\n") else 0)
            return f"{self.path} lines {block.first_line}-{last}"
        return f"{self.path} bytes {block.offset}-{block.offset + len(block.data)} (byte-range shard)"


def _nested_binary(t: pa.DataType) -> bool:
    if is_binary_like(t) or pat.is_fixed_size_binary(t):
        return True
    if pat.is_struct(t):
        return any(_nested_binary(f.type) for f in t)
    if pat.is_list(t) or pat.is_large_list(t) or pat.is_fixed_size_list(t):
        return _nested_binary(t.value_type)
    return False


def encode_ndjson(batch: pa.RecordBatch | pa.Table, *, where: str = "batch") -> bytes:
    """One JSON object per row, newline-terminated, keys in column order (polars' vectorized writer)."""
    import polars as pl

    base64_columns = []
    for field in batch.schema:
        if is_binary_like(field.type):
            base64_columns.append(field.name)
        elif _nested_binary(field.type):
            raise SchemaError(
                f"{where}: column {field.name!r} ({field.type}) nests binary values, which JSON cannot hold; "
                "cast them to strings (or base64-encode them) before writing JSONL"
            )
    if batch.num_columns == 0:
        return b"{}\n" * batch.num_rows
    try:
        frame = pl.from_arrow(batch)
        if base64_columns:
            frame = frame.with_columns([pl.col(c).bin.encode("base64") for c in base64_columns])
        buffer = io.BytesIO()
        frame.write_ndjson(buffer)
    except Exception as exc:  # polars raises its own exception types for unsupported dtypes
        raise SchemaError(f"{where}: cannot encode columns {batch.schema.names} as JSON: {exc}") from exc
    return buffer.getvalue()
