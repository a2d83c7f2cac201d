"""The JSONL encoder of the sinks and ``encode_ndjson``: one JSON object per row by polars' vectorized
writer, binary as base64, compressed by ``zephyr.io.compression`` (see the ``zephyr.io.sinks`` contract)."""

from __future__ import annotations

import io

import pyarrow as pa
import pyarrow.types as pat

from zephyr.errors import SchemaError
from zephyr.io.checksum import Checksummed
from zephyr.io.compression import open_compressed_writer
from zephyr.io.schema import conform
from zephyr.io.sink_encoder import SCHEMA_FIX, Encoder, promote_or_refuse, quietly

__all__ = ["JsonlEncoder", "encode_ndjson"]


class JsonlEncoder(Encoder):
    """Writes each batch as it comes; JSON text has no file schema, so batches may widen freely."""

    def __init__(self, fs, path: str, compression: str | None, schema: pa.Schema | None, where: str):
        self.fs = fs
        self.path = path
        self.handle = Checksummed(fs.open(path, "wb"))  # the bytes on disk: after compression
        self.out = open_compressed_writer(self.handle, compression)
        self.checksum: dict | None = None
        """The finished file's checksum record (``zephyr.io.checksum``), hashed as written."""
        self.compressed = compression is not None
        self.schema = schema
        self.fixed = schema is not None
        self.where = where

    def write(self, batch: pa.RecordBatch) -> None:
        schema = self.schema if self.fixed else promote_or_refuse(self.schema, batch.schema, self.where)
        batch = conform(batch, schema, where=self.where, fix=SCHEMA_FIX)
        self.schema = schema  # only once the batch fits: a refused batch leaves the writer as it was
        if batch.num_rows:
            self.out.write(encode_ndjson(batch, where=self.where))

    def finish(self) -> None:
        if self.compressed:
            self.out.close()
        self.handle.close()
        self.checksum = self.handle.record()

    def discard(self) -> None:
        if self.compressed:
            quietly(self.out.close, self.path)
        quietly(self.handle.close, self.path)
        quietly(lambda: self.fs.rm(self.path) if self.fs.exists(self.path) else None, self.path)


def _nested_binary(t: pa.DataType) -> bool:
    if pat.is_binary(t) or pat.is_large_binary(t) or pat.is_binary_view(t) or pat.is_fixed_size_binary(t):
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
        top_binary = (
            pat.is_binary(field.type) or pat.is_large_binary(field.type) or pat.is_binary_view(field.type)
        )
        if top_binary:
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
