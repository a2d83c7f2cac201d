"""Exact dedup: documents (driver and shuffle paths), paragraphs, and URLs (exact on the normalized URL).

Exact dedup as plain functions on ``pyarrow.Table`` (or record batches): documents and paragraphs.

Document level: the text is normalized (``none`` or NFC + lower case + whitespace collapse), hashed with
128-bit xxh3, and rows with equal hashes form a cluster; the kept row is the one with the maximum
priority, then the minimum id, then the first in input order (rows that share an id are still separate
rows), and ``dup_cluster`` is its id. Paragraph level: documents are split on a separator (newline); a paragraph whose
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

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from zephyr.dedup._hashing import normalize_text, xxh3_128_array
from zephyr.dedup._rows import (
    H0,
    H1,
    ROW,
    URL_KEY,
    DedupResult,
    Finish,
    StripRowNumbers,
    as_table,
    attached,
    cluster_node_info,
    driver_row_limit,
    execution_kwargs,
    group_keepers,
    has_column,
    joined,
    keep_ranks,
    key_columns,
    numbered,
    require_column,
    table_result,
)
from zephyr.dedup.config import ExactDedupConfig, check_mode

from zephyr import counters
from zephyr.errors import SchemaError

if TYPE_CHECKING:
    from zephyr.budget import Budget
    from zephyr.dataset import Dataset
    from zephyr.options import ExecutionOptions


logger = logging.getLogger(__name__)


def document_hashes(texts: pa.Array | pa.ChunkedArray, normalize: str = "default") -> np.ndarray:
    """``(n, 2)`` uint64: the 128-bit xxh3 of each normalized text (nulls hash like the empty string)."""
    digests = xxh3_128_array(normalize_text(texts, normalize))
    return digests.view(np.uint64).reshape(len(digests), 2)


def group_labels(hashes: np.ndarray, ranks: np.ndarray, members: np.ndarray) -> np.ndarray:
    """Label of each member row: the minimum rank among member rows with the same 128-bit hash."""
    labels = ranks.copy()
    rows = np.flatnonzero(members)
    if len(rows) == 0:
        return labels
    h = hashes[rows]
    order = np.lexsort((ranks[rows], h[:, 1], h[:, 0]))
    hs = h[order]
    new_group = np.ones(len(order), dtype=bool)
    new_group[1:] = (hs[1:] != hs[:-1]).any(axis=1)
    first_rank = ranks[rows[order]][np.flatnonzero(new_group)]
    labels[rows[order]] = first_rank[np.cumsum(new_group) - 1]
    return labels


def exact_dedup(
    data: Any,
    *,
    text_column: str = "text",
    id_column: str | None = "id",
    normalize: str = "default",
    mode: str = "remove",
    priority_column: str | None = None,
) -> DedupResult:
    """Document-level exact dedup of one in-memory table: the driver route of ``exact_dedup_dataset``
    (member hashes → groups → cluster columns by row number) run on the table itself; see the module
    docstring for the keep rule and the columns."""
    ExactDedupConfig(normalize=normalize)
    check_mode(mode)
    table = numbered(as_table(data), text_column)
    members = _MemberHashes(text_column, id_column, normalize, priority_column)(table)
    node_info = _exact_node_info(members, id_column, priority_column)
    return table_result(table, node_info, text_column, id_column, mode, {})


def split_paragraphs(
    table: pa.Table, text_column: str, separator: str, normalize: str
) -> tuple[pa.Array, pa.Array, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The texts (one ``large_string`` array) and their paragraphs as (texts, values, document of each,
    paragraphs per document, position in its document, blank or not, ``(n, 2)`` uint64 xxh3-128 of the
    normalized text). Shared by the exact and the Bloom-filter paragraph dedup, so both cut and hash
    paragraphs alike."""
    texts = require_column(table, text_column, "text")
    if isinstance(texts, pa.ChunkedArray):
        texts = texts.combine_chunks() if texts.num_chunks != 1 else texts.chunk(0)
    texts = texts.cast(pa.large_string())
    parts = pc.split_pattern(texts, separator)
    values = parts.flatten()
    doc = np.asarray(pc.list_parent_indices(parts), dtype=np.int64)
    lengths = np.asarray(pc.list_value_length(parts).fill_null(0), dtype=np.int64)
    starts = np.concatenate(([0], np.cumsum(lengths)[:-1]))
    position = np.arange(len(values), dtype=np.int64) - starts[doc]
    normalized = normalize_text(values, normalize)
    blank = np.asarray(pc.equal(pc.utf8_length(normalize_text(values, "default")), 0).fill_null(True))
    hashes = xxh3_128_array(normalized).view(np.uint64).reshape(len(values), 2)
    return texts, values, doc, lengths, position, blank, hashes


