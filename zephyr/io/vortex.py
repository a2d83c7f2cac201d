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

The Vortex writer is in ``zephyr.io.sinks`` (``VortexWriter``).
"""

from __future__ import annotations

from collections.abc import Iterator

import pyarrow as pa

from zephyr.errors import InputError
from zephyr.io.parquet import checked_batches, columns_to_read
from zephyr.io.paths import filesystem, is_local, open_input
from zephyr.io.schema import normalize_view_types


def read_vortex_shard(shard, read) -> Iterator[pa.RecordBatch]:
    """The batches of the Vortex ``shard`` (the module docstring), read as ``read`` says (a
    ``zephyr.io.sources.ReadOptions``)."""
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
