"""Sinks: write one output shard file (Parquet, JSONL[.gz|.zst], Vortex) atomically and deterministically.

``ShardWriter(path, format)`` is the format's writer (``ParquetWriter``, ``JsonlWriter``, ``VortexWriter``, its
subclasses), which encodes into the temporary file ``file`` (``_write``; ``_finish``, which returns the file's
checksum record; ``_discard``); ``ShardWriter`` checks the calls and renames the file into place.

Contract:

- **Checksummed.** ``WrittenFile.checksum`` is the file's size and xxh3-128, hashed from the bytes as they are
  written (``zephyr.io.checksum``; Vortex, written by its own writer, is read once after), so a resume can
  tell the file still holds them.
- **Atomic.** ``ShardWriter(path, ...)`` writes to ``path + ".tmp-<uuid>"`` in the same directory and renames it to
  ``path`` on a successful ``close()`` (``fs.mv``: ``rename(2)`` locally). ``abort()`` — and leaving
  the ``with`` block by an exception — removes the temporary file. A crash before ``close()`` leaves only a
  ``.tmp-`` file, which ``expand_paths`` never lists; the final name never holds a partial file.
- **Deterministic.** The same batches give the same bytes: Parquet carries no timestamps (``created_by`` is the
  pyarrow version), gzip has ``mtime=0`` and no file name, zstd is single-threaded level 3. While row groups are
  cut by row count (the common case: 1 Mi rows under 128 MiB), Parquet bytes do not even depend on how the rows
  were split into batches.
- **Schema.** With ``schema=`` every batch is cast to it (losslessly, or ``SchemaError``). Without, the file
  schema is the promotion (``zephyr.io.schema``) of the batches seen: Parquet and Vortex fix it at the first
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
import logging
import os
import posixpath
import shutil
import tempfile
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import IO, Any

import pyarrow as pa
import pyarrow.parquet as pq
from fsspec.implementations.local import LocalFileSystem

from zephyr.errors import ConfigError, ZephyrError
from zephyr.io import paths
from zephyr.io.checksum import Checksummed, checksum_record, file_checksum
from zephyr.io.compression import open_compressed_writer
from zephyr.io.jsonl import encode_ndjson
from zephyr.io.paths import (
    Compression,
    Format,
    filesystem,
    is_local,
    naming_path,
    public_path,
    quietly,
)
from zephyr.io.schema import conform, promote_or_refuse

logger = logging.getLogger(__name__)

DEFAULT_ROW_GROUP_BYTES = 128 << 20
DEFAULT_ROW_GROUP_ROWS = 1 << 20
_FORMATS = ("parquet", "jsonl", "vortex")


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
    codec = next((ext for ext, name in paths.CODEC_EXTENSIONS.items() if name == compression), "")
    return f"part-{index:05d}{paths.FORMAT_EXTENSIONS[format][0]}{codec}"


def _check_format(format: str, compression: str | None) -> None:
    if format not in _FORMATS:
        raise ConfigError(f"unknown output format {format!r}; use one of {list(_FORMATS)}")
    if compression is not None and compression not in paths.CODEC_FORMATS.get(format, ()):
        raise ConfigError(
            f"compression={compression!r} does not apply to {format} output; JSONL takes None, 'gzip' or 'zstd', "
            "Parquet and Vortex files compress internally"
        )


@dataclass(frozen=True)
class WrittenFile:
    """A finished output file."""

    path: str
    rows: int
    bytes: int
    """Size of the file on its filesystem."""
    checksum: dict | None = None
    """Its checksum record (``zephyr.io.checksum``): size and xxh3-128 of the bytes written."""


class ShardWriter(contextlib.AbstractContextManager):
    """Write one output file atomically (see the module docstring): ``ShardWriter(path, format)`` makes the
    format's writer, which encodes into ``file``; this class renames it to ``path`` on ``close()``.

    >>> import pyarrow as pa, fsspec
    >>> with ShardWriter("memory://doc-sinks/out/part-00000.jsonl", "jsonl") as writer:
    ...     writer.write(pa.table({"id": [1, 2], "text": ["a", None]}))
    >>> writer.result.path, writer.result.rows, writer.result.bytes
    ('memory:///doc-sinks/out/part-00000.jsonl', 2, 41)
    >>> fsspec.filesystem("memory").cat("/doc-sinks/out/part-00000.jsonl")
    b'{"id":1,"text":"a"}\\n{"id":2,"text":null}\\n'
    """

    def __new__(cls, path: str, format: Format, **options: Any) -> ShardWriter:
        _check_format(format, options.get("compression"))
        return super().__new__(_WRITERS[format] if cls is ShardWriter else cls)

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
        if row_group_bytes <= 0 or row_group_rows <= 0:
            raise ConfigError(
                f"row_group_bytes and row_group_rows must be > 0, got {row_group_bytes} and {row_group_rows}"
            )
        self.format, self.compression = format, compression
        self.row_group_bytes, self.row_group_rows = row_group_bytes, row_group_rows
        # the file schema: the caller's (``user_schema``), else what the writer makes of the batches
        self.schema = schema
        self.user_schema = schema is not None
        self.fs, self._final = filesystem(path)
        self.path = public_path(self.fs, self._final)
        # the temporary file the format's writer encodes into, renamed to ``path`` on ``close()``
        self.file = f"{self._final}.tmp-{uuid.uuid4().hex}"
        self.where = f"writing {self.path}"
        self._rows = 0
        self._done = False  # closed or aborted
        self.result: WrittenFile | None = None
        self.fs.makedirs(posixpath.dirname(self._final) or ".", exist_ok=True)

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is not None:
            self.abort()
        elif not self._done:
            self.close()

    def write(self, batch: pa.RecordBatch | pa.Table) -> None:
        """Append rows; a ``Table`` is written chunk by chunk (zero-copy)."""
        if self._done:
            raise ZephyrError(f"{self.path}: write() after close() or abort()")
        if not isinstance(batch, pa.RecordBatch | pa.Table):
            raise ConfigError(f"write() takes a pyarrow RecordBatch or Table, got {type(batch).__name__}")
        batches = [batch] if isinstance(batch, pa.RecordBatch) else batch.to_batches()
        for b in batches or [pa.RecordBatch.from_pylist([], schema=batch.schema)]:
            with naming_path(self.path):
                self._write(b)
            self._rows += b.num_rows

    def close(self) -> WrittenFile:
        """Finish the file and rename it into place; returns what was written."""
        if self._done and self.result is None:
            raise ZephyrError(f"{self.path}: close() after abort()")
        if self._done:
            return self.result
        try:
            with naming_path(self.path):
                checksum = self._finish()
                self.fs.mv(self.file, self._final)  # a rename on a local disk
        except BaseException:
            self.abort()
            raise
        self._done = True
        size = self.fs.size(self._final)
        self.result = WrittenFile(path=self.path, rows=self._rows, bytes=int(size), checksum=checksum)
        logger.debug("wrote %s: %d rows, %d bytes", self.path, self._rows, size)
        return self.result

    def abort(self) -> None:
        """Throw the output away: nothing is left at the final path or the temporary one."""
        if self._done:
            return
        self._done = True
        self._discard()
        with contextlib.suppress(FileNotFoundError):
            if self.fs.exists(self.file):
                self.fs.rm(self.file)


WRITER_OPTIONS: dict[str, object] = {"compression": "zstd", "compression_level": 3, "use_dictionary": True}
"""How every output Parquet file zephyr writes is encoded. zstd level 3, not pyarrow's level 1: the medium
docs come out the size of the input (1.00x, level 1: 1.18x), the sample 23% smaller than at level 1, for a write
about 1.8x slower than level 1 (still several times the ops' own throughput); level 6 saves another 10% at
about 1.6x the time of level 3 (benchmarks/parquet_output.py, RESULTS.md). Spill and scratch files the engine
reads back once keep level 1."""


class BufferedWriter(ShardWriter):
    """Buffers batches into row groups and keeps one file schema.

    Without a user schema, the schema is the promotion of the batches buffered before the first flush. A later
    batch that widens it (a column that was all-null gets strings; int64 meets double; a new column) makes the
    writer rewrite what it has emitted so far under the widened schema: the file row groups go to (``emitted``
    on ``emitted_fs``: ``file``, or Vortex's spill) is moved aside and read back into a new one (``read_back``).
    Rare, costs one pass over the rows written so far, and gives the same bytes as if the wide schema had been
    known from the start. Readers yield batches whose schemas only widen (see ``zephyr.io.jsonl``), so that is
    all it needs. A format's writer writes a row group (``emit``), reads back those of a file (``read_back``),
    closes the file being written (``close_file``) and, once every row group is out, finishes it
    (``close_format``, returning its checksum record).
    """

    def __init__(self, *args: Any, **options: Any):
        super().__init__(*args, **options)
        self.emitted_fs, self.emitted = self.fs, self.file
        self.pending: pa.Schema | None = None  # promotion of buffered batches while the schema is not fixed
        self.buffered: list[pa.RecordBatch] = []
        self.buffered_rows = 0
        self.buffered_bytes = 0
        self.emitted_rows = 0

    def _write(self, batch: pa.RecordBatch) -> None:
        if self.schema is None:
            self.pending = promote_or_refuse(self.pending, batch.schema, self.where)
        elif not self.user_schema:
            widened = promote_or_refuse(self.schema, batch.schema, self.where)
            if not widened.equals(self.schema):
                self._widen(widened)
            batch = conform(batch, self.schema, where=self.where)
        else:
            batch = conform(batch, self.schema, where=self.where)
        self.buffered.append(batch)
        self.buffered_rows += batch.num_rows
        self.buffered_bytes += batch.nbytes
        while self.buffered and (
            self.buffered_rows >= self.row_group_rows or self.buffered_bytes >= self.row_group_bytes
        ):
            self._flush()

    def _widen(self, widened: pa.Schema) -> None:
        buffered = [conform(b, widened, where=self.where) for b in self.buffered]
        logger.info(
            "%s: schema widens from %s to %s; rewriting the %d rows already written",
            self.where,
            self.schema,
            widened,
            self.emitted_rows,
        )
        self.schema = widened
        if self.emitted_rows:
            self.close_file()
            self.emitted_fs.mv(self.emitted, f"{self.emitted}-narrow")
            for table in self.read_back(f"{self.emitted}-narrow"):
                self.emit(conform(table, self.schema, where=self.where))
            self.emitted_fs.rm(f"{self.emitted}-narrow")
        self.buffered = buffered

    def _fix_schema(self) -> pa.Schema:
        if self.schema is None:
            self.schema = self.pending if self.pending is not None else pa.schema([])
            self.buffered = [conform(b, self.schema, where=self.where) for b in self.buffered]
        return self.schema

    def _flush(self) -> None:
        schema = self._fix_schema()
        table = pa.Table.from_batches(self.buffered, schema=schema)
        # at most row_group_rows rows, and about row_group_bytes: the rest waits for the next row group
        by_bytes = int(table.num_rows * self.row_group_bytes / max(1, table.nbytes))
        head = table.slice(0, min(self.row_group_rows, max(1, by_bytes)))
        if head.num_rows:
            self.emit(head)
            self.emitted_rows += head.num_rows
        rest = table.slice(head.num_rows)
        self.buffered = rest.to_batches() if rest.num_rows else []
        self.buffered_rows, self.buffered_bytes = rest.num_rows, rest.nbytes if rest.num_rows else 0

    def _finish(self) -> dict:
        while self.buffered:
            self._flush()
        self._fix_schema()
        return self.close_format()

    def _discard(self) -> None:
        quietly(self.close_file, self.emitted)
        for path in (
            self.emitted,
            f"{self.emitted}-narrow",
        ):  # a failed rewrite may leave the narrow one behind
            quietly(lambda p=path: self.emitted_fs.rm(p) if self.emitted_fs.exists(p) else None, path)


class ParquetWriter(BufferedWriter):
    def __init__(self, *args: Any, **options: Any):
        super().__init__(*args, **options)
        self.handle: Checksummed | None = None  # hashes the file as it is written (``zephyr.io.checksum``)
        self.writer: pq.ParquetWriter | None = None

    def _writer(self) -> pq.ParquetWriter:
        if self.writer is None:
            self.handle = Checksummed(self.fs.open(self.file, "wb"))  # a rewrite starts a new file and hash
            self.writer = pq.ParquetWriter(
                self.handle, self._fix_schema(), write_statistics=True, **WRITER_OPTIONS
            )
        return self.writer

    def emit(self, table: pa.Table) -> None:
        self._writer().write_table(table, row_group_size=max(1, table.num_rows))

    def read_back(self, path: str) -> Iterator[pa.Table]:
        with self.fs.open(path, "rb") as source:
            parquet_file = pq.ParquetFile(source)
            for group in range(parquet_file.num_row_groups):
                yield parquet_file.read_row_group(group)

    def close_file(self) -> None:
        if self.writer is not None:
            self.writer.close()
            self.writer = None
        if self.handle is not None:
            self.handle.close()

    def close_format(self) -> dict:
        self._writer()
        self.close_file()
        return self.handle.record()


class VortexWriter(BufferedWriter):
    """Spills row groups to an Arrow IPC stream; ``_finish`` converts it with ``vortex.io.write``. The file is
    built locally (``local``): in a local temporary folder when ``file`` is on another filesystem, uploaded when
    finished."""

    def __init__(self, *args: Any, **options: Any):
        super().__init__(*args, **options)
        self.local_dir = None if is_local(self.fs) else tempfile.mkdtemp(prefix="zephyr-vortex-")
        self.local = self.file if self.local_dir is None else os.path.join(self.local_dir, "out.vortex")
        self.emitted_fs, self.emitted = LocalFileSystem(), f"{self.local}.spill.arrows"
        self.spill_file: IO[bytes] | None = None
        self.spill_writer: pa.ipc.RecordBatchStreamWriter | None = None

    def _spill(self) -> pa.ipc.RecordBatchStreamWriter:
        if self.spill_writer is None:
            self.spill_file = open(self.emitted, "wb")  # noqa: SIM115 - closed in close_file
            self.spill_writer = pa.ipc.new_stream(self.spill_file, self._fix_schema())
        return self.spill_writer

    def emit(self, table: pa.Table) -> None:
        self._spill().write_table(table)

    def read_back(self, path: str) -> Iterator[pa.Table]:
        with pa.OSFile(path, "rb") as source:
            for batch in pa.ipc.open_stream(source):
                yield pa.Table.from_batches([batch])

    def close_file(self) -> None:
        if self.spill_writer is not None:
            self.spill_writer.close()
            self.spill_writer = None
        if self.spill_file is not None:
            self.spill_file.close()
            self.spill_file = None

    def close_format(self) -> dict:
        """The finished file's checksum record: its writer (Rust) writes the file itself, so it is read once."""
        import vortex

        self._spill()
        self.close_file()
        with pa.OSFile(self.emitted, "rb") as source:
            vortex.io.write(pa.ipc.open_stream(source), self.local)
        os.remove(self.emitted)  # on an error, ``abort`` removes it (``_discard``)
        checksum = checksum_record(*file_checksum(self.local))
        if self.local_dir is not None:
            self.fs.put_file(self.local, self.file)
            shutil.rmtree(self.local_dir, ignore_errors=True)
        return checksum

    def _discard(self) -> None:
        super()._discard()  # the spill; ``ShardWriter.abort`` removes ``file``
        if self.local_dir is not None:
            shutil.rmtree(self.local_dir, ignore_errors=True)


class JsonlWriter(ShardWriter):
    """Writes each batch as it comes; JSON text has no file schema, so batches may widen freely."""

    def __init__(self, *args: Any, **options: Any):
        super().__init__(*args, **options)
        self.handle = Checksummed(self.fs.open(self.file, "wb"))  # the bytes on disk: after compression
        self.out = open_compressed_writer(self.handle, self.compression)

    def _write(self, batch: pa.RecordBatch) -> None:
        schema = self.schema if self.user_schema else promote_or_refuse(self.schema, batch.schema, self.where)
        batch = conform(batch, schema, where=self.where)
        self.schema = schema  # only once the batch fits: a refused batch leaves the writer as it was
        if batch.num_rows:
            self.out.write(encode_ndjson(batch, where=self.where))

    def _finish(self) -> dict:
        if self.out is not self.handle:  # a compressing writer: closing it ends the stream
            self.out.close()
        self.handle.close()
        return self.handle.record()

    def _discard(self) -> None:
        """Close the file (``ShardWriter.abort`` removes it)."""
        if self.out is not self.handle:
            quietly(self.out.close, self.file)
        quietly(self.handle.close, self.file)


_WRITERS = {"parquet": ParquetWriter, "jsonl": JsonlWriter, "vortex": VortexWriter}
