"""Decontamination: find documents that share a word 13-gram with an evaluation set.

Both sides are normalized the same way (lower case, every character that is not a letter, digit or space
becomes a space, split on whitespace — as in GPT-3's contamination study, Brown et al. 2020, App. C) and
hashed with ngrams.py's batch hashing. The eval set's n-grams go into one sorted unique ``uint64`` array
(``EvalNgramIndex``; 8 bytes per distinct n-gram, saved as ``.npy``); a batch of documents is checked with
one ``np.searchsorted`` over all of its n-grams — no per-document loop. Eval items shorter than ``n`` words
contribute no n-gram (counted in ``EvalNgramIndex.short_items``). A match is by 64-bit hash, so a false
positive needs a hash collision (~ W·E/2^64 for W document n-grams against E eval n-grams).

The batch op ``Decontaminate(index_path, mode)`` adds ``contaminated`` (bool) and ``contaminated_ngrams``
(int32, number of matching n-gram positions) columns (``mode="annotate"``), or with ``mode="remove"`` drops
the rows that match, with reason ``decontam_shares_13gram``. Null texts are never contaminated. The modes are
dedup's words and default (``remove``, as every removing op).

>>> import pyarrow as pa
>>> idx = build_eval_index(["The quick brown fox jumps over the lazy dog near the river bank today."])
>>> docs = pa.array(["Intro: the QUICK brown fox jumps over the lazy dog near the river bank!", "other"])
>>> contamination(docs, idx).tolist()
[1, 0]
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from zephyr.pipelines.quality._text import text_array
from zephyr.pipelines.quality.ngrams import FlatWords, flat_words, ngram_keys

from zephyr import counters
from zephyr.config import RemovalMode, coerce
from zephyr.errors import ConfigError, InputError, SchemaError
from zephyr.ops import BatchOutput
from zephyr.removal import check_added_columns, keep_by

log = logging.getLogger(__name__)


def _normalized_words(texts: pa.Array) -> FlatWords:
    import polars as pl

    s = pl.Series("t", texts).fill_null("").str.to_lowercase().str.replace_all(r"[^\p{L}\p{N}\s]", " ")
    return flat_words(s.str.extract_all(r"\S+").to_arrow())


@dataclass(frozen=True)
class EvalNgramIndex:
    """Sorted unique 64-bit hashes of an eval set's word n-grams."""

    hashes: np.ndarray
    n: int = 13
    items: int = 0
    short_items: int = 0

    def save(self, path: str | Path) -> None:
        """``.npz`` with ``hashes``, ``n`` and a format ``version`` (1)."""
        np.savez(
            path, hashes=self.hashes, n=self.n, items=self.items, short_items=self.short_items, version=1
        )

    @classmethod
    def load(cls, path: str | Path) -> EvalNgramIndex:
        try:
            z = np.load(path)
        except (OSError, ValueError) as exc:
            raise InputError(f"cannot read eval n-gram index: {exc}", path=str(path)) from exc
        if int(z["version"]) != 1:
            raise InputError(f"eval index version {int(z['version'])} is not 1", path=str(path))
        return cls(z["hashes"], int(z["n"]), int(z["items"]), int(z["short_items"]))


def read_eval_texts(paths: Sequence[str | Path], columns: Sequence[str] = ("text",)) -> pa.Array:
    """All strings of ``columns`` in Parquet / JSONL (``.jsonl``, ``.json``, optionally ``.gz``/``.zst``) files."""
    import pyarrow.json as pj
    import pyarrow.parquet as pq

    chunks: list[pa.Array] = []
    for path in paths:
        p = str(path)
        try:
            if p.endswith(".parquet"):
                table = pq.read_table(p)
            else:
                with pa.input_stream(p, compression="detect") as f:
                    table = pj.read_json(f)
        except (OSError, pa.ArrowInvalid) as exc:
            raise InputError(f"cannot read eval set: {exc}", path=p) from exc
        for column in columns:
            if column not in table.schema.names:
                raise SchemaError(f"{p}: eval column {column!r} not found; columns are {table.schema.names}")
            chunks.append(text_array(table, column))
    if not chunks:
        raise ConfigError("no eval set given")
    return pa.concat_arrays(chunks)


