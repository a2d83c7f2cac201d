"""Fuzzy (MinHash-LSH) dedup: signatures per batch, bucket pairs, verified clusters; on a table or a Dataset.

Signatures and band hashes per batch → one row per (row, band) → ``group_by(band, band hash)`` → bounded
candidate pairs per bucket (``_minhash.candidate_pairs``' rule, by row number) → distinct pairs; then
verification and clusters (``_graph.verify_and_cluster``: in the driver when the pairs and sets fit, else on
the engine), and the result attached by row number or joined from engine labels. ``fuzzy_dedup`` runs
``fuzzy_dedup_dataset`` in process on one in-memory table. See ``zephyr.dedup.exact`` for the columns and
counters every dedup method shares.

>>> import pyarrow as pa
>>> base = "the quick brown fox jumps over the lazy dog and runs far away into the green forest today"
>>> t = pa.table({"id": [0, 1, 2], "text": [base, base.replace("today", "again"), "something else entirely"]})
>>> r = fuzzy_dedup(t, FuzzyDedupConfig(threshold=0.7, ngram=3), mode="annotate")
>>> r.table.select(["id", "dup_cluster", "dup_cluster_size", "dup_keep"]).to_pylist()[1]
{'id': 1, 'dup_cluster': 0, 'dup_cluster_size': 2, 'dup_keep': False}
>>> fuzzy_dedup(t, FuzzyDedupConfig(threshold=0.7, ngram=3)).table["id"].to_pylist()
[0, 2]
"""

from __future__ import annotations

import contextlib
import logging
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import zephyr.dedup._compiled as compiled
from zephyr.dedup._graph import FuzzyRun, node_sets, verify_and_cluster
from zephyr.dedup._minhash import band_rows, candidate_pairs, compute_signatures
from zephyr.dedup._rows import (
    ROW,
    DedupResult,
    Finish,
    Jobs,
    StripRowNumbers,
    attached,
    has_column,
    on_table,
    scratch_folder,
)
from zephyr.dedup.config import COLUMNS, DedupColumns, FuzzyDedupConfig, IndexConfig

import zephyr
from zephyr import counters
from zephyr.config import RemovalMode, coerce
from zephyr.errors import ConfigError

if TYPE_CHECKING:
    from zephyr.dedup.index import IndexInfo

    from zephyr.dataset import Dataset


logger = logging.getLogger(__name__)


def fuzzy_dedup(
    data: Any,
    config: FuzzyDedupConfig | None = None,
    columns: DedupColumns = COLUMNS,
    *,
    mode: str = "remove",
    index: IndexInfo | str | None = None,
) -> DedupResult:
    """Near-duplicate dedup of one in-memory table: ``fuzzy_dedup_dataset`` run in process on it
    (``_rows.on_table``). Columns, keep rule and ``index`` as there. ``DedupResult.stats`` holds the row
    balance, the cluster-size histogram and the graph figures (candidate, verified and rejected pairs, rows
    split from components)."""
    return on_table(data, mode, fuzzy_dedup_dataset, columns, config=config, index=index)


def _band_rows(config: FuzzyDedupConfig, text_column: str, table: pa.Table) -> pa.Table:
    """One row (ROW, band, band hash) per document and band; documents without shingles emit none."""
    if not has_column(table, text_column, "text"):
        return band_rows(np.zeros(0, np.int64), np.zeros((0, 0), np.uint64))
    shingles, bands = compute_signatures(table[text_column], config)
    has = shingles.counts > 0
    return band_rows(np.asarray(table[ROW], dtype=np.int64)[has], bands[has])


def _bucket_pairs(links: int, table: pa.Table) -> pa.Table:
    """Buckets (with their member lists) → candidate pairs [u later row, v earlier row], each member paired
    with the bucket's first ``links`` members before it (``_minhash.candidate_pairs``' rule, by row number)."""
    members = table.filter(pc.greater(table["n"], 1))["members"].combine_chunks()
    bucket = np.asarray(pc.list_parent_indices(members), dtype=np.uint64)
    rows = np.asarray(members.flatten(), dtype=np.int64)
    pairs = candidate_pairs(bucket[:, None], rows, links=links)
    pairs = pairs[pairs[:, 0] >= 0]  # two indexed documents (negative keys): both are kept already
    counters.increment("dedup/candidate_pairs", len(pairs))
    return pa.table({"u": pa.array(pairs[:, 0]), "v": pa.array(pairs[:, 1])})


