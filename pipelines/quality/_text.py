"""Shared helpers: pull the text (and language) column out of an Arrow table, checked, as polars Series.

Every quality function takes a ``pyarrow.Table`` and the *name* of its text column. A missing column or a
column that is not a string type is a ``SchemaError`` naming the column and the columns there are (a ``null``
typed column, all nulls, is text: see ``zephyr.io.quarantine``); null texts are the caller's business
(filters quarantine them, annotators leave their outputs null).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.compute as pc

from zephyr.io.quarantine import require_text_column

if TYPE_CHECKING:
    import polars as pl

NO_SPACE_LANGUAGES: frozenset[str] = frozenset({"zh", "ja", "th", "lo", "km", "my", "bo", "wuu", "yue"})
"""Languages written without spaces between words: whitespace-token rules (word counts, stop words,
n-grams) say nothing about them, so the word-based rules skip their rows instead of dropping them all."""


def text_array(table: pa.Table | pa.RecordBatch, column: str = "text") -> pa.Array:
    """The text column as one contiguous ``large_string`` array (chunks combined)."""
    require_text_column(table.schema, column)
    col = table.column(column)
    if isinstance(col, pa.ChunkedArray):
        col = col.combine_chunks() if col.num_chunks != 1 else col.chunk(0)
    if not pa.types.is_large_string(col.type):
        col = pc.cast(col, pa.large_string())
    return col


def lang_series(table: pa.Table | pa.RecordBatch, column: str | None, default: str) -> pl.Series:
    """Per-row language codes: ``column``'s values (nulls → ``default``), or ``default`` everywhere.

    Codes are reduced to their primary subtag, lower-cased (``de-DE`` → ``de``, ``zh_TW`` → ``zh``).
    """
    import polars as pl

    if column is None or column not in table.schema.names:
        return pl.Series("lang", [default] * table.num_rows, dtype=pl.String)
    require_text_column(table.schema, column, what="language")
    values = pl.Series("lang", text_array(table, column)).cast(pl.String)
    return values.str.to_lowercase().str.replace(r"[-_].*$", "").fill_null(default).replace("", default)


def put_column(table: pa.Table, name: str, values: pa.Array) -> pa.Table:
    """``table`` with ``values`` as column ``name``: replaced in place if it exists (the caller decided that,
    see ``zephyr.removal``), else appended."""
    if name in table.schema.names:
        return table.set_column(table.schema.get_field_index(name), name, values)
    return table.append_column(name, values)
