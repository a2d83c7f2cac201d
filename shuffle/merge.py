"""External k-way merge of sorted runs, vectorized a batch at a time.

Each source yields tables sorted by the same key. The merge keeps one *head* table per source. Each round:
the *cutoff* is the smallest last-key among the heads of sources that still have data to read; every row
strictly below the cutoff, in every head, is final — no unread row can sort before it. Those rows are cut
off (a prefix of each head, found by binary search), concatenated in source order and stably sorted, then
emitted. The source(s) whose last key *is* the cutoff read their next table, so every round makes progress.

Two properties follow. Emitted batches are globally ordered, and all rows with equal keys come out in one
batch (rows equal to the cutoff are held back until every source has moved past it) — a reducer can group
or deduplicate a batch on its own. Ties keep source order, then row order, so the output is deterministic.

Memory is one row group per source plus one batch; ``merge_runs`` bounds the fan-in by merging groups of
sources into intermediate runs first (external merge), so a reducer never holds more than ``fan_in`` heads.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import numpy as np
import polars as pl
import pyarrow as pa
from zephyr.shuffle.partition import numpy_to_arrow
from zephyr.shuffle.writer import sort_table

__all__ = ["merge_sorted"]

SortColumns = Sequence[tuple[str, bool]]


class _Head:
    """The unread part of one source; ``keys`` mirrors the uint64 merge key when the merge is on a hash."""

    def __init__(self, source: Iterator[pa.Table], hash_key: str | None):
        self.source = source
        self.hash_key = hash_key
        self.table: pa.Table | None = None
        self.keys: np.ndarray | None = None
        self.exhausted = False
        self.extend()

    def extend(self) -> None:
        """Append the source's next non-empty table, or mark the source exhausted."""
        for table in self.source:
            if table.num_rows:
                if self.table is None:
                    self.table = table
                else:
                    self.table = pa.concat_tables([self.table, table], promote_options="permissive")
                if self.hash_key is not None:
                    self.keys = _hash_keys(self.table, self.hash_key)
                return
        self.exhausted = True

    def take_front(self, n: int) -> pa.Table:
        front = self.table.slice(0, n)
        self.table = self.table.slice(n)
        if self.keys is not None:
            self.keys = self.keys[n:]
        return front

    @property
    def rows(self) -> int:
        return 0 if self.table is None else self.table.num_rows


def _hash_keys(table: pa.Table, name: str) -> np.ndarray:
    return table.column(name).combine_chunks().to_numpy(zero_copy_only=False)


def _frame(table: pa.Table, columns: SortColumns) -> pl.DataFrame:
    return pl.from_arrow(table.select([c for c, _ in columns]), rechunk=False)


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


def _is_hash_merge(columns: SortColumns, heads: list[_Head]) -> bool:
    return (
        len(columns) == 1
        and not columns[0][1]
        and all(h.table is None or h.table.schema.field(columns[0][0]).type == pa.uint64() for h in heads)
    )


def _sort_by_hash(table: pa.Table, name: str) -> pa.Table:
    order = np.argsort(_hash_keys(table, name), kind="stable")
    return table.take(numpy_to_arrow(order))


def merge_sorted(sources: Sequence[Iterator[pa.Table]], columns: SortColumns) -> Iterator[pa.Table]:
    """Merge sources sorted by ``columns`` into globally sorted batches (see the module docstring)."""
    columns = list(columns)
    heads = [_Head(iter(source), None) for source in sources]
    if _is_hash_merge(columns, heads):
        name = columns[0][0]
        for head in heads:
            head.hash_key = name
            if head.table is not None:
                head.keys = _hash_keys(head.table, name)
        yield from _merge_hash(heads, name)
        return
    while True:
        live = [h for h in heads if h.rows]
        if not live:
            return
        frontier = [h for h in live if not h.exhausted]
        if not frontier:  # nothing left to read: the rest is final
            yield sort_table(pa.concat_tables([h.table for h in live], promote_options="permissive"), columns)
            return
        lasts = pl.concat([_frame(h.table.slice(h.rows - 1, 1), columns) for h in frontier])
        order = lasts.with_row_index("__i").sort(
            [c for c, _ in columns], descending=[d for _, d in columns], nulls_last=True, maintain_order=True
        )
        cutoff = order.slice(0, 1).drop("__i")
        pieces = []
        for head in live:
            n = _count_before(_frame(head.table, columns), cutoff, columns)
            if n:
                pieces.append(head.take_front(n))
        if pieces:
            yield (
                sort_table(pa.concat_tables(pieces, promote_options="permissive"), columns)
                if len(pieces) > 1
                else pieces[0]
            )
        # Sources at the cutoff (and sources emptied by this round) read on.
        at_cutoff = {
            id(frontier[i])
            for i in order.get_column("__i").to_list()
            if _equal_rows(lasts.slice(i, 1), cutoff)
        }
        for head in heads:
            if not head.exhausted and (id(head) in at_cutoff or head.rows == 0):
                head.extend()


def _merge_hash(heads: list[_Head], name: str) -> Iterator[pa.Table]:
    """``merge_sorted`` for one ascending uint64 key without nulls: numpy binary searches, no conversions."""
    while True:
        live = [h for h in heads if h.rows]
        if not live:
            return
        frontier = [h for h in live if not h.exhausted]
        if not frontier:
            yield _sort_by_hash(pa.concat_tables([h.table for h in live], promote_options="permissive"), name)
            return
        cutoff = min(h.keys[-1] for h in frontier)
        pieces = []
        for head in live:
            n = int(np.searchsorted(head.keys, cutoff, side="left"))
            if n:
                pieces.append(head.take_front(n))
        if pieces:
            batch = pa.concat_tables(pieces, promote_options="permissive")
            yield _sort_by_hash(batch, name) if len(pieces) > 1 else batch
        for head in heads:
            if not head.exhausted and (head.rows == 0 or head.keys[-1] == cutoff):
                head.extend()


def _equal_rows(a: pl.DataFrame, b: pl.DataFrame) -> bool:
    """Whether two one-row key frames are equal as the sort orders them: NaN equals NaN, null equals null.
    Python's ``==`` on the rows' tuples says NaN != NaN, so a source whose last key was NaN never read on and
    the merge looped forever."""
    return a.equals(b)


def concat_sources(sources: Sequence[Iterator[pa.Table]]) -> Iterator[pa.Table]:
    """Sources one after another (round-robin reshard; order = source order)."""
    for source in sources:
        yield from source
