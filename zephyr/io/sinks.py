"""Sinks: write one output shard file (Parquet, JSONL[.gz|.zst], Vortex) atomically and deterministically.

``ShardWriter(path, format)`` is the format's writer (``ParquetWriter``, ``JsonlWriter``, ``VortexWriter``, each a
subclass in the format's module), which encodes into the temporary file ``file`` (``_write``; ``_finish``, which
returns the file's checksum record; ``_discard``); ``ShardWriter`` checks the calls and renames the file into
place.

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
import posixpath
import uuid
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from zephyr.errors import ConfigError, ZephyrError
from zephyr.io import paths
from zephyr.io.paths import Compression, Format, filesystem, naming_path, public_path

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
        if cls is ShardWriter:  # each format's writer subclasses this class in the format's module
            from zephyr.io import jsonl, parquet, vortex

            cls = {
                "parquet": parquet.ParquetWriter,
                "jsonl": jsonl.JsonlWriter,
                "vortex": vortex.VortexWriter,
            }[format]
        return super().__new__(cls)

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
