"""Parquet: the reader of shards and the encoder of the sinks.

Read Parquet shards: footer-based row-group splitting, column projection, bounded batches, bad-row handling.

- Files are opened through fsspec file objects (``pq.ParquetFile(f)``), read row group by row group with
  ``iter_batches`` (no pre-buffering). Column chunks stream through buffers of ``buffer_bytes`` a column
  (``Budget.read_buffer_bytes``), one page decompressed at a time, so memory is about one batch plus one
  page and one buffer per column. Without the buffer Arrow reads each column chunk whole before decoding it:
  a 320 MiB row group (128 MiB of zstd text) then costs ~200 MiB of RSS above the batches, with it ~70 MiB
  (benchmarks/RESULTS.md, "the budget holds"). Row groups larger than the budget are read in batches like
  any other; a row larger than a batch cannot be sliced: it is read alone, with one warning naming the file.
- Batch size in rows comes from a probe: the first 1,024 rows of the shard are decoded once to measure Arrow
  bytes per row (footer sizes are post-encoding, and dictionary-encoded text decodes to 10x its footer size),
  then each row group is read with ``batch_bytes / bytes_per_row`` rows, rescaled by the row group's footer size.
  A batch that still comes out larger than ``2 * batch_bytes`` is sliced (zero-copy) before it is yielded.
- Corrupt files (bad magic, truncated footer, undecodable pages, 0 bytes) raise ``InputError`` naming the file
  and, when known, the row group. A requested column missing from the file raises ``SchemaError`` naming the
  column, the file and the columns it has.
- With ``schema=`` each batch is cast to it (``zephyr.io.schema.cast_to_schema``): columns missing from
  the file are nulls, values are checked, and one that does not fit raises ``SchemaError`` naming file, row
  and column.
- Each batch is checked with Arrow's full validation (UTF-8 included); bad rows are located by bisection and
  either raise ``InputError`` naming file, row group and row, or go to the quarantine with ``line`` = the row's
  0-based index within the file.

The Parquet writer is in ``zephyr.io.sinks`` (``ParquetWriter``).
"""

from __future__ import annotations

import collections
import contextlib
import itertools
import logging
from collections.abc import Iterator, Sequence

import pyarrow as pa
import pyarrow.parquet as pq

from zephyr.errors import InputError, SchemaError
from zephyr.io.paths import open_input
from zephyr.io.quarantine import QuarantineFn, drop_bad_rows
from zephyr.io.schema import cast_to_schema

logger = logging.getLogger(__name__)

_PROBE_ROWS = 1024


@contextlib.contextmanager
def open_parquet(path: str, *, buffer_bytes: int = 0) -> Iterator[pq.ParquetFile]:
    """Open ``path`` (an fsspec URL) as a ``ParquetFile``; unreadable footers become ``InputError``.

    ``buffer_bytes`` > 0 streams each column chunk through a buffer of that size (reading data); 0 reads a
    column chunk whole (enough for footers and schemas)."""
    with open_input(path) as handle:
        try:
            parquet_file = pq.ParquetFile(handle, buffer_size=buffer_bytes, pre_buffer=False)
        except (pa.ArrowInvalid, pa.ArrowException, OSError, ValueError) as exc:
            raise InputError(f"not a readable Parquet file: {exc}", path=path) from exc
        with parquet_file:
            yield parquet_file


def parquet_rows(paths: Sequence[str]) -> int:
    """Rows in some Parquet files (fsspec URLs), summed from their footers: no data page is read.

    An unreadable file raises ``InputError`` naming it (``open_parquet``)."""
    total = 0
    for path in paths:
        with open_parquet(path) as parquet_file:
            total += parquet_file.metadata.num_rows
    return total


