"""Exact dedup: documents (driver and shuffle paths), paragraphs, and URLs (exact on the normalized URL).

Exact dedup as plain functions on ``pyarrow.Table`` (or record batches): documents and paragraphs.

Document level: the text is normalized (``none`` or NFC + lower case + whitespace collapse), hashed with
128-bit xxh3, and rows with equal hashes form a cluster; the kept row is the one with the maximum
priority, then the minimum id, then the first in input order (rows that share an id are still separate
rows), and ``dup_cluster`` is its id. Paragraph level: documents are split on newlines; a paragraph whose
normalized hash was already seen in an earlier paragraph (order: id, then position) is removed. Blank
paragraphs are never removed. Rows with null text are passed through unchanged and counted.

>>> import pyarrow as pa
>>> t = pa.table({"id": [3, 1, 2], "text": ["Hello  World", "hello world", "other"]})
>>> r = exact_dedup(t, mode="annotate")
>>> r.table.select(["id", "dup_cluster", "dup_cluster_size", "dup_keep"]).to_pylist()[0]
{'id': 3, 'dup_cluster': 1, 'dup_cluster_size': 2, 'dup_keep': False}
>>> exact_dedup(t).table["id"].to_pylist()
[1, 2]
>>> p = pa.table({"id": ["a", "b"], "text": ["x\\ny\\n\\nz", "y\\nw\\nz"]})
>>> paragraph_dedup(p, mode="remove").table["text"].to_pylist()
['x\\ny\\n\\nz', 'w']

Document-level exact dedup on a ``Dataset`` (``exact_dedup_dataset``): with ``execution``, one pass hashes
every row into a small (row, hash, id, priority) table; when it fits the driver, groups form there and a second
pass attaches the cluster columns by row number (the text is never shuffled). Otherwise, and without
``execution`` (lazy), the shuffle path: hash → keepers by aggregation (``_rows.group_keepers``) → a join back
on the hash.

Where each dedup method lives: this module (exact documents, paragraphs, URLs), ``fuzzy`` (signatures, LSH
buckets, candidate pairs), ``_graph`` (verification and clusters, in the driver or on the engine), ``bloom``
(paragraphs against a Bloom filter), ``substring`` (repeated byte spans), ``index`` (earlier runs' kept rows);
``_rows`` holds what they share (row numbers, the keep rule, the dup columns, execution options, scratch).

**Row identity is the engine's.** Every path numbers the input rows with ``Dataset.with_row_index`` and
addresses them by that number; user ids only order rows (the keep rule: largest priority, then smallest
id, then input order; nulls last) and name clusters. So rows that share an id, rows with null ids and
inputs without an id column (``id_column=None``) dedup like any others, and nothing is quarantined.

Columns added: ``dup_cluster`` (the id of the cluster's kept row; its row number without an id column),
``dup_cluster_size``, ``dup_keep``. Null texts pass through with null cluster columns and ``dup_keep =
true``. Counters: ``dedup/duplicates``, ``dedup/null_text``, ``dedup/cluster_size=N`` (clusters of N rows:
the cluster-size histogram), ``dedup/candidate_pairs``, ``dedup/verified_pairs``, ``dedup/rejected_pairs``.

Exact URL dedup: one row per normalized URL, kept by the exact-dedup keep rule.

The key is ``zephyr.pipelines.web.urls.normalize_url`` of the url column (lower-case host, no default port,
fragment or tracking parameters), and the rest is ``exact_dedup_dataset`` on that key with ``normalize="none"``:
the same keep rule (largest priority, then smallest id, then input order), the same ``dup_cluster`` /
``dup_cluster_size`` / ``dup_keep`` columns, the same driver-or-shuffle paths. Rows whose URL is null or not a
web URL are in no cluster and pass through (counted as ``dedup/null_text``: no key).

>>> import zephyr
>>> ds = zephyr.from_items([{"id": 2, "url": "http://A.com/x#top"}, {"id": 1, "url": "http://a.com:80/x?utm_source=t"}])
>>> url_dedup_dataset(ds, mode="remove").to_arrow(executor="inprocess").to_pylist()
[{'id': 1, 'url': 'http://a.com:80/x?utm_source=t'}]
"""

