"""Sinks: write one output shard file (Parquet, JSONL[.gz|.zst], Vortex) atomically and deterministically.

Contract:

- **Atomic.** ``ShardWriter(path, ...)`` writes to ``path + ".tmp-<uuid>"`` in the same directory and renames it to
  ``path`` on a successful ``close()`` (``os.replace`` locally, ``fs.mv`` elsewhere). ``abort()`` — and leaving
  the ``with`` block by an exception — removes the temporary file. A crash before ``close()`` leaves only a
  ``.tmp-`` file, which ``expand_paths`` never lists; the final name never holds a partial file.
- **Deterministic.** The same batches give the same bytes: Parquet carries no timestamps (``created_by`` is the
  pyarrow version), gzip has ``mtime=0`` and no file name, zstd is single-threaded level 3. While row groups are
  cut by row count (the common case: 1 Mi rows under 128 MiB), Parquet bytes do not even depend on how the rows
  were split into batches.
- **Schema.** With ``schema=`` every batch is cast to it (losslessly, or ``SchemaError``). Without, the file
  schema is the promotion (``zephyr.io.casting``) of the batches seen: Parquet and Vortex fix it at the first
  row group, and when a later batch widens it (a column that was all null gets strings, int64 meets double, a
  new column appears) they rewrite the row groups written so far under the wider schema — rare, one pass over
  the rows so far, and the same bytes as if the wide schema had been known from the start. JSONL, which has
  no stored schema, just promotes batch by batch. A batch that does not widen losslessly (string vs int64, an
  int above 2**53 into double) raises ``SchemaError`` naming the column, both types and the fix.
- **Parquet**: zstd, statistics on, dictionary encoding, row groups of ``row_group_rows`` (1 Mi) rows or about
  ``row_group_bytes`` (128 MiB) of Arrow data, whichever comes first. Memory: one row group of buffered batches.
- **JSONL**: one JSON object per line, UTF-8, keys in schema order, nulls written as ``null``; encoded by polars
  (``DataFrame.write_ndjson``, vectorized). JSON has no NaN: NaN floats are written as ``null``. Binary columns
  are written as base64 strings (nested binary is refused). Compression None | "gzip" | "zstd".
- **Vortex** (``vortex-data`` 0.91): its writer pulls from a ``RecordBatchReader``, so batches are spilled to an
  Arrow IPC stream beside the output (bounded memory, one extra local write and read) and converted on
  ``close()``. For non-local URLs the file is built in a local temporary directory and uploaded.
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import posixpath
import shutil
import tempfile
import uuid
from dataclasses import dataclass
from typing import IO, Literal

import pyarrow as pa
import pyarrow.parquet as pq
import pyarrow.types as pat

from zephyr.errors import ConfigError, SchemaError, ZephyrError
from zephyr.io.casting import SchemaConflict, conform, promote_schemas
from zephyr.io.compression import open_compressed_writer
from zephyr.io.paths import Compression, Format, filesystem, is_local, naming_path, public_path

__all__ = [
    "ShardWriter",
    "WrittenFile",
    "encode_ndjson",
    "output_name",
    "DEFAULT_ROW_GROUP_BYTES",
    "DEFAULT_ROW_GROUP_ROWS",
]

logger = logging.getLogger(__name__)

DEFAULT_ROW_GROUP_BYTES = 128 << 20
DEFAULT_ROW_GROUP_ROWS = 1 << 20
_EXTENSIONS = {"parquet": ".parquet", "jsonl": ".jsonl", "vortex": ".vortex"}
_CODEC_EXTENSIONS = {None: "", "gzip": ".gz", "zstd": ".zst"}
_FIX = "Pass schema= to the writer (or cast the column upstream) so every batch has one type."


def output_name(index: int, format: Format, compression: Compression | None = None) -> str:
    """The file name of output shard ``index``.

    >>> output_name(7, "parquet")
    'part-00007.parquet'
    >>> output_name(7, "jsonl", "zstd")
    'part-00007.jsonl.zst'
    """
    _check_format(format, compression)
    if index < 0:
        raise ConfigError(f"shard index must be >= 0, got {index}")
    return f"part-{index:05d}{_EXTENSIONS[format]}{_CODEC_EXTENSIONS[compression]}"


def _check_format(format: str, compression: str | None) -> None:
    if format not in _EXTENSIONS:
        raise ConfigError(f"unknown output format {format!r}; use one of {sorted(_EXTENSIONS)}")
    if compression not in _CODEC_EXTENSIONS:
        raise ConfigError(f"unknown compression {compression!r}; use None, 'gzip' or 'zstd'")
    if compression is not None and format != "jsonl":
        raise ConfigError(
            f"compression={compression!r} applies to JSONL only; {format} files compress internally"
        )


@dataclass(frozen=True)
class WrittenFile:
    """A finished output file."""

    path: str
    rows: int
    bytes: int
    """Size of the file on its filesystem."""


class _Encoder:
    """Turns batches into the bytes of one format in a temporary file it owns (``path``)."""

    path: str

    def write(self, batch: pa.RecordBatch) -> None:
        raise NotImplementedError

    def finish(self) -> None:
        raise NotImplementedError

    def discard(self) -> None:
        """Close and remove everything written (never raises)."""
        raise NotImplementedError


def _quietly(action, what: str) -> None:
    try:
        action()
    except Exception:  # noqa: BLE001 - used only while throwing a file away
        logger.debug("ignoring error while discarding %s", what, exc_info=True)


class _BufferedEncoder(_Encoder):
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
            self.pending = _promote(self.pending, batch.schema, self.where)
        elif not self.user_schema:
            widened = _promote(self.schema, batch.schema, self.where)
            if not widened.equals(self.schema):
                self._widen(widened)
            batch = conform(batch, self.schema, where=self.where, fix=_FIX)
        else:
            batch = conform(batch, self.schema, where=self.where, fix=_FIX)
        self.buffered.append(batch)
        self.buffered_rows += batch.num_rows
        self.buffered_bytes += batch.nbytes
        while self.buffered and (
            self.buffered_rows >= self.row_group_rows or self.buffered_bytes >= self.row_group_bytes
        ):
            self._flush()

    def _widen(self, widened: pa.Schema) -> None:
        buffered = [conform(b, widened, where=self.where, fix=_FIX) for b in self.buffered]
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
            self.buffered = [conform(b, self.schema, where=self.where, fix=_FIX) for b in self.buffered]
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


def _promote(current: pa.Schema | None, new: pa.Schema, where: str) -> pa.Schema:
    if current is None:
        return new
    try:
        return promote_schemas(current, new)
    except SchemaConflict as exc:
        raise SchemaError(
            f"{where}: column {exc.column!r} is {exc.left} in earlier batches but {exc.right} in this one; "
            f"that cast could lose data. {_FIX}"
        ) from exc


class _ParquetEncoder(_BufferedEncoder):
    def __init__(self, fs, path: str, schema, row_group_bytes, row_group_rows, where):
        super().__init__(schema, row_group_bytes, row_group_rows, where)
        self.fs = fs
        self.base = path
        self.path = path
        self.generation = 0
        self.handle: IO[bytes] | None = None
        self.writer: pq.ParquetWriter | None = None

    def _writer(self) -> pq.ParquetWriter:
        if self.writer is None:
            self.handle = self.fs.open(self.path, "wb")
            self.writer = pq.ParquetWriter(
                self.handle,
                self._fix_schema(),
                compression="zstd",
                write_statistics=True,
                use_dictionary=True,
            )
        return self.writer

    def emit(self, table: pa.Table) -> None:
        self._writer().write_table(table, row_group_size=max(1, table.num_rows))

    def _close_files(self) -> None:
        if self.writer is not None:
            self.writer.close()
            self.writer = None
        if self.handle is not None:
            self.handle.close()
            self.handle = None

    def rewrite(self) -> None:
        self._close_files()
        old = self.path
        self.generation += 1
        self.path = f"{self.base}-{self.generation}"
        with self.fs.open(old, "rb") as source:
            parquet_file = pq.ParquetFile(source)
            for group in range(parquet_file.num_row_groups):
                table = conform(parquet_file.read_row_group(group), self.schema, where=self.where, fix=_FIX)
                self.emit(table)
        self.fs.rm(old)

    def close_format(self) -> None:
        self._writer()
        self._close_files()

    def discard(self) -> None:
        _quietly(self._close_files, self.path)
        for generation in range(self.generation + 1):  # a failed rewrite may leave the previous one behind
            path = self.base if generation == 0 else f"{self.base}-{generation}"
            _quietly(lambda p=path: self.fs.rm(p) if self.fs.exists(p) else None, path)


class _VortexEncoder(_BufferedEncoder):
    """Spills row groups to an Arrow IPC stream; ``finish`` converts it with ``vortex.io.write``."""

    def __init__(self, local_path: str, schema, row_group_bytes, row_group_rows, where):
        super().__init__(schema, row_group_bytes, row_group_rows, where)
        self.path = local_path
        self.generation = 0
        self.spill_path = f"{local_path}.spill.arrows"
        self.spill_file: IO[bytes] | None = None
        self.spill_writer: pa.ipc.RecordBatchStreamWriter | None = None

    def _spill(self) -> pa.ipc.RecordBatchStreamWriter:
        if self.spill_writer is None:
            self.spill_file = open(self.spill_path, "wb")  # noqa: SIM115 - closed in _close_spill
            self.spill_writer = pa.ipc.new_stream(self.spill_file, self._fix_schema())
        return self.spill_writer

    def _close_spill(self) -> None:
        if self.spill_writer is not None:
            self.spill_writer.close()
            self.spill_writer = None
        if self.spill_file is not None:
            self.spill_file.close()
            self.spill_file = None

    def emit(self, table: pa.Table) -> None:
        self._spill().write_table(table)

    def rewrite(self) -> None:
        self._close_spill()
        old = self.spill_path
        self.generation += 1
        self.spill_path = f"{self.path}.spill-{self.generation}.arrows"
        with pa.OSFile(old, "rb") as source:
            for batch in pa.ipc.open_stream(source):
                self.emit(pa.Table.from_batches([conform(batch, self.schema, where=self.where, fix=_FIX)]))
        _remove_local(old)

    def close_format(self) -> None:
        import vortex

        self._spill()
        self._close_spill()
        try:
            with pa.OSFile(self.spill_path, "rb") as source:
                vortex.io.write(pa.ipc.open_stream(source), self.path)
        finally:
            _remove_local(self.spill_path)

    def discard(self) -> None:
        _quietly(self._close_spill, self.spill_path)
        _remove_local(f"{self.path}.spill.arrows")
        for generation in range(1, self.generation + 1):
            _remove_local(f"{self.path}.spill-{generation}.arrows")
        _remove_local(self.path)


class _JsonlEncoder(_Encoder):
    """Writes each batch as it comes; JSON text has no file schema, so batches may widen freely."""

    def __init__(self, fs, path: str, compression: str | None, schema: pa.Schema | None, where: str):
        self.fs = fs
        self.path = path
        self.handle = fs.open(path, "wb")
        self.out = open_compressed_writer(self.handle, compression)
        self.compressed = compression is not None
        self.schema = schema
        self.fixed = schema is not None
        self.where = where

    def write(self, batch: pa.RecordBatch) -> None:
        schema = self.schema if self.fixed else _promote(self.schema, batch.schema, self.where)
        batch = conform(batch, schema, where=self.where, fix=_FIX)
        self.schema = schema  # only once the batch fits: a refused batch leaves the writer as it was
        if batch.num_rows:
            self.out.write(encode_ndjson(batch, where=self.where))

    def finish(self) -> None:
        if self.compressed:
            self.out.close()
        self.handle.close()

    def discard(self) -> None:
        if self.compressed:
            _quietly(self.out.close, self.path)
        _quietly(self.handle.close, self.path)
        _quietly(lambda: self.fs.rm(self.path) if self.fs.exists(self.path) else None, self.path)


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


def _remove_local(path: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.remove(path)


class ShardWriter:
    """Write one output file atomically (see the module docstring).

    >>> import pyarrow as pa, fsspec
    >>> with ShardWriter("memory://doc-sinks/out/part-00000.jsonl", "jsonl") as writer:
    ...     writer.write(pa.table({"id": [1, 2], "text": ["a", None]}))
    >>> writer.result
    WrittenFile(path='memory:///doc-sinks/out/part-00000.jsonl', rows=2, bytes=41)
    >>> fsspec.filesystem("memory").cat("/doc-sinks/out/part-00000.jsonl")
    b'{"id":1,"text":"a"}\\n{"id":2,"text":null}\\n'
    """

    def __init__(
        self,
        path: str,
        format: Format,
        *,
        compression: Compression | None = None,
        schema: pa.Schema | None = None,
        row_group_bytes: int = DEFAULT_ROW_GROUP_BYTES,
        row_group_rows: int = DEFAULT_ROW_GROUP_ROWS,
    ):
        _check_format(format, compression)
        if row_group_bytes <= 0 or row_group_rows <= 0:
            raise ConfigError(
                f"row_group_bytes and row_group_rows must be > 0, got {row_group_bytes} and {row_group_rows}"
            )
        self.format = format
        self.fs, self._final = filesystem(path)
        self.path = public_path(self.fs, self._final)
        self._tmp = f"{self._final}.tmp-{uuid.uuid4().hex}"
        self._rows = 0
        self._state: Literal["open", "closed", "aborted"] = "open"
        self.result: WrittenFile | None = None
        self._local_dir: str | None = None  # vortex on a remote filesystem: where the file is built
        parent = posixpath.dirname(self._final)
        if parent:
            self.fs.makedirs(parent, exist_ok=True)
        where = f"writing {self.path}"
        if format == "vortex":
            if is_local(self.fs):
                local = self._tmp
            else:
                self._local_dir = tempfile.mkdtemp(prefix="zephyr-vortex-")
                local = os.path.join(self._local_dir, "out.vortex")
            self._encoder: _Encoder = _VortexEncoder(local, schema, row_group_bytes, row_group_rows, where)
        elif format == "parquet":
            self._encoder = _ParquetEncoder(
                self.fs, self._tmp, schema, row_group_bytes, row_group_rows, where
            )
        else:
            self._encoder = _JsonlEncoder(self.fs, self._tmp, compression, schema, where)

    def __enter__(self) -> ShardWriter:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is not None:
            self.abort()
        elif self._state == "open":
            self.close()

    def write(self, batch: pa.RecordBatch | pa.Table) -> None:
        """Append rows; a ``Table`` is written chunk by chunk (zero-copy)."""
        if self._state != "open":
            raise ZephyrError(f"{self.path}: write() after {self._state}")
        batches = batch.to_batches() if isinstance(batch, pa.Table) else [batch]
        if isinstance(batch, pa.Table) and not batches:
            batches = [pa.RecordBatch.from_pylist([], schema=batch.schema)]
        for b in batches:
            if not isinstance(b, pa.RecordBatch):
                raise ConfigError(f"write() takes a pyarrow RecordBatch or Table, got {type(b).__name__}")
            with naming_path(self.path):
                self._encoder.write(b)
            self._rows += b.num_rows

    def close(self) -> WrittenFile:
        """Finish the file and rename it into place; returns what was written."""
        if self._state == "closed" and self.result is not None:
            return self.result
        if self._state != "open":
            raise ZephyrError(f"{self.path}: close() after abort()")
        try:
            with naming_path(self.path):
                self._encoder.finish()
                if self._local_dir is not None:
                    self.fs.put_file(self._encoder.path, self._tmp)
                    source = self._tmp
                else:
                    source = self._encoder.path
                self._rename(source)
        except BaseException:
            self.abort()
            raise
        finally:
            self._cleanup_local_dir()
        self._state = "closed"
        size = self.fs.size(self._final)
        self.result = WrittenFile(path=self.path, rows=self._rows, bytes=int(size))
        logger.debug("wrote %s: %d rows, %d bytes", self.path, self._rows, size)
        return self.result

    def abort(self) -> None:
        """Throw the output away: nothing is left at the final path or the temporary one."""
        if self._state != "open":
            return
        self._state = "aborted"
        self._encoder.discard()
        with contextlib.suppress(FileNotFoundError):
            if self.fs.exists(self._tmp):
                self.fs.rm(self._tmp)
        self._cleanup_local_dir()

    def _rename(self, source: str) -> None:
        if is_local(self.fs):
            os.replace(source, self._final)
        else:
            self.fs.mv(source, self._final)

    def _cleanup_local_dir(self) -> None:
        if self._local_dir is not None:
            shutil.rmtree(self._local_dir, ignore_errors=True)
            self._local_dir = None
