"""Verifying candidate pairs on the engine: shingle sets joined onto the pairs, a giant bucket's first
members broadcast.

A templated source puts most rows in the same LSH buckets, and each bucket member is paired with the bucket's
first few members (``lsh.candidate_edges``), so those few rows are the earlier end (v) of most pairs. Joined
row by row, each of their sets would be copied once per pair into a single partition: quadratic bytes and
one straggler task. Instead the pairs of such *hot* rows are grouped by their other end u, joined with u's
set once, and checked against the hot rows' sets, which travel with the stage (a broadcast). The remaining
*cold* pairs join both sets, at most ``_HOT_FAN`` copies of a set each. Sets, not texts, are joined: every
row is shingled once (``fuzzy_clusters.NodeSets``), never once per pair.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from zephyr.dedup.columns import ROW
from zephyr.dedup.config import FuzzyDedupConfig

from zephyr import counters
from zephyr.budget import Budget

if TYPE_CHECKING:
    from zephyr.dedup.index import IndexInfo
    from zephyr.dedup.shingles import Shingles

    from zephyr.dataset import Dataset

__all__ = ["RowsIn", "Renamed", "WithSim", "shingles_of", "similar_pairs", "verify_on_engine"]

_VERIFY_BATCH_ROWS = 2048
"""Pairs (or u rows, on the hot path) verified per batch on the engine path."""
_HOT_FAN = 32
"""A row that is the earlier end (v) of more candidate pairs than this is *hot* on the engine path."""
_PAIR_BYTES = 16
"""Bytes of one (u, v) pair held in memory: the hot pairs broadcast when they fit ``Budget.broadcast_bytes``."""


class RowsIn:
    """The rows whose ``column`` value is in ``keys`` (not in it, with ``keep=False``), with ``rename``
    applied to the column names."""

    def __init__(
        self, column: str, keys: pa.Array, rename: dict[str, str] | None = None, *, keep: bool = True
    ):
        self.column, self.keys, self.rename, self.keep = column, keys, rename or {}, keep

    def __call__(self, table: pa.Table) -> pa.Table:
        inside = pc.is_in(table[self.column], value_set=self.keys)
        table = table.filter(inside if self.keep else pc.invert(inside))
        return Renamed(self.rename)(table)


class Renamed:
    """The table with the columns in ``names`` renamed."""

    def __init__(self, names: dict[str, str]):
        self.names = names

    def __call__(self, table: pa.Table) -> pa.Table:
        return table.rename_columns([self.names.get(c, c) for c in table.column_names])


class WithSim:
    """Unverified pairs as (u, v, sim = null): the shape of verified ones."""

    def __call__(self, table: pa.Table) -> pa.Table:
        return table.append_column("sim", pa.nulls(table.num_rows, pa.float64()))


def shingles_of(lists: pa.Array | pa.ChunkedArray) -> Shingles:
    """A list<uint64> column of sorted sets as ``Shingles`` (no copy of the hashes when in one chunk)."""
    from zephyr.dedup.shingles import Shingles

    if isinstance(lists, pa.ChunkedArray):
        lists = lists.combine_chunks()
    offsets = np.asarray(lists.offsets, dtype=np.int64)
    return Shingles(hashes=np.asarray(lists.flatten(), dtype=np.uint64), offsets=offsets - offsets[0])


def _joined(a: Shingles, b: Shingles) -> Shingles:
    """``a``'s documents then ``b``'s, as one ``Shingles``."""
    from zephyr.dedup.shingles import Shingles

    return Shingles(
        hashes=np.concatenate((a.hashes, b.hashes)),
        offsets=np.concatenate((a.offsets, a.offsets[-1] + b.offsets[1:])),
    )


class _VerifySetPairs:
    """Keeps the pairs (u, v, shingles_u, shingles_v) whose two sets reach the Jaccard threshold."""

    def __init__(self, config: FuzzyDedupConfig):
        self.config = config

    def __call__(self, table: pa.Table) -> pa.Table:
        from zephyr.dedup.verify import jaccard

        m = table.num_rows
        if not m:
            return similar_pairs(table, np.zeros(0), self.config.threshold)
        both = _joined(shingles_of(table["shingles_u"]), shingles_of(table["shingles_v"]))
        sims = jaccard(both, np.stack((np.arange(m), np.arange(m) + m), axis=1), sets=True)
        return similar_pairs(table, sims, self.config.threshold)


class _VerifyHotPairs:
    """Keeps the pairs of (u, vs: the hot rows u is paired with, shingles_u) that reach the threshold. The
    hot rows' sets (``hot``: ROW, shingles) come with the stage, loaded once per worker process: a broadcast,
    so a giant bucket's first members are never copied once per pair nor gathered into one partition.

    With ``grouped`` (u, vs), the pairs come with the stage too and the batches are (ROW, shingles) rows of
    the sets themselves: no shuffle at all, a map over the sets that keeps the rows named as u."""

    def __init__(self, hot: pa.Table, config: FuzzyDedupConfig, grouped: pa.Table | None = None):
        self.hot, self.config = hot.combine_chunks(), config
        self.grouped = None if grouped is None else grouped.combine_chunks()
        self._sets: Shingles | None = None

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_sets": None}

    def _with_pairs(self, sets: pa.Table) -> pa.Table:
        """(u, vs, shingles_u) of the set rows named as u by ``grouped``."""
        assert self.grouped is not None
        at = pc.index_in(sets[ROW], value_set=self.grouped["u"].chunk(0))
        named = pc.is_valid(at)
        return pa.table(
            {
                "u": sets[ROW].filter(named),
                "vs": self.grouped["vs"].take(at.filter(named)),
                "shingles_u": sets["shingles"].filter(named),
            }
        )

    def __call__(self, table: pa.Table) -> pa.Table:
        from zephyr.dedup.verify import jaccard

        if self._sets is None:
            self._sets = shingles_of(self.hot["shingles"])
        if self.grouped is not None:
            table = self._with_pairs(table)
        m = table.num_rows
        vs = table["vs"].combine_chunks()
        lengths = np.asarray(pc.list_value_length(vs).fill_null(0), dtype=np.int64)
        owner = np.repeat(np.arange(m, dtype=np.int64), lengths)
        partner = vs.flatten()
        hot_pos = np.asarray(pc.index_in(partner, value_set=self.hot[ROW].chunk(0)), dtype=np.int64)
        pairs = pa.table({"u": table["u"].take(pa.array(owner)), "v": partner})
        if not len(owner):
            return similar_pairs(pairs, np.zeros(0), self.config.threshold)
        both = _joined(shingles_of(table["shingles_u"]), self._sets)
        sims = jaccard(both, np.stack((owner, m + hot_pos), axis=1), sets=True)
        return similar_pairs(pairs, sims, self.config.threshold)


class _FanAbove:
    """The (v, n) rows with n above ``limit``."""

    def __init__(self, limit: int):
        self.limit = limit

    def __call__(self, table: pa.Table) -> pa.Table:
        return table.filter(pc.greater(table["n"], self.limit))


def similar_pairs(table: pa.Table, sims: np.ndarray, threshold: float) -> pa.Table:
    """(u, v, sim) of the pairs whose Jaccard reaches ``threshold``; counts verified and rejected pairs."""
    keep = sims >= threshold
    counters.increment("dedup/verified_edges", int(keep.sum()))
    counters.increment("dedup/rejected_edges", int((~keep).sum()))
    return pa.table({"u": table["u"], "v": table["v"], "sim": pa.array(sims)}).filter(pa.array(keep))


def verify_on_engine(
    edges: Dataset,
    pairs: pa.Table | None,
    sets: Dataset,
    set_rows: int,
    set_bytes: int,
    pair_limit: int,
    budget_bytes: int,
    config: FuzzyDedupConfig,
    index: IndexInfo | None,
    kw: dict[str, Any],
) -> tuple[list[Dataset], dict[str, Any]]:
    """The verified pairs (u, v, sim) and figures (``hot_rows``, ``hot_pairs``, ``hot_broadcast``), by joins of shingle sets (``sets``: every endpoint's ``NodeSets`` row;
    the index's docs for indexed endpoints, v < 0) onto the pairs ``edges``.

    Pairs whose earlier row v is *hot* (the end of more than ``_HOT_FAN`` pairs: a giant bucket's first
    members) are grouped by u, joined with u's set once and checked against the hot rows' sets broadcast
    with the stage. The other pairs join both sets, one per pair (bounded copies: a cold row is in at most
    ``_HOT_FAN`` pairs as v). When the pairs (or the cold ones) fit the driver (``pair_limit``), each join
    reads only the sets it needs (a semi-join by a broadcast key list), not every set."""
    import zephyr

    sets = sets.select(ROW, "shingles")
    hot, hot_pairs = _hot_rows(edges, pairs, max(1, set_bytes // max(1, set_rows)), budget_bytes, kw)
    hot_sets = _sets_of(hot, sets, index, kw)

    def side(name: str, keys: pa.Array | None, source: Dataset = sets, key: str = ROW) -> Dataset:
        rename = Renamed({key: name, "shingles": f"shingles_{name}"})
        if keys is None:
            return source.map_batches(rename, name=f"dedup.fuzzy.sets_{name}")
        return source.map_batches(RowsIn(key, keys, rename.names), name=f"dedup.fuzzy.sets_{name}")

    def ends(table: pa.Table | None, end: str) -> pa.Array | None:
        return None if table is None else pc.unique(table[end].combine_chunks())

    parts = []
    broadcast = bool(len(hot)) and hot_pairs * _PAIR_BYTES <= Budget(budget_bytes).broadcast_bytes
    if len(hot):
        grouped = (
            edges.map_batches(RowsIn("v", hot), name="dedup.fuzzy.hot_pairs")
            .group_by("u")
            .agg(vs=("v", "list"))
        )
        if broadcast:
            # the hot pairs travel with the stage (u → its hot partners): a map over the sets, no shuffle
            verify = _VerifyHotPairs(hot_sets, config, grouped.to_arrow(**kw))
            parts.append(sets.map_batches(verify, name="dedup.fuzzy.verify_hot"))
        else:
            hot_u = None if pairs is None else ends(pairs.filter(pc.is_in(pairs["v"], value_set=hot)), "u")
            parts.append(
                grouped.join(side("u", hot_u), on="u").map_batches(
                    _VerifyHotPairs(hot_sets, config),
                    batch_rows=_VERIFY_BATCH_ROWS,
                    name="dedup.fuzzy.verify_hot",
                )
            )
    cold = edges.map_batches(RowsIn("v", hot, keep=False), name="dedup.fuzzy.cold_pairs")
    if pairs is not None:
        cold_pairs = pairs.filter(pc.invert(pc.is_in(pairs["v"], value_set=hot)))
    else:  # a giant bucket's pairs are mostly hot: the cold rest may fit the driver
        cold = cold.materialize(**kw)
        cold_pairs = cold.to_arrow(**kw) if cold.count(**kw) <= pair_limit else None
    # materialized before the second join: its partitions are then sized from the real bytes of
    # (pair, set) rows, one set per pair, not from the pair files' few bytes
    cold_u = cold.join(side("u", ends(cold_pairs, "u")), on="u").materialize(**kw)
    cold_v = ends(cold_pairs, "v")
    parts.append(
        cold_u.join(side("v", cold_v), on="v").map_batches(
            _VerifySetPairs(config), batch_rows=_VERIFY_BATCH_ROWS, name="dedup.fuzzy.verify"
        )
    )
    if index is not None and index.docs:
        index_sets = zephyr.read_parquet(index.doc_files(), columns=["key", "shingles"])
        parts.append(
            cold_u.join(side("v", cold_v, index_sets, "key"), on="v").map_batches(
                _VerifySetPairs(config), batch_rows=_VERIFY_BATCH_ROWS, name="dedup.fuzzy.verify_indexed"
            )
        )
    return parts, {"hot_rows": len(hot), "hot_pairs": hot_pairs, "hot_broadcast": broadcast}


def _hot_rows(
    edges: Dataset, pairs: pa.Table | None, per_set: int, budget: int, kw: dict[str, Any]
) -> tuple[pa.Array, int]:
    """The v ends of more than ``_HOT_FAN`` pairs (counted in the driver when ``pairs`` is there, else by a
    group-by), most-paired first, as many as ``Budget.broadcast_bytes`` holds at ``per_set`` bytes each
    (the rest stay cold: correct, only slower), and how many pairs they end."""
    if pairs is not None:
        counts = pc.value_counts(pairs["v"].combine_chunks()).flatten()
        fan = _FanAbove(_HOT_FAN)(pa.table({"v": counts[0], "n": counts[1]}))
    else:
        fan = (
            edges.group_by("v")
            .count("n")
            .map_batches(_FanAbove(_HOT_FAN), name="dedup.fuzzy.hot_rows")
            .to_arrow(**kw)
        )
    cap = max(1, Budget(budget).broadcast_bytes // per_set)
    if fan.num_rows > cap:
        fan = fan.sort_by([("n", "descending"), ("v", "ascending")]).slice(0, cap)
    if not fan.num_rows:
        return pa.array([], pa.int64()), 0
    return fan["v"].combine_chunks().cast(pa.int64()), int(pc.sum(fan["n"]).as_py())


def _sets_of(keys: pa.Array, sets: Dataset, index: IndexInfo | None, kw: dict[str, Any]) -> pa.Table:
    """(ROW, shingles) of the rows in ``keys``: new rows' from ``sets``, indexed documents' (keys < 0) from
    the index's docs."""
    import zephyr

    if not len(keys):
        return pa.table({ROW: pa.array([], pa.int64()), "shingles": pa.array([], pa.large_list(pa.uint64()))})
    found = [sets.map_batches(RowsIn(ROW, keys), name="dedup.fuzzy.hot_sets").to_arrow(**kw)]
    if index is not None and index.docs and pc.any(pc.less(keys, 0)).as_py():
        docs = zephyr.read_parquet(index.doc_files(), columns=["key", "shingles"])
        found.append(
            docs.map_batches(RowsIn("key", keys, {"key": ROW}), name="dedup.fuzzy.hot_index_sets").to_arrow(
                **kw
            )
        )
    return pa.concat_tables([t.select([ROW, "shingles"]) for t in found]).combine_chunks()