def without_paragraphs(
    table: pa.Table,
    text_column: str,
    paragraphs: tuple,
    removed: np.ndarray,
    separator: str,
    mode: str,
) -> tuple[pa.Table, np.ndarray, np.ndarray, np.ndarray]:
    """The table with the ``removed`` paragraphs cut from its text (``remove``), or counted in
    ``dup_paragraphs`` / ``dup_paragraph_bytes`` (``annotate``); and the removed paragraphs and bytes per
    document and the bytes of each paragraph. ``paragraphs``: ``split_paragraphs``' result."""
    texts, values, doc, lengths = paragraphs[:4]
    n = table.num_rows
    para_bytes = np.asarray(pc.binary_length(values), dtype=np.int64)
    removed_per_doc = np.bincount(doc[removed], minlength=n)
    bytes_per_doc = np.bincount(doc[removed], weights=para_bytes[removed], minlength=n).astype(np.int64)
    if mode == "remove":
        new_text = join_paragraphs(values, lengths, removed, texts, separator)
        new_text = new_text.cast(table.schema.field(text_column).type)
        out = table.set_column(table.column_names.index(text_column), text_column, new_text)
    else:
        out = table.drop_columns(
            [c for c in ("dup_paragraphs", "dup_paragraph_bytes") if c in table.column_names]
        )
        out = out.append_column("dup_paragraphs", pa.array(removed_per_doc, pa.int64()))
        out = out.append_column("dup_paragraph_bytes", pa.array(bytes_per_doc, pa.int64()))
    return out, removed_per_doc, bytes_per_doc, para_bytes


def join_paragraphs(
    values: pa.Array, lengths: np.ndarray, removed: np.ndarray, texts: pa.Array, separator: str
) -> pa.Array:
    """Each document's text rebuilt from its paragraphs without the ``removed`` ones (null texts stay null)."""
    n = len(lengths)
    kept = pc.filter(values, pa.array(~removed))
    kept_per_doc = lengths - np.bincount(np.repeat(np.arange(n), lengths)[removed], minlength=n).astype(
        np.int64
    )
    offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(kept_per_doc, out=offsets[1:])
    joined = pc.binary_join(
        pa.LargeListArray.from_arrays(pa.array(offsets), kept), pa.scalar(separator, pa.large_string())
    )
    return pc.if_else(texts.is_valid(), joined, pa.nulls(n, pa.large_string()))


def paragraph_dedup(
    data: Any,
    *,
    text_column: str = "text",
    id_column: str | None = "id",
    normalize: str = "default",
    mode: str = "remove",
    separator: str = "\n",
    source_column: str | None = "source",
) -> DedupResult:
    """Remove paragraphs seen earlier in id order.

    ``remove`` rewrites the text without them; ``annotate`` keeps the text and adds ``dup_paragraphs`` and
    ``dup_paragraph_bytes`` (what ``remove`` would cut). Stats count removed paragraphs and bytes per source.
    """
    ExactDedupConfig(level="paragraph", normalize=normalize, paragraph_separator=separator)
    check_mode(mode)
    table = as_table(data)
    paragraphs = split_paragraphs(table, text_column, separator, normalize)
    texts, values, doc, lengths, position, blank, hashes = paragraphs
    ranks = keep_ranks(table, id_column)
    order = np.lexsort((position, ranks[doc], hashes[:, 1], hashes[:, 0]))
    hs = hashes[order]
    first = np.ones(len(order), dtype=bool)
    first[1:] = (hs[1:] != hs[:-1]).any(axis=1)
    removed = np.zeros(len(values), dtype=bool)
    removed[order[~first]] = True
    removed &= ~blank
    out, removed_per_doc, bytes_per_doc, para_bytes = without_paragraphs(
        table, text_column, paragraphs, removed, separator, mode
    )
    blank_per_doc = np.bincount(doc[blank], minlength=table.num_rows)
    n = table.num_rows
    per_source: dict[str, dict[str, int]] = {}
    if source_column is not None and source_column in table.column_names and n:
        src = table[source_column].combine_chunks().cast(pa.large_string()).fill_null("<null>")
        enc = pc.dictionary_encode(src)
        codes = np.asarray(enc.indices, dtype=np.int64)
        names = enc.dictionary.to_pylist()
        paras = np.bincount(codes, weights=removed_per_doc, minlength=len(names))
        nbytes = np.bincount(codes, weights=bytes_per_doc, minlength=len(names))
        per_source = {
            str(name): {"paragraphs_removed": int(p), "bytes_removed": int(b)}
            for name, p, b in zip(names, paras, nbytes)
        }
    stats = {
        "rows_in": n,
        "rows_out": out.num_rows,
        "rows_dropped": 0,
        "rows_quarantined": 0,
        "null_text": int(texts.null_count),
        "paragraphs": int(len(values)),
        "paragraphs_removed": int(removed.sum()),
        "bytes_removed": int(para_bytes[removed].sum()),
        "docs_changed": int((removed_per_doc > 0).sum()),
        "docs_emptied": int(((removed_per_doc > 0) & (lengths - removed_per_doc - blank_per_doc <= 0)).sum()),
        "per_source": per_source,
    }
    return DedupResult(out, stats)