def split_row_groups(path: str, approx_shard_bytes: int) -> list[tuple[int, ...] | None]:
    """Runs of consecutive row groups of about ``approx_shard_bytes`` uncompressed bytes each (footer sizes).

    A file with a single run (or no row groups) gives ``[None]``: one shard for the whole file.
    """
    with open_parquet(path) as parquet_file:
        metadata = parquet_file.metadata
        runs: list[tuple[int, ...]] = []
        current: list[int] = []
        current_bytes = 0
        for index in range(metadata.num_row_groups):
            current.append(index)
            current_bytes += metadata.row_group(index).total_byte_size
            if current_bytes >= approx_shard_bytes:
                runs.append(tuple(current))
                current, current_bytes = [], 0
        if current:
            runs.append(tuple(current))
    if len(runs) <= 1:
        return [None]
    return list(runs)


def column_bytes(row_group: pq.RowGroupMetaData) -> dict[str, int]:
    """Uncompressed (post-encoding) footer bytes of each top-level column of one row group."""
    sizes: collections.Counter[str] = collections.Counter()
    for j in range(row_group.num_columns):
        chunk = row_group.column(j)
        sizes[chunk.path_in_schema.split(".", 1)[0]] += chunk.total_uncompressed_size
    return sizes


def _estimated_bytes(row_group: pq.RowGroupMetaData, wanted: set[str] | None) -> int:
    """Uncompressed (post-encoding) footer size of the wanted top-level columns of one row group."""
    if wanted is None:
        return row_group.total_byte_size
    return sum(size for name, size in column_bytes(row_group).items() if name in wanted)


def plain_schema(schema: pa.Schema, path: str, columns: Sequence[str] | None = None) -> pa.Schema:
    """The schema a job reads from a Parquet file: dictionary-encoded columns (pandas categoricals, Arrow
    dictionary arrays) as their value type, like any other writer's. A column name that appears twice among
    ``columns`` (all, when None) has no meaning: one line naming the file and the column."""
    names = schema.names
    wanted = set(names if columns is None else columns)
    twice = sorted({n for n in names if names.count(n) > 1 and n in wanted})
    if twice:
        raise SchemaError(
            f"{path}: column {twice[0]!r} appears {names.count(twice[0])} times in the file; a column needs one "
            "name, so rewrite the file with distinct column names"
        )
    return pa.schema([_plain_field(f) for f in schema])


def _plain_field(field: pa.Field) -> pa.Field:
    return field.with_type(field.type.value_type) if pa.types.is_dictionary(field.type) else field


def columns_to_read(
    path: str, available: Sequence[str], columns: Sequence[str] | None, schema: pa.Schema | None
) -> tuple[list[str] | None, pa.Schema | None]:
    """(the file's columns to read, None for all; the schema to cast batches to, projected to ``columns``) of a
    Parquet or Vortex file with columns ``available``: a requested column is in the file or in ``schema``
    (then read as nulls), else ``SchemaError`` names it and the file's columns."""
    if columns is not None:
        missing = [c for c in columns if c not in available and (schema is None or c not in schema.names)]
        if missing:
            raise SchemaError(
                f"{path}: column(s) {missing} not found; the file has columns {list(available)}. "
                "Check the spelling, or pass schema= with the column to read it as nulls."
            )
        if schema is not None:
            schema = pa.schema([schema.field(c) for c in columns])
    if schema is not None:
        return [n for n in schema.names if n in available], schema
    return (list(columns) if columns is not None else None), schema


