"""Text → normalized text → 64/128-bit hashes and shingle-hash sets: the per-batch kernels every dedup method
starts from.

Text normalization for dedup, vectorized with Arrow compute and polars (no per-row Python except NFC of non-ASCII rows).

Modes:

- ``none``: the text as stored (whitespace is still collapsed where a tokenizer needs word boundaries).
- ``default``: Unicode NFC, lower case, every run of Unicode whitespace collapsed to one space, trimmed.
  Python's ``str.split()`` whitespace set is matched exactly, so word shingles equal those of
  ``text.lower().split()`` (the Jaccard definition of the benchmark corpus) up to case-mapping corner cases.
- ``simplify``: ``default``, then punctuation and symbols become spaces and digits become ``0``
  (the spirit of datatrove's ``simplify_text``; used by the ``datatrove`` preset).

>>> import pyarrow as pa
>>> normalize_text(pa.array(["  Hello\\u00a0 WORLD\\n", None]), "default").to_pylist()
['hello world', None]

Hash kernels shared by the plain functions and the Dataset functions.

- ``xxh3_128_array``: 128-bit xxh3 of every string in an Arrow array (document and paragraph exact dedup).
  No library here offers a vectorized xxh3: Arrow's compute has no hash kernel, polars' ``hash`` is a
  different, version-dependent function, and numpy cannot express xxh3's length-dependent paths. So the
  kernel calls ``xxhash.xxh3_128_digest`` once per row on a zero-copy ``memoryview`` slice of the Arrow
  data buffer (no ``str`` objects are built) and assembles the digests with one ``bytes.join``: ~0.2 µs of
  overhead per row, the rest is xxh3's own speed.
- ``span_hashes``: a 64-bit polynomial hash of arbitrary byte spans of one buffer, fully vectorized: with
  prefix sums ``S[k] = Σ_{j<k} b_j Q^j`` (Q = P⁻¹ mod 2⁶⁴, P odd) every span ``[a, e)`` hashes to
  ``(S[e] − S[a])·P^(e−1) = Σ b_j P^(e−1−j) mod 2⁶⁴``, i.e. exactly ``poly_hash_bytes`` of the span's bytes.
  Shingles (word or character n-grams) are spans of the normalized text, so their hashes need no copy.
- ``fmix64``: the MurmurHash3 64-bit finalizer (a bijection), used to spread hashes before MinHash.

Shingling: the set of n-grams of each document, as 64-bit hashes in one flat array.

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
>>> from zephyr.dedup._hashing import poly_hash_bytes
>>> s = shingle_hashes(pa.array(["a b c d", "x"]), kind="word", n=3)
>>> s.offsets.tolist()
[0, 2, 3]
>>> [int(h) for h in s.hashes] == [poly_hash_bytes(t) for t in (b"a b c", b"b c d", b"x")]
True
"""

from __future__ import annotations

import unicodedata
from dataclasses import dataclass
from typing import Literal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import xxhash
import zephyr.dedup._compiled as compiled
from zephyr.dedup.config import NORMALIZATIONS

from zephyr.errors import ConfigError

# Python's str.isspace() set: \s lacks \v, \x1c-\x1f, \x85 and the \p{Z} separators, so list them.
_WHITESPACE_RUN = r"[\t\n\x{0b}\x{0c}\r\x{1c}-\x{1f} \x{85}\p{Z}]+"
_PUNCT_OR_SYMBOL = r"[\p{P}\p{S}]+"
_DIGIT = r"\p{Nd}"


def _as_string(values: pa.Array | pa.ChunkedArray) -> pa.Array | pa.ChunkedArray:
    if pa.types.is_dictionary(values.type):  # dictionary-encoded text (a categorical): its values
        values = values.cast(values.type.value_type)
    if pa.types.is_string(values.type) or pa.types.is_large_string(values.type):
        return values
    if pa.types.is_string_view(values.type) or pa.types.is_null(values.type):
        return values.cast(pa.large_string())
    raise ConfigError(f"text column must be a string column, got type {values.type}")