def _hash_columns(texts: pa.ChunkedArray, normalize: str) -> tuple[pa.Array, pa.Array]:
    """The two 64-bit halves of each normalized text's xxh3-128 (int64 bit patterns: the engine's shuffle keys
    are signed integers); null for null text."""

    hashes = document_hashes(texts, normalize)
    mask = ~np.asarray(pc.is_valid(texts), dtype=bool)
    return tuple(pa.array(hashes[:, k].view(np.int64), mask=mask, type=pa.int64()) for k in (0, 1))


class _AddDocHash:
    """Adds H0/H1 (the text's hash) to every row."""

    def __init__(self, text_column: str, normalize: str):
        self.text_column, self.normalize = text_column, normalize

    def __call__(self, table: pa.Table) -> pa.Table:
        if not has_column(table, self.text_column, "text"):
            return table
        h0, h1 = _hash_columns(table[self.text_column], self.normalize)
        return table.append_column(H0, h0).append_column(H1, h1)


class _MemberHashes:
    """(ROW, H0, H1[, id][, priority]) of every row with text: the small table the exact path groups."""

    def __init__(self, text_column: str, id_column: str | None, normalize: str, priority_column: str | None):
        self.text_column, self.id_column, self.normalize = text_column, id_column, normalize
        self.priority_column = priority_column

    def __call__(self, table: pa.Table) -> pa.Table:
        if not (has_column(table, self.text_column, "text") and has_column(table, self.id_column, "id")):
            return pa.table({ROW: pa.array([], pa.int64())})
        table = table.filter(pc.is_valid(table[self.text_column]))
        h0, h1 = _hash_columns(table[self.text_column], self.normalize)
        return pa.table(
            {ROW: table[ROW], H0: h0, H1: h1, **key_columns(table, self.id_column, self.priority_column)}
        )


def _exact_node_info(
    members: pa.Table, id_column: str | None, priority_column: str | None
) -> pa.Table | None:
    """(ROW, CLUSTER, SIZE, KEEP) of the rows whose normalized text occurs more than once, in the driver."""

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
    ranks = keep_ranks(dup, id_column, priority_column)
    hashes = np.stack([np.asarray(dup[h]).view(np.uint64) for h in (H0, H1)], axis=1)
    labels_by_rank = group_labels(hashes, ranks, np.ones(dup.num_rows, dtype=bool))
    position_of_rank = np.empty(dup.num_rows, dtype=np.int64)
    position_of_rank[ranks] = np.arange(dup.num_rows)
    return cluster_node_info(dup, position_of_rank[labels_by_rank], id_column)