from __future__ import annotations

import dataclasses
import functools
import logging
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from zephyr.dedup._hashing import as_array, hash_groups, normalize_text, xxh3_128_array
from zephyr.dedup._rows import (
    H0,
    H1,
    ROW,
    URL_KEY,
    DedupResult,
    Finish,
    Jobs,
    StripRowNumbers,
    as_table,
    attached,
    cluster_node_info,
    group_keepers,
    has_column,
    keep_ranks,
    on_table,
    require_column,
    sums_per_source,
)
from zephyr.dedup.config import COLUMNS, DedupColumns, ExactDedupConfig

from zephyr import counters
from zephyr.config import RemovalMode, coerce

if TYPE_CHECKING:
    from zephyr.dataset import Dataset


logger = logging.getLogger(__name__)


def document_hashes(texts: pa.Array | pa.ChunkedArray, normalize: str = "default") -> np.ndarray:
    """``(n, 2)`` uint64: the 128-bit xxh3 of each normalized text (nulls hash like the empty string)."""
    digests = xxh3_128_array(normalize_text(texts, normalize))
    return digests.view(np.uint64).reshape(len(digests), 2)


def exact_dedup(
    data: Any, columns: DedupColumns = COLUMNS, *, normalize: str = "default", mode: str = "remove"
) -> DedupResult:
    """Document-level exact dedup of one in-memory table: ``exact_dedup_dataset`` run in process on it
    (``_rows.on_table``); see the module docstring for the keep rule and the columns."""
    return on_table(data, mode, exact_dedup_dataset, columns, normalize=normalize)


def split_paragraphs(data: Any, text_column: str, normalize: str, mode: str) -> tuple[pa.Table, tuple]:
    """``data`` as a table (the settings checked) and its paragraphs, as (texts: one ``large_string`` array,
    values, document of each, paragraphs per document, position in its document, blank or not, ``(n, 2)``
    uint64 xxh3-128 of the normalized text). Shared by the exact and the Bloom-filter paragraph dedup, so
    both cut and hash paragraphs alike."""
    ExactDedupConfig(normalize=normalize)
    coerce(mode, RemovalMode, "mode")
    table = as_table(data)
    texts = as_array(require_column(table, text_column, "text")).cast(pa.large_string())
    parts = pc.split_pattern(texts, "\n")
    values = parts.flatten()
    doc = np.asarray(pc.list_parent_indices(parts), dtype=np.int64)
    lengths = np.asarray(pc.list_value_length(parts).fill_null(0), dtype=np.int64)
    starts = np.concatenate(([0], np.cumsum(lengths)[:-1]))
    position = np.arange(len(values), dtype=np.int64) - starts[doc]
    blank = np.asarray(pc.equal(pc.utf8_length(normalize_text(values, "default")), 0).fill_null(True))
    return table, (texts, values, doc, lengths, position, blank, document_hashes(values, normalize))