def collapse_whitespace(values: pa.Array | pa.ChunkedArray) -> pa.Array | pa.ChunkedArray:
    """Every whitespace run becomes one ASCII space; leading/trailing whitespace is removed.

    With numba, one compiled copy of the bytes (~5× faster than polars on the medium corpus). Otherwise runs through polars' ``str.replace_all`` (Rust ``regex``, a lazy DFA) rather than Arrow's RE2
    ``replace_substring_regex``: same character class, byte-identical output (pinned against the RE2 version
    and ``" ".join(s.split())`` in tests/dedup/test_kernels.py), 1.8x faster on a 20 MB slice of the medium
    corpus (0.40 s vs 0.72 s). Arrow's ``utf8_split_whitespace`` + ``binary_join`` is faster still but was
    rejected: it leaves a trailing U+3000 after other spaces as a token, so it is not ``str.split()``.
    """
    values = _as_string(values)
    if len(values) == 0:
        return values
    if compiled.available():
        return _collapse_compiled(values)
    import polars as pl  # here, not at import: a driver that only plans dedup jobs never loads it (~0.2 s)

    collapsed = pl.Series(values=values).str.replace_all(_WHITESPACE_RUN, " ").str.strip_chars(" ").to_arrow()
    collapsed = collapsed.cast(values.type)
    return pa.chunked_array([collapsed], values.type) if isinstance(values, pa.ChunkedArray) else collapsed


def _collapse_compiled(values: pa.Array | pa.ChunkedArray) -> pa.Array | pa.ChunkedArray:
    """``collapse_whitespace`` as one compiled copy of the bytes (``compiled.collapse_whitespace``)."""

    arr = values.combine_chunks() if isinstance(values, pa.ChunkedArray) else values
    data, offsets = string_buffers(arr)
    out, out_offsets = compiled.collapse_whitespace(data, offsets)
    validity = pc.is_valid(arr).buffers()[1] if arr.null_count else None
    collapsed = pa.Array.from_buffers(
        pa.large_string(), len(arr), [validity, pa.py_buffer(out_offsets), pa.py_buffer(out)], arr.null_count
    ).cast(values.type)
    return pa.chunked_array([collapsed], values.type) if isinstance(values, pa.ChunkedArray) else collapsed


def nfc(values: pa.Array | pa.ChunkedArray) -> pa.Array:
    """Unicode NFC. ASCII rows are already NFC and are skipped (one vectorized check); the other rows go
    through CPython's ``unicodedata.normalize``, whose quick check returns already-normalized strings
    untouched. Measured on the small corpus this is ~20x faster than Arrow's ``utf8_normalize`` (utf8proc
    rebuilds every string), which is why this one step calls Python per non-ASCII row."""
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks() if values.num_chunks != 1 else values.chunk(0)
    ascii_rows = np.asarray(pc.string_is_ascii(values).fill_null(True), dtype=bool)
    if ascii_rows.all():
        return values
    idx = np.flatnonzero(~ascii_rows)
    originals = values.take(pa.array(idx)).to_pylist()
    normalized = [unicodedata.normalize("NFC", s) for s in originals]
    changed = [i for i, (a, b) in enumerate(zip(originals, normalized)) if a is not b and a != b]
    if not changed:
        return values
    mask = np.zeros(len(values), dtype=bool)
    mask[idx[changed]] = True
    return pc.replace_with_mask(
        values, pa.array(mask), pa.array([normalized[i] for i in changed], values.type)
    )


def normalize_text(
    values: pa.Array | pa.ChunkedArray, mode: str = "default", *, collapse: bool = True
) -> pa.Array | pa.ChunkedArray:
    """Normalize a string array; nulls stay null. See the module docstring for the modes.

    ``collapse=False`` leaves whitespace runs alone (the word shingler splits on them itself).
    """
    values = _as_string(values)
    if mode == "none":
        return values
    if mode not in NORMALIZATIONS:
        raise ConfigError(f"normalize must be one of {', '.join(NORMALIZATIONS)}, got {mode!r}")
    out = pc.utf8_lower(nfc(values))
    if mode == "simplify":
        out = pc.replace_substring_regex(out, _PUNCT_OR_SYMBOL, " ")
        out = pc.replace_substring_regex(out, _DIGIT, "0")
    return collapse_whitespace(out) if collapse else out


POLY_BASE = 0x9E3779B97F4A7C15  # odd, so it is invertible mod 2**64
_MASK64 = (1 << 64) - 1
_POLY_INV = pow(POLY_BASE, -1, 1 << 64)
_FMIX_C1 = np.uint64(0xFF51AFD7ED558CCD)
_FMIX_C2 = np.uint64(0xC4CEB9FE1A85EC53)
_S33 = np.uint64(33)


