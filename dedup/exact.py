"""Exact dedup as plain functions on ``pyarrow.Table`` (or record batches): documents and paragraphs.

Document level: the text is normalized (``none`` or NFC + lower case + whitespace collapse), hashed with
128-bit xxh3, and rows with equal hashes form a cluster; the kept row is the one with the maximum
priority, then the minimum id, then the first in input order (rows that share an id are still separate
rows), and ``dup_cluster`` is its id. Paragraph level: documents are split on a separator (newline); a paragraph whose
normalized hash was already seen in an earlier paragraph (order: id, then position) is removed. Blank
paragraphs are never removed. Rows with null text are passed through unchanged and counted.

>>> import pyarrow as pa
>>> t = pa.table({"id": [3, 1, 2], "text": ["Hello  World", "hello world", "other"]})
>>> r = exact_dedup(t)
>>> r.table.select(["id", "dup_cluster", "dup_cluster_size", "dup_keep"]).to_pylist()[0]
{'id': 3, 'dup_cluster': 1, 'dup_cluster_size': 2, 'dup_keep': False}
>>> exact_dedup(t, mode="remove").table["id"].to_pylist()
[1, 2]
>>> p = pa.table({"id": ["a", "b"], "text": ["x\\ny\\n\\nz", "y\\nw\\nz"]})
>>> paragraph_dedup(p, mode="remove").table["text"].to_pylist()
['x\\ny\\n\\nz', 'w']
"""

from __future__ import annotations

import logging
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from zephyr.dedup.clusters import (
    DedupResult,
    apply_mode,
    as_table,
    cluster_columns,
    keep_ranks,
    require_column,
    size_histogram,
)
from zephyr.dedup.config import ExactDedupConfig, check_mode
from zephyr.dedup.hashing import xxh3_128_array
from zephyr.dedup.normalize import normalize_text

__all__ = [
    "exact_dedup",
    "paragraph_dedup",
    "document_hashes",
    "group_labels",
    "split_paragraphs",
    "join_paragraphs",
]

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
    mode: str = "annotate",
    priority_column: str | None = None,
) -> DedupResult:
    """Document-level exact dedup; see the module docstring."""
    ExactDedupConfig(normalize=normalize)
    check_mode(mode)
    table = as_table(data)
    texts = require_column(table, text_column, "text")
    members = np.asarray(texts.is_valid()) if table.num_rows else np.zeros(0, dtype=bool)
    ranks = keep_ranks(table, id_column, priority_column)
    labels = group_labels(document_hashes(texts, normalize), ranks, members)
    cluster, size, keep = cluster_columns(table, ranks, labels, members, id_column=id_column)
    out = apply_mode(table, cluster, size, keep, mode)
    hist = size_histogram(labels, members)
    stats = {
        "rows_in": table.num_rows,
        "rows_out": out.num_rows,
        "rows_dropped": table.num_rows - out.num_rows,
        "rows_quarantined": 0,
        "null_text": int((~members).sum()),
        "duplicates": int((~keep).sum()),
        "clusters": int(sum(hist.values())),
        "cluster_size_histogram": hist,
    }
    logger.info(
        "exact dedup: %d rows, %d duplicates, %d null texts",
        table.num_rows,
        stats["duplicates"],
        stats["null_text"],
    )
    return DedupResult(out, stats)


def split_paragraphs(
    texts: pa.Array, separator: str, normalize: str
) -> tuple[pa.Array, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The paragraphs of ``texts`` (a ``large_string`` array) as (values, document of each, paragraphs per
    document, position in its document, blank or not, ``(n, 2)`` uint64 xxh3-128 of the normalized text).
    Shared by the exact and the Bloom-filter paragraph dedup, so both cut and hash paragraphs alike."""
    parts = pc.split_pattern(texts, separator)
    values = parts.flatten()
    doc = np.asarray(pc.list_parent_indices(parts), dtype=np.int64)
    lengths = np.asarray(pc.list_value_length(parts).fill_null(0), dtype=np.int64)
    starts = np.concatenate(([0], np.cumsum(lengths)[:-1]))
    position = np.arange(len(values), dtype=np.int64) - starts[doc]
    normalized = normalize_text(values, normalize)
    blank = np.asarray(pc.equal(pc.utf8_length(normalize_text(values, "default")), 0).fill_null(True))
    hashes = xxh3_128_array(normalized).view(np.uint64).reshape(len(values), 2)
    return values, doc, lengths, position, blank, hashes


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
    texts = require_column(table, text_column, "text")
    if isinstance(texts, pa.ChunkedArray):
        texts = texts.combine_chunks() if texts.num_chunks != 1 else texts.chunk(0)
    texts = texts.cast(pa.large_string())
    ranks = keep_ranks(table, id_column)
    values, doc, lengths, position, blank, hashes = split_paragraphs(texts, separator, normalize)
    order = np.lexsort((position, ranks[doc], hashes[:, 1], hashes[:, 0]))
    hs = hashes[order]
    first = np.ones(len(order), dtype=bool)
    first[1:] = (hs[1:] != hs[:-1]).any(axis=1)
    removed = np.zeros(len(values), dtype=bool)
    removed[order[~first]] = True
    removed &= ~blank
    para_bytes = np.asarray(pc.binary_length(values), dtype=np.int64)
    blank_per_doc = np.bincount(doc[blank], minlength=table.num_rows)
    n = table.num_rows
    removed_per_doc = np.bincount(doc[removed], minlength=n)
    bytes_per_doc = np.bincount(doc[removed], weights=para_bytes[removed], minlength=n).astype(np.int64)
    if mode == "remove":
        new_text = join_paragraphs(values, lengths, removed, texts, separator)
        new_text = new_text.cast(table.schema.field(text_column).type)
        out = table.set_column(table.column_names.index(text_column), text_column, new_text)
    else:
        out = table
        for name, col in (("dup_paragraphs", removed_per_doc), ("dup_paragraph_bytes", bytes_per_doc)):
            if name in out.column_names:
                out = out.drop_columns([name])
            out = out.append_column(name, pa.array(col, type=pa.int64()))
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
