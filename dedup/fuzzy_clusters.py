"""Verification and clustering of the fuzzy dedup candidate pairs, choosing where each runs.

The endpoints' shingle sets are written once (``NodeSets``). When the pairs and the sets fit the driver,
verification and clusters run there (``driver_graph.graph_in_driver``). Otherwise the pairs are verified on
the engine (``verify_engine.verify_on_engine``); the verified graph is then clustered in the driver when it
fits, else (components only) by engine rounds (``engine_components``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc
from zephyr.dedup.columns import CLUSTER, KEEPER, ROW, SIZE
from zephyr.dedup.config import FuzzyDedupConfig
from zephyr.dedup.driver_graph import graph_in_driver
from zephyr.dedup.dup_columns import group_keepers, has_column, key_columns
from zephyr.dedup.eager import memory_budget_bytes
from zephyr.dedup.verify_engine import RowsIn, WithSim, verify_on_engine

from zephyr import budget as budget_module
from zephyr import counters
from zephyr.budget import Budget
from zephyr.errors import ZephyrError

if TYPE_CHECKING:
    from zephyr.dedup.index import IndexInfo

    from zephyr.dataset import Dataset

__all__ = ["NodeSets", "verify_and_cluster"]


class NodeSets:
    """(ROW, sorted shingle set[, id][, priority]) of the rows whose number is in ``nodes`` (every row when
    ``nodes`` is None). Counts the sets' bytes (``dedup/set_bytes``): what holding them in the driver costs."""

    def __init__(
        self,
        nodes: pa.Array | None,
        config: FuzzyDedupConfig,
        text_column: str,
        id_column: str | None,
        priority_column: str | None,
    ):
        self.nodes, self.config, self.text_column = nodes, config, text_column
        self.id_column, self.priority_column = id_column, priority_column

    def __call__(self, table: pa.Table) -> pa.Table:
        from zephyr.dedup.shingles import shingle_hashes, unique_sets

        if not (has_column(table, self.text_column, "text") and has_column(table, self.id_column, "id")):
            return pa.table({ROW: pa.array([], pa.int64())})
        wanted = table if self.nodes is None else table.filter(pc.is_in(table[ROW], value_set=self.nodes))
        cfg = self.config
        sets = unique_sets(
            shingle_hashes(wanted[self.text_column], kind=cfg.shingle, n=cfg.ngram, normalize=cfg.normalize)
        )
        lists = pa.LargeListArray.from_arrays(pa.array(sets.offsets), pa.array(sets.hashes, pa.uint64()))
        counters.increment("dedup/set_bytes", lists.nbytes)
        return pa.table(
            {
                ROW: wanted[ROW],
                "shingles": lists,
                **key_columns(wanted, self.id_column, self.priority_column),
            }
        )


def verify_and_cluster(
    rows: Dataset,
    edges: Dataset,
    candidates: int,
    config: FuzzyDedupConfig,
    text_column: str,
    id_column: str | None,
    priority_column: str | None,
    kw: dict[str, Any],
    info: dict[str, Any],
    index: IndexInfo | None,
    scratch: str,
) -> tuple[pa.Table | None, Dataset | None]:
    """Verify and cluster the candidate pairs: (node info for ``Attach``, None) when the verified graph is
    clustered in the driver, (None, labels) when by engine rounds.

    The driver verifies when both the pairs (``in_memory_limit``) and the endpoints' shingle sets (an
    sixteenth of the memory budget) fit; the sets are written once to ``scratch`` either way, so the engine
    path joins sets, never texts, and nothing is shingled twice. Otherwise the pairs are verified on the
    engine (``verify_on_engine``) and only the verified graph comes to the driver."""
    budget = memory_budget_bytes(kw)
    new_nodes: pa.Array | None = None
    pairs: pa.Table | None = None
    if candidates <= info["in_memory_limit"]:
        pairs = edges.to_arrow(**kw)
        if not pairs.num_rows:
            info.update(in_memory=True, verified_edges=0)
            return None, None
        nodes = pc.unique(pa.chunked_array(pairs["u"].chunks + pairs["v"].chunks).combine_chunks())
        new_nodes = nodes.filter(pc.greater_equal(nodes, 0))
    written = rows.map_batches(
        NodeSets(new_nodes, config, text_column, id_column, priority_column), name="dedup.fuzzy.node_sets"
    ).write_parquet(f"{scratch}/sets", **kw)
    set_bytes = sum(stage["counters"].get("dedup/set_bytes", 0) for stage in written.stats["stages"])
    info["set_bytes"] = set_bytes
    import zephyr

    if not written.files:  # no row has a set: nothing can pair
        info.update(in_memory=pairs is not None, verified_edges=0)
        return None, None
    sets = zephyr.read_parquet(written.files)

    def collect_sets(keys: pa.Array) -> pa.Table:
        return sets.map_batches(RowsIn(ROW, keys), name="dedup.fuzzy.endpoint_sets").to_arrow(**kw)

    in_memory = pairs is not None and (not config.verify or set_bytes <= Budget(budget).driver_set_bytes)
    info["in_memory"] = in_memory
    if in_memory:
        return graph_in_driver(collect_sets, pairs, config, id_column, priority_column, kw, info, index), None
    verified = _verified_graph(edges, pairs, sets, written, budget, config, index, kw, info, scratch)
    count = info["verified_edges"]
    graph_limit = Budget(budget).driver_graph_edges
    if not count:
        return None, None
    if count <= graph_limit:
        pairs = verified.to_arrow(**kw)
        if not config.verify:
            pairs = pairs.drop_columns(["sim"])
        node_info = graph_in_driver(collect_sets, pairs, config, id_column, priority_column, kw, info, index)
        return node_info, None
    _check_engine_clusters(count, graph_limit, config, index)
    return None, _components_on_engine(rows, verified, id_column, priority_column, kw).materialize(**kw)


