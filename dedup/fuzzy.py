"""Fuzzy (MinHash-LSH) dedup as plain functions on ``pyarrow.Table`` or record batches.

Pipeline: normalize → shingle hashes → MinHash signatures → band hashes → candidate edges (each bucket
member to the bucket minimum) → verification (true Jaccard of the shingle sets ≥ threshold; on by
default) → connected components (min-label propagation) → cluster id (the smallest id), size and keep
flag. ``SignatureIndex`` holds a deduplicated corpus A so a later corpus B can be deduped against it.

>>> import pyarrow as pa
>>> base = "the quick brown fox jumps over the lazy dog and runs far away into the green forest today"
>>> t = pa.table({"id": [0, 1, 2], "text": [base, base.replace("today", "again"), "something else entirely"]})
>>> r = fuzzy_dedup(t, FuzzyDedupConfig(threshold=0.7, ngram=3))
>>> r.table.select(["id", "dup_cluster", "dup_cluster_size", "dup_keep"]).to_pylist()[1]
{'id': 1, 'dup_cluster': 0, 'dup_cluster_size': 2, 'dup_keep': False}
>>> index = SignatureIndex.build(t.slice(0, 1), FuzzyDedupConfig(threshold=0.7, ngram=3))
>>> fuzzy_dedup(t.slice(1), index.config, index=index, mode="remove").table["id"].to_pylist()
[2]
"""

from __future__ import annotations

import json
import logging
import os
import time
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from zephyr.dedup.anchored import Measure, anchored_clusters, split_rows
from zephyr.dedup.clusters import (
    DedupResult,
    apply_mode,
    as_table,
    cluster_columns,
    keep_ranks,
    require_column,
    size_histogram,
)
from zephyr.dedup.components import connected_components
from zephyr.dedup.config import FuzzyDedupConfig, check_mode
from zephyr.dedup.lsh import candidate_edges, unique_edges
from zephyr.dedup.minhash import band_hashes, make_permutations
from zephyr.dedup.shingles import Shingles, shingle_hashes, unique_sets
from zephyr.dedup.signature_device import signatures_on
from zephyr.dedup.verify import jaccard

from zephyr.errors import ConfigError, InputError, ResumeError

__all__ = [
    "fuzzy_dedup",
    "cluster_labels",
    "SignatureIndex",
    "compute_signatures",
    "INDEX_FORMAT",
    "INDEX_VERSION",
]

logger = logging.getLogger(__name__)

INDEX_FORMAT = "zephyr.dedup.signature_index"
INDEX_VERSION = 1


def compute_signatures(
    texts: pa.Array | pa.ChunkedArray, config: FuzzyDedupConfig
) -> tuple[Shingles, np.ndarray]:
    """(shingles, ``(n, bands)`` band hashes) of a text column: the per-batch kernel of every surface."""
    shingles = shingle_hashes(texts, kind=config.shingle, n=config.ngram, normalize=config.normalize)
    bands, rows = config.bands_rows()
    perms = make_permutations(config.num_perm_resolved, seed=config.seed, scheme=config.scheme)
    return shingles, band_hashes(signatures_on(shingles, perms, config.signature_device), bands, rows)


