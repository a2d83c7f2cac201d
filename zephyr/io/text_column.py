"""The one check of a text column, shared by every command that reads text (tokenize, filter, normalize, ...).

A text column holds strings: ``string``, ``large_string`` or ``string_view``. A column of type ``null`` is
accepted too: Arrow gives that type to a column without a single value (a JSONL block whose texts are all null,
an all-``None`` pandas column), and its rows are null texts, which every command already handles (filter and
tokenize quarantine them as ``null_text``, annotators leave their outputs null). Any other type (numbers,
binary, lists, ...) is a ``SchemaError``: turning numbers into text would silently tokenize or filter data
that is not text.

Two entry points, one rule:

- ``require_text_column(schema, column, where=...)`` checks one schema (a stage's batch, a file's footer).
- ``check_text_inputs(paths, column, format=...)`` runs it on every input file before a job starts, reading
  only what decides it: a Parquet footer, the first 64 KiB of a JSONL file, the first batch of a Vortex file
  (8 files at a time). So a wrong column fails at once, in one line naming the file and the column. A JSONL
  file whose first lines have only null texts passes here; the stages check each batch again.

>>> import pyarrow as pa
>>> require_text_column(pa.schema([("text", pa.large_string())]), "text")
>>> require_text_column(pa.schema([("text", pa.int64())]), "text", where="a.parquet")
Traceback (most recent call last):
    ...
zephyr.errors.SchemaError: a.parquet: text column 'text' has type int64, not a string type; ...
"""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

import pyarrow as pa
import pyarrow.types as pat

from zephyr.errors import SchemaError
from zephyr.io.paths import Format

__all__ = ["is_text_type", "require_text_column", "check_text_inputs"]

_PEEK_BYTES = (
    64 << 10
)  # JSONL bytes parsed to learn a file's column types (a longer first line is read whole)
_PEEK_THREADS = 8  # files checked at once (footer and first-block reads wait on storage, not CPU)


def is_text_type(t: pa.DataType) -> bool:
    """True for the types a text column may have: the string types, and ``null`` (no value at all)."""
    return pat.is_string(t) or pat.is_large_string(t) or pat.is_string_view(t) or pat.is_null(t)


def require_text_column(
    schema: pa.Schema, column: str, *, where: str | None = None, what: str = "text"
) -> None:
    """Raise ``SchemaError`` unless ``schema`` has ``column`` with a text type (see the module docstring).

    ``where`` (a file, a shard) starts the message; ``what`` names the column's role ("text", "language").
    """
    prefix = f"{where}: " if where else ""
    other = "--text-column" if what == "text" else "its option"
    if column not in schema.names:
        raise SchemaError(
            f"{prefix}{what} column {column!r} not found; the columns are {schema.names} "
            f"(name the right one with {other})"
        )
    t = schema.field(column).type
    if not is_text_type(t):
        raise SchemaError(
            f"{prefix}{what} column {column!r} has type {t}, not a string type; cast it to string before "
            f"this step (numbers are not turned into text), or name another column with {other}"
        )


def check_text_inputs(paths: str | Sequence[str], column: str, *, format: Format | None = None) -> None:
    """Check ``column`` of every input file with ``require_text_column``, before any task runs.

    ``paths`` and ``format`` are resolved as ``zephyr.io.list_shards`` does. A JSONL or Vortex file without
    rows has no column types and passes; a 0-row Parquet file is checked like any other (its empty, typed
    table still flows through the steps). Raises the first failing file's error, in file order.
    """
    from zephyr.io.sources import list_shards

    files = list_shards(paths, format)  # one shard per file
    if files and files[0].format == "warc":
        from zephyr.errors import SchemaError

        raise SchemaError(
            f"{files[0].path} is a WARC file: its records hold HTML, not a {column!r} column; extract the text "
            "first (zephyr extract WARC... --output DIR, or zephyr.read_warc), then run this command on DIR"
        )
    with ThreadPoolExecutor(max_workers=min(_PEEK_THREADS, max(1, len(files)))) as pool:
        for path, schema in pool.map(_peek_schema, files):
            if schema is not None:
                require_text_column(schema, column, where=path)


def _peek_schema(shard) -> tuple[str, pa.Schema | None]:
    """(path, the file's schema as a job reads it), or (path, None) for a JSONL/Vortex file without rows."""
    from zephyr.io.schema_plan import peek_schema

    return peek_schema(shard, peek_bytes=_PEEK_BYTES)
