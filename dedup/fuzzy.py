"""Fuzzy (MinHash-LSH) dedup: signatures per batch, bucket pairs, verified clusters; on a table or a Dataset.

Fuzzy (MinHash-LSH) dedup as plain functions on ``pyarrow.Table`` or record batches.

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

MinHash-LSH fuzzy dedup on a ``Dataset`` (``fuzzy_dedup_dataset``).

Signatures and band hashes per batch → one row per (row, band) → ``group_by(band, band hash)`` → bounded
candidate pairs per bucket (``lsh.candidate_edges``' rule) → distinct pairs; then verification and clusters
(``fuzzy_clusters.verify_and_cluster``), and the result attached by row number or joined from engine
labels. See ``dedup.dataset_ops`` for the columns and counters every dedup stage shares.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from zephyr.dedup._graph import NodeSets, cluster_labels, jaccard, verify_and_cluster
from zephyr.dedup._hashing import Shingles, unique_sets
from zephyr.dedup._minhash import BUCKET_LINKS, candidate_edges, compute_signatures, unique_edges
from zephyr.dedup._rows import (
    ROW,
    Attach,
    DedupResult,
    Finish,
    apply_mode,
    as_table,
    cluster_columns,
    execution_kwargs,
    has_column,
    in_memory_limit,
    keep_ranks,
    mark_keep,
    require_column,
    scratch_folder,
    size_histogram,
)
from zephyr.dedup.config import FuzzyDedupConfig, check_mode

from zephyr import counters
from zephyr.errors import ConfigError, InputError, ResumeError

if TYPE_CHECKING:
    from zephyr.dedup.index import IndexInfo

    from zephyr.dataset import Dataset
    from zephyr.options import ExecutionOptions


logger = logging.getLogger(__name__)

INDEX_FORMAT = "zephyr.dedup.signature_index"
INDEX_VERSION = 1


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
    from zephyr.dedup._graph import gather_sets

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


class _BandRows:
    """One row (ROW, band, band hash) per document and band; documents without shingles emit none."""

    def __init__(self, config: FuzzyDedupConfig, text_column: str):
        self.config, self.text_column = config, text_column

    def __call__(self, table: pa.Table) -> pa.Table:

        empty = pa.table(
            {
                ROW: pa.array([], pa.int64()),
                "band": pa.array([], pa.int32()),
                "bhash": pa.array([], pa.int64()),
            }
        )
        if not has_column(table, self.text_column, "text"):
            return empty
        shingles, bands = compute_signatures(table[self.text_column], self.config)
        has = np.flatnonzero(shingles.counts > 0)
        nb = bands.shape[1]
        return pa.table(
            {
                ROW: table[ROW].take(pa.array(np.repeat(has, nb))),
                "band": pa.array(np.tile(np.arange(nb, dtype=np.int32), len(has))),
                "bhash": pa.array(bands[has].reshape(-1).view(np.int64), type=pa.int64()),
            }
        )


class _BucketEdges:
    """Buckets (with their member lists) → candidate pairs [u later row, v earlier row], each member paired
    with the bucket's first ``links`` members before it (``lsh.candidate_edges``' rule, by row number)."""

    def __init__(self, links: int):
        self.links = links

    def __call__(self, table: pa.Table) -> pa.Table:
        from zephyr.dedup._minhash import candidate_edges

        big = table.filter(pc.greater(table["n"], 1))
        members = big["members"].combine_chunks()
        bucket = np.asarray(pc.list_parent_indices(members), dtype=np.uint64)
        rows = np.asarray(members.flatten(), dtype=np.int64)
        pairs = candidate_edges(bucket[:, None], rows, links=self.links)
        pairs = pairs[pairs[:, 0] >= 0]  # two indexed documents (negative keys): both are kept already
        counters.increment("dedup/candidate_edges", len(pairs))
        return pa.table({"u": pa.array(pairs[:, 0]), "v": pa.array(pairs[:, 1])})


@contextlib.contextmanager
def _with_index_bands(
    band_rows: Dataset, index: IndexInfo | None, scratch: str, kw: dict[str, Any]
) -> Iterator[Dataset]:
    """``band_rows`` plus the index's band rows: the new rows' are written to ``scratch`` first, so that one
    Parquet read of both (same schema) feeds the bucket shuffle."""
    if index is None or not index.docs:
        yield band_rows
        return
    import zephyr

    new = band_rows.write_parquet(f"{scratch}/bands", **kw).files
    yield zephyr.read_parquet([*new, *index.band_files()])


def fuzzy_dedup_dataset(
    ds: Dataset,
    config: FuzzyDedupConfig | None = None,
    *,
    text_column: str = "text",
    id_column: str | None = "id",
    mode: str = "annotate",
    priority_column: str | None = None,
    execution: ExecutionOptions | dict[str, Any] | None = None,
    in_memory_edges: int | None = None,
    stats: dict[str, Any] | None = None,
    index: IndexInfo | str | None = None,
    row_numbers: bool = False,
) -> Dataset:
    """MinHash-LSH dedup on the engine. Runs candidates, verification and clustering eagerly with
    ``execution``; returns a lazy Dataset with the input columns plus the dup columns.

    ``in_memory_edges``: candidate-pair count up to which verification can run in the driver; ``None``
    derives it from the memory budget (64 bytes per pair within a quarter of it); 0 forces verification on
    the engine. The driver also needs the endpoints' shingle sets to fit a sixteenth of the budget. The
    verified graph is clustered in the driver when it fits (48 bytes per edge within the budget), else by engine rounds (``clusters="components"`` only). ``stats``, when given, receives the
    eager phase's figures (candidate, verified and rejected pairs, rows split from components, the path).

    ``index`` (an ``IndexInfo`` or a path; ``zephyr.dedup.index``): earlier runs' kept documents. Their band
    rows join the bucket shuffle (read from the index's Parquet parts, never whole into RAM) and rank before
    every row of ``ds``; rows near an indexed document are removed like rows near an earlier kept row. Index
    documents are never in the output. Needs the verified graph to fit the driver. ``row_numbers``
    (annotate mode) keeps each row's number and its kept row's (``__dedup_row``, ``__dedup_keeper``; the
    kept row may be an indexed document): ``index.write_generation`` records them, ``StripRowNumbers``
    turns the result into the output of either mode.

    >>> import zephyr
    >>> base = "the quick brown fox jumps over the lazy dog and runs far away into the green forest today"
    >>> ds = zephyr.from_items([{"id": "a", "text": base}, {"id": "b", "text": base + " again"},
    ...                         {"id": "c", "text": "something else"}])
    >>> out = fuzzy_dedup_dataset(ds, FuzzyDedupConfig(threshold=0.7, ngram=3), execution={"executor": "inprocess"})
    >>> out.to_arrow(executor="inprocess").select(["id", "dup_cluster", "dup_keep"]).to_pylist()[1]
    {'id': 'b', 'dup_cluster': 'a', 'dup_keep': False}
    """
    config = config or FuzzyDedupConfig()
    check_mode(mode)
    kw = execution_kwargs(execution)
    limit = in_memory_limit(kw, in_memory_edges)
    if config.verify:  # the driver checks small pair sets itself: load its kernels while the workers hash
        import zephyr.dedup._compiled as compiled

        compiled.warm_up_in_background()
    if isinstance(index, str):
        from zephyr.dedup.index import open_index

        index = open_index(index, config)
    if row_numbers and mode != "annotate":
        raise ConfigError("row_numbers needs mode='annotate' (removed rows are what an index links through)")
    plans = fuzzy_job_plans(
        ds, config, text_column=text_column, id_column=id_column, mode=mode, priority_column=priority_column
    )
    rows, band_rows = plans.rows, plans.band_rows
    finish = Finish(text_column, id_column, mode, row_numbers)
    with scratch_folder(kw) as scratch:
        edges = _candidate_pairs(band_rows, config, index, scratch, kw)
        candidates = edges.count(**kw)
        info: dict[str, Any] = {"candidate_edges": candidates, "in_memory_limit": limit}
        info["cluster_rule"] = config.clusters
        if index is not None:
            info["index"] = {"path": index.path, "docs": index.docs, "generations": len(index.generations)}
        logger.info("fuzzy dedup: %d candidate pairs, in-memory limit %d", candidates, limit)
        node_info, labels_ds = verify_and_cluster(
            rows, edges, candidates, config, text_column, id_column, priority_column, kw, info, index, scratch
        )
    info["rejected_edges"] = candidates - info["verified_edges"] if config.verify else 0
    if stats is not None:
        stats.update(info)
    return _with_dup_columns(rows, node_info, labels_ds, finish, id_column)


def _candidate_pairs(
    band_rows: Dataset, config: FuzzyDedupConfig, index: IndexInfo | None, scratch: str, kw: dict[str, Any]
) -> Dataset:
    """The distinct candidate pairs (u, v), materialized: band rows (the index's too) grouped by (band,
    band hash), each bucket's members paired by ``_BucketEdges``."""
    with _with_index_bands(band_rows, index, scratch, kw) as band_rows:
        return _pairs_of(band_rows, config).materialize(**kw)


def _pairs_of(band_rows: Dataset, config: FuzzyDedupConfig) -> Dataset:
    return (
        band_rows.group_by("band", "bhash")
        .agg(members=(ROW, "list"), n=(ROW, "count"))
        .map_batches(_BucketEdges(config.bucket_links or BUCKET_LINKS), name="dedup.fuzzy.bucket_edges")
        .deduplicate("u", "v")
    )


@dataclass(frozen=True)
class FuzzyJobPlans:
    """The lazy plans of fuzzy dedup's engine jobs whose inputs are known before any job runs (what
    ``zephyr explain dedup fuzzy`` prints); the verification jobs that follow depend on the pairs found."""

    rows: Dataset
    band_rows: Dataset
    candidate_pairs: Dataset
    """Job 1: the distinct candidate pairs (without an index), materialized and counted."""
    node_sets: Dataset
    """Job 2: the endpoints' shingle sets (every row's when the pairs do not fit the driver), written once."""
    attached: Dataset
    """The output when the verified graph is clustered in the driver (cluster columns by row number)."""


def fuzzy_job_plans(
    ds: Dataset,
    config: FuzzyDedupConfig,
    *,
    text_column: str = "text",
    id_column: str | None = "id",
    mode: str = "annotate",
    priority_column: str | None = None,
) -> FuzzyJobPlans:
    """Build, without running anything, the plans ``fuzzy_dedup_dataset`` starts from."""
    rows = ds.with_row_index(ROW)
    band_rows = rows.map_batches(_BandRows(config, text_column), name="dedup.fuzzy.signatures")
    sets = NodeSets(None, config, text_column, id_column, priority_column)
    node_sets = rows.map_batches(sets, name="dedup.fuzzy.node_sets")
    attached = _with_dup_columns(rows, None, None, Finish(text_column, id_column, mode), id_column)
    return FuzzyJobPlans(rows, band_rows, _pairs_of(band_rows, config), node_sets, attached)


def _with_dup_columns(
    rows: Dataset, node_info: pa.Table | None, labels: Dataset | None, finish: Finish, id_column: str | None
) -> Dataset:
    """The lazy output: engine labels joined on the row number, or the driver's node info attached to it."""
    if labels is not None:
        joined = rows.join(labels, on=ROW, how="left")
        return joined.map_batches(mark_keep, name="dedup.fuzzy.keep").map_batches(
            finish, name="dedup.fuzzy.finish"
        )
    attach = Attach(node_info, id_column)
    return rows.map_batches(attach, name="dedup.fuzzy.attach").map_batches(finish, name="dedup.fuzzy.finish")
