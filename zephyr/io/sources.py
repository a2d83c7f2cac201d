"""Sources: split input files into shards and stream each shard as bounded Arrow record batches.

Contract:

- ``list_shards(paths, format)`` resolves paths (globs, directories, fsspec URLs; see ``zephyr.io.paths``) and
  returns an ordered, deterministic list of ``Shard``s. By default one shard per file. With
  ``approx_shard_bytes``: Parquet files are split into runs of consecutive row groups of about that many
  *uncompressed* bytes (read from the footers); plain JSONL into byte ranges (a line belongs to the shard in
  which it starts); compressed JSONL and Vortex stay one shard per file (they cannot be entered mid-stream).
- ``read_shard(shard)`` yields ``pyarrow.RecordBatch``es of at most about ``batch_bytes`` each (a single row
  larger than that is yielded alone). Memory stays bounded by a few batches whatever the file size: Parquet is
  read row group by row group with ``iter_batches``, JSONL in newline-aligned blocks, Vortex with its scan.
- Bad input never crashes obscurely and never silently loses rows. Unreadable files (corrupt Parquet, a cut
  .gz/.zst stream, an empty .parquet) raise ``InputError`` naming the file (and row group / line); with
  ``on_error="quarantine"`` a cut .gz/.zst stream instead yields every whole line before the cut and
  quarantines the cut as one entry. A 0-row Parquet file or a 0-byte JSONL file yields no rows. Bad rows
  (invalid JSON or UTF-8, a JSON line that is not an object, a Parquet string that is not UTF-8) raise
  ``InputError`` naming file and line/row with ``on_error="raise"``; with ``on_error="quarantine"`` they are
  passed to ``quarantine`` (schema in ``zephyr.io.quarantine``) and not yielded, so rows yielded + rows
  quarantined == input rows. A missing requested column or an inconsistent JSONL column type raises
  ``SchemaError`` naming file, column and the fix.
- Files of one input that disagree on their schemas are cast to one schema a job decides before its tasks
  (``input_schema=``; the rule is in ``zephyr.io.schema``).

A multi-file input's one schema (``plan_input_schema``): each file's schema read cheaply (``_peek_schema``),
then the rule of ``zephyr.io.schema`` applied; reading schemas needs the readers, so it lives here, above both,
and the job planner calls it. ``check_text_inputs`` peeks the same way to refuse a text column that is not text.

How many in-memory (Arrow) bytes an input file holds, estimated before reading it, is one rule for every
planner: the engine sizes shuffle partitions and decides small jobs from it, and the
tokenize writer splits its inputs by it. Parquet footers give exact uncompressed column sizes
(``parquet_footer_sizes``); otherwise the file size is scaled by a per-format factor (``estimated_bytes``).
The same footers tell how wide a row is on average in each row group, per column: a row is the one thing a
reader cannot split, so it bounds the smallest memory budget that works (``zephyr.physical.check_row_width``).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import Literal

import pyarrow as pa

from zephyr.errors import ConfigError, SchemaError, require
from zephyr.io import jsonl, parquet, vortex, warc
from zephyr.io.paths import Format, infer_compression, input_files
from zephyr.io.quarantine import QuarantineFn, require_text_column
from zephyr.io.schema import SCHEMA_PEEK_BYTES, merge_schemas

logger = logging.getLogger(__name__)

DEFAULT_BATCH_BYTES = 64 << 20
DEFAULT_BUFFER_BYTES = 1 << 20
"""Parquet: each column chunk streams through a buffer of this size (tasks use ``Budget.read_buffer_bytes``)."""


@dataclass(frozen=True)
class Shard:
    """One unit of input work: a whole file or a piece of one. Small, picklable, deterministic."""

    path: str
    """fsspec URL (local paths are plain paths)."""
    format: Format
    index: int
    """Position in the source's ordered shard list."""
    row_groups: tuple[int, ...] | None = None
    """Parquet: the row groups of this shard (None = all)."""
    byte_range: tuple[int, int] | None = None
    """Uncompressed JSONL: ``[start, stop)``; a line belongs to the shard in which it starts."""

    def describe(self) -> str:
        """``path (row groups 3-5)`` / ``path (bytes 0-1048576)`` / ``path``, for messages and logs."""
        if self.row_groups is not None:
            groups = self.row_groups
            if not groups:
                return f"{self.path} (no row groups)"
            contiguous = list(groups) == list(range(groups[0], groups[-1] + 1))
            if len(groups) == 1:
                return f"{self.path} (row group {groups[0]})"
            if contiguous:
                return f"{self.path} (row groups {groups[0]}-{groups[-1]})"
            return f"{self.path} (row groups {', '.join(map(str, groups))})"
        if self.byte_range is not None:
            return f"{self.path} (bytes {self.byte_range[0]}-{self.byte_range[1]})"
        return self.path