def without_paragraphs(
    table: pa.Table, text_column: str, paragraphs: tuple, removed: np.ndarray, mode: str
) -> tuple[DedupResult, np.ndarray, np.ndarray]:
    """The table with the ``removed`` paragraphs cut from its text (``remove``), or counted in
    ``dup_paragraphs`` / ``dup_paragraph_bytes`` (``annotate``), with the stats every paragraph dedup gives
    (rows, paragraphs and bytes removed, documents changed; in an engine task also its ``dedup/*`` counters);
    and the removed paragraphs and bytes per document. ``paragraphs``: ``split_paragraphs``' result."""
    texts, values, doc, lengths = paragraphs[:4]
    n = table.num_rows
    para_bytes = np.asarray(pc.binary_length(values), dtype=np.int64)
    removed_per_doc = np.bincount(doc[removed], minlength=n)
    bytes_per_doc = np.bincount(doc[removed], weights=para_bytes[removed], minlength=n).astype(np.int64)
    if mode == "remove":  # each text rebuilt from its kept paragraphs (null texts stay null)
        offsets = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(lengths - removed_per_doc, out=offsets[1:])
        kept = pa.LargeListArray.from_arrays(pa.array(offsets), pc.filter(values, pa.array(~removed)))
        joined = pc.binary_join(kept, pa.scalar("\n", pa.large_string()))
        new_text = pc.if_else(texts.is_valid(), joined, pa.nulls(n, pa.large_string()))
        new_text = new_text.cast(table.schema.field(text_column).type)
        out = table.set_column(table.column_names.index(text_column), text_column, new_text)
    else:
        out = table.drop_columns(
            [c for c in ("dup_paragraphs", "dup_paragraph_bytes") if c in table.column_names]
        )
        out = out.append_column("dup_paragraphs", pa.array(removed_per_doc, pa.int64()))
        out = out.append_column("dup_paragraph_bytes", pa.array(bytes_per_doc, pa.int64()))
    stats = {"rows_in": n, "rows_out": out.num_rows, "paragraphs_removed": int(removed.sum())}
    stats.update(bytes_removed=int(bytes_per_doc.sum()), docs_changed=int((removed_per_doc > 0).sum()))
    counters.increment("dedup/paragraphs_removed", stats["paragraphs_removed"])
    counters.increment("dedup/paragraph_bytes_removed", stats["bytes_removed"])
    counters.increment("dedup/rows_changed", stats["docs_changed"])
    return DedupResult(out, stats), removed_per_doc, bytes_per_doc


def paragraph_dedup(
    data: Any,
    columns: DedupColumns = COLUMNS,
    *,
    normalize: str = "default",
    mode: str = "remove",
    source_column: str | None = "source",
) -> DedupResult:
    """Remove paragraphs seen earlier in id order (``columns``: the text and id; no priority).

    ``remove`` rewrites the text without them; ``annotate`` keeps the text and adds ``dup_paragraphs`` and
    ``dup_paragraph_bytes`` (what ``remove`` would cut). Stats count removed paragraphs and bytes per source.
    """
    table, paragraphs = split_paragraphs(data, columns.text_column, normalize, mode)
    texts, values, doc, lengths, position, blank, hashes = paragraphs
    order, firsts = hash_groups(hashes, position, keep_ranks(table, columns.id_column)[doc])
    removed = np.zeros(len(values), dtype=bool)
    removed[order[firsts != order]] = True
    removed &= ~blank
    result, removed_per_doc, bytes_per_doc = without_paragraphs(
        table, columns.text_column, paragraphs, removed, mode
    )
    blank_per_doc = np.bincount(doc[blank], minlength=table.num_rows)
    emptied = (removed_per_doc > 0) & (lengths - removed_per_doc - blank_per_doc <= 0)
    sums = sums_per_source(table, source_column, "<null>", removed_per_doc, bytes_per_doc)
    result.stats.update(
        rows_dropped=0, rows_quarantined=0, null_text=texts.null_count, paragraphs=len(values)
    )
    result.stats.update(
        docs_emptied=int(emptied.sum()),
        per_source={k: {"paragraphs_removed": p, "bytes_removed": b} for k, (p, b) in sums.items()},
    )
    return result


class _DocHashes:
    """Adds H0/H1 (the text's hash) to every row; the id and priority columns the keep rule reads checked."""

    def __init__(self, columns: DedupColumns, normalize: str):
        self.columns, self.normalize = columns, normalize

    def __call__(self, table: pa.Table) -> pa.Table:
        c = self.columns
        checks = ((c.text_column, "text"), (c.id_column, "id"), (c.priority_column, "priority"))
        if not all(has_column(table, name, what) for name, what in checks):
            return table
        # the two halves of the text's xxh3-128 as int64 bit patterns (the shuffle keys are signed integers)
        texts = table[c.text_column]
        hashes = document_hashes(texts, self.normalize).view(np.int64)
        mask = ~np.asarray(pc.is_valid(texts), dtype=bool)
        for name, k in ((H0, 0), (H1, 1)):
            table = table.append_column(name, pa.array(hashes[:, k], mask=mask, type=pa.int64()))
        return table


