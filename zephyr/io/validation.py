"""Find the rows of a decoded columnar batch that are not valid Arrow data (in practice: strings that are not UTF-8).

Parquet and Vortex readers hand back string columns without checking their bytes, so a file written by a
careless tool can carry invalid UTF-8 that later crashes a tokenizer far from its source. ``bad_rows`` runs
Arrow's full validation once per batch (vectorized, SIMD UTF-8 check) and, only when that fails, bisects the
failing columns with slice validation to name the bad rows: O(k log n) validations for k bad rows.
"""

from __future__ import annotations

import pyarrow as pa

__all__ = ["bad_rows"]

_LEAF_ROWS = 32  # below this many rows, validate row by row


def bad_rows(batch: pa.RecordBatch) -> list[tuple[int, str]] | None:
    """None when ``batch`` is valid; else ``[(row, reason), ...]`` sorted by row (may be empty when the
    damage is structural and no single row can be blamed)."""
    try:
        batch.validate(full=True)
        return None
    except pa.ArrowInvalid:
        pass
    found: dict[int, str] = {}
    for name, column in zip(batch.schema.names, batch.columns):
        try:
            column.validate(full=True)
            continue
        except pa.ArrowInvalid:
            pass
        for row, message in _bisect(column):
            kind = "invalid UTF-8" if "utf8" in message.lower() else "invalid data"
            found.setdefault(row, f"{kind} in column {name!r}: {message}")
    return sorted(found.items())


def _bisect(column: pa.Array) -> list[tuple[int, str]]:
    out: list[tuple[int, str]] = []
    stack = [(0, len(column))]
    while stack:
        lo, hi = stack.pop()
        if hi - lo <= _LEAF_ROWS:
            for row in range(lo, hi):
                try:
                    column.slice(row, 1).validate(full=True)
                except pa.ArrowInvalid as exc:
                    out.append((row, str(exc)))
            continue
        try:
            column.slice(lo, hi - lo).validate(full=True)
        except pa.ArrowInvalid:
            mid = (lo + hi) // 2
            stack.append((mid, hi))
            stack.append((lo, mid))
    return sorted(out)