@dataclass
class SignatureIndex:
    """Band hashes and shingle sets of a reference corpus (A), for deduping later corpora against it.

    On disk (``save``/``load``): one Parquet file with columns ``id`` (the corpus' id type), ``bands``
    (``fixed_size_list<uint64>[bands]``) and ``shingles`` (``large_list<uint64>``, the sorted set), and the
    schema metadata key ``zephyr.dedup`` = JSON ``{"format": "zephyr.dedup.signature_index",
    "version": 1, "fingerprint": ..., "config": {...}}``. A config whose signature fingerprint differs
    (shingling, permutations) is refused.
    """

    config: FuzzyDedupConfig
    ids: pa.Array
    bands: np.ndarray
    shingles: Shingles

    @classmethod
    def build(
        cls, data: Any, config: FuzzyDedupConfig, *, text_column: str = "text", id_column: str = "id"
    ) -> SignatureIndex:
        """Index corpus A (its null/empty texts are left out); A should already be deduplicated."""
        table = as_table(data)
        texts = require_column(table, text_column, "text")
        ids = require_column(table, id_column, "id").combine_chunks()
        shingles, bands = compute_signatures(texts, config)
        has = shingles.counts > 0
        order = np.flatnonzero(has)[
            np.argsort(keep_ranks(table.filter(pa.array(has)), id_column), kind="stable")
        ]
        sets = unique_sets(shingles)
        keep_sets = _select(sets, order)
        return cls(
            config=config,
            ids=ids.take(pa.array(order, type=pa.int64())),
            bands=bands[order],
            shingles=keep_sets,
        )

    def __len__(self) -> int:
        return len(self.ids)

    def save(self, path: str) -> str:
        """Write the index to ``path`` (a file name ending in .parquet, or a directory)."""
        if not path.endswith(".parquet"):
            os.makedirs(path, exist_ok=True)
            path = os.path.join(path, "signature_index.parquet")
        width = self.bands.shape[1]
        bands = pa.FixedSizeListArray.from_arrays(pa.array(self.bands.reshape(-1), pa.uint64()), width)
        sets = pa.LargeListArray.from_arrays(pa.array(self.shingles.offsets), pa.array(self.shingles.hashes))
        meta = {
            "format": INDEX_FORMAT,
            "version": INDEX_VERSION,
            "fingerprint": self.config.signature_fingerprint(),
            "config": self.config.to_dict(),
        }
        table = pa.table({"id": self.ids, "bands": bands, "shingles": sets})
        table = table.replace_schema_metadata({"zephyr.dedup": json.dumps(meta, sort_keys=True)})
        pq.write_table(table, path, compression="zstd")
        return path

    @classmethod
    def load(cls, path: str) -> SignatureIndex:
        if os.path.isdir(path):
            path = os.path.join(path, "signature_index.parquet")
        try:
            table = pq.read_table(path)
        except (OSError, pa.ArrowInvalid) as exc:
            raise InputError(f"cannot read signature index: {exc}", path=path) from exc
        raw = (table.schema.metadata or {}).get(b"zephyr.dedup")
        meta = json.loads(raw) if raw else {}
        if meta.get("format") != INDEX_FORMAT or meta.get("version") != INDEX_VERSION:
            raise InputError(
                f"not a zephyr signature index (format {meta.get('format')!r}, version {meta.get('version')!r}; "
                f"expected {INDEX_FORMAT!r} version {INDEX_VERSION}); rebuild it with SignatureIndex.build",
                path=path,
            )
        config = FuzzyDedupConfig(**meta["config"])
        bands = table["bands"].combine_chunks()
        width = bands.type.list_size
        band_arr = np.asarray(bands.flatten(), dtype=np.uint64).reshape(-1, width)
        sets = table["shingles"].combine_chunks()
        offsets = np.asarray(sets.offsets, dtype=np.int64)
        hashes = np.asarray(sets.flatten(), dtype=np.uint64)
        return cls(
            config=config,
            ids=table["id"].combine_chunks(),
            bands=band_arr,
            shingles=Shingles(hashes=hashes, offsets=offsets - offsets[0]),
        )

    def check_compatible(self, config: FuzzyDedupConfig) -> None:
        if config.signature_fingerprint() != self.config.signature_fingerprint() or (
            config.bands_rows() != self.config.bands_rows()
        ):
            raise ResumeError(
                "the signature index was built with another shingling/permutation/banding config "
                f"({self.config.to_dict()}) than the one given ({config.to_dict()}); "
                "pass index.config, or rebuild the index"
            )


def _select(shingles: Shingles, docs: np.ndarray) -> Shingles:
    counts = shingles.counts[docs]
    offsets = np.zeros(len(docs) + 1, dtype=np.int64)
    np.cumsum(counts, out=offsets[1:])
    from zephyr.dedup.verify import gather_sets

    hashes, _ = gather_sets(shingles, docs)
    return Shingles(hashes=hashes, offsets=offsets)


def _concat(a: Shingles, b: Shingles) -> Shingles:
    return Shingles(
        hashes=np.concatenate((a.hashes, b.hashes)),
        offsets=np.concatenate((a.offsets, b.offsets[1:] + a.offsets[-1])),
    )


