"""The reduce side's reading: one partition's run parts, as sources ready to merge, within the byte budget.

First every run's index block for the partition is read (one small read each, ``shuffle.runs``). Its byte
counts tell how big the partition is before any payload is touched; the blobs are then read a chunk of
consecutive blobs at a time (``runs.part_sources``: about one request per run):

* small enough (``Budget.in_memory_reduce_bytes``, assuming ``EXPANSION``× decompression; zephyr/budget.py): all parts are
  read, concatenated in run order and stably sorted once — one source; the fastest path;
* otherwise parts are merged as streams, at most ``fan_in`` at a time (one row group per open part stays in
  memory); with more parts than that, groups are merged first into intermediate sorted Parquet files in a
  scratch directory (external merge), and those files are merged in turn.

Both paths yield the same rows in the same order (stable sort by the merge key, ties in run order), so the
output bytes do not depend on which one ran.

**The merge** (``merge_sorted``): external k-way merge of sorted runs, vectorized a batch at a time.

Each source yields tables sorted by the same key. The merge keeps one *head* table per source. Each round:
the *cutoff* is the smallest last-key among the heads of sources that still have data to read; every row
strictly below the cutoff, in every head, is final — no unread row can sort before it. Those rows are cut
off (a prefix of each head, found by binary search), concatenated in source order and stably sorted, then
emitted. The source(s) whose last key *is* the cutoff read their next table, so every round makes progress.

Two properties follow. Emitted batches are globally ordered, and all rows with equal keys come out in one
batch (rows equal to the cutoff are held back until every source has moved past it) — a reducer can group
or deduplicate a batch on its own. Ties keep source order, then row order, so the output is deterministic.

Memory is one row group per source plus one batch; ``partition_sources`` bounds the fan-in by merging groups of
sources into intermediate runs first (external merge), so a reducer never holds more than ``fan_in`` heads.
"""

from __future__ import annotations

import logging
import shutil
import tempfile
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import fsspec
import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
from zephyr.shuffle.runs import Run, part_sources, read_index_block, row_group_bytes_for
from zephyr.shuffle.writer import sort_table

from zephyr.budget import EXPANSION, Budget

log = logging.getLogger(__name__)


def partition_sources(
    runs: Sequence[Run | str],
    partition: int,
    merge_columns: Sequence[tuple[str, bool]] | None,
    budget_bytes: int,
) -> tuple[list[Iterator[pa.Table]], _Scratch]:
    """Sources for one partition of ``runs`` (data paths or ``Run``s; see the module docstring) and the scratch
    space to clean up afterwards."""
    chunk = row_group_bytes_for(budget_bytes)
    scratch, sources, stored = _Scratch(), [], 0
    for run in runs:  # one index read each, then the partition's blobs
        run = run if isinstance(run, Run) else Run(run)
        fs, path = fsspec.core.url_to_fs(run.path)
        parts = read_index_block(fs, Run(path, run.slots), partition)
        stored += sum(p.length for p in parts)
        sources += part_sources(fs, parts, chunk)
    if not sources or merge_columns is None:  # no order needed: parts one after another
        return sources, scratch
    if stored * EXPANSION <= Budget(budget_bytes).in_memory_reduce_bytes:
        tables = [t for source in sources for t in source]
        whole = sort_table(pa.concat_tables(tables, promote_options="permissive"), merge_columns)
        return [iter([whole])], scratch
    fan_in = Budget(budget_bytes).merge_fan_in(chunk)  # parts that stream at once: a row group each
    level = 0
    while len(sources) > fan_in:
        merged = []
        for start in range(0, len(sources), fan_in):
            group = sources[start : start + fan_in]
            name = f"l{level}-{start // fan_in:05d}"
            merged.append(scratch.spill(merge_sorted(group, merge_columns), name, chunk))
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


class _Scratch:
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


# -- the merge ----------------------------------------------------------------------------------------------
SortColumns = Sequence[tuple[str, bool]]