def _verified_graph(
    edges: Dataset,
    pairs: pa.Table | None,
    sets: Dataset,
    written: Any,
    budget: int,
    config: FuzzyDedupConfig,
    index: IndexInfo | None,
    kw: dict[str, Any],
    info: dict[str, Any],
    scratch: str,
) -> Dataset | None:
    """The verified pairs (u, v, sim) beyond the driver, written to ``scratch`` (None when there are none):
    verified on the engine, or every candidate with sim 1.0 when ``config.verify`` is off. Records
    ``verified_edges`` and the engine verification's figures in ``info``."""
    import zephyr

    if config.verify:
        set_rows = written.stats["stages"][-1]["rows_out"]
        parts, figures = verify_on_engine(
            edges,
            pairs,
            sets,
            set_rows,
            info["set_bytes"],
            info["in_memory_limit"],
            budget,
            config,
            index,
            kw,
        )
        info.update(figures)
    else:
        parts = [edges.map_batches(WithSim(), name="dedup.fuzzy.unverified")]
    files = [
        f for i, part in enumerate(parts) for f in part.write_parquet(f"{scratch}/verified-{i}", **kw).files
    ]
    verified = zephyr.read_parquet(files) if files else None
    info["verified_edges"] = verified.count(**kw) if verified is not None else 0
    return verified


def _check_engine_clusters(
    count: int, graph_limit: int, config: FuzzyDedupConfig, index: IndexInfo | None
) -> None:
    """Refuse, naming the fix, a verified graph too big for the driver when only the driver can cluster it."""
    if index is not None:
        raise ZephyrError(
            f"dedup against an index clusters in the driver, but {count} verified pairs exceed its share "
            f"of the memory budget ({graph_limit} pairs at {budget_module.GRAPH_BYTES_PER_EDGE} bytes each); raise "
            "--memory-budget, or dedup the input in parts"
        )
    if config.clusters != "components":
        raise ZephyrError(
            f"anchored clusters are formed in the driver, but {count} verified pairs exceed its share of the "
            f"memory budget ({graph_limit} pairs at {budget_module.GRAPH_BYTES_PER_EDGE} bytes each); raise "
            "--memory-budget, or pass --clusters components (engine rounds, transitive clusters)"
        )


def _components_on_engine(
    rows: Dataset, verified: Dataset, id_column: str | None, priority_column: str | None, kw: dict[str, Any]
) -> Dataset:
    """(ROW, KEEPER, CLUSTER, SIZE) of every row in a component, for graphs beyond the driver."""
    from zephyr.dedup.engine_components import LABEL, connected_components_dataset

    labels = connected_components_dataset(verified.select("u", "v"), execution=kw)
    keys = rows.select(ROW, *[c for c in (id_column, priority_column) if c is not None])
    members = labels.map_batches(lambda t: t.rename_columns([ROW, LABEL]), name="dedup.cc.members").join(
        keys, on=ROW
    )
    groups = group_keepers(members, [LABEL], id_column, priority_column)
    return (
        members.select(ROW, LABEL).join(groups, on=LABEL).select(ROW, KEEPER, CLUSTER, SIZE).materialize(**kw)
    )
