"""The fuzzy dedup graph in the driver: verify a driver-sized candidate-pair table against the endpoints'
shingle sets, number the nodes in keep order (indexed documents first), and cluster them
(``fuzzy.cluster_labels``); the result is the node info ``dup_columns.Attach`` looks rows up in.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from zephyr.dedup.clusters import keep_ranks
from zephyr.dedup.columns import ROW
from zephyr.dedup.config import FuzzyDedupConfig
from zephyr.dedup.dup_columns import cluster_node_info
from zephyr.dedup.verify_engine import shingles_of

from zephyr.errors import ConfigError, InputError

if TYPE_CHECKING:
    from zephyr.dedup.index import IndexInfo

__all__ = ["graph_in_driver"]


def graph_in_driver(
    collect_sets: Callable[[pa.Array], pa.Table],
    pairs: pa.Table,
    config: FuzzyDedupConfig,
    id_column: str | None,
    priority_column: str | None,
    kw: dict[str, Any],
    info: dict[str, Any],
    index: IndexInfo | None = None,
) -> pa.Table | None:
    """Verify (unless ``pairs`` has a ``sim`` column already) and cluster a driver-sized pair table; returns
    the node info of the rows in clusters of 2 or more. ``collect_sets(rows)`` gives the ``NodeSets`` rows of
    the endpoints (one filtered pass); the index's docs give those of indexed endpoints."""
    from zephyr.dedup.fuzzy import cluster_labels
    from zephyr.dedup.verify import jaccard

    nodes = pc.unique(pa.chunked_array(pairs["u"].chunks + pairs["v"].chunks).combine_chunks())
    new_nodes = nodes.filter(pc.greater_equal(nodes, 0))
    sets = collect_sets(new_nodes)
    if sets.num_rows != len(new_nodes):  # the input changed between passes: never index garbage
        raise InputError(
            f"{len(new_nodes) - sets.num_rows} candidate-pair rows were not found on the second read of the input; "
            "the input must not change while the job runs"
        )
    indexed, anchor = 0, np.zeros(0, dtype=np.int64)
    if len(new_nodes) < len(nodes):
        found, anchor = _indexed_sets(
            index, nodes.filter(pc.less(nodes, 0)), sets.schema, id_column, priority_column, kw
        )
        sets, indexed = pa.concat_tables([found, sets]), found.num_rows
    keys = sets.drop_columns(["shingles"])
    index_keys = np.asarray(keys[ROW].slice(0, indexed), dtype=np.int64)
    node_of_pos, pos_of_node = _keep_order(keys, indexed, anchor, index_keys, id_column, priority_column)
    shingles = shingles_of(sets["shingles"])
    owners = keys[ROW].combine_chunks()
    edges = np.stack(
        [
            node_of_pos[np.asarray(pc.index_in(pairs[end], value_set=owners), dtype=np.int64)]
            for end in ("u", "v")
        ],
        axis=1,
    )

    def measure(node_pairs: np.ndarray) -> np.ndarray:
        sims = jaccard(shingles, pos_of_node[node_pairs], sets=True)
        sims[node_pairs.max(axis=1, initial=0) < indexed] = 0.0  # two indexed documents: both stay kept
        return sims

    if "sim" in pairs.column_names:
        sims = np.asarray(pairs["sim"], dtype=np.float64)
    elif config.verify:
        sims = measure(edges)
        similar = sims >= config.threshold
        edges, sims = edges[similar], sims[similar]
    else:
        sims = None
    info["verified_edges"] = len(edges)
    removed = np.flatnonzero(anchor != index_keys)
    if len(removed):  # each indexed document an earlier run removed stays tied to the document it kept
        owner = np.asarray(pc.index_in(pa.array(anchor[removed]), value_set=owners), dtype=np.int64)
        tied = np.stack((node_of_pos[removed], node_of_pos[owner]), axis=1)
        edges = np.concatenate((edges, tied))
        if sims is not None:
            sims = np.concatenate((sims, jaccard(shingles, np.stack((removed, owner), axis=1), sets=True)))
    labels, graph = cluster_labels(len(keys), edges, sims, config, measure if config.verify else None)
    info.update(graph)
    if index is not None:
        info["indexed_nodes"] = indexed
        info["matched_index"] = int(np.count_nonzero(labels[indexed:] < indexed))
    return cluster_node_info(keys.take(pa.array(pos_of_node)), labels, id_column)


def _keep_order(
    keys: pa.Table,
    indexed: int,
    anchor: np.ndarray,
    index_keys: np.ndarray,
    id_column: str | None,
    priority_column: str | None,
) -> tuple[np.ndarray, np.ndarray]:
    """(node of each position in ``keys``, position of each node): nodes numbered in keep order.

    The sets stay where they arrived (no copy of the big column); nodes are numbered in keep order
    (rank), with input order (row number) as the last tie-break. Indexed documents (negative keys, the
    first ``indexed`` positions) rank first, those an earlier run kept before those it removed: they are
    in the corpus already (or were removed for a document that is), so no new row can change them."""
    by_row = np.asarray(pc.sort_indices(keys[ROW]), dtype=np.int64)
    node_of_pos = np.empty(len(by_row), dtype=np.int64)
    kept_first = by_row[:indexed][
        np.argsort(anchor[by_row[:indexed]] != index_keys[by_row[:indexed]], kind="stable")
    ]
    node_of_pos[kept_first] = np.arange(indexed)
    node_of_pos[by_row[indexed:]] = indexed + keep_ranks(
        keys.take(pa.array(by_row[indexed:])), id_column, priority_column
    )
    pos_of_node = np.empty_like(node_of_pos)
    pos_of_node[node_of_pos] = np.arange(len(node_of_pos), dtype=np.int64)
    return node_of_pos, pos_of_node


def _indexed_sets(
    index: IndexInfo,
    keys: pa.Array,
    like: pa.Schema,
    id_column: str | None,
    priority_column: str | None,
    kw: dict[str, Any],
) -> tuple[pa.Table, np.ndarray]:
    """The node-set rows (``like``'s schema) of the indexed documents in ``keys`` and of the documents their
    removed ones were removed for, with each one's anchor (the key of the document kept for it; its own
    key when kept). ROW is the (negative) key, the id the indexed one cast to this input's id type, the
    priority null (indexed rows rank first)."""
    from zephyr.dedup.index import KEY

    found = index.node_sets(keys, kw)
    missing = pc.filter(found["anchor"], pc.invert(pc.is_in(found["anchor"], value_set=found[KEY])))
    if len(missing):  # a second filtered pass: the kept documents of removed ones, when not yet found
        found = pa.concat_tables([found, index.node_sets(pc.unique(missing), kw)])
    wanted = len(keys) + len(pc.unique(missing)) if len(missing) else len(keys)
    if found.num_rows != wanted:
        raise InputError(
            f"{wanted - found.num_rows} indexed documents named by band rows are missing from the index's "
            "docs parts; the index was changed by hand or a run is writing to it",
            path=index.path,
        )
    columns: dict[str, Any] = {ROW: found[KEY], "shingles": found["shingles"]}
    if id_column is not None:
        want = like.field(id_column).type
        try:
            columns[id_column] = found["id"].cast(want)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
            raise ConfigError(
                f"the index's ids are {found.schema.field('id').type}, this input's {id_column!r} is {want}, and "
                f"one cannot become the other ({exc}); index and dedup with the same id column"
            ) from None
    if priority_column is not None:
        columns[priority_column] = pa.nulls(found.num_rows, like.field(priority_column).type)
    table = pa.table(columns).select(like.names).cast(like)
    return table, np.asarray(found["anchor"], dtype=np.int64)
