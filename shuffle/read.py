"""The reduce side's reading: one partition's run parts, as sources ready to merge, within the byte budget.

First every run's index entry for the partition is read (24 bytes each). Their byte counts tell how big the
partition is before any payload is touched:

* small enough (``Budget.in_memory_reduce_bytes``, assuming ``EXPANSION``× decompression; zephyr/budget.py): all parts are
  read, concatenated in run order and stably sorted once — one source; the fastest path;
* otherwise parts are merged as streams, at most ``fan_in`` at a time (one row group per open part stays in
  memory); with more parts than that, groups are merged first into intermediate sorted Parquet files in a
  scratch directory (external merge), and those files are merged in turn.

Both paths yield the same rows in the same order (stable sort by the merge key, ties in run order), so the
output bytes do not depend on which one ran.
"""

from __future__ import annotations

import logging
import shutil
import tempfile
from collections.abc import Iterator, Sequence

import fsspec
import pyarrow as pa
import pyarrow.parquet as pq
from zephyr.shuffle.merge import merge_sorted
from zephyr.shuffle.runs import RunPart, read_index_entry, read_run_part, row_group_bytes_for
from zephyr.shuffle.writer import sort_table

from zephyr.budget import EXPANSION, Budget

__all__ = ["partition_sources"]

log = logging.getLogger(__name__)


def _read_parts(run_urls: Sequence[str], partition: int) -> list[tuple[fsspec.AbstractFileSystem, RunPart]]:
    parts = []
    for url in run_urls:
        fs, path = fsspec.core.url_to_fs(url)
        part = read_index_entry(fs, path, partition)
        if part.rows:
            parts.append((fs, part))
    return parts


def fan_in_for(budget_bytes: int, row_group_bytes: int) -> int:
    """How many parts may stream at once: each holds about one decoded row group, plus the merged batch."""
    return Budget(budget_bytes).merge_fan_in(row_group_bytes)


def partition_sources(
    run_urls: Sequence[str],
    partition: int,
    merge_columns: Sequence[tuple[str, bool]] | None,
    budget_bytes: int,
) -> tuple[list[Iterator[pa.Table]], Scratch]:
    """Sources for one partition (see the module docstring) and the scratch space to clean up afterwards."""
    parts = _read_parts(run_urls, partition)
    scratch = Scratch()
    if not parts:
        return [], scratch
    stored = sum(p.length for _, p in parts)
    if merge_columns is None:  # no order needed: parts one after another
        return [read_run_part(fs, p) for fs, p in parts], scratch
    if stored * EXPANSION <= Budget(budget_bytes).in_memory_reduce_bytes:
        tables = [t for fs, p in parts for t in read_run_part(fs, p)]
        whole = sort_table(pa.concat_tables(tables, promote_options="permissive"), merge_columns)
        return [iter([whole])], scratch
    fan_in = fan_in_for(budget_bytes, row_group_bytes_for(budget_bytes))
    sources = [_part_source(fs, p) for fs, p in parts]
    level = 0
    while len(sources) > fan_in:
        merged = []
        for start in range(0, len(sources), fan_in):
            group = sources[start : start + fan_in]
            name = f"l{level}-{start // fan_in:05d}"
            merged.append(
                scratch.spill(merge_sorted(group, merge_columns), name, row_group_bytes_for(budget_bytes))
            )
        log.info(
            "partition %d: merged %d sources into %d (fan-in %d)",
            partition,
            len(sources),
            len(merged),
            fan_in,
        )
        sources = merged
        level += 1
    return sources, scratch


def _part_source(fs: fsspec.AbstractFileSystem, part: RunPart) -> Iterator[pa.Table]:
    yield from read_run_part(fs, part)


class Scratch:
    """A local temporary directory for intermediate merge files, removed by ``cleanup``."""

    def __init__(self) -> None:
        self.directory: str | None = None

    def spill(self, tables: Iterator[pa.Table], name: str, row_group_bytes: int) -> Iterator[pa.Table]:
        if self.directory is None:
            self.directory = tempfile.mkdtemp(prefix="zephyr-merge-")
        path = f"{self.directory}/{name}.parquet"
        writer = None
        for table in tables:
            if writer is None:
                writer = pq.ParquetWriter(path, table.schema, compression="lz4", use_dictionary=False)
            table = table.cast(writer.schema) if table.schema != writer.schema else table
            rows = max(256, row_group_bytes // max(1, table.nbytes // max(1, table.num_rows)))
            writer.write_table(table, row_group_size=rows)
        if writer is None:
            return iter(())
        writer.close()
        return _file_source(path)

    def cleanup(self) -> None:
        if self.directory is not None:
            shutil.rmtree(self.directory, ignore_errors=True)
            self.directory = None


def _file_source(path: str) -> Iterator[pa.Table]:
    reader = pq.ParquetFile(path)
    for group in range(reader.num_row_groups):
        yield reader.read_row_group(group)
