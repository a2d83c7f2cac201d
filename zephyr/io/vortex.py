"""Read Vortex shards with the ``vortex-data`` package (API checked against 0.91), streaming.

- Local files are opened with ``vortex.open`` (native I/O), other fsspec URLs with ``vortex.open_readable`` on
  an fsspec file object; both without the segment cache, so memory stays about one chunk.
- ``VortexFile.to_arrow`` streams the file's chunks as record batches (a chunk is what the writer was handed,
  see ``zephyr.io.sinks``); a batch above ``2 * batch_bytes`` is sliced zero-copy before it is yielded.
- Vortex hands strings back as ``string_view``; they are read as ``string`` (``binary_view`` as ``binary``) so
  every source yields the same types for the same data.
- Corrupt or empty files raise ``InputError`` naming the file; a missing requested column ``SchemaError``
  naming the column, the file and the columns it has. Each batch gets the same full Arrow validation as
  Parquet (invalid UTF-8 → ``InputError`` naming the row, or the quarantine with ``line`` = the row index).

The Vortex writer of the sinks (``VortexWriter``): row groups spill to a local Arrow IPC stream, converted by
``vortex.io.write`` on finish (its writer pulls from a ``RecordBatchReader``; see the ``zephyr.io.sinks``
contract).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from typing import IO, TYPE_CHECKING, Any

import pyarrow as pa
from fsspec.implementations.local import LocalFileSystem

from zephyr.errors import InputError
from zephyr.io.checksum import checksum_record, file_checksum
from zephyr.io.parquet import BufferedWriter, checked_batches, columns_to_read
from zephyr.io.paths import filesystem, is_local, open_input, remove_local
from zephyr.io.schema import normalize_view_types

if TYPE_CHECKING:
    from zephyr.io.sources import ReadOptions, Shard


def read_vortex_shard(shard: Shard, read: ReadOptions) -> Iterator[pa.RecordBatch]:
    import vortex

    path = shard.path
    fs, stripped = filesystem(path)
    # a missing or unreadable file: one line naming it (vortex says "not readable")
    with open_input(path) as raw:
        if fs.size(stripped) == 0:
            raise InputError("empty (0-byte) Vortex file", path=path)
        try:  # local files with native I/O; both without the segment cache (memory: about one chunk)
            if is_local(fs):
                handle = vortex.open(stripped, without_segment_cache=True)
            else:
                handle = vortex.open_readable(raw, without_segment_cache=True)
        except Exception as exc:  # vortex raises plain ValueError/OSError/RuntimeError for bad files
            raise InputError(f"not a readable Vortex file: {exc}", path=path) from exc
        try:
            file_schema = handle.dtype.to_arrow_schema()
        except Exception as exc:
            raise InputError(f"cannot read the Vortex schema: {exc}", path=path) from exc
        columns, target = columns_to_read(path, file_schema.names, read.columns, read.schema or read.planned)
        wanted = file_schema.names if columns is None else columns
        read_schema = pa.schema(
            [file_schema.field(n).with_type(normalize_view_types(file_schema.field(n).type)) for n in wanted]
        )
        try:
            reader = handle.to_arrow(wanted, schema=read_schema)
        except Exception as exc:
            raise InputError(f"cannot scan the Vortex file: {exc}", path=path) from exc

        def scan() -> Iterator[pa.RecordBatch]:
            row = 0
            try:
                for batch in reader:
                    yield batch
                    row += batch.num_rows
            except Exception as exc:
                raise InputError(f"corrupt Vortex data after row {row}: {exc}", path=path) from exc

        yield from checked_batches(scan(), path, target, read.quarantine, read.batch_bytes)


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
        try:
            with pa.OSFile(self.emitted, "rb") as source:
                vortex.io.write(pa.ipc.open_stream(source), self.local)
        finally:
            remove_local(self.emitted)
        checksum = checksum_record(*file_checksum(self.local))
        if self.local_dir is not None:
            self.fs.put_file(self.local, self.file)
            shutil.rmtree(self.local_dir, ignore_errors=True)
        return checksum

    def _discard(self) -> None:
        super()._discard()  # the spill; ``ShardWriter.abort`` removes ``file``
        if self.local_dir is not None:
            shutil.rmtree(self.local_dir, ignore_errors=True)
