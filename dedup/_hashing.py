"""Text → normalized text → 64/128-bit hashes and shingle-hash sets: the per-batch kernels every dedup method
starts from.

Text normalization, vectorized with Arrow compute, polars and one compiled whitespace pass (no per-row Python
except NFC of non-ASCII rows).

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
document over the Arrow buffer (``_compiled.word_shingles``/``char_shingles``); nothing is copied per
shingle.

Output layout (``Shingles``): ``hashes`` (uint64, all docs concatenated, in text order, duplicates kept) and
``offsets`` (int64, ``len(docs) + 1``): document ``i`` owns ``hashes[offsets[i]:offsets[i+1]]``.

>>> import pyarrow as pa
>>> s = shingle_hashes(pa.array(["a b c d", "x"]), kind="word", n=3)
>>> s.offsets.tolist()
[0, 2, 3]
>>> [int(h) for h in s.hashes] == [poly_hash_bytes(t) for t in (b"a b c", b"b c d", b"x")]
True
"""

from __future__ import annotations

import unicodedata
from dataclasses import dataclass
from typing import Literal, get_args

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import xxhash
import zephyr.dedup._compiled as compiled
from zephyr.dedup.config import Normalization

from zephyr.errors import ConfigError

_PUNCT_OR_SYMBOL = r"[\p{P}\p{S}]+"
_DIGIT = r"\p{Nd}"


def as_array(values: pa.Array | pa.ChunkedArray) -> pa.Array:
    """A column as one array (a column of one chunk: that chunk, not a copy)."""
    if isinstance(values, pa.ChunkedArray):
        return values.combine_chunks() if values.num_chunks != 1 else values.chunk(0)
    return values


def _as_string(values: pa.Array | pa.ChunkedArray) -> pa.Array | pa.ChunkedArray:
    if pa.types.is_dictionary(values.type):  # dictionary-encoded text (a categorical): its values
        values = values.cast(values.type.value_type)
    if pa.types.is_string(values.type) or pa.types.is_large_string(values.type):
        return values
    if pa.types.is_string_view(values.type) or pa.types.is_null(values.type):
        return values.cast(pa.large_string())
    raise ConfigError(f"text column must be a string column, got type {values.type}")


def collapse_whitespace(values: pa.Array | pa.ChunkedArray) -> pa.Array | pa.ChunkedArray:
    """Every whitespace run (Python's ``str.isspace`` set) becomes one ASCII space; leading/trailing
    whitespace is removed. One compiled copy of the bytes (``_compiled.collapse_whitespace``; ~5× faster than
    polars' regex on the medium corpus), pinned against an RE2 regex and ``" ".join(s.split())`` in
    tests/dedup/test_kernels.py. Arrow's ``utf8_split_whitespace`` + ``binary_join`` would not do: it leaves a
    trailing U+3000 after other spaces as a token, so it is not ``str.split()``."""
    values = _as_string(values)
    if len(values) == 0:
        return values
    arr = as_array(values)
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
    values = as_array(values)
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
    if mode not in get_args(Normalization):  # the kernels are callable without a config
        raise ConfigError(f"normalize must be one of {', '.join(get_args(Normalization))}, got {mode!r}")
    if mode == "none":
        return values
    out = pc.utf8_lower(nfc(values))
    if mode == "simplify":
        out = pc.replace_substring_regex(out, _PUNCT_OR_SYMBOL, " ")
        out = pc.replace_substring_regex(out, _DIGIT, "0")
    return collapse_whitespace(out) if collapse else out


POLY_BASE = 0x9E3779B97F4A7C15  # odd, so it is invertible mod 2**64
_MASK64 = (1 << 64) - 1
_POLY_INV = pow(POLY_BASE, -1, 1 << 64)


def poly_hash_bytes(data: bytes) -> int:
    """Reference (pure Python) form of the span hash: ``Σ b_j · P^(n−1−j) mod 2⁶⁴``.

    >>> poly_hash_bytes(b"ab") == (ord("a") * POLY_BASE + ord("b")) % 2**64
    True
    """
    h = 0
    for byte in data:
        h = (h * POLY_BASE + byte) & _MASK64
    return h


_FMIX_C1 = np.uint64(0xFF51AFD7ED558CCD)
_FMIX_C2 = np.uint64(0xC4CEB9FE1A85EC53)
_S33 = np.uint64(33)