def _exact_node_info(members: pa.Table, columns: DedupColumns) -> pa.Table | None:
    """(ROW, CLUSTER, SIZE, KEEPER) of the rows whose normalized text occurs more than once, in the driver."""

    if H0 not in members.column_names or members.num_rows == 0:
        return None
    counts = members.group_by([H0, H1]).aggregate([([], "count_all")])
    repeated = counts.filter(pc.greater(counts["count_all"], 1)).select([H0, H1])
    if repeated.num_rows == 0:
        return None
    # joined by position, so the id and priority columns (of any type, null-typed too) are only taken
    at = members.select([H0, H1]).append_column("__at", pa.array(np.arange(members.num_rows)))
    dup = members.take(at.join(repeated, keys=[H0, H1], join_type="inner")["__at"])
    dup = dup.take(pc.sort_indices(dup[ROW]))  # input order: the keep rule's last tie-break
    hashes = np.stack([np.asarray(dup[h]).view(np.uint64) for h in (H0, H1)], axis=1)
    order, firsts = hash_groups(hashes, keep_ranks(dup, columns.id_column, columns.priority_column))
    labels = np.empty(dup.num_rows, dtype=np.int64)
    labels[order] = firsts  # each row's kept row: the first of its hash in keep order
    return cluster_node_info(dup, labels, columns.id_column)


def exact_dedup_dataset(
    ds: Dataset,
    columns: DedupColumns = COLUMNS,
    *,
    normalize: str = "default",
    mode: str = "remove",
    execution: dict[str, Any] | None = None,
    driver_rows: int | None = None,
    stats: dict[str, Any] | None = None,
    jobs: Jobs | None = None,
) -> Dataset:
    """Document-level exact dedup on the engine; same output as ``exact.exact_dedup``.

    Without ``execution`` the plan is lazy (the shuffle path). With ``execution``, job 1 hashes each row
    into a small (row, hash, id, priority) table; when it has at most ``driver_rows`` rows (default: 64 bytes
    a row within a quarter of the memory budget), groups form in the driver and the returned plan (job 2a)
    reads the input once more and attaches the cluster columns by row number; else it is the shuffle path
    (job 2b). ``stats`` receives which path ran and why; ``jobs`` (``_rows.Jobs``) replaces ``execution``
    and ``stats`` (``zephyr explain`` lists both paths).

    >>> import zephyr
    >>> ds = zephyr.from_items([{"id": 2, "text": "A  b"}, {"id": 1, "text": "a b"}, {"id": 1, "text": "a B"}])
    >>> exact_dedup_dataset(ds, mode="remove").to_arrow(executor="inprocess").to_pylist()
    [{'id': 1, 'text': 'a b'}]
    """
    ExactDedupConfig(normalize=normalize)
    coerce(mode, RemovalMode, "mode")
    jobs = jobs or Jobs(execution, {} if stats is None else stats)
    rows = ds.with_row_index(ROW)
    finish = Finish(columns, mode)
    hashed = rows.map_batches(_DocHashes(columns, normalize), name="dedup.exact.hash")
    keys = [ROW, H0, H1] + [c for c in (columns.id_column, columns.priority_column) if c is not None]

    def members_of(table: pa.Table) -> pa.Table:  # (ROW, H0, H1[, id][, priority]) of the rows with text
        if H0 not in table.column_names:  # an empty input file without columns
            return pa.table({ROW: pa.array([], pa.int64())})
        return table.select(keys).filter(pc.is_valid(table[H0]))

    members = hashed.map_batches(members_of, name="dedup.exact.members")
    limit = driver_rows if driver_rows is not None else jobs.budget.driver_rows
    what = "URL key" if columns.text_column == URL_KEY else "member"
    jobs.info["in_memory"], node_info = False, None
    found = jobs(f"job 1: {what} hashes (row, hash, id, priority), materialized, then counted", members)
    jobs(
        f"member rows ≤ driver_rows {limit:,} (64 bytes a row in B/4): groups form in the driver and job 2a "
        "runs; more: job 2b"
    )
    if jobs.running:
        count = found.count(**jobs.execution)
        jobs.info.update(member_rows=count, driver_rows=limit)
        if count <= limit:
            node_info = _exact_node_info(found.to_arrow(**jobs.execution), columns)
            jobs.info.update(in_memory=True, duplicate_rows=0 if node_info is None else node_info.num_rows)
        else:
            jobs.info["fallback"] = f"{count} rows exceed the in-memory limit {limit}"
            logger.info("exact dedup: shuffle path (%s)", jobs.info["fallback"])
    if jobs.explain or jobs.info["in_memory"]:
        title = "job 2a: the output, cluster columns attached by row number"
        driver_path = jobs.output(title, attached(rows, node_info, finish, "exact"))
        if not jobs.explain:
            return driver_path
    keepers = group_keepers(members, [H0, H1], columns)  # groups of one are no clusters (``Finish``)
    return jobs.output(
        "job 2b: the output by the shuffle path (hash → keepers → join back)",
        hashed.join(keepers, on=[H0, H1], how="left").map_batches(finish, name="dedup.exact.finish"),
    )


