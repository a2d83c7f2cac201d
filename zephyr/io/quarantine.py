"""The table of rows a reader set aside (``on_error="quarantine"``), handed to the caller's ``quarantine`` callback.

Schema (version 1), one row per bad input row:

- ``source`` (string): the file's path or URL.
- ``line`` (int64, nullable): the 1-based line for JSONL; the 0-based row index within the file for Parquet and
  Vortex. Null for a line of a byte-range JSONL shard that does not start at byte 0 (its absolute line is
  unknown without reading the file from the start); ``reason`` then names the line's byte offset.
- ``reason`` (string): what is wrong, e.g. ``invalid JSON: Expecting ',' delimiter: line 1 column 9``.
- ``raw`` (large_binary, nullable): the line's bytes for JSONL, null for columnar formats.

A reader never yields a quarantined row, so for every shard: rows yielded + rows quarantined == rows (or
non-blank lines) in the input.

``REJECT_REASON`` (``reject_reason``) names the reason column of a table of set-aside rows that still has its
input columns: a ``map_batches`` function's ``BatchOutput.rejected`` (turned into this schema, the column
becoming ``reason``) and ``zephyr filter``'s ``_quarantine/``. It is not ``drop_reason``: a dropped row is good
input removed by a rule (``zephyr.dropped.DROP_REASON``), a quarantined one could not be processed.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import pyarrow as pa

__all__ = ["QUARANTINE_SCHEMA", "REJECT_REASON", "QuarantineFn", "quarantine_table"]

REJECT_REASON = "reject_reason"
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
