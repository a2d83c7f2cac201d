"""Vectorized word n-gram hashing over a whole batch of documents (numpy, no per-document loop).

A batch's words are laid out flat: ``hashes[j]`` (uint64, polars' hash of the word), ``lengths[j]`` (its
characters) and ``rows[j]`` (the document it belongs to), with ``offsets`` (length ``num_rows + 1``) marking
each document's slice. The n-gram that starts at word ``i`` is keyed by ``Σ_k hashes[i+k] · M_k``
(mod 2^64, fixed odd multipliers, order-sensitive) and is *valid* only if all its words lie in one document.
Duplicate detection within a document keys each n-gram by ``(row, n-gram)`` mixed into 64 bits and runs one
``np.unique`` for the whole batch; the chance of a false match is ~ N²/2^64.

Used by the Gopher repetition rules and by 13-gram decontamination.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from zephyr.errors import ConfigError

_HASH_SEED = 0x5EED
# Fixed odd 64-bit multipliers, one per position in the n-gram (splitmix64 outputs of 1, 2, 3, ...).
_MULTIPLIERS = np.array(
    [
        0x910A2DEC89025CC1,
        0xBEEB8DA1658EEC67,
        0xF893A2EEFB32555F,
        0x71C18690EE42C90B,
        0x71BB54D8D101B5B9,
        0xC34D0BFF90150281,
        0xF2C0D5F2C4E8C4B5,
        0x7B1B5A3C5D8E9F01,
        0x9E3779B97F4A7C15,
        0xBF58476D1CE4E5B9,
        0x94D049BB133111EB,
        0xD6E8FEB86659FD93,
        0xA0761D6478BD642F,
        0xE7037ED1A0B428DB,
        0x8EBC6AF09C88C6E3,
        0x589965CC75374CC3,
    ],
    dtype=np.uint64,
)
MAX_N = len(_MULTIPLIERS)
_ROW_MIX = np.uint64(0x9FB21C651E98DF25)


@dataclass(frozen=True)
class FlatWords:
    """The words of a batch, flattened (see the module docstring)."""

    hashes: np.ndarray  # uint64 [W]
    lengths: np.ndarray  # int64 [W], characters
    rows: np.ndarray  # int64 [W]
    offsets: np.ndarray  # int64 [R + 1]

    @property
    def num_rows(self) -> int:
        return len(self.offsets) - 1


def flat_words(words: pa.Array | pa.ChunkedArray) -> FlatWords:
    """Flatten a list<string> array (nulls count as empty documents) and hash every word."""
    import polars as pl

    if isinstance(words, pa.ChunkedArray):
        words = words.combine_chunks()
    counts = pc.fill_null(pc.list_value_length(words), 0).to_numpy().astype(np.int64)
    offsets = np.zeros(len(counts) + 1, dtype=np.int64)
    np.cumsum(counts, out=offsets[1:])
    values = pl.Series(pc.list_flatten(words))
    hashes = values.hash(seed=_HASH_SEED).to_numpy().astype(np.uint64, copy=False)
    lengths = values.str.len_chars().to_numpy().astype(np.int64)
    rows = np.repeat(np.arange(len(counts), dtype=np.int64), counts)
    return FlatWords(hashes, lengths, rows, offsets)


def ngram_keys(fw: FlatWords, n: int, positions: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(keys uint64, valid bool) of the n-grams starting at ``positions`` (default: every word); an n-gram
    is valid if it fits inside its document (keys of invalid ones are meaningless)."""
    if not 1 <= n <= MAX_N:
        raise ConfigError(f"n must be in [1, {MAX_N}], got {n}")
    w = len(fw.hashes)
    pos = np.arange(w, dtype=np.int64) if positions is None else positions
    ends = fw.offsets[1:][fw.rows[pos]] if len(pos) else np.zeros(0, dtype=np.int64)
    valid = pos + n <= ends
    keys = np.zeros(len(pos), dtype=np.uint64)
    for k in range(n):  # n vector ops over the batch, not a loop over documents
        keys += fw.hashes[np.minimum(pos + k, w - 1)] * _MULTIPLIERS[k]
    return keys, valid