def paragraph_dedup_dataset(
    ds: Dataset, columns: DedupColumns = COLUMNS, *, jobs: Jobs | None = None, **kwargs: Any
) -> Dataset:
    """Paragraph-level dedup needs a global "seen earlier" order; on the engine it is one shuffle-free
    pass after a stable sort by id into one partition (ties and null ids keep input order; without an id
    column, ``reshard(1)`` keeps input order), running ``exact.paragraph_dedup`` on the whole stream.

    Memory: the paragraph hashes of the corpus (16 bytes each plus the text of one batch). Keyword
    arguments are those of ``exact.paragraph_dedup``; ``jobs``: as in ``exact_dedup_dataset``.
    """

    def run(table: pa.Table) -> pa.Table:
        if not has_column(table, columns.text_column, "text"):
            return table
        return paragraph_dedup(table, columns, **kwargs).table

    ordered = ds.sort(columns.id_column, num_partitions=1) if columns.id_column else ds.reshard(1)
    return (jobs or Jobs()).output(
        "job 1: the output (rows in one partition, paragraphs seen earlier removed)",
        ordered.map_batches(run, batch_rows=1 << 62, name="dedup.paragraph"),
    )


URL_DUPLICATE = "url_duplicate"
"""The drop reason of a row whose normalized URL an earlier-kept row has (the CLI's and the pipelines')."""


def _add_url_key(url_column: str, table: pa.Table) -> pa.Table:
    from zephyr.pipelines.web.urls import normalize_urls

    if not has_column(table, url_column, "url"):  # an empty input file without columns
        return table.append_column(URL_KEY, pa.array([], pa.string()))
    return table.append_column(URL_KEY, normalize_urls(table.column(url_column)))


def url_dedup_dataset(
    ds: Dataset,
    columns: DedupColumns = COLUMNS,
    *,
    url_column: str = "url",
    mode: str = "remove",
    execution: dict[str, Any] | None = None,
    stats: dict[str, Any] | None = None,
    jobs: Jobs | None = None,
) -> Dataset:
    """Keep one row per normalized URL (module docstring): exact dedup (byte-exact, annotated) of the
    normalized URL in ``URL_KEY``, then the key column dropped (in ``remove`` mode the duplicates too, reason
    ``url_duplicate``). Arguments as in ``exact_dedup_dataset`` (the ``text_column`` of ``columns`` is not
    read)."""
    strip = StripRowNumbers(mode, URL_DUPLICATE)

    def stripped(out: Dataset) -> Dataset:
        return out.map_batches(strip, name="dedup.url.finish")

    jobs = jobs or Jobs(execution, {} if stats is None else stats)
    keyed = ds.map_batches(functools.partial(_add_url_key, url_column), name="dedup.url.key")
    keys = dataclasses.replace(columns, text_column=URL_KEY)
    out = exact_dedup_dataset(keyed, keys, normalize="none", mode="annotate", jobs=jobs.then(stripped))
    return stripped(out)
