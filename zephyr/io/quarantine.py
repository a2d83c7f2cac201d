"""Bad input rows: the table of rows a reader set aside (``on_error="quarantine"``, handed to the caller's
``quarantine`` callback), the check that sets aside the invalid rows of a decoded batch (``drop_bad_rows``),
and the one rule of a text column (``require_text_column``).

Schema (version 1) of the quarantine table, one row per bad input row:

- ``source`` (string): the file's path or URL.
- ``line`` (int64, nullable): the 1-based line for JSONL; the 0-based row index within the file for Parquet and
  Vortex. Null for a line of a byte-range JSONL shard that does not start at byte 0 (its absolute line is
  unknown without reading the file from the start); ``reason`` then names the line's byte offset.
- ``reason`` (string): what is wrong, e.g. ``invalid JSON: Expecting ',' delimiter: line 1 column 9``.
- ``raw`` (large_binary, nullable): the line's bytes for JSONL, null for columnar formats.

A reader never yields a quarantined row, so for every shard: rows yielded + rows quarantined == rows (or
non-blank lines) in the input.

``QUARANTINE_REASON`` (``quarantine_reason``) names the reason column of a table of set-aside rows that still has its
input columns: a ``map_batches`` function's ``BatchOutput.quarantined`` (turned into this schema, the column
becoming ``reason``) and ``zephyr filter``'s ``_quarantine/``. It is not ``drop_reason``: a dropped row is good
input removed by a rule (``zephyr.removal.DROP_REASON``), a quarantined one could not be processed.

Invalid rows: Parquet and Vortex readers hand back string columns without checking their bytes, so a file
written by a careless tool can carry invalid UTF-8 that later crashes a tokenizer far from its source.
``drop_bad_rows`` runs Arrow's full validation once per batch (vectorized, SIMD UTF-8 check) and, only when that
fails, bisects the failing columns with slice validation to name the bad rows: O(k log n) validations for k bad
rows.

A text column holds strings: ``string``, ``large_string`` or ``string_view``. A column of type ``null`` is
accepted too: Arrow gives that type to a column without a single value (a JSONL block whose texts are all null,
an all-``None`` pandas column), and its rows are null texts, which every command already handles (filter and
tokenize quarantine them as ``null_text``, annotators leave their outputs null). Any other type (numbers,
binary, lists, ...) is a ``SchemaError``: turning numbers into text would silently tokenize or filter data
that is not text. ``require_text_column(schema, column, where=...)`` checks one schema (a stage's batch, a
file's footer); ``zephyr.io.sources.check_text_inputs`` runs it on every input file before a job starts.

>>> import pyarrow as pa
>>> require_text_column(pa.schema([("text", pa.large_string())]), "text")
>>> require_text_column(pa.schema([("text", pa.int64())]), "text", where="a.parquet")
Traceback (most recent call last):
    ...
zephyr.errors.SchemaError: a.parquet: text column 'text' has type int64, not a string type; ...
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.types as pat

from zephyr.errors import InputError, SchemaError
from zephyr.io.schema import failing_rows, is_string_like
from zephyr.io.text_encoding import wide_text

QUARANTINE_REASON = "quarantine_reason"
"""Why a set-aside row that keeps its input columns was quarantined (see the module docstring)."""

QUARANTINE_SCHEMA = pa.schema(
    [
        pa.field("source", pa.string(), nullable=False),
        pa.field("line", pa.int64()),
        pa.field("reason", pa.string(), nullable=False),
        pa.field("raw", pa.large_binary()),
    ],
    metadata={"zephyr.quarantine.version": "1"},
)

QuarantineFn = Callable[[pa.Table], None]


def quarantine_table(
    source: str, lines: Sequence[int | None], reasons: Sequence[str], raws: Sequence[bytes | None]
) -> pa.Table:
    """Build the quarantine table for rows of one file."""
    n = len(lines)
    return pa.Table.from_arrays(
        [
            pa.array([source] * n, pa.string()),
            pa.array(lines, pa.int64()),
            pa.array(reasons, pa.string()),
            pa.array(raws, pa.large_binary()),
        ],
        schema=QUARANTINE_SCHEMA,
    )


def refuse_or_set_aside(
    quarantine: QuarantineFn | None,
    path: str,
    refusal: str,
    reasons: Sequence[str],
    lines: Sequence[int | None] | None = None,
    raws: Sequence[bytes | None] | None = None,
    **where: int | None,
) -> None:
    """Bad input of ``path`` (bad lines or rows; a cut stream, a UTF-16 file, a damaged WARC record: one entry):
    without a ``quarantine``, ``InputError(refusal)`` naming the file (and ``where``: ``line=``, ``row=``);
    with one, an entry per reason, with its ``lines`` and ``raws`` (null when not given)."""
    if quarantine is None:
        raise InputError(refusal, path=path, **where)
    none = [None] * len(reasons)
    quarantine(quarantine_table(path, lines or none, reasons, raws or none))


def refuse_wide_text(head: bytes, path: str, quarantine: QuarantineFn | None) -> bool:
    """Whether the file ``path`` starting with ``head`` is UTF-16 or UTF-32 text (``wide_text``), which is then
    refused (``InputError``) or, with a ``quarantine``, set aside as one entry: none of it is a line or record."""
    what = wide_text(head)
    if what is not None:
        refuse_or_set_aside(
            quarantine, path, f"{what}; or pass on_error='quarantine' to set it aside", [what]
        )
    return what is not None


def drop_bad_rows(
    batch: pa.RecordBatch, path: str, first_row: int, quarantine: QuarantineFn | None, *, where: str = ""
) -> pa.RecordBatch:
    """``batch`` without its invalid rows (Parquet and Vortex readers; the check is in the module docstring):
    each goes to ``quarantine`` with its row in the file (``first_row`` + its row in the batch), or, without
    one, the first raises ``InputError`` naming it; ``where`` (``row group 3: ``) starts the messages. Damage
    that no single row can be blamed for (structural) makes the file corrupt."""
    if _invalid(batch) is None:
        return batch
    found: dict[int, str] = {}
    for name, column in zip(batch.schema.names, batch.columns):
        rows = failing_rows(len(column), lambda lo, hi, c=column: _invalid(c.slice(lo, hi - lo)))
        for row, message in rows:
            kind = "invalid UTF-8" if "utf8" in message.lower() else "invalid data"
            found.setdefault(row, f"{kind} in column {name!r}: {message}")
    if not found:
        raise InputError(
            f"{where}batch starting at row {first_row} fails validation and no single row can be blamed; "
            "the file is corrupt",
            path=path,
        )
    rows = sorted(found)
    refusal = f"{where}{found[rows[0]]}. Pass on_error='quarantine' to set such rows aside."
    lines = [first_row + r for r in rows]
    refuse_or_set_aside(quarantine, path, refusal, [found[r] for r in rows], lines, row=lines[0])
    mask = np.ones(batch.num_rows, dtype=bool)
    mask[rows] = False
    return batch.filter(pa.array(mask))


def _invalid(array: pa.Array | pa.RecordBatch) -> str | None:
    """Why Arrow's full validation (UTF-8 included) refuses ``array``; None when it passes."""
    try:
        array.validate(full=True)
        return None
    except pa.ArrowInvalid as exc:
        return str(exc)


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
    if not (is_string_like(t) or pat.is_null(t)):  # null: a column without a single value
        raise SchemaError(
            f"{prefix}{what} column {column!r} has type {t}, not a string type; cast it to string before "
            f"this step (numbers are not turned into text), or name another column with {other}"
        )