def _repeat_counts(fw: FlatWords, keys: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """How often each n-gram (``keys`` at word positions ``starts``) occurs among them in its document."""
    if len(starts) == 0:
        return np.zeros(0, dtype=np.int64)
    mixed = keys ^ (fw.rows[starts].astype(np.uint64) * _ROW_MIX)
    order = np.argsort(mixed)
    ordered = mixed[order]
    first = np.flatnonzero(np.concatenate([[True], ordered[1:] != ordered[:-1]]))
    runs = np.diff(np.append(first, len(ordered)))
    out = np.empty(len(starts), dtype=np.int64)
    out[order] = np.repeat(runs, runs)
    return out


class NgramCounts:
    """Per-start occurrence counts of word n-grams within their document, for n = 1, 2, 3, … on demand.

    An n-gram can only repeat where its (n-1)-word prefix repeats, so the count for n is computed only at
    the starts whose (n-1)-gram repeated (typically a few percent of the words once n ≥ 3); the others are
    unique by construction. The first level sorts every start of the batch once.
    """

    def __init__(self, fw: FlatWords):
        self.fw = fw
        self._counts: dict[int, np.ndarray] = {}

    def counts(self, n: int) -> np.ndarray:
        """int64 [W]: occurrences of the n-gram starting at each word (0 where it does not fit)."""
        if n in self._counts:
            return self._counts[n]
        w = len(self.fw.hashes)
        valid = np.arange(w, dtype=np.int64) + n <= (self.fw.offsets[1:][self.fw.rows] if w else 0)
        counts = valid.astype(np.int64)
        repeated = self.counts(n - 1) >= 2 if n > 1 else True  # only a repeated (n-1)-gram can start one
        candidates = np.flatnonzero(repeated & valid)
        keys, _ = ngram_keys(self.fw, n, candidates)
        counts[candidates] = _repeat_counts(self.fw, keys, candidates)
        self._counts[n] = counts
        return counts


def _row_sums(fw: FlatWords, weights: np.ndarray) -> np.ndarray:
    return np.bincount(fw.rows, weights=weights, minlength=fw.num_rows)


def top_ngram_char_fraction(fw: FlatWords, n: int, counter: NgramCounts | None = None) -> np.ndarray:
    """Per document: characters covered by the most frequent *repeated* word n-gram (count × its length),
    over the characters of all words (Rae et al. 2021, App. A). 0 where no n-gram occurs twice."""
    counts = (counter or NgramCounts(fw)).counts(n)
    rep = np.flatnonzero(counts >= 2)
    top = np.zeros(fw.num_rows, dtype=np.int64)
    if len(rep):
        cum = np.concatenate([[0], np.cumsum(fw.lengths)])
        ngram_chars = cum[rep + n] - cum[rep]
        rows = fw.rows[rep]
        top_count = np.zeros(fw.num_rows, dtype=np.int64)
        np.maximum.at(top_count, rows, counts[rep])
        score = np.where(counts[rep] == top_count[rows], counts[rep] * ngram_chars, 0)
        np.maximum.at(top, rows, score)
    total = _row_sums(fw, fw.lengths.astype(np.float64))
    # overlapping occurrences ("a a a a") can cover more than every character once; cap at 1.
    return np.minimum(np.divide(top, total, out=np.zeros(fw.num_rows), where=total > 0), 1.0)


def duplicate_ngram_char_fraction(fw: FlatWords, n: int, counter: NgramCounts | None = None) -> np.ndarray:
    """Per document: characters of the words covered by any word n-gram that occurs at least twice in it
    (every occurrence, each word counted once), over the characters of all words (Gopher's "fraction of
    characters in duplicate n-grams"; RedPajama-v2's ``rps_doc_frac_chars_dupe_ngrams``)."""
    dup_start = ((counter or NgramCounts(fw)).counts(n) >= 2).astype(np.int64)
    # word j is covered iff a duplicate n-gram starts in [j-n+1, j]; a valid start never crosses a document
    # boundary, so the window sum cannot leak between documents.
    cum = np.concatenate([[0], np.cumsum(dup_start)])
    j = np.arange(len(dup_start))
    covered = (cum[j + 1] - cum[np.maximum(j + 1 - n, 0)]) > 0
    dup = _row_sums(fw, np.where(covered, fw.lengths, 0).astype(np.float64))
    total = _row_sums(fw, fw.lengths.astype(np.float64))
    return np.divide(dup, total, out=np.zeros(fw.num_rows), where=total > 0)