def exact_dedup_dataset(
    ds: Dataset,
    *,
    text_column: str = "text",
    id_column: str | None = "id",
    normalize: str = "default",
    mode: str = "remove",
    priority_column: str | None = None,
    execution: ExecutionOptions | dict[str, Any] | None = None,
    driver_rows: int | None = None,
    stats: dict[str, Any] | None = None,
) -> Dataset:
    """Document-level exact dedup on the engine; same output as ``exact.exact_dedup``.

    Without ``execution`` the plan is lazy (the shuffle path). With ``execution``, one eager pass hashes
    each row into a small (row, hash, id, priority) table; when it has at most ``driver_rows`` rows
    (default: 64 bytes a row within a quarter of the memory budget), groups form in the driver and the
    returned plan reads the input once more and attaches the cluster columns by row number. ``stats``
    receives which path ran and why.

    >>> import zephyr
    >>> ds = zephyr.from_items([{"id": 2, "text": "A  b"}, {"id": 1, "text": "a b"}, {"id": 1, "text": "a B"}])
    >>> exact_dedup_dataset(ds, mode="remove").to_arrow(executor="inprocess").to_pylist()
    [{'id': 1, 'text': 'a b'}]
    """
    ExactDedupConfig(normalize=normalize)
    check_mode(mode)
    plans = _exact_job_plans(
        ds,
        text_column=text_column,
        id_column=id_column,
        normalize=normalize,
        mode=mode,
        priority_column=priority_column,
    )
    info: dict[str, Any] = {"in_memory": False}
    if execution is not None:
        kw = execution_kwargs(execution)
        limit = driver_row_limit(kw, driver_rows)
        members = plans.member_hashes.materialize(**kw)
        count = members.count(**kw)
        info.update(member_rows=count, driver_rows=limit)
        if count <= limit:
            info["in_memory"] = True
            node_info = _exact_node_info(members.to_arrow(**kw), id_column, priority_column)
            info["duplicate_rows"] = 0 if node_info is None else node_info.num_rows
            if stats is not None:
                stats.update(info)
            return plans.attached(node_info)
        info["fallback"] = f"{count} rows exceed the in-memory limit {limit}"
        logger.info("exact dedup: shuffle path (%s)", info["fallback"])
    if stats is not None:
        stats.update(info)
    return plans.shuffle_path


@dataclass(frozen=True)
class ExactJobPlans:
    """The lazy plans of exact dedup's engine jobs, built once for the run and for ``zephyr explain``."""

    member_hashes: Dataset
    """Job 1 (with ``execution``): the (row, hash, id, priority) table, materialized and counted."""
    shuffle_path: Dataset
    """The output when the member rows exceed the in-memory limit (or without ``execution``)."""
    rows: Dataset
    finish: Finish
    id_column: str | None

    def attached(self, node_info: pa.Table | None) -> Dataset:
        """The output when groups formed in the driver: the cluster columns attached by row number."""
        return attached(self.rows, node_info, self.id_column, self.finish, "exact")


def _exact_job_plans(
    ds: Dataset,
    *,
    text_column: str = "text",
    id_column: str | None = "id",
    normalize: str = "default",
    mode: str = "remove",
    priority_column: str | None = None,
) -> ExactJobPlans:
    """Every plan ``exact_dedup_dataset`` may run, built without running anything."""
    rows = ds.with_row_index(ROW)
    finish = Finish(text_column, id_column, mode)
    member_hashes = rows.map_batches(
        _MemberHashes(text_column, id_column, normalize, priority_column),
        name="dedup.exact.member_hashes",
    )
    hashed = rows.map_batches(_AddDocHash(text_column, normalize), name="dedup.exact.hash")
    keys = [ROW, H0, H1] + [c for c in (id_column, priority_column) if c is not None]
    members_ds = hashed.select(*keys).map_batches(
        lambda t: t.filter(pc.is_valid(t[H0])), name="dedup.exact.members"
    )
    shuffle_path = joined(
        hashed, group_keepers(members_ds, [H0, H1], id_column, priority_column), [H0, H1], finish, "exact"
    )
    return ExactJobPlans(member_hashes, shuffle_path, rows, finish, id_column)


def exact_plans(
    ds: Dataset,
    *,
    budget: Budget,
    finish: Callable[[Dataset], Dataset] = lambda out: out,
    hashes: str = "member hashes (row, hash, id, priority)",
    **arguments: Any,
) -> list[tuple[str, Dataset | None]]:
    """The engine jobs ``exact_dedup_dataset(ds, **arguments)`` may run, in order, each a title and its lazy
    plan, or a rule (plan None) that chooses between them (``zephyr explain dedup exact``): the hashes, then
    the driver's or the shuffle path. ``finish``: what the caller does to the output before writing it."""
    plans = _exact_job_plans(ds, **arguments)
    return [
        (f"job 1: {hashes}, materialized, then counted", plans.member_hashes),
        (
            f"member rows ≤ driver_pair_rows {budget.driver_pair_rows:,} (64 bytes a row in B/4): groups "
            "form in the driver and job 2a runs; more: job 2b",
            None,
        ),
        ("job 2a: the output, cluster columns attached by row number", finish(plans.attached(None))),
        ("job 2b: the output by the shuffle path (hash → keepers → join back)", finish(plans.shuffle_path)),
    ]