def fuzzy_dedup_dataset(
    ds: Dataset,
    config: FuzzyDedupConfig | None = None,
    columns: DedupColumns = COLUMNS,
    *,
    mode: str = "remove",
    execution: dict[str, Any] | None = None,
    driver_rows: int | None = None,
    stats: dict[str, Any] | None = None,
    index: IndexInfo | str | None = None,
    row_numbers: bool = False,
    jobs: Jobs | None = None,
) -> Dataset:
    """MinHash-LSH dedup on the engine. Runs candidates, verification and clustering eagerly with
    ``execution``; returns a lazy Dataset with the input columns plus the dup columns.

    ``driver_rows``: candidate-pair count up to which verification can run in the driver; ``None``
    derives it from the memory budget (64 bytes per pair within a quarter of it); 0 forces verification on
    the engine. The driver also needs the endpoints' shingle sets to fit a sixteenth of the budget. The
    verified graph is clustered in the driver when it fits (48 bytes per edge within the budget), else by engine rounds (``clusters="components"`` only). ``stats``, when given, receives the
    eager phase's figures (candidate, verified and rejected pairs, rows split from components, the path).
    ``jobs`` (``_rows.Jobs``) replaces ``execution`` and ``stats``; a listing (``zephyr explain``) gives the
    jobs after job 1 as the rules that choose them, since they depend on the pairs found.

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
    >>> cfg = FuzzyDedupConfig(threshold=0.7, ngram=3)
    >>> out = fuzzy_dedup_dataset(ds, cfg, mode="annotate", execution={"executor": "inprocess"})
    >>> out.to_arrow(executor="inprocess").select(["id", "dup_cluster", "dup_keep"]).to_pylist()[1]
    {'id': 'b', 'dup_cluster': 'a', 'dup_keep': False}
    """
    config = config or FuzzyDedupConfig()
    coerce(mode, RemovalMode, "mode")
    jobs = jobs or Jobs(dict(execution or {}), {} if stats is None else stats)
    kw, info, budget = jobs.execution, jobs.info, jobs.budget
    limit = driver_rows if driver_rows is not None else budget.driver_rows
    if config.verify and jobs.running:  # the driver checks small pair sets itself: load its kernels now
        compiled.warm_up_in_background()
    if isinstance(index, str) and jobs.running:
        from zephyr.dedup.index import open_index

        index = open_index(index, config)
    if row_numbers and mode != "annotate":
        raise ConfigError("row_numbers needs mode='annotate' (removed rows are what an index links through)")
    rows = ds.with_row_index(ROW)
    band_rows = rows.map_batches(
        partial(_band_rows, config, columns.text_column), name="dedup.fuzzy.signatures"
    )
    finish = Finish(columns, mode, row_numbers)
    indexed = " (with --index, the index's band rows join the bucket shuffle)" if index is not None else ""
    with scratch_folder(kw) if jobs.running else contextlib.nullcontext("") as scratch:
        if jobs.running and index is not None and index.docs:  # the index's band rows too: one read
            new = band_rows.write_parquet(f"{scratch}/bands", **kw).files
            band_rows = zephyr.read_parquet([*new, *index.files("bands")])
        edges = jobs(
            f"job 1: candidate pairs, materialized, then counted{indexed}", _pairs_of(band_rows, config)
        )
        jobs(
            f"candidate pairs ≤ driver_rows {limit:,}: they come to the driver and job 2 writes only their "
            "endpoints' sets; more: every row's"
        )
        if jobs.explain:
            sets = rows.map_batches(partial(node_sets, None, config, columns), name="dedup.fuzzy.node_sets")
            jobs("job 2: shingle sets, written once", sets)
            jobs(
                f"pairs in the driver and their sets ≤ driver_set_bytes {budget.driver_set_bytes:,}: "
                "verification and clusters in the driver; else verification on the engine (sets joined onto "
                "the pairs, a giant bucket's first members broadcast up to broadcast_bytes "
                f"{budget.broadcast_bytes:,}), and the verified graph clustered in the driver up to "
                f"driver_graph_edges {budget.driver_graph_edges:,}, else (--clusters components) by engine "
                "rounds whose labels are joined on the row number"
                if config.verify
                else "pairs in the driver: clusters in the driver; else clusters on the engine as for verified "
                "pairs"
            )
            title = "job 3: the output, cluster columns attached by row number"
            return jobs.output(title, attached(rows, None, finish, "fuzzy"))
        candidates = edges.count(**kw)
        info.update(candidate_pairs=candidates, driver_rows=limit, cluster_rule=config.clusters)
        bands, rows_per_band = config.bands_rows()  # the banding in force: ``lsh`` in the stats
        lsh = dict(bands=bands, rows=rows_per_band, threshold=config.threshold)
        info["lsh"] = {**lsh, "lsh_threshold": round(config.lsh_threshold, 4)}
        if index is not None:
            info["index"] = {"path": index.path, "docs": index.docs, "generations": len(index.generations)}
        logger.info("fuzzy dedup: %d candidate pairs, in-memory limit %d", candidates, limit)
        run = FuzzyRun(config, columns, kw, info, index, scratch)
        node_info, labels_ds = verify_and_cluster(rows, edges, candidates, run)
    info["rejected_pairs"] = candidates - info["verified_pairs"] if config.verify else 0
    if labels_ds is not None:
        return rows.join(labels_ds, on=ROW, how="left").map_batches(finish, name="dedup.fuzzy.finish")
    return attached(rows, node_info, finish, "fuzzy")