class _Head:
    """The unread part of one source, and ``keys``: its merge key, as ``key_of`` makes it of the table."""

    def __init__(self, source: Iterator[pa.Table], key_of: Callable[[pa.Table], Any]):
        self.source, self.key_of = source, key_of
        self.table: pa.Table | None = None
        self.keys: Any = None
        self.exhausted = False
        self.extend()

    def extend(self) -> None:
        """Append the source's next non-empty table, or mark the source exhausted."""
        for table in self.source:
            if table.num_rows:
                if self.table is not None:
                    table = pa.concat_tables([self.table, table], promote_options="permissive")
                self.table, self.keys = table, self.key_of(table)
                return
        self.exhausted = True

    def take_front(self, n: int) -> pa.Table:
        front = self.table.slice(0, n)
        self.table, self.keys = self.table.slice(n), self.keys[n:]
        return front

    @property
    def rows(self) -> int:
        return 0 if self.table is None else self.table.num_rows


def _count_before(keys: pl.DataFrame, cutoff: pl.DataFrame, columns: SortColumns) -> int:
    """Rows of the sorted ``keys`` that sort strictly before the one-row ``cutoff`` (nulls last)."""
    if len(columns) == 1:
        name, descending = columns[0]
        series = keys.get_column(name)
        value = cutoff.get_column(name)[0]
        non_null = len(series) - series.null_count()
        if value is None:
            return non_null
        return int(series.slice(0, non_null).search_sorted(value, side="left", descending=descending))
    before = pl.lit(False)
    equal_so_far = pl.lit(True)
    for name, descending in columns:
        value = cutoff.get_column(name)[0]
        column = pl.col(name)
        if value is None:
            less, equal = column.is_not_null(), column.is_null()
        else:
            less = (column > value) if descending else (column < value)
            less = less.fill_null(False)
            equal = (column == value).fill_null(False)
        before = before | (equal_so_far & less)
        equal_so_far = equal_so_far & equal
    return int(keys.select(before.sum()).item())


def merge_sorted(sources: Sequence[Iterator[pa.Table]], columns: SortColumns) -> Iterator[pa.Table]:
    """Merge sources sorted by ``columns`` into globally sorted batches (see the module docstring).

    One ascending ``uint64`` key (a hash shuffle's) is merged on numpy arrays, with binary searches and no
    conversions; any other key on polars frames of the key columns."""
    columns = list(columns)
    heads = [_Head(iter(source), lambda t: t) for source in sources]
    name = columns[0][0] if columns else None
    hashed = (
        len(columns) == 1
        and not columns[0][1]
        and all(h.table is None or h.table.schema.field(name).type == pa.uint64() for h in heads)
    )
    key_of = (
        (lambda t: t.column(name).combine_chunks().to_numpy(zero_copy_only=False))
        if hashed
        else (lambda t: pl.from_arrow(t.select([c for c, _ in columns]), rechunk=False))
    )
    for head in heads:  # the first tables were read to choose: their keys now
        head.key_of, head.keys = key_of, None if head.table is None else key_of(head.table)
    while True:
        live = [h for h in heads if h.rows]
        if not live:
            return
        frontier = [h for h in live if not h.exhausted]
        if not frontier:  # nothing left to read: the rest is final
            yield sort_table(pa.concat_tables([h.table for h in live], promote_options="permissive"), columns)
            return
        if hashed:
            cutoff = min(h.keys[-1] for h in frontier)
            at_cutoff = {id(h) for h in frontier if h.keys[-1] == cutoff}
            counts = [int(np.searchsorted(h.keys, cutoff, side="left")) for h in live]
        else:
            lasts = [h.keys.slice(h.rows - 1, 1) for h in frontier]
            cutoff = pl.concat(lasts).sort(
                [c for c, _ in columns],
                descending=[d for _, d in columns],
                nulls_last=True,
                maintain_order=True,
            )[:1]
            # ``equals``, not ``==`` on the rows' tuples: NaN equals NaN and null equals null here, as the sort
            # orders them (with ``==`` a source whose last key was NaN never read on and the merge looped).
            at_cutoff = {id(h) for h, last in zip(frontier, lasts) if last.equals(cutoff)}
            counts = [_count_before(h.keys, cutoff, columns) for h in live]
        pieces = [head.take_front(n) for head, n in zip(live, counts) if n]
        if pieces:
            yield (
                sort_table(pa.concat_tables(pieces, promote_options="permissive"), columns)
                if len(pieces) > 1
                else pieces[0]
            )
        # Sources at the cutoff (and sources emptied by this round) read on.
        for head in heads:
            if not head.exhausted and (id(head) in at_cutoff or head.rows == 0):
                head.extend()
