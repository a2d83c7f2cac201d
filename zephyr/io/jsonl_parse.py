"""Parse one block of JSONL lines into an Arrow table: steps 2–4 of the ``zephyr.io.jsonl_source`` contract.

The fast path is one vectorized Arrow parse, accepted only with exactly one row per non-blank line; a block
that fails falls back to screening its lines one by one, so bad lines raise or go to quarantine with their
numbers; the schema only widens across blocks, or is the caller's (``schema=``) or the job's (``planned=``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence

import pyarrow as pa
import pyarrow.json as pj
import pyarrow.types as pat

from zephyr.errors import InputError, SchemaError
from zephyr.io.jsonl_blocks import Block
from zephyr.io.quarantine import QuarantineFn, quarantine_table
from zephyr.io.schema import SchemaConflict, conform, fit_planned, promote_schemas

__all__ = ["BlockParser"]

_PARSE_CHUNK_BYTES = 8 << 20  # Arrow's own block size inside one of our blocks: lets it use several cores
_BLANK_AFTER_NEWLINE = re.compile(rb"\n[ \t\r]*(?=\n)")
_BLANK_FIRST = re.compile(rb"[ \t\r]*(?:\n|\Z)")
_ROW_IN_MESSAGE = re.compile(r"in row (\d+)")
_CONFLICT = re.compile(r"Column\(([^)]*)\) changed from (\w+) to (\w+)")
_MAX_ROW_RETRIES = 16
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


def _has_timestamp(t: pa.DataType) -> bool:
    if pat.is_timestamp(t):
        return True
    if pat.is_struct(t):
        return any(_has_timestamp(f.type) for f in t)
    if pat.is_list(t) or pat.is_large_list(t):
        return _has_timestamp(t.value_type)
    return False


def _timestamps_as_strings(t: pa.DataType) -> pa.DataType:
    if pat.is_timestamp(t):
        return pa.string()
    if pat.is_struct(t):
        return pa.struct([f.with_type(_timestamps_as_strings(f.type)) for f in t])
    if pat.is_list(t):
        return pa.list_(t.value_field.with_type(_timestamps_as_strings(t.value_type)))
    if pat.is_large_list(t):
        return pa.large_list(t.value_field.with_type(_timestamps_as_strings(t.value_type)))
    return t


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


class BlockParser:
    def __init__(
        self,
        path: str,
        *,
        schema: pa.Schema | None,
        columns: Sequence[str] | None,
        quarantine: QuarantineFn | None,
        planned: pa.Schema | None = None,
    ):
        self.path = path
        self.columns = list(columns) if columns is not None else None
        self.quarantine = quarantine
        self.user_schema = schema
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
        if not whole and len(data) > _PARSE_CHUNK_BYTES:
            # Arrow parses its blocks in parallel; a line longer than one makes it raise "straddling", and then
            # the whole block is parsed as one.
            try:
                return pj.read_json(
                    pa.BufferReader(data),
                    read_options=pj.ReadOptions(use_threads=True, block_size=_PARSE_CHUNK_BYTES),
                    parse_options=parse_options,
                )
            except pa.ArrowInvalid as exc:
                if "straddl" not in str(exc):
                    raise
        return pj.read_json(
            pa.BufferReader(data),
            read_options=pj.ReadOptions(use_threads=True, block_size=max(len(data) + 64, 1 << 16)),
            parse_options=parse_options,
        )

    def _parse(self, data: bytes, *, whole: bool = False) -> pa.Table:
        """``read_json`` with inferred timestamps turned back into the strings they were.

        ``whole=True`` parses ``data`` as one Arrow block, so a row number in an error is a row of ``data``.
        """
        for _ in range(8):
            table = self._read_json(data, whole=whole)
            if self.explicit is not None:
                return table
            stamped = [f for f in table.schema if _has_timestamp(f.type)]
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
        table: pa.Table | None = None
        retries = 0
        isolated = False
        while good:
            try:
                table = self._parse(b"\n".join(lines[i] for i in good), whole=True)
            except pa.ArrowInvalid as exc:
                message = str(exc)
                match = _ROW_IN_MESSAGE.search(message)
                row = int(match.group(1)) if match else -1
                conflict = _CONFLICT.search(message)
                if conflict and self.explicit is None and 0 <= row < len(good):
                    raise self._conflict_error(block, lines, good, row, conflict) from exc
                if 0 <= row < len(good) and retries < _MAX_ROW_RETRIES:
                    retries += 1
                    bad.append((good.pop(row), f"rejected by the JSON parser: {message}"))
                    continue
                if isolated:
                    raise InputError(
                        f"{self._where(block, lines, good[0])}..{self._where(block, lines, good[-1])}: "
                        f"the JSON parser rejects these lines together but accepts each alone: {message}",
                        path=self.path,
                    ) from exc
                isolated = True
                still_good = []
                for i in good:
                    try:
                        self._parse(lines[i], whole=True)
                        still_good.append(i)
                    except pa.ArrowInvalid as line_exc:
                        bad.append((i, f"rejected by the JSON parser: {line_exc}"))
                good = still_good
                table = None
                continue
            if table.num_rows != len(good):
                raise InputError(
                    f"{self._where(block, lines, good[0])}: parsed {table.num_rows} rows from {len(good)} "
                    "screened lines; please report this file",
                    path=self.path,
                )
            break
        bad.sort()
        self._report(block, lines, bad)
        return table if good else None

    def _where(self, block: Block, lines: list[bytes], index: int) -> str:
        if block.first_line is not None:
            return f"line {block.first_line + index}"
        offset = block.offset + sum(len(line) + 1 for line in lines[:index])
        return f"byte offset {offset} (line number unknown: a byte-range shard)"

    def _line_number(self, block: Block, index: int) -> int | None:
        return None if block.first_line is None else block.first_line + index

    def _report(self, block: Block, lines: list[bytes], bad: list[tuple[int, str]]) -> None:
        if not bad:
            return
        if self.quarantine is None:
            index, reason = bad[0]
            line = self._line_number(block, index)
            where = "" if line is not None else f"at {self._where(block, lines, index)}: "
            raise InputError(
                f"{where}{reason}. Fix the line, or pass on_error='quarantine' to set bad lines aside.",
                path=self.path,
                line=line,
            )
        numbers = [self._line_number(block, i) for i, _ in bad]
        reasons = [
            reason if block.first_line is not None else f"{reason} (at {self._where(block, lines, i)})"
            for i, reason in bad
        ]
        self.quarantine(quarantine_table(self.path, numbers, reasons, [lines[i] for i, _ in bad]))

    def _conflict_error(self, block, lines, good, row, match) -> SchemaError:
        column = match.group(1).strip("/").replace("/", ".") or "<row>"
        first = self._where(block, lines, good[0])
        last = self._where(block, lines, good[-1])
        here = self._where(block, lines, good[row])
        return SchemaError(
            f"{self.path}: column {column!r} holds {match.group(2)} values and then a {match.group(3)} at {here} "
            f"(block {first} to {last}); one column needs one type. {_FIX_SCHEMA}"
        )

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
            if self.running is None:
                self.running = table.schema
            else:
                try:
                    self.running = promote_schemas(self.running, table.schema)
                except SchemaConflict as exc:
                    raise SchemaError(
                        f"{self.path}: column {exc.column!r} was {exc.left} in earlier lines but is {exc.right} "
                        f"in {where}; one column needs one type. {_FIX_SCHEMA}"
                    ) from exc
            table = conform(table, self.running, where=where, fix=_FIX_SCHEMA)
            if self.planned is not None:
                table = fit_planned(table, self.planned, where=where)
        return table

    def _block_range(self, block: Block) -> str:
        if block.first_line is not None:
            last = block.first_line + block.newlines - (1 if block.data.endswith(b"\n") else 0)
            return f"{self.path} lines {block.first_line}-{last}"
        return f"{self.path} bytes {block.offset}-{block.offset + len(block.data)} (byte-range shard)"
