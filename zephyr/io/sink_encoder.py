"""The encoder interface of the sinks and the row-group buffering that Parquet and Vortex share.

An encoder turns batches into the bytes of one format in a temporary file it owns; ``sinks.ShardWriter``
picks one per format and renames its file into place. ``BufferedEncoder`` cuts row groups and keeps one file
schema that may only widen (see the ``zephyr.io.sinks`` contract).
"""

from __future__ import annotations

import contextlib
import logging
import os

import pyarrow as pa

from zephyr.errors import SchemaError
from zephyr.io.schema import SchemaConflict, conform, promote_schemas

__all__ = ["SCHEMA_FIX", "BufferedEncoder", "Encoder", "promote_or_refuse", "quietly", "remove_local"]

logger = logging.getLogger(__name__)

SCHEMA_FIX = "Pass schema= to the writer (or cast the column upstream) so every batch has one type."


class Encoder:
    """Turns batches into the bytes of one format in a temporary file it owns (``path``)."""

    path: str

    def write(self, batch: pa.RecordBatch) -> None:
        raise NotImplementedError

    def finish(self) -> None:
        raise NotImplementedError

    def discard(self) -> None:
        """Close and remove everything written (never raises)."""
        raise NotImplementedError


def quietly(action, what: str) -> None:
    """Run ``action`` while throwing ``what`` away: an error then is logged, never raised over the real one."""
    try:
        action()
    except Exception:  # noqa: BLE001 - used only while throwing a file away
        logger.debug("ignoring error while discarding %s", what, exc_info=True)


class BufferedEncoder(Encoder):
    """Buffers batches into row groups and keeps one file schema.

    Without a user schema, the schema is the promotion of the batches buffered before the first flush. A later
    batch that widens it (a column that was all-null gets strings; int64 meets double; a new column) makes the
    encoder rewrite what it has emitted so far under the widened schema (``rewrite``): rare, costs one pass over
    the rows written so far, and gives the same bytes as if the wide schema had been known from the start.
    Readers yield batches whose schemas only widen (see ``zephyr.io.jsonl_source``), so that is all it needs.
    """

    def __init__(self, schema: pa.Schema | None, row_group_bytes: int, row_group_rows: int, where: str):
        self.user_schema = schema is not None
        self.schema = schema  # the file schema, once fixed
        self.pending: pa.Schema | None = None  # promotion of buffered batches while it is not
        self.buffered: list[pa.RecordBatch] = []
        self.buffered_rows = 0
        self.buffered_bytes = 0
        self.emitted_rows = 0
        self.row_group_bytes = row_group_bytes
        self.row_group_rows = row_group_rows
        self.where = where

    def write(self, batch: pa.RecordBatch) -> None:
        if self.schema is None:
            self.pending = promote_or_refuse(self.pending, batch.schema, self.where)
        elif not self.user_schema:
            widened = promote_or_refuse(self.schema, batch.schema, self.where)
            if not widened.equals(self.schema):
                self._widen(widened)
            batch = conform(batch, self.schema, where=self.where, fix=SCHEMA_FIX)
        else:
            batch = conform(batch, self.schema, where=self.where, fix=SCHEMA_FIX)
        self.buffered.append(batch)
        self.buffered_rows += batch.num_rows
        self.buffered_bytes += batch.nbytes
        while self.buffered and (
            self.buffered_rows >= self.row_group_rows or self.buffered_bytes >= self.row_group_bytes
        ):
            self._flush()

    def _widen(self, widened: pa.Schema) -> None:
        buffered = [conform(b, widened, where=self.where, fix=SCHEMA_FIX) for b in self.buffered]
        logger.info(
            "%s: schema widens from %s to %s; rewriting the %d rows already written",
            self.where,
            self.schema,
            widened,
            self.emitted_rows,
        )
        self.schema = widened
        if self.emitted_rows:
            self.rewrite()
        self.buffered = buffered

    def _fix_schema(self) -> pa.Schema:
        if self.schema is None:
            self.schema = self.pending if self.pending is not None else pa.schema([])
            self.buffered = [conform(b, self.schema, where=self.where, fix=SCHEMA_FIX) for b in self.buffered]
        return self.schema

    def _flush(self) -> None:
        schema = self._fix_schema()
        table = pa.Table.from_batches(self.buffered, schema=schema)
        if table.num_rows == 0:
            self.buffered, self.buffered_rows, self.buffered_bytes = [], 0, 0
            return
        limit = self.row_group_rows
        if table.nbytes > self.row_group_bytes:
            limit = min(limit, max(1, int(table.num_rows * self.row_group_bytes / table.nbytes)))
        if table.num_rows > limit:
            head, rest = table.slice(0, limit), table.slice(limit)
        else:
            head, rest = table, None
        self.emit(head)
        self.emitted_rows += head.num_rows
        self.buffered = rest.to_batches() if rest is not None and rest.num_rows else []
        self.buffered_rows = rest.num_rows if rest is not None else 0
        self.buffered_bytes = rest.nbytes if rest is not None else 0

    def finish(self) -> None:
        while self.buffered:
            self._flush()
        self._fix_schema()
        self.close_format()

    def emit(self, table: pa.Table) -> None:
        """Write one row group."""
        raise NotImplementedError

    def rewrite(self) -> None:
        """Re-encode every emitted row group under ``self.schema`` (which has just widened)."""
        raise NotImplementedError

    def close_format(self) -> None:
        raise NotImplementedError


def promote_or_refuse(current: pa.Schema | None, new: pa.Schema, where: str) -> pa.Schema:
    """The schema both ``current`` and ``new`` batches fit losslessly, or a ``SchemaError`` naming the column."""
    if current is None:
        return new
    try:
        return promote_schemas(current, new)
    except SchemaConflict as exc:
        raise SchemaError(
            f"{where}: column {exc.column!r} is {exc.left} in earlier batches but {exc.right} in this one; "
            f"that cast could lose data. {SCHEMA_FIX}"
        ) from exc


def remove_local(path: str) -> None:
    """Remove a local file that may not exist (spills and half-built files)."""
    with contextlib.suppress(FileNotFoundError):
        os.remove(path)
