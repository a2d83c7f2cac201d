"""Dedup on a ``zephyr.Dataset``: functions taking a Dataset and returning one with the dedup ops appended
(each runs as one or more engine stages). Until this release the module was ``dedup.stages`` (still
importable, with a ``ZephyrDeprecationWarning``).

Where each piece lives: ``exact_dataset`` (exact), ``fuzzy_dataset`` (fuzzy up to candidate pairs),
``fuzzy_clusters`` (where verification and clustering run), ``driver_graph`` (the graph in the driver),
``dup_columns`` (the dup columns both paths end with), ``eager`` (execution options, limits, scratch);
this module keeps paragraph dedup and re-exports the public names.

**Row identity is the engine's.** Every path numbers the input rows with ``Dataset.with_row_index`` and
addresses them by that number; user ids only order rows (the keep rule: largest priority, then smallest
id, then input order; nulls last) and name clusters. So rows that share an id, rows with null ids and
inputs without an id column (``id_column=None``) dedup like any others, and nothing is quarantined.

- exact, with ``execution``: one pass hashes every row into a small (row, hash, id, priority) table; when
  it fits the driver, groups form there and a second pass attaches the cluster columns by row number (the
  text is never shuffled). Otherwise, and without ``execution`` (lazy), the shuffle path: hash →
  keepers by aggregation (``dup_columns.group_keepers``) → a join back on the hash.
- fuzzy: signatures and band hashes per batch → one row per (row, band) → ``group_by(band, band hash)``
  → bounded candidate pairs per bucket (``lsh.candidate_edges``' rule) → distinct pairs. One pass writes
  the endpoints' shingle sets and keys (every row's, when the pairs do not fit the driver). When pairs
  and sets fit the driver, verification and clusters (``fuzzy.cluster_labels``: anchored by default) run
  there and the result is attached by row number. Otherwise the pairs are verified on the engine
  (``verify_engine``: sets joined onto pairs, a giant bucket's first members broadcast); the verified
  graph is then clustered in the driver when it fits, else (components only) by engine rounds
  (``engine_components``).

Columns added: ``dup_cluster`` (the id of the cluster's kept row; its row number without an id column),
``dup_cluster_size``, ``dup_keep``. Null texts pass through with null cluster columns and ``dup_keep =
true``. Counters: ``dedup/duplicates``, ``dedup/null_text``, ``dedup/cluster_size=N`` (clusters of N rows:
the cluster-size histogram), ``dedup/candidate_edges``, ``dedup/verified_edges``, ``dedup/rejected_edges``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pyarrow as pa
from zephyr.dedup.columns import ROW
from zephyr.dedup.dup_columns import StripRowNumbers, has_column
from zephyr.dedup.exact_dataset import exact_dedup_dataset
from zephyr.dedup.fuzzy_dataset import fuzzy_dedup_dataset

from zephyr import counters

if TYPE_CHECKING:
    from zephyr.dataset import Dataset

__all__ = ["exact_dedup_dataset", "fuzzy_dedup_dataset", "paragraph_dedup_dataset", "ROW", "StripRowNumbers"]


def paragraph_dedup_dataset(ds: Dataset, **kwargs: Any) -> Dataset:
    """Paragraph-level dedup needs a global "seen earlier" order; on the engine it is one shuffle-free
    pass after a stable sort by id into one partition (ties and null ids keep input order; without an id
    column, ``reshard(1)`` keeps input order), running ``exact.paragraph_dedup`` on the whole stream.

    Memory: the paragraph hashes of the corpus (16 bytes each plus the text of one batch). Keyword
    arguments are those of ``exact.paragraph_dedup``.
    """
    from zephyr.dedup.exact import paragraph_dedup

    id_column = kwargs.get("id_column", "id")
    text_column = kwargs.get("text_column", "text")

    def run(table: pa.Table) -> pa.Table:
        if not has_column(table, text_column, "text"):
            return table
        result = paragraph_dedup(table, **kwargs)
        counters.increment("dedup/paragraphs_removed", result.stats["paragraphs_removed"])
        counters.increment("dedup/paragraph_bytes_removed", result.stats["bytes_removed"])
        return result.table

    ordered = ds.sort(id_column, num_partitions=1) if id_column else ds.reshard(1)
    return ordered.map_batches(run, batch_rows=1 << 62, name="dedup.paragraph")