def fuzzy_dedup(
    data: Any,
    config: FuzzyDedupConfig | None = None,
    *,
    text_column: str = "text",
    id_column: str | None = "id",
    mode: str = "annotate",
    priority_column: str | None = None,
    index: SignatureIndex | None = None,
) -> DedupResult:
    """Near-duplicate dedup of one table; with ``index``, rows matching the indexed corpus are dropped too.

    ``annotate`` adds ``dup_cluster`` (id of the cluster's kept row; with an index, possibly an indexed id),
    ``dup_cluster_size`` (members in this table plus matched indexed docs) and ``dup_keep``; ``remove``
    keeps the rows with ``dup_keep``. The kept row is the one with the largest priority, then the smallest
    id, then the first in input order; with ``config.clusters == "anchored"`` (the default) a row is removed
    only if its verified Jaccard to that kept row reaches the threshold. Null texts pass through (null
    cluster, kept); texts without any shingle (empty) are singletons.
    """
    config = config or FuzzyDedupConfig()
    check_mode(mode)
    if index is not None:
        index.check_compatible(config)
        if id_column is None:
            raise ConfigError("deduping against an index needs an id column (id_column=...)")
    timings: dict[str, float] = {}
    t0 = time.perf_counter()
    table = as_table(data)
    texts = require_column(table, text_column, "text")
    n = table.num_rows
    members = np.asarray(texts.is_valid()) if n else np.zeros(0, dtype=bool)
    ranks = keep_ranks(table, id_column, priority_column)
    shingles, bands = compute_signatures(texts, config)
    timings["signatures_s"] = time.perf_counter() - t0
    n_index = len(index) if index is not None else 0
    # Two numberings of the same documents: storage position (indexed docs, then this table in input order:
    # what candidates are ordered by and shingle sets are stored in) and node = keep rank (indexed docs are
    # earlier than anything new, so they are always kept).
    node_of_pos = np.concatenate((np.arange(n_index, dtype=np.int64), ranks + n_index))
    pos_of_node = np.empty(n_index + n, dtype=np.int64)
    pos_of_node[node_of_pos] = np.arange(n_index + n, dtype=np.int64)
    pos_bands = np.concatenate((index.bands, bands)) if index is not None else bands
    pos_shingles = _concat(index.shingles, shingles) if index is not None else shingles
    active = np.flatnonzero(np.concatenate((np.ones(n_index, dtype=bool), shingles.counts > 0)))
    t1 = time.perf_counter()
    raw = candidate_edges(pos_bands[active], active, links=config.bucket_links)
    edges = unique_edges(node_of_pos[raw]) if len(raw) else unique_edges(raw)  # [later node, earlier node]
    if n_index:
        edges = edges[edges[:, 0] >= n_index]  # pairs inside the index were settled when it was built
    timings["candidates_s"] = time.perf_counter() - t1

    def measure(pairs: np.ndarray) -> np.ndarray:
        return jaccard(pos_shingles, pos_of_node[pairs])

    t2 = time.perf_counter()
    sims = measure(edges) if config.verify and len(edges) else None
    verified = edges[sims >= config.threshold] if sims is not None else edges
    timings["verify_s"] = time.perf_counter() - t2
    t3 = time.perf_counter()
    verified_sims = sims[sims >= config.threshold] if sims is not None else None
    labels, graph = cluster_labels(
        n_index + n, verified, verified_sims, config, measure if config.verify else None
    )
    timings["clusters_s"] = time.perf_counter() - t3
    labels_all = labels[node_of_pos[n_index:]]  # per row of this table, in node space
    matched_index = members & (labels_all < n_index)
    local_labels = np.where(matched_index, ranks, labels_all - n_index)
    cluster, size, keep = cluster_columns(table, ranks, local_labels, members, id_column=id_column)
    if matched_index.any():
        cluster, size, keep = _with_index_matches(
            index, labels, labels_all, matched_index, members, pos_of_node, cluster, size, keep
        )
    out = apply_mode(table, cluster, size, keep, mode)
    hist = size_histogram(local_labels, members)
    figures = {"candidate_edges": len(raw), "unique_edges": len(edges), "verified_edges": len(verified)}
    stats = _stats(n, out, members, shingles, keep, matched_index, figures, graph, hist, config, timings)
    _log_summary(n, config, len(edges), len(verified), stats["duplicates"], graph["split_rows"])
    return DedupResult(out, stats)