def read_parquet_shard(shard, read) -> Iterator[pa.RecordBatch]:
    """The batches of the Parquet ``shard`` (the module docstring), read as ``read`` says (a
    ``zephyr.io.sources.ReadOptions``)."""
    path, batch_bytes = shard.path, read.batch_bytes
    with open_parquet(path, buffer_bytes=read.buffer_bytes) as parquet_file:
        metadata = parquet_file.metadata
        file_schema = plain_schema(parquet_file.schema_arrow, path, read.columns)
        read_columns, target = columns_to_read(
            path, file_schema.names, read.columns, read.schema or read.planned
        )
        row_groups = (
            list(range(metadata.num_row_groups)) if shard.row_groups is None else list(shard.row_groups)
        )
        bad_index = [g for g in row_groups if not 0 <= g < metadata.num_row_groups]
        if bad_index:
            raise InputError(
                f"row group(s) {bad_index} out of range: the file has {metadata.num_row_groups}; "
                "it changed after the shards were listed — list them again",
                path=path,
            )
        sizes = (metadata.row_group(g).num_rows for g in range(metadata.num_row_groups))
        starts = [0, *itertools.accumulate(sizes)]
        wanted = set(read_columns) if read_columns is not None else None

        def group_batches(group: int, batch_rows: int) -> Iterator[pa.RecordBatch]:
            try:
                yield from parquet_file.iter_batches(
                    batch_size=batch_rows, row_groups=[group], columns=read_columns, use_threads=True
                )
            except (pa.ArrowException, OSError, ValueError) as exc:
                raise InputError(f"row group {group}: corrupt Parquet data: {exc}", path=path) from exc

        bytes_per_footer_byte: float | None = None
        warned = False
        for group in row_groups:
            group_meta = metadata.row_group(group)
            rows = group_meta.num_rows
            if rows == 0:
                continue
            footer_bytes = max(1, _estimated_bytes(group_meta, wanted))
            if bytes_per_footer_byte is None:  # Arrow bytes per row of the first rows (decoded again below)
                with contextlib.closing(group_batches(group, _PROBE_ROWS)) as probe:
                    first = next(probe, None)
                probe_bytes_per_row = (
                    max(1.0, first.nbytes / first.num_rows) if first and first.num_rows else 1.0
                )
                bytes_per_footer_byte = probe_bytes_per_row * rows / footer_bytes
            bytes_per_row = max(1.0, bytes_per_footer_byte * footer_bytes / rows)
            if bytes_per_row > batch_bytes and not warned:
                warned = True
                logger.warning(
                    "%s: row group %d holds rows of ~%.1f MiB decoded, larger than the read batch of %.1f MiB "
                    "the memory budget allows: each is read alone and the task may exceed its budget; raise "
                    "--memory-budget or split these rows",
                    path,
                    group,
                    bytes_per_row / 2**20,
                    batch_bytes / 2**20,
                )
            batch_rows = max(1, min(rows, int(batch_bytes / bytes_per_row)))
            batches = group_batches(group, batch_rows)
            yield from checked_batches(
                batches,
                path,
                target,
                read.quarantine,
                batch_bytes,
                first_row=starts[group],
                where=f"row group {group}",
            )


def checked_batches(
    batches: Iterator[pa.RecordBatch],
    path: str,
    target: pa.Schema | None,
    quarantine: QuarantineFn | None,
    batch_bytes: int,
    *,
    first_row: int = 0,
    where: str = "",
) -> Iterator[pa.RecordBatch]:
    """What a columnar reader (Parquet, Vortex) yields of the decoded ``batches`` of ``path``, whose first row is
    the file's ``first_row``: bad rows set aside or refused (``drop_bad_rows``), dictionary columns decoded
    (``plain_schema``), cast to ``target`` when given, sliced (zero-copy) to about ``batch_bytes`` when a
    decoded batch overshoots it by more than 2x; ``where`` (``row group 3``) places the rows in messages."""
    row = first_row
    for batch in batches:
        start, row = row, row + batch.num_rows
        batch = drop_bad_rows(batch, path, start, quarantine, where=f"{where}: " if where else "")
        if batch.num_rows == 0:
            continue
        if any(pa.types.is_dictionary(t) for t in batch.schema.types):
            batch = batch.cast(pa.schema([_plain_field(f) for f in batch.schema]))
        if target is not None:
            batch = cast_to_schema(
                batch, target, where=f"{path} ({where})" if where else path, first_row=start
            )
        if batch.nbytes <= 2 * batch_bytes or batch.num_rows <= 1:
            yield batch
            continue
        rows = max(1, int(batch.num_rows * batch_bytes / batch.nbytes))  # 2x over: zero-copy slices
        for begin in range(0, batch.num_rows, rows):
            yield batch.slice(begin, rows)