@dataclass(frozen=True)
class ReadOptions:
    """What ``read_shard`` hands the format's reader (``read_parquet_shard``, ``read_jsonl_shard``,
    ``read_vortex_shard``, ``read_warc_shard``): its arguments, checked; ``planned`` is its ``input_schema``,
    ``quarantine`` None unless ``on_error="quarantine"``."""

    columns: list[str] | None
    schema: pa.Schema | None
    planned: pa.Schema | None
    quarantine: QuarantineFn | None
    batch_bytes: int
    buffer_bytes: int


def list_shards(
    paths: str | Sequence[str], format: Format | None = None, *, approx_shard_bytes: int | None = None
) -> list[Shard]:
    """Resolve ``paths`` (``zephyr.io.paths.input_files``: one format, the given one or the files') and split
    the files into shards (see the module docstring for the rules)."""
    if approx_shard_bytes is not None and approx_shard_bytes <= 0:
        raise ConfigError(f"approx_shard_bytes must be > 0, got {approx_shard_bytes}")
    files, fmt = input_files(paths, format)
    shards: list[Shard] = []
    for path in files:
        pieces: list[dict] = [{}]
        if approx_shard_bytes is not None:
            if fmt == "parquet":
                pieces = [{"row_groups": g} for g in parquet.split_row_groups(path, approx_shard_bytes)]
            elif fmt == "jsonl" and infer_compression(path) is None:
                pieces = [{"byte_range": r} for r in jsonl.split_byte_ranges(path, approx_shard_bytes)]
        for piece in pieces:
            shards.append(Shard(path=path, format=fmt, index=len(shards), **piece))
    if fmt == "vortex" and files:
        require("vortex", "vortex", f"reading {files[0]}")
    logger.info(
        "listed %d shards from %d %s files (approx_shard_bytes=%s)",
        len(shards),
        len(files),
        fmt,
        approx_shard_bytes,
    )
    return shards


def read_shard(
    shard: Shard,
    *,
    columns: Sequence[str] | None = None,
    schema: pa.Schema | None = None,
    input_schema: pa.Schema | None = None,
    on_error: Literal["raise", "quarantine"] = "raise",
    quarantine: QuarantineFn | None = None,
    batch_bytes: int = DEFAULT_BATCH_BYTES,
    buffer_bytes: int = DEFAULT_BUFFER_BYTES,
) -> Iterator[pa.RecordBatch]:
    """Stream ``shard`` as record batches of about ``batch_bytes`` (see the module docstring).

    ``schema``: the user's schema (JSONL is parsed with it; Parquet and Vortex columns are cast to it).
    ``input_schema``: the schema a job planned for all its files (``zephyr.io.schema``); every batch is
    cast to it, so all files of one input yield one schema.
    ``buffer_bytes``: Parquet column chunks are read through buffers of this size, never whole.
    """
    if on_error not in ("raise", "quarantine"):
        raise ConfigError(f"on_error must be 'raise' or 'quarantine', got {on_error!r}")
    if on_error == "quarantine" and quarantine is None:
        raise ConfigError("on_error='quarantine' needs a quarantine= callback to receive the bad rows")
    if batch_bytes <= 0:
        raise ConfigError(f"batch_bytes must be > 0, got {batch_bytes}")
    if columns is not None:
        columns = list(columns)
        if len(set(columns)) != len(columns):
            raise ConfigError(f"columns has duplicates: {columns}")
    readers = {
        "parquet": parquet.read_parquet_shard,
        "jsonl": jsonl.read_jsonl_shard,
        "warc": warc.read_warc_shard,
        "vortex": vortex.read_vortex_shard,
    }
    kept = quarantine if on_error == "quarantine" else None
    return readers[shard.format](
        shard, ReadOptions(columns, schema, input_schema, kept, batch_bytes, buffer_bytes)
    )


_PEEK_THREADS = 8  # footer and first-block reads wait on storage, not CPU
_TEXT_PEEK_BYTES = 64 << 10
"""JSONL bytes parsed to learn a text column's type (a longer first line is read whole)."""


def _peek_schema(shard: Shard, *, peek_bytes: int = SCHEMA_PEEK_BYTES) -> tuple[str, pa.Schema | None]:
    """(path, the file's schema as a reader yields it), or (path, None) for a JSONL/Vortex file without rows.

    Parquet: the footer (even a 0-row file has typed columns). JSONL/Vortex: the first batch; bad lines are the
    job's business (it raises or quarantines them by its own ``on_error``), so they are skipped here.
    """
    if shard.format == "parquet":
        with parquet.open_parquet(shard.path) as parquet_file:
            return shard.path, parquet.plain_schema(parquet_file.schema_arrow, shard.path)
    if shard.format == "warc":  # one fixed schema; peeking would parse records
        return shard.path, warc.WARC_SCHEMA
    batches = read_shard(shard, on_error="quarantine", quarantine=lambda table: None, batch_bytes=peek_bytes)
    with contextlib.closing(batches):  # a generator: closes the file now
        first = next(batches, None)
    return shard.path, None if first is None else first.schema