def fmix64(values: np.ndarray) -> np.ndarray:
    """MurmurHash3's 64-bit finalizer, element-wise on a uint64 array (returns a new array)."""
    h = values ^ (values >> _S33)
    h *= _FMIX_C1
    h ^= h >> _S33
    h *= _FMIX_C2
    h ^= h >> _S33
    return h


def span_hashes(data: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """Polynomial hashes of the byte spans ``data[starts[i]:ends[i]]`` (non-empty spans), vectorized.

    >>> buf = np.frombuffer(b"hello world", dtype=np.uint8)
    >>> int(span_hashes(buf, np.array([6]), np.array([11]))[0]) == poly_hash_bytes(b"world")
    True
    """
    n = len(data)
    p, q = np.full(n + 1, POLY_BASE, dtype=np.uint64), np.full(n + 1, _POLY_INV, dtype=np.uint64)
    p[0] = q[0] = 1
    with np.errstate(over="ignore"):  # P^j and P^-j mod 2^64
        p, q = np.cumprod(p, dtype=np.uint64), np.cumprod(q, dtype=np.uint64)
    prefix = np.zeros(n + 1, dtype=np.uint64)
    np.cumsum(data.astype(np.uint64) * q[:n], out=prefix[1:])
    return (prefix[ends] - prefix[starts]) * p[ends - 1]


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


def hash_groups(hashes: np.ndarray, *keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(order, firsts): the rows sorted by their ``(n, 2)`` uint64 hash, then by ``keys`` (``np.lexsort``'s
    order: the last key most significant), and for each row of ``order`` the first row of its hash there."""
    order = np.lexsort((*keys, hashes[:, 1], hashes[:, 0]))
    hs = hashes[order]
    starts = np.ones(len(order), dtype=bool)
    starts[1:] = (hs[1:] != hs[:-1]).any(axis=1)
    return order, order[np.flatnonzero(starts)][np.cumsum(starts) - 1]


def xxh3_128_array(values: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """xxh3-128 digests of every string, as an ``(n, 16)`` uint8 array (big-endian canonical digests).

    Nulls hash as the empty string; callers mask them with the validity bitmap.

    >>> d = xxh3_128_array(pa.array(["a", "b", "a"]))
    >>> bytes(d[0]) == xxhash.xxh3_128_digest(b"a"), bool((d[0] == d[2]).all()), bool((d[0] == d[1]).all())
    (True, True, False)
    """
    data, offsets = string_buffers(as_array(values))
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


def shingle_hashes(
    texts: pa.Array | pa.ChunkedArray, *, kind: ShingleKind = "word", n: int = 5, normalize: str = "default"
) -> Shingles:
    """Hash the shingles of every text; nulls and empty texts get no shingles. ``kind``, ``n`` and ``normalize``
    are a ``FuzzyDedupConfig``'s, checked there and again here, for a direct call."""
    if n < 1 or kind not in get_args(ShingleKind):
        raise ConfigError(f"shingles need kind 'word' or 'char' and n >= 1, got kind {kind!r}, n {n}")
    # words are not collapsed: the shingler splits on whitespace bytes itself
    values = as_array(normalize_text(texts, normalize, collapse=kind == "char")).cast(pa.large_string())
    if values.null_count:  # a null yields no shingle, whatever bytes its slot spans
        values = values.fill_null("")
    data, offsets = string_buffers(values)
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
        kernel = compiled.word_shingles if kind == "word" else compiled.char_shingles
        hashes, counts = kernel(chunk, offsets[lo : hi + 1] - byte_lo, n)
        hash_parts.append(hashes)
        offset_parts.append(np.cumsum(counts) + base)
        base += len(hashes)
        lo = hi
    hashes = np.concatenate(hash_parts) if hash_parts else np.zeros(0, dtype=np.uint64)
    return Shingles(hashes=hashes, offsets=np.concatenate(offset_parts))


def unique_sets(shingles: Shingles) -> Shingles:
    """The shingle *sets*: each document's hashes sorted and de-duplicated (for Jaccard)."""
    hashes, counts = compiled.sorted_sets(shingles.hashes, shingles.offsets)
    offsets = np.zeros(len(shingles) + 1, dtype=np.int64)
    np.cumsum(counts, out=offsets[1:])
    return Shingles(hashes=hashes, offsets=offsets)
