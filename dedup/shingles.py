"""Shingling: the set of n-grams of each document, as 64-bit hashes in one flat array.

A *shingle* is either a word n-gram (``n`` consecutive whitespace-separated words of the normalized text,
joined by one space; a document with fewer than ``n`` words has the single shingle of all its words, as in
the corpus' Jaccard definition) or a character n-gram (``n`` consecutive Unicode code points of the
normalized text; shorter documents give one shingle of the whole text). Empty documents have no shingles.

Every shingle hash is ``poly_hash_bytes`` of the shingle's UTF-8 bytes, computed in one compiled pass per
document (``compiled.word_shingles``/``char_shingles``), or, without numba, with vectorized prefix sums over
the Arrow buffer (``hashing.span_hashes``, the reference form); nothing is copied per shingle.

Output layout (``Shingles``): ``hashes`` (uint64, all docs concatenated, in text order, duplicates kept) and
``offsets`` (int64, ``len(docs) + 1``): document ``i`` owns ``hashes[offsets[i]:offsets[i+1]]``.

>>> import pyarrow as pa
>>> from zephyr.dedup.hashing import poly_hash_bytes
>>> s = shingle_hashes(pa.array(["a b c d", "x"]), kind="word", n=3)
>>> s.offsets.tolist()
[0, 2, 3]
>>> [int(h) for h in s.hashes] == [poly_hash_bytes(t) for t in (b"a b c", b"b c d", b"x")]
True
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np
import pyarrow as pa
from zephyr.dedup import compiled
from zephyr.dedup.hashing import span_hashes, string_buffers
from zephyr.dedup.normalize import normalize_text

from zephyr.errors import ConfigError

__all__ = ["ShingleKind", "Shingles", "shingle_hashes", "shingle_spans", "unique_sets"]

ShingleKind = Literal["word", "char"]

# Texts are shingled in slices of about this many bytes so the prefix arrays (3 × 8 bytes per text byte)
# stay small; a single longer document forms its own slice.
_SLICE_BYTES = 8 << 20


@dataclass(frozen=True)
class Shingles:
    """Flat shingle hashes per document; see the module docstring for the layout."""

    hashes: np.ndarray
    offsets: np.ndarray

    @property
    def counts(self) -> np.ndarray:
        return np.diff(self.offsets)

    def __len__(self) -> int:
        return len(self.offsets) - 1


def shingle_spans(
    data: np.ndarray, offsets: np.ndarray, *, kind: ShingleKind, n: int, tokens: bool = False
) -> tuple[np.ndarray, ...]:
    """Byte spans ``(starts, ends)`` of every shingle and the per-document shingle offsets.

    ``data``/``offsets`` are a string array's buffers; words are runs of non-whitespace bytes. With
    ``tokens=True`` returns (token starts, token ends, first token, last token, offsets) per shingle instead.
    """
    num_docs = len(offsets) - 1
    doc_start = offsets[:-1]
    doc_end = offsets[1:]
    nonempty = doc_end > doc_start
    starts_doc = np.zeros(len(data) + 1, dtype=bool)
    starts_doc[doc_start[nonempty]] = True
    ends_doc = np.zeros(len(data) + 1, dtype=bool)
    ends_doc[doc_end[nonempty] - 1] = True
    if kind == "word":
        is_space = whitespace_mask(data)
        prev_space = np.concatenate(([True], is_space[:-1])) | starts_doc[:-1]
        next_space = np.concatenate((is_space[1:], [True])) | ends_doc[:-1]
        token_starts = np.flatnonzero(~is_space & prev_space)
        token_ends = np.flatnonzero(~is_space & next_space) + 1
    elif kind == "char":
        # a code point starts at every byte that is not a UTF-8 continuation byte (0b10xxxxxx)
        token_starts = np.flatnonzero((data & 0xC0) != 0x80)
        token_ends = np.append(token_starts[1:], len(data))
    else:
        raise ConfigError(f"shingle kind must be 'word' or 'char', got {kind!r}")
    tokens_per_doc = np.searchsorted(token_starts, doc_end, "left") - np.searchsorted(
        token_starts, doc_start, "left"
    )
    tokens_per_doc[~nonempty] = 0
    first_token = np.concatenate(([0], np.cumsum(tokens_per_doc)[:-1]))
    grams_per_doc = np.where(tokens_per_doc >= n, tokens_per_doc - n + 1, np.minimum(tokens_per_doc, 1))
    shingle_offsets = np.zeros(num_docs + 1, dtype=np.int64)
    np.cumsum(grams_per_doc, out=shingle_offsets[1:])
    total = int(shingle_offsets[-1])
    doc_of_gram = np.repeat(np.arange(num_docs), grams_per_doc)
    gram_index = np.arange(total, dtype=np.int64) - shingle_offsets[doc_of_gram]
    first_tok = first_token[doc_of_gram] + gram_index
    last_tok = np.minimum(first_tok + n - 1, first_token[doc_of_gram] + tokens_per_doc[doc_of_gram] - 1)
    if tokens:
        return token_starts, token_ends, first_tok, last_tok, shingle_offsets
    return token_starts[first_tok], token_ends[last_tok], shingle_offsets


# Python's str.split() whitespace: ASCII 9-13, 28-32 and these multi-byte UTF-8 sequences
_WS_ASCII = np.zeros(256, dtype=bool)
_WS_ASCII[[9, 10, 11, 12, 13, 28, 29, 30, 31, 32]] = True
_WS_MULTI = [bytes([0xC2, 0x85]), bytes([0xC2, 0xA0]), bytes([0xE1, 0x9A, 0x80])]
_WS_MULTI += [bytes([0xE2, 0x80, c]) for c in list(range(0x80, 0x8B)) + [0xA8, 0xA9, 0xAF]]
_WS_MULTI += [bytes([0xE2, 0x81, 0x9F]), bytes([0xE3, 0x80, 0x80])]


def whitespace_mask(data: np.ndarray) -> np.ndarray:
    """True on every byte of a whitespace character (the set of Python's ``str.isspace``)."""
    mask = _WS_ASCII[data]
    lead = np.flatnonzero((data == 0xC2) | (data == 0xE1) | (data == 0xE2) | (data == 0xE3))
    if len(lead):
        for seq in _WS_MULTI:
            k = len(seq)
            cand = lead[(lead + k <= len(data))]
            hit = np.ones(len(cand), dtype=bool)
            for j, byte in enumerate(seq):
                hit &= data[cand + j] == byte
            for j in range(k):
                mask[cand[hit] + j] = True
    return mask


def _word_gram_hashes(
    data: np.ndarray,
    tok_starts: np.ndarray,
    tok_ends: np.ndarray,
    first_tok: np.ndarray,
    last_tok: np.ndarray,
) -> np.ndarray:
    """Hash of the tokens first..last joined by single spaces, from per-token hashes:
    ``H(a + " " + b) = H(a)·P^(1+|b|) + 32·P^|b| + H(b)`` (mod 2⁶⁴), the same as hashing the joined bytes."""
    from zephyr.dedup.hashing import base_powers

    tok_hash = span_hashes(data, tok_starts, tok_ends)
    tok_len = tok_ends - tok_starts
    powers = base_powers(int(tok_len.max(initial=0)) + 2)
    acc = tok_hash[first_tok].copy()
    span = last_tok - first_tok
    for j in range(1, int(span.max(initial=0)) + 1):
        sel = np.flatnonzero(span >= j)
        t = first_tok[sel] + j
        length = tok_len[t]
        acc[sel] = acc[sel] * powers[length + 1] + np.uint64(32) * powers[length] + tok_hash[t]
    return acc


def shingle_hashes(
    texts: pa.Array | pa.ChunkedArray,
    *,
    kind: ShingleKind = "word",
    n: int = 5,
    normalize: str = "default",
) -> Shingles:
    """Hash the shingles of every text; nulls and empty texts get no shingles."""
    if n < 1:
        raise ConfigError(f"ngram size must be >= 1, got {n}")
    if kind not in ("word", "char"):
        raise ConfigError(f"shingle kind must be 'word' or 'char', got {kind!r}")
    if kind == "word":
        values = normalize_text(texts, normalize, collapse=False)  # the tokenizer splits on whitespace bytes
    else:
        values = normalize_text(texts, normalize)
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks() if values.num_chunks != 1 else values.chunk(0)
    values = values.cast(pa.large_string())
    data, offsets = string_buffers(values)
    if values.null_count:  # a null's slot is empty in the offsets; make sure it yields no shingle
        valid = np.asarray(values.is_valid())
        offsets = offsets.copy()
        ends = offsets[1:].copy()
        ends[~valid] = offsets[:-1][~valid]
        if not np.array_equal(ends, offsets[1:]):
            raise ConfigError("null string slots with data are not supported")
    hash_parts: list[np.ndarray] = []
    offset_parts: list[np.ndarray] = [np.zeros(1, dtype=np.int64)]
    base = 0
    num_docs = len(offsets) - 1
    lo = 0
    while lo < num_docs:
        hi = int(np.searchsorted(offsets, offsets[lo] + _SLICE_BYTES, "right")) - 1
        hi = min(max(hi, lo + 1), num_docs)
        byte_lo, byte_hi = int(offsets[lo]), int(offsets[hi])
        chunk = data[byte_lo:byte_hi]
        if compiled.available():
            kernel = compiled.word_shingles if kind == "word" else compiled.char_shingles
            hashes, counts = kernel(chunk, offsets[lo : hi + 1] - byte_lo, n)
            hash_parts.append(hashes)
            offset_parts.append(np.cumsum(counts) + base)
            base += len(hashes)
            lo = hi
            continue
        if kind == "word":
            ts, te, ft, lt, sh_off = shingle_spans(
                chunk, offsets[lo : hi + 1] - byte_lo, kind=kind, n=n, tokens=True
            )
            hash_parts.append(_word_gram_hashes(chunk, ts, te, ft, lt))
        else:
            starts, ends, sh_off = shingle_spans(chunk, offsets[lo : hi + 1] - byte_lo, kind=kind, n=n)
            hash_parts.append(span_hashes(chunk, starts, ends))
        offset_parts.append(sh_off[1:] + base)
        base += int(sh_off[-1])
        lo = hi
    hashes = np.concatenate(hash_parts) if hash_parts else np.zeros(0, dtype=np.uint64)
    return Shingles(hashes=hashes, offsets=np.concatenate(offset_parts))


def unique_sets(shingles: Shingles) -> Shingles:
    """The shingle *sets*: each document's hashes sorted and de-duplicated (for Jaccard)."""
    if compiled.available():
        hashes, counts = compiled.sorted_sets(shingles.hashes, shingles.offsets)
        offsets = np.zeros(len(shingles) + 1, dtype=np.int64)
        np.cumsum(counts, out=offsets[1:])
        return Shingles(hashes=hashes, offsets=offsets)
    doc = np.repeat(np.arange(len(shingles), dtype=np.int64), shingles.counts)
    order = np.lexsort((shingles.hashes, doc))
    h = shingles.hashes[order]
    d = doc[order]
    keep = np.ones(len(h), dtype=bool)
    keep[1:] = (h[1:] != h[:-1]) | (d[1:] != d[:-1])
    counts = np.bincount(d[keep], minlength=len(shingles))
    offsets = np.zeros(len(shingles) + 1, dtype=np.int64)
    np.cumsum(counts, out=offsets[1:])
    return Shingles(hashes=h[keep], offsets=offsets)