def _pairs_of(band_rows: Dataset, config: FuzzyDedupConfig) -> Dataset:
    return (
        band_rows.group_by("band", "bhash")
        .agg(members=(ROW, "list"), n=(ROW, "count"))
        .map_batches(partial(_bucket_pairs, config.bucket_links), name="dedup.fuzzy.bucket_pairs")
        .deduplicate("u", "v")
    )


@dataclass
class IndexedDedup:
    """One fuzzy dedup against and into the signature index ``index`` names, for ``zephyr dedup fuzzy`` and
    the pipelines' ``fuzzy_dedup`` step. ``dedup`` (a Dataset function: ``dedup(rows, mode=, jobs=)``) opens
    and checks the index when it runs (a listing only names it), and when this run writes a generation it
    numbers the rows and takes the output through ``StripRowNumbers`` (op ``name``); after the output is
    written, ``write`` records every row, the removed ones tied to their kept row. ``run`` tags the
    generation: what a pipeline step wrote before it was interrupted is no earlier run, and is replaced."""

    config: FuzzyDedupConfig
    columns: DedupColumns
    index: IndexConfig
    run: str | None = None
    name: str = "dedup.fuzzy.output"
    opened: IndexInfo | None = None
    annotated: Dataset | None = None

    def dedup(self, rows: Dataset, mode: str, jobs: Jobs) -> Dataset:
        from zephyr.dedup.index import checked_target, open_index

        index, config = self.index, self.config
        if jobs.running:
            self.opened = open_index(index.index, config, run=self.run) if index.index is not None else None
            if index.writes is not None:  # before any work
                checked_target(index.writes, config, create=index.write_index is not None)
        kw = dict(index=self.opened if jobs.running else index.index, jobs=jobs)
        if index.writes is None:
            return fuzzy_dedup_dataset(rows, config, self.columns, mode=mode, **kw)

        def stripped(out: Dataset) -> Dataset:
            return out.map_batches(StripRowNumbers(mode), name=self.name)

        kw["jobs"] = jobs.then(stripped)
        self.annotated = fuzzy_dedup_dataset(
            rows, config, self.columns, mode="annotate", row_numbers=True, **kw
        )
        return stripped(self.annotated)

    def write(self, execution: dict[str, Any]) -> dict[str, Any]:
        """The run's rows as a new generation of the index (``write_generation``): its entry."""
        from zephyr.dedup.index import write_generation

        kw = dict(create=self.index.write_index is not None, run=self.run, execution=execution)
        return write_generation(self.index.writes, self.annotated, self.config, self.columns, **kw)