def build_eval_index(texts: pa.Array | Iterable[str], n: int = 13) -> EvalNgramIndex:
    """Hash every word n-gram of the eval texts into a sorted unique array (``n`` within ``ngrams.MAX_N``)."""
    if not isinstance(texts, pa.Array):
        texts = pa.array(list(texts), type=pa.large_string())
    fw = _normalized_words(texts)
    keys, valid = ngram_keys(fw, n)
    words_per_item = np.diff(fw.offsets)
    short = int(((words_per_item < n) & (words_per_item > 0)).sum())
    hashes = np.unique(keys[valid])
    log.info(
        "eval index: %d items, %d distinct %d-grams, %d items shorter than n",
        len(texts),
        len(hashes),
        n,
        short,
    )
    return EvalNgramIndex(hashes, n, len(texts), short)


def contamination(texts: pa.Array, index: EvalNgramIndex) -> np.ndarray:
    """int32 per row: how many of the document's n-gram positions occur in the eval set."""
    fw = _normalized_words(texts)
    keys, valid = ngram_keys(fw, index.n)
    hits = np.zeros(len(keys), dtype=bool)
    if len(index.hashes) and len(keys):
        pos = np.minimum(np.searchsorted(index.hashes, keys), len(index.hashes) - 1)
        hits = (index.hashes[pos] == keys) & valid
    return np.bincount(fw.rows[hits], minlength=fw.num_rows).astype(np.int32)


@dataclass
class Decontaminate:
    """Annotates (``mode="annotate"``) or removes (``mode="remove"``) rows sharing an n-gram with the eval index
    file.

    Annotate mode adds ``output_column`` and ``<output_column>_ngrams``; an input that has them fails unless
    ``replace_columns`` (``zephyr.removal``). Remove mode adds nothing."""

    index_path: str
    mode: str = "remove"
    text_column: str = "text"
    replace_columns: bool = False
    output_column: str = "contaminated"
    _index: EvalNgramIndex | None = field(default=None, repr=False, compare=False)

    def __post_init__(self) -> None:
        self.mode = coerce(self.mode, RemovalMode, "mode")

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_index": None}

    @property
    def columns(self) -> tuple[str, ...]:
        """The columns this step adds."""
        return (self.output_column, f"{self.output_column}_ngrams") if self.mode == "annotate" else ()

    def _counts(self, table: pa.Table) -> Any:
        """Matching n-grams per row (numpy), counted as ``decontam/contaminated_rows``."""
        if self._index is None:
            self._index = EvalNgramIndex.load(self.index_path)
        counts = contamination(table.column(self.text_column).combine_chunks(), self._index)
        counters.increment("decontam/contaminated_rows", int((counts > 0).sum()))
        return counts

    def reasons(self, table: pa.Table) -> pa.Array:
        """Per-row drop reason of remove mode (null: kept), for ``--dropped-output`` (``zephyr.removal``)."""
        hit = self._counts(table) > 0
        reason = f"decontam_shares_{self._index.n}gram"
        return pc.if_else(pa.array(hit, pa.bool_()), pa.scalar(reason), pa.scalar(None, pa.string()))

    def __call__(self, table: pa.Table) -> BatchOutput | pa.Table:
        check_added_columns(table.schema.names, self.columns, replace_columns=self.replace_columns)
        if self.mode == "annotate":  # columns of those names are replaced at the end (checked above)
            counts = self._counts(table)
            flag, ngrams = self.columns
            table = table.drop_columns([c for c in self.columns if c in table.schema.names])
            return table.append_column(flag, pa.array(counts > 0)).append_column(ngrams, pa.array(counts))
        reasons = self.reasons(table)
        return keep_by(table, reasons)