def url_plans(
    ds: Dataset,
    *,
    budget: Budget,
    url_column: str = "url",
    finish: Callable[[Dataset], Dataset] = lambda out: out,
    **arguments: Any,
) -> list[tuple[str, Dataset | None]]:
    """The engine jobs ``url_dedup_dataset`` may run: exact dedup's, on the normalized URL."""
    mode = arguments.pop("mode", "remove")
    keyed, keys = _url_keyed(ds, url_column, **arguments)
    return exact_plans(
        keyed,
        budget=budget,
        finish=lambda out: finish(_without_url_key(out, mode)),
        hashes="URL key hashes (row, hash, id, priority)",
        **keys,
    )


def paragraph_dedup_dataset(ds: Dataset, **kwargs: Any) -> Dataset:
    """Paragraph-level dedup needs a global "seen earlier" order; on the engine it is one shuffle-free
    pass after a stable sort by id into one partition (ties and null ids keep input order; without an id
    column, ``reshard(1)`` keeps input order), running ``exact.paragraph_dedup`` on the whole stream.

    Memory: the paragraph hashes of the corpus (16 bytes each plus the text of one batch). Keyword
    arguments are those of ``exact.paragraph_dedup``.
    """

    id_column = kwargs.get("id_column", "id")
    text_column = kwargs.get("text_column", "text")

    def run(table: pa.Table) -> pa.Table:
        if not has_column(table, text_column, "text"):
            return table
        result = paragraph_dedup(table, **kwargs)
        counters.increment("dedup/paragraphs_removed", result.stats["paragraphs_removed"])
        counters.increment("dedup/paragraph_bytes_removed", result.stats["bytes_removed"])
        counters.increment("dedup/rows_changed", result.stats["docs_changed"])
        return result.table

    ordered = ds.sort(id_column, num_partitions=1) if id_column else ds.reshard(1)
    return ordered.map_batches(run, batch_rows=1 << 62, name="dedup.paragraph")


URL_DUPLICATE = "url_duplicate"
"""The drop reason of a row whose normalized URL an earlier-kept row has (the CLI's and the pipelines')."""


class _AddUrlKey:
    def __init__(self, url_column: str):
        self.url_column = url_column

    def __call__(self, table: pa.Table) -> pa.Table:
        from zephyr.pipelines.web.urls import normalize_urls

        if self.url_column not in table.column_names:
            if table.num_rows == 0:
                return table.append_column(URL_KEY, pa.array([], pa.string()))
            raise SchemaError(
                f"url column {self.url_column!r} not found; the input has {', '.join(table.column_names)} "
                "(pass --url-column / url_column=)"
            )
        return table.append_column(URL_KEY, normalize_urls(table.column(self.url_column)))


def _url_keyed(
    ds: Dataset, url_column: str = "url", id_column: str | None = "id", priority_column: str | None = None
) -> tuple[Dataset, dict[str, Any]]:
    """``ds`` with the normalized URL in ``URL_KEY``, and the arguments URL dedup gives exact dedup (the key,
    byte-exact, annotated: ``_without_url_key`` removes): one place, so ``zephyr explain dedup url`` shows the
    plans ``zephyr dedup url`` runs."""
    keys = {"text_column": URL_KEY, "id_column": id_column, "normalize": "none", "mode": "annotate"}
    return ds.map_batches(_AddUrlKey(url_column), name="dedup.url.key"), {
        **keys,
        "priority_column": priority_column,
    }


def _without_url_key(out: Dataset, mode: str) -> Dataset:
    """The exact dedup's output without the key column (and in ``remove`` mode the duplicates, reason
    ``url_duplicate``, and the dup columns): URL dedup's output."""
    return out.map_batches(StripRowNumbers(mode, URL_DUPLICATE), name="dedup.url.finish")


def url_dedup_dataset(
    ds: Dataset,
    *,
    url_column: str = "url",
    id_column: str | None = "id",
    mode: str = "remove",
    priority_column: str | None = None,
    execution: ExecutionOptions | dict[str, Any] | None = None,
    stats: dict[str, Any] | None = None,
) -> Dataset:
    """Keep one row per normalized URL (module docstring); arguments as in ``exact_dedup_dataset``."""

    keyed, keys = _url_keyed(ds, url_column, id_column, priority_column)
    return _without_url_key(exact_dedup_dataset(keyed, **keys, execution=execution, stats=stats), mode)