def poly_hash_bytes(data: bytes) -> int:
    """Reference (pure Python) form of the span hash: ``Σ b_j · P^(n−1−j) mod 2⁶⁴``.

    >>> poly_hash_bytes(b"ab") == (ord("a") * POLY_BASE + ord("b")) % 2**64
    True
    """
    h = 0
    for byte in data:
        h = (h * POLY_BASE + byte) & _MASK64
    return h


def fmix64(values: np.ndarray) -> np.ndarray:
    """MurmurHash3's 64-bit finalizer, element-wise on a uint64 array (returns a new array)."""
    h = values ^ (values >> _S33)
    h *= _FMIX_C1
    h ^= h >> _S33
    h *= _FMIX_C2
    h ^= h >> _S33
    return h


class _Powers:
    """Growing caches of P^j and Q^j (mod 2⁶⁴) so batches reuse them."""

    def __init__(self) -> None:
        self.p = np.ones(1, dtype=np.uint64)
        self.q = np.ones(1, dtype=np.uint64)

    def ensure(self, n: int) -> None:
        if len(self.p) >= n:
            return
        size = max(n, 2 * len(self.p))
        with np.errstate(over="ignore"):
            p = np.full(size, POLY_BASE, dtype=np.uint64)
            p[0] = 1
            q = np.full(size, _POLY_INV, dtype=np.uint64)
            q[0] = 1
            self.p = np.cumprod(p, dtype=np.uint64)
            self.q = np.cumprod(q, dtype=np.uint64)


_POWERS = _Powers()


def base_powers(n: int) -> np.ndarray:
    """P^0 … P^(n-1) (mod 2⁶⁴) of the polynomial hash, from the shared growing cache: what a caller needs to
    combine span hashes (``H(a + b) = H(a)·P^|b| + H(b)``)."""
    _POWERS.ensure(n)
    return _POWERS.p[:n]


def span_hashes(data: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """Polynomial hashes of the byte spans ``data[starts[i]:ends[i]]`` (non-empty spans), vectorized.

    >>> buf = np.frombuffer(b"hello world", dtype=np.uint8)
    >>> int(span_hashes(buf, np.array([6]), np.array([11]))[0]) == poly_hash_bytes(b"world")
    True
    """
    n = len(data)
    _POWERS.ensure(n + 1)
    prefix = np.empty(n + 1, dtype=np.uint64)
    prefix[0] = 0
    weighted = data.astype(np.uint64)
    weighted *= _POWERS.q[:n]
    np.cumsum(weighted, out=prefix[1:])
    out = prefix[ends] - prefix[starts]
    out *= _POWERS.p[ends - 1]
    return out


def string_buffers(values: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """(bytes as uint8, offsets as int64 rebased to 0) of a string array without copying the bytes."""
    if pa.types.is_string(values.type):
        values = values.cast(pa.large_string())
    n = len(values)
    buffers = values.buffers()
    offsets = np.frombuffer(buffers[1], dtype=np.int64)[values.offset : values.offset + n + 1]
    if buffers[2] is None or n == 0:
        return np.zeros(0, dtype=np.uint8), np.zeros(n + 1, dtype=np.int64)
    data = np.frombuffer(buffers[2], dtype=np.uint8)[offsets[0] : offsets[-1]]
    return data, offsets - offsets[0]


def xxh3_128_array(values: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """xxh3-128 digests of every string, as an ``(n, 16)`` uint8 array (big-endian canonical digests).

    Nulls hash as the empty string; callers mask them with the validity bitmap.

    >>> d = xxh3_128_array(pa.array(["a", "b", "a"]))
    >>> bytes(d[0]) == xxhash.xxh3_128_digest(b"a"), bool((d[0] == d[2]).all()), bool((d[0] == d[1]).all())
    (True, True, False)
    """
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks() if values.num_chunks != 1 else values.chunk(0)
    data, offsets = string_buffers(values)
    view = memoryview(data)
    digest = xxhash.xxh3_128_digest
    bounds = offsets.tolist()
    joined = b"".join([digest(view[s:e]) for s, e in zip(bounds[:-1], bounds[1:])])
    return np.frombuffer(joined, dtype=np.uint8).reshape(len(values), 16)


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