def peek_schemas(
    shards: Sequence[Shard], *, peek_bytes: int = SCHEMA_PEEK_BYTES
) -> list[tuple[str, pa.Schema | None]]:
    """``_peek_schema`` of each distinct file of ``shards``, in order, 8 files at a time."""
    files = list({s.path: replace(s, byte_range=None, row_groups=None) for s in shards}.values())
    with ThreadPoolExecutor(max_workers=min(_PEEK_THREADS, max(1, len(files)))) as pool:
        return list(pool.map(lambda s: _peek_schema(s, peek_bytes=peek_bytes), files))


def check_text_inputs(paths: str | Sequence[str], column: str, *, format: Format | None = None) -> None:
    """Check ``column`` of every input file with ``zephyr.io.quarantine.require_text_column``, before any task
    runs, reading only what decides it: a Parquet footer, the first 64 KiB of a JSONL file, the first batch of
    a Vortex file (8 files at a time). So a wrong column fails at once, in one line naming the file and the
    column. A JSONL file whose first lines have only null texts passes here; the stages check each batch again.

    ``paths`` and ``format`` are resolved as ``list_shards`` does. A JSONL or Vortex file without rows has no
    column types and passes; a 0-row Parquet file is checked like any other (its empty, typed table still flows
    through the steps). Raises the first failing file's error, in file order.
    """
    files = list_shards(paths, format)  # one shard per file
    if files and files[0].format == "warc":
        raise SchemaError(
            f"{files[0].path} is a WARC file: its records hold HTML, not a {column!r} column; extract the text "
            "first (zephyr extract WARC... --output DIR, or zephyr.read_warc), then run this command on DIR"
        )
    for path, schema in peek_schemas(files, peek_bytes=_TEXT_PEEK_BYTES):
        if schema is not None:
            require_text_column(schema, column, where=path)


def plan_input_schema(
    shards: Sequence[Shard],
    *,
    unify: bool = False,
    schema: pa.Schema | None = None,
    columns: Sequence[str] | None = None,
) -> pa.Schema | None:
    """The schema every task of this input casts to, or None when no rule is needed (one shard, no schema).

    ``columns``: only these take part (a projection never fails on a column it does not read).
    """
    if schema is not None:
        return schema
    if len(shards) <= 1:
        return None
    peeks = peek_schemas(shards)
    if columns is not None:
        wanted = list(columns)
        peeks = [
            (p, None if s is None else pa.schema([s.field(c) for c in wanted if c in s.names]))
            for p, s in peeks
        ]
    return merge_schemas(peeks, unify=unify)


SIZE_FACTOR = {"parquet": 3.0, "vortex": 3.0, "jsonl": 1.0, "warc": 1.0}
"""In-memory bytes per stored byte: zstd/snappy Parquet and Vortex of prose and code hold 2-4x; plain JSONL's
text is about its size in Arrow."""
COMPRESSED_FACTOR = {".gz": 4.0, ".zst": 5.0}
"""The same for a compressed JSONL stream (its suffix decides)."""
FOOTER_ESTIMATE_MAX_FILES = 2000
"""Above this many Parquet files, sizes are estimated from file sizes instead of reading every footer."""


def estimated_bytes(path: str, size: int, fmt: str) -> int:
    """In-memory bytes of a ``fmt`` file of ``size`` stored bytes at ``path``."""
    factor = SIZE_FACTOR.get(fmt, 1.0)
    for suffix, compressed in COMPRESSED_FACTOR.items():
        if path.endswith(suffix):
            factor = compressed
    return int(size * factor)


@dataclass(frozen=True)
class RowWidth:
    """A column's widest row group: its uncompressed bytes per row there, and where it is."""

    bytes_per_row: int
    path: str
    row_group: int


@dataclass
class FooterSizes:
    """What the footers of some Parquet files say: uncompressed bytes per top-level column over all row groups,
    and per column the row group whose rows are widest on average."""

    column_bytes: dict[str, int] = field(default_factory=dict)
    widest: dict[str, RowWidth] = field(default_factory=dict)


def parquet_footer_sizes(paths: list[str]) -> FooterSizes:
    """Column sizes and widest rows of these files (one footer read each)."""
    sizes = FooterSizes()
    for url in paths:
        try:
            with parquet.open_parquet(url) as parquet_file:
                metadata = parquet_file.metadata
        except Exception:  # unreadable here: the reading task reports it with its path
            continue
        for group in range(metadata.num_row_groups):
            row_group = metadata.row_group(group)
            for name, size in parquet.column_bytes(row_group).items():
                sizes.column_bytes[name] = sizes.column_bytes.get(name, 0) + size
                if row_group.num_rows:
                    width = size // row_group.num_rows
                    if name not in sizes.widest or width > sizes.widest[name].bytes_per_row:
                        sizes.widest[name] = RowWidth(width, url, group)
    return sizes