def _log_summary(
    n: int, config: FuzzyDedupConfig, candidates: int, verified: int, duplicates: int, split_rows: int
) -> None:
    """One line with the arithmetic of the run: scheme, pairs at each step, duplicates."""
    b, r = config.bands_rows()
    logger.info(
        "fuzzy dedup: %d rows, %d bands x %d rows (LSH threshold %.3f), %d candidate pairs, %d verified, "
        "%d duplicates (%s clusters, %d rows split from components)",
        n,
        b,
        r,
        config.lsh_threshold,
        candidates,
        verified,
        duplicates,
        config.clusters,
        split_rows,
    )


def _with_index_matches(
    index: SignatureIndex,
    labels: np.ndarray,
    labels_all: np.ndarray,
    matched_index: np.ndarray,
    members: np.ndarray,
    pos_of_node: np.ndarray,
    cluster: pa.Array,
    size: pa.Array,
    keep: np.ndarray,
) -> tuple[pa.Array, pa.Array, np.ndarray]:
    """(cluster, size, keep) once rows near an indexed document join its cluster: removed, named by the
    indexed id, and sized with the indexed members."""
    n_index = len(index)
    keep &= ~matched_index
    node_sizes = np.bincount(labels[np.concatenate((np.ones(n_index, dtype=bool), members))[pos_of_node]])
    size = pa.array(
        np.where(
            matched_index,
            node_sizes[np.where(matched_index, labels_all, 0)],
            np.asarray(size.fill_null(0)),
        ),
        mask=~members,
        type=pa.int64(),
    )
    index_ids = index.ids.take(pa.array(np.where(matched_index, labels_all, 0), type=pa.int64()))
    cluster = pc.if_else(pa.array(matched_index), index_ids.cast(cluster.type), cluster)
    return cluster, size, keep


def _stats(
    n: int,
    out: pa.Table,
    members: np.ndarray,
    shingles: Any,
    keep: np.ndarray,
    matched_index: np.ndarray,
    figures: dict[str, int],
    graph: dict[str, Any],
    hist: dict[int, int],
    config: FuzzyDedupConfig,
    timings: dict[str, float],
) -> dict[str, Any]:
    """The ``DedupResult.stats`` of ``fuzzy_dedup``: row balance, pair counts, clusters, the LSH scheme."""
    b, r = config.bands_rows()
    return {
        "rows_in": n,
        "rows_out": out.num_rows,
        "rows_dropped": n - out.num_rows,
        "rows_quarantined": 0,
        "null_text": int((~members).sum()),
        "no_shingles": int((members & (shingles.counts == 0)).sum()),
        "duplicates": int((~keep).sum()),
        "matched_index": int(matched_index.sum()),
        "candidate_edges": int(figures["candidate_edges"]),
        "unique_edges": int(figures["unique_edges"]),
        "verified_edges": int(figures["verified_edges"]),
        "rejected_edges": int(figures["unique_edges"] - figures["verified_edges"]),
        **graph,
        "clusters": int(sum(hist.values())),
        "cluster_size_histogram": hist,
        "bands": b,
        "rows": r,
        "lsh_threshold": config.lsh_threshold,
        "threshold": config.threshold,
        "verify": config.verify,
        "cluster_rule": config.clusters,
        **{k: round(v, 4) for k, v in timings.items()},
    }


def cluster_labels(
    num_nodes: int,
    verified: np.ndarray,
    similarity: np.ndarray | None,
    config: FuzzyDedupConfig,
    measure: Measure | None,
) -> tuple[np.ndarray, dict[str, int]]:
    """Label (the kept node) of every node, nodes numbered in keep order, by ``config.clusters``; and the
    graph stats (``split_rows``: rows anchoring kept out of their component's cluster; refinement figures)."""
    if config.clusters == "components":
        labels = connected_components(num_nodes, verified)
        return labels, {"split_rows": 0, "refine_rounds": 0, "refine_candidates": 0, "refine_verified": 0}
    labels, edges, stats = anchored_clusters(
        num_nodes, verified, similarity, measure=measure, threshold=config.threshold
    )
    return labels, {"split_rows": split_rows(labels, edges), **stats}
