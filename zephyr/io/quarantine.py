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
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import pyarrow as pa

__all__ = ["QUARANTINE_SCHEMA", "QuarantineFn", "quarantine_table"]

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
