"""Text normalization for dedup, vectorized with Arrow compute and polars (no per-row Python except NFC of non-ASCII rows).

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
"""

from __future__ import annotations

import unicodedata

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from zephyr.dedup import compiled
from zephyr.dedup.config import NORMALIZATIONS, Normalization

from zephyr.errors import ConfigError

__all__ = ["Normalization", "NORMALIZATIONS", "normalize_text", "collapse_whitespace"]


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
    from zephyr.dedup.hashing import string_buffers

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
