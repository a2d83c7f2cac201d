"""Exact substring dedup: repeated spans of at least ``min_bytes`` removed across the corpus.

Per-document kernels of the exact substring dedup (``substring.py``): anchors, candidate windows, cuts.

Definitions (bytes of one document ``d`` of length ``n``; ``L`` = ``min_bytes``, ``w`` = anchor length):

- ``window(s)`` = ``d[s:s+L]`` for ``0 <= s <= n-L``; its hash is the polynomial hash mod the Mersenne prime
  2⁶¹−1 (base ``_BASE``) of its bytes; two different windows collide with probability about L/2⁶¹.
- ``anchor(s)``: the position of the smallest ``fmix64(gram hash)`` among the ``L-w+1`` w-grams inside
  ``window(s)``, the rightmost on ties (winnowing, Schleimer et al. 2003). It depends on the window's bytes
  only, so equal windows have anchors at the same offset with the same gram hash: a window can repeat only
  if its anchor's gram hash occurs at least twice in the corpus.
- ``anchor_hashes``: the gram hash of every distinct anchor position of every document (pass 1);
  ``candidates``: for windows whose anchor gram hash is in the sorted set ``repeated``, the window hash and
  start of every candidate window, and whether it is the first of its hash in its document (pass 2); ``cut``: remove the union of the windows
  that repeat inside their document or start at one of the given ``starts`` (earlier documents had them),
  snapped inward to UTF-8 character boundaries (pass 3).

The functions are plain Python over numpy arrays, compiled with numba on first use (``ZEPHYR_NO_NUMBA=1``
runs them as Python: the slow reference path the tests compare against on small inputs).

Exact substring dedup on the engine: remove every repeat, after its first occurrence in corpus order, of a
byte span of at least ``min_bytes`` that occurs more than once in the corpus (within a document or across).

Definition. Documents are taken in input order (the engine's row index), bytes in order within each. A window
is ``min_bytes`` consecutive bytes of one document; it *repeats* when an equal window starts at an earlier
position of the corpus. The bytes removed are the union of the repeating windows (a repeated span of any
length ≥ ``min_bytes`` is exactly the union of its windows), each run of it snapped inward to UTF-8 character
boundaries, so the text stays valid and a character straddling a run's edge is kept (or, with a
``tokenizer``, to token starts: no token is cut). Documents that lost bytes
and are left with fewer than ``min_doc_bytes`` are dropped (reason ``substring_short_doc``).

Bounded memory, no suffix array (each pass holds one batch; the shuffles spill by the memory budget):

1. anchors: winnowing picks, per window, one ``anchor_bytes``-gram determined by the window's bytes
   (``substring_kernels``); ``group_by(gram hash).count()`` keeps the gram hashes seen twice or more: the
   *repeated anchors* (held by the driver and every task: 8 bytes each). A window can only repeat if its
   anchor is repeated, which is what bounds the next pass's volume to the duplicated part of the corpus.
2. candidates: each document's first occurrence of every window with a repeated anchor, as (window hash,
   row, start); ``group_by(window hash)`` → (count, first row); joined back, every occurrence after the first
   row's is a repeat. The repeats, sorted by row, are written once (Parquet).
3. cut: each batch reads the repeats of its rows (a range read of the sorted files), adds the windows that
   repeat inside their own document, and rewrites the text.

Window identity is a 61-bit polynomial hash (mod 2⁶¹−1): two different windows collide with probability
about ``min_bytes``/2⁶¹ per pair. On small corpora the result equals a plain reference
(tests/dedup/test_substring.py, hypothesis). Stats: bytes removed per source, documents changed/dropped,
and the most repeated spans (text, count).
"""

from __future__ import annotations

import functools
import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from zephyr.dedup._compiled import LazyKernels
from zephyr.dedup._hashing import fmix64, string_buffers
from zephyr.dedup._rows import Jobs, has_column, sums_per_source
from zephyr.dedup.config import SubstringConfig

from zephyr import counters, job_stats
from zephyr.io.parquet import parquet_rows

if TYPE_CHECKING:
    from zephyr.dataset import Dataset


_BASE = np.uint64(1_000_003)
_M61 = np.uint64((1 << 61) - 1)
_MASK30 = np.uint64((1 << 30) - 1)
_MASK31 = np.uint64((1 << 31) - 1)
_kernels = LazyKernels(globals())  # the functions are looked up when first compiled
_kernels.kernel(fmix64)  # the anchors' order: MurmurHash3's finalizer, compiled here as a scalar kernel


@_kernels.kernel
def _mulmod(a, b):
    """a·b mod 2⁶¹−1 for a, b < 2⁶¹, in 64-bit halves (no 128-bit integers in numba)."""
    au = a >> np.uint64(31)
    ad = a & _MASK31
    bu = b >> np.uint64(31)
    bd = b & _MASK31
    mid = ad * bu + au * bd
    res = ((au * bu) << np.uint64(1)) + (mid >> np.uint64(30)) + ((mid & _MASK30) << np.uint64(31)) + ad * bd
    res = (res & _M61) + (res >> np.uint64(61))
    res = (res & _M61) + (res >> np.uint64(61))
    return res - _M61 if res >= _M61 else res


@_kernels.kernel
def _prefix(data, lo, hi, prefix):
    """prefix[i] = hash of data[lo:lo+i] (mod 2⁶¹−1; byte b counts as b+1 so zero bytes matter)."""
    h = np.uint64(0)
    prefix[0] = h
    for i in range(hi - lo):
        h = _mulmod(h, _BASE) + np.uint64(data[lo + i]) + np.uint64(1)
        if h >= _M61:
            h -= _M61
        prefix[i + 1] = h


@_kernels.kernel
def _pow(n):
    r = np.uint64(1)
    for _ in range(n):
        r = _mulmod(r, _BASE)
    return r


@_kernels.kernel
def _span(prefix, s, n, pw):
    """Hash of the n bytes at s, from the prefix array (pw = BASE^n)."""
    h = prefix[s + n] + _M61 - _mulmod(prefix[s], pw)
    return h - _M61 if h >= _M61 else h


@_kernels.kernel
def _anchor_positions(prefix, length, L, w, pw_w, gram, key, anchor):
    """gram[j] (gram hash at j), and anchor[s] for every window start s (sliding minimum, rightmost)."""
    grams = length - w + 1
    for j in range(grams):
        gram[j] = _span(prefix, j, w, pw_w)
        key[j] = fmix64(gram[j])
    span = L - w + 1
    dq = np.empty(grams, dtype=np.int64)
    head = 0
    tail = 0
    for j in range(grams):
        while tail > head and key[dq[tail - 1]] >= key[j]:  # >=: the rightmost minimum survives
            tail -= 1
        dq[tail] = j
        tail += 1
        s = j - span + 1
        if s >= 0:
            while dq[head] < s:
                head += 1
            anchor[s] = dq[head]


@_kernels.kernel
def _grow(arr, need):
    if need <= len(arr):
        return arr
    out = np.empty(max(need, 2 * len(arr) + 16), dtype=arr.dtype)
    out[: len(arr)] = arr
    return out


@_kernels.kernel
def _document_anchors(data, lo, hi, L, w, pw_w):
    """(prefix hashes, gram hashes, anchor of every window start) of the document ``data[lo:hi]`` (at least
    ``L`` bytes; ``pw_w`` = BASE^w): what passes 1 and 2 both derive from a document."""
    n = hi - lo
    prefix = np.empty(n + 1, dtype=np.uint64)
    _prefix(data, lo, hi, prefix)
    gram = np.empty(n - w + 1, dtype=np.uint64)
    key = np.empty(n - w + 1, dtype=np.uint64)
    anchor = np.empty(n - L + 1, dtype=np.int64)
    _anchor_positions(prefix, n, L, w, pw_w, gram, key, anchor)
    return prefix, gram, anchor


@_kernels.kernel
def _anchors(data, offsets, L, w):
    out = np.empty(1024, dtype=np.uint64)
    count = 0
    pw_w = _pow(w)
    for d in range(len(offsets) - 1):
        lo, hi = offsets[d], offsets[d + 1]
        n = hi - lo
        if n < L:
            continue
        _, gram, anchor = _document_anchors(data, lo, hi, L, w, pw_w)
        last = -1
        for s in range(n - L + 1):
            a = anchor[s]
            if a != last:  # anchors only move right as s grows: distinct positions are the changes
                out = _grow(out, count + 1)
                out[count] = gram[a]
                count += 1
                last = a
    return out[:count]


@_kernels.kernel
def _candidates(data, offsets, L, w, repeated):
    """(window hash, document, start, first in its document) of every candidate window."""
    hashes = np.empty(1024, dtype=np.uint64)
    firsts = np.empty(1024, dtype=np.bool_)
    docs = np.empty(1024, dtype=np.int64)
    starts = np.empty(1024, dtype=np.int64)
    count = 0
    pw_w = _pow(w)
    pw_l = _pow(L)
    for d in range(len(offsets) - 1):
        lo, hi = offsets[d], offsets[d + 1]
        n = hi - lo
        if n < L:
            continue
        prefix, gram, anchor = _document_anchors(data, lo, hi, L, w, pw_w)
        wins = np.empty(n - L + 1, dtype=np.uint64)
        pos = np.empty(n - L + 1, dtype=np.int64)
        m = 0
        for s in range(n - L + 1):
            g = gram[anchor[s]]
            i = np.searchsorted(repeated, g)
            if i < len(repeated) and repeated[i] == g:
                wins[m] = _span(prefix, s, L, pw_l)
                pos[m] = s
                m += 1
        if m == 0:
            continue
        order = np.argsort(wins[:m], kind="mergesort")  # stable: starts stay increasing within a hash
        for k in range(m):
            i = order[k]
            hashes = _grow(hashes, count + 1)
            docs = _grow(docs, count + 1)
            starts = _grow(starts, count + 1)
            firsts = _grow(firsts, count + 1)
            hashes[count] = wins[i]
            docs[count] = d
            starts[count] = pos[i]
            firsts[count] = k == 0 or wins[order[k - 1]] != wins[i]
            count += 1
    return hashes[:count], docs[:count], starts[:count], firsts[:count]


@_kernels.kernel
def _cut(
    data, offsets, L, removed_docs, removed_starts, bounds, bound_offsets, out, out_offsets, removed_bytes
):
    """Copy each document without the union of the windows at ``removed_starts`` (sorted by document),
    each run of the union snapped inward to UTF-8 character boundaries, or, when ``bound_offsets`` is not
    empty, to the sorted byte positions ``bounds[bound_offsets[d]:bound_offsets[d + 1]]`` (token starts)."""
    tokens = len(bound_offsets) > 0
    k = 0
    o = 0
    out_offsets[0] = 0
    for d in range(len(offsets) - 1):
        lo, hi = offsets[d], offsets[d + 1]
        n = hi - lo
        cover = np.zeros(n + 1, dtype=np.int32)
        while k < len(removed_docs) and removed_docs[k] == d:
            s = removed_starts[k]
            cover[s] += 1
            cover[min(s + L, n)] -= 1
            k += 1
        depth = 0
        i = 0
        while i < n:
            depth += cover[i]
            if depth <= 0:
                out[o] = data[lo + i]
                o += 1
                i += 1
                continue
            a = i  # a covered run [a, b)
            i += 1
            while i < n:
                depth += cover[i]
                if depth <= 0:
                    break
                i += 1
            b = i
            a2 = a
            b2 = b
            if tokens:  # the first token start at or after a, the last at or before b (or the end)
                own = bounds[bound_offsets[d] : bound_offsets[d + 1]]
                j = np.searchsorted(own, a)
                a2 = own[j] if j < len(own) else n
                if b < n:
                    j = np.searchsorted(own, b, side="right") - 1
                    b2 = own[j] if j >= 0 else 0
                if b2 < a2:
                    b2 = a2
            else:
                while a2 < b and (data[lo + a2] & 0xC0) == 0x80:  # a is inside a character: keep it whole
                    a2 += 1
                if b < n:
                    while b2 > a2 and (data[lo + b2] & 0xC0) == 0x80:  # the char at b began before b: keep it
                        b2 -= 1
            for j in range(a, a2):
                out[o] = data[lo + j]
                o += 1
            removed_bytes[d] += b2 - a2
            for j in range(b2, b):
                out[o] = data[lo + j]
                o += 1
            if i < n:  # byte i is uncovered (its cover is counted already)
                out[o] = data[lo + i]
                o += 1
                i += 1
        out_offsets[d + 1] = o


# -- entry points (numpy in, numpy out) ----------------------------------------------------------------
def anchor_hashes(data: np.ndarray, offsets: np.ndarray, min_bytes: int, anchor_bytes: int) -> np.ndarray:
    """uint64 gram hashes of every distinct anchor position (one per occurrence)."""
    with _kernels.compile():
        return _anchors(data, offsets.astype(np.int64), min_bytes, anchor_bytes)


def candidates(
    data: np.ndarray, offsets: np.ndarray, min_bytes: int, anchor_bytes: int, repeated: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(window hash, document index, start, first in its document) of every window whose anchor is in
    ``repeated``; the windows that are not first repeat an earlier window of their own document."""
    with _kernels.compile():
        return _candidates(data, offsets.astype(np.int64), min_bytes, anchor_bytes, repeated)


def cut(
    data: np.ndarray,
    offsets: np.ndarray,
    min_bytes: int,
    docs: np.ndarray,
    starts: np.ndarray,
    token_starts: list[np.ndarray] | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(bytes, offsets, removed bytes per document) after removing the windows (docs, starts); runs snap to
    UTF-8 characters, or to ``token_starts`` (sorted byte positions per document) when given."""
    kernels = _kernels.compile()
    order = np.lexsort((starts, docs))
    docs, starts = docs[order].astype(np.int64), starts[order].astype(np.int64)
    offsets = offsets.astype(np.int64)
    n_docs = len(offsets) - 1
    out = np.empty(len(data), dtype=np.uint8)
    out_offsets = np.empty(n_docs + 1, dtype=np.int64)
    removed = np.zeros(n_docs, dtype=np.int64)
    per_doc = [np.asarray(t, np.int64) for t in token_starts or []]
    bounds = np.concatenate([np.zeros(0, np.int64), *per_doc])
    bound_offsets = np.zeros(0, np.int64)  # empty: runs snap to UTF-8 characters
    if token_starts is not None:
        bound_offsets = np.concatenate(([0], np.cumsum([len(t) for t in per_doc]))).astype(np.int64)
    with kernels:
        _cut(data, offsets, min_bytes, docs, starts, bounds, bound_offsets, out, out_offsets, removed)
    return out[: out_offsets[-1]], out_offsets, removed


logger = logging.getLogger(__name__)

ROW = "__substring_row"
SHORT_DOC = "substring_short_doc"
_TOP_CANDIDATES = 200  # windows looked at for the report's top spans (neighbours merge into one span)


def _texts(table: pa.Table, column: str) -> tuple[np.ndarray, np.ndarray, pa.Array] | None:
    """(bytes, offsets, the texts as one ``large_string`` array) of the text column; None for an empty input
    file without columns (``_rows.has_column``)."""
    if not has_column(table, column, "text"):
        return None
    texts = table.column(column).combine_chunks().cast(pa.large_string())
    if texts.offset:  # a slice: give it buffers of its own, so its validity bitmap starts at bit 0
        texts = pa.concat_arrays([texts])
    return *string_buffers(texts), texts


def _batch_anchors(cfg: SubstringConfig, table: pa.Table) -> pa.Table:
    found = _texts(table, cfg.text_column)
    hashes = anchor_hashes(*found[:2], cfg.min_bytes, cfg.anchor) if found else np.zeros(0, np.uint64)
    return pa.table({"h": pa.array(hashes.view(np.int64))})


def _batch_candidates(cfg: SubstringConfig, repeated: np.ndarray, table: pa.Table) -> pa.Table:
    found = _texts(table, cfg.text_column)
    if found is None:
        return pa.table({k: pa.array([], pa.int64()) for k in ("wh", "row", "s")})
    wh, docs, starts, first = candidates(*found[:2], cfg.min_bytes, cfg.anchor, repeated)
    wh, docs, starts = wh[first], docs[first], starts[first]  # one per document and window is enough
    rows = np.asarray(table.column(ROW), dtype=np.int64)[docs]
    return pa.table({"wh": pa.array(wh.view(np.int64)), "row": pa.array(rows), "s": pa.array(starts)})


@dataclass(frozen=True)
class _Cut:
    """The final pass: remove local and global repeats from each document of a batch."""

    config: SubstringConfig
    repeated: np.ndarray = field(repr=False)
    repeat_files: tuple[str, ...] = ()
    group_hashes: np.ndarray | None = field(default=None, repr=False)
    """Broadcast path: the sorted hashes of the windows in two or more documents, and ``group_first``, the
    first row holding each; a document's first occurrence of such a window repeats it when its row is later."""
    group_first: np.ndarray | None = field(default=None, repr=False)

    def _broadcast(self, wh, docs, starts, rows) -> tuple[np.ndarray, np.ndarray]:
        """Of the documents' first occurrences (wh, docs, starts), those a document earlier than this one has."""
        at = np.minimum(np.searchsorted(self.group_hashes, wh), len(self.group_hashes) - 1)
        hit = (self.group_hashes[at] == wh) & (rows[docs] > self.group_first[at])
        return docs[hit], starts[hit]

    def _global(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(document index in the batch, start) of the earlier-document repeats of these rows."""
        if not self.repeat_files or len(rows) == 0:
            return np.zeros(0, np.int64), np.zeros(0, np.int64)
        import pyarrow.dataset as pads

        dataset = pads.dataset(list(self.repeat_files), format="parquet")
        lo, hi = int(rows.min()), int(rows.max())
        found = dataset.to_table(filter=(pads.field("row") >= lo) & (pads.field("row") <= hi))
        order = np.argsort(rows, kind="stable")
        found_rows = np.asarray(found["row"], dtype=np.int64)
        at = np.minimum(np.searchsorted(rows[order], found_rows), len(rows) - 1)
        hit = rows[order][at] == found_rows
        return order[at[hit]], np.asarray(found["s"], dtype=np.int64)[hit]

    def __call__(self, table: pa.Table) -> Any:

        from zephyr.ops import BatchOutput

        cfg, found = self.config, _texts(table, self.config.text_column)
        if found is None:
            return table.drop_columns([c for c in (ROW,) if c in table.column_names])
        data, offsets, texts = found
        rows = np.asarray(table.column(ROW), dtype=np.int64)
        wh, cand_docs, cand_starts, first = candidates(
            data, offsets, cfg.min_bytes, cfg.anchor, self.repeated
        )
        local_docs, local_starts = cand_docs[~first], cand_starts[~first]
        if self.group_hashes is not None and len(self.group_hashes):
            global_docs, global_starts = self._broadcast(
                wh[first], cand_docs[first], cand_starts[first], rows
            )
        else:
            global_docs, global_starts = self._global(rows)
        docs = np.concatenate([local_docs, global_docs])
        starts = np.concatenate([local_starts, global_starts])
        bounds = token_starts(texts, cfg.tokenizer) if cfg.tokenizer else None
        out, out_offsets, removed = cut(data, offsets, cfg.min_bytes, docs, starts, bounds)
        new_text = pa.LargeStringArray.from_buffers(
            len(texts), pa.py_buffer(out_offsets), pa.py_buffer(out), texts.buffers()[0], texts.null_count
        )
        table = table.set_column(
            table.column_names.index(cfg.text_column),
            cfg.text_column,
            new_text.cast(table.schema.field(cfg.text_column).type),
        ).drop_columns([ROW])
        counters.increment("substring/bytes_removed", int(removed.sum()))
        counters.increment("substring/docs_changed", int((removed > 0).sum()))
        sums = sums_per_source(table, cfg.source_column, "null", removed) if removed.any() else {}
        for name, (n,) in sums.items():
            if n:
                counters.increment(f"substring/bytes_removed/source={name}", n)
        left = np.diff(out_offsets)
        short = (removed > 0) & (left < cfg.min_doc_bytes)
        if not short.any():
            return table
        return BatchOutput(kept=table.filter(pa.array(~short)), dropped={SHORT_DOC: int(short.sum())})


@functools.lru_cache(maxsize=4)
def _load_tokenizer(path: str):
    from tokenizers import Tokenizer

    return Tokenizer.from_file(path)


def token_starts(texts: pa.Array, tokenizer: str) -> list[np.ndarray]:
    """The byte position where each token starts, per text (tokenizers report character offsets)."""
    values = texts.to_pylist()
    encodings = _load_tokenizer(tokenizer).encode_batch([v or "" for v in values], add_special_tokens=False)
    out = []
    for text, enc in zip(values, encodings):
        text = text or ""
        points = np.frombuffer(text.encode("utf-32-le"), dtype=np.uint32)
        widths = 1 + (points >= 0x80) + (points >= 0x800) + (points >= 0x10000)
        byte_at = np.concatenate(([0], np.cumsum(widths))).astype(np.int64)
        chars = np.array([s for s, _ in enc.offsets], dtype=np.int64)
        out.append(np.unique(byte_at[np.minimum(chars, len(points))]))
    return out


def substring_dedup_dataset(
    ds: Dataset,
    config: SubstringConfig,
    *,
    execution: dict[str, Any] | None = None,
    scratch: str = "",
    stats: dict[str, Any] | None = None,
    shared_window_rows: int | None = None,
    jobs: Jobs | None = None,
) -> Dataset:
    """Run passes 1 and 2 (module docstring) eagerly with ``execution``, writing the repeats under
    ``scratch``; return the lazy plan of pass 3 (the deduplicated rows, input order kept). ``stats`` receives
    the pass sizes and the top repeated spans. The windows found in two or more documents are looked up in
    memory by every task when there are at most ``shared_window_rows`` of them (default: the budget's
    ``shared_window_rows``, 48 bytes each within a quarter of it), else found by a join and a sort.
    ``jobs`` (``_rows.Jobs``) replaces ``execution``, ``scratch`` and ``stats``: a listing (``zephyr explain
    dedup substring``) plans every branch, each job over the plans before it and with empty arrays for what
    they would have found."""
    jobs = jobs or Jobs(execution, {} if stats is None else stats, scratch=scratch)
    limit = jobs.budget.shared_window_rows if shared_window_rows is None else shared_window_rows
    info, explain = jobs.info, jobs.explain
    rows, repeated = ds.with_row_index(ROW), np.zeros(0, np.uint64)
    anchors = rows.map_batches(functools.partial(_batch_anchors, config), name="dedup.substring.anchors")
    found = jobs(
        f"job 1: repeated anchors ({config.anchor}-byte winnowing grams seen twice), to the driver",
        anchors.group_by("h")
        .count()
        .map_batches(
            lambda t: t.filter(pc.greater_equal(t["count"], 2)).select(["h"]), name="dedup.substring.repeated"
        ),
        "to_arrow",
    )
    if not explain and found.num_rows:
        repeated = np.sort(np.asarray(found["h"], dtype=np.int64).view(np.uint64))
    logger.info(
        "substring dedup: %d repeated anchors (%d bytes held by every task)", len(repeated), repeated.nbytes
    )
    info.update(repeated_anchors=len(repeated), min_bytes=config.min_bytes, anchor_bytes=config.anchor)
    jobs(
        "no repeated anchor: jobs 2-5 are skipped; else every task holds the repeated anchors (8 bytes each, "
        "outside the budget's shares)",
    )
    repeat_files, broadcast, top = (), None, []
    if explain or len(repeated):
        cand = jobs(
            f"job 2: candidate windows ({config.min_bytes} bytes with a repeated anchor), materialized",
            rows.map_batches(
                functools.partial(_batch_candidates, config, repeated), name="dedup.substring.candidates"
            ),
            folder="candidates",
        )
        groups = jobs(
            "job 3: windows in two or more documents (count, first row), materialized; planned over job 2's "
            "plan, the run reads its files",
            cand.group_by("wh")
            .agg(n=("row", "count"), r0=("row", "min"))
            .map_batches(lambda t: t.filter(pc.greater_equal(t["n"], 2)), name="dedup.substring.groups"),
            folder="groups",
        )
        jobs(
            f"shared windows ≤ shared_window_rows {limit:,} (48 bytes a window in B/4): the driver reads them "
            "and every task looks them up in memory (no join, no sort); more: job 4",
        )
        shared = 1 if explain else parquet_rows(groups.files)
        if not explain:
            info.update(candidate_windows=parquet_rows(cand.files), shared_windows=shared)
            info["broadcast"] = 0 < shared <= limit
            top = _top_windows(groups.files)
        if info.get("broadcast"):  # every task looks the windows up in memory: no join, no sort
            table = pa.concat_tables(pq.read_table(f, columns=["wh", "r0"]) for f in groups.files)
            hashes = np.asarray(table["wh"], dtype=np.int64).view(np.uint64)
            order = np.argsort(hashes, kind="stable")
            broadcast = hashes[order], np.asarray(table["r0"], dtype=np.int64)[order]
        elif shared:  # too many to hold: the repeats are found by a join and read back by row range
            later = cand.join(groups, on="wh").map_batches(  # the occurrences after the first row's
                lambda t: t.filter(pc.greater(t["row"], t["r0"])).select(["row", "s"]),
                name="dedup.substring.repeats",
            )
            written = jobs(
                "job 4: the repeats by the join path, sorted by row, written once (over jobs 2-3's plans)",
                later.sort("row", "s"),
                "write_parquet",
                folder="repeats",
            )
            if not explain:
                logger.info("substring dedup: %d shared windows > the limit %d: join path", shared, limit)
                repeat_files = tuple(sorted(written.files))
                info["repeat_windows"] = parquet_rows(repeat_files)
    if explain or top:
        keys, text = pa.array(sorted({r0 for _, _, r0 in top}), pa.int64()), config.text_column
        docs = jobs(
            "job 5: the most repeated windows' first documents, to the driver (top spans in the stats)",
            rows.map_batches(
                lambda t: t.filter(pc.is_in(t[ROW], keys)).select([ROW, text]),
                name="dedup.substring.top_docs",
            ),
            "to_arrow",
        )
        info["top_spans"] = [] if explain else _top_spans(top, docs, config, repeated)
    info.setdefault("top_spans", [])
    cut = _Cut(config, repeated, repeat_files, *(broadcast or (None, None)))
    return jobs.output(
        "job 6: the output, each batch's repeats cut", rows.map_batches(cut, name="dedup.substring.cut")
    )


def removed_bytes(stages: list[dict[str, Any]]) -> dict[str, Any]:
    """What a run of ``substring_dedup_dataset`` removed, from its write's ``stages``: ``bytes_removed``,
    ``bytes_removed_per_source`` (by ``config.source_column``), ``docs_changed`` (counters) and
    ``docs_dropped_short`` (rows dropped as ``substring_short_doc``)."""
    counters, prefix = job_stats.counter_totals(stages), "substring/bytes_removed/source="
    dropped = (op.get("dropped_by_reason", {}).get(SHORT_DOC, 0) for st in stages for op in st["ops"])
    return {
        "bytes_removed": counters.get("substring/bytes_removed", 0),
        "bytes_removed_per_source": {
            k[len(prefix) :]: v for k, v in counters.items() if k.startswith(prefix)
        },
        "docs_changed": counters.get("substring/docs_changed", 0),
        "docs_dropped_short": sum(dropped),
    }


def _top_windows(files: list[str]) -> list[tuple[int, int, int]]:
    """The ``_TOP_CANDIDATES`` windows in the most documents, as (count, window hash, first row): the largest
    of each file of pass 2's groups, then of those."""
    order = [("n", "descending"), ("wh", "descending"), ("r0", "descending")]
    tables = (pq.read_table(path, columns=["wh", "n", "r0"]) for path in files)
    heads = [t.take(pc.select_k_unstable(t, _TOP_CANDIDATES, order)) for t in tables]
    if not heads:
        return []
    best = pa.concat_tables(heads)
    best = best.take(pc.select_k_unstable(best, _TOP_CANDIDATES, order))
    return list(zip(best["n"].to_pylist(), best["wh"].to_pylist(), best["r0"].to_pylist()))


def _top_spans(
    top: list[tuple[int, int, int]], docs: pa.Table, config: SubstringConfig, repeated: np.ndarray
) -> list[dict]:
    """The most repeated spans: the ``top`` windows located in their first document (``docs``: ROW, text),
    the first of their candidate windows there with their hash, and merged with overlapping neighbours
    there, as (text, documents, bytes)."""
    data, offsets, _ = _texts(docs, config.text_column)
    wh, doc, starts, first = candidates(data, offsets, config.min_bytes, config.anchor, repeated)
    rows = np.asarray(docs[ROW], dtype=np.int64)
    located: dict[int, list[tuple[int, int]]] = {}
    for n, h, r0 in top:
        hits = np.flatnonzero(first & (wh == np.uint64(h & 0xFFFFFFFFFFFFFFFF)) & (rows[doc] == r0))
        if len(hits):
            located.setdefault(r0, []).append((int(starts[hits[0]]), n))
    out = []
    for r0, items in located.items():  # overlapping windows of one document are one span
        d = int(np.flatnonzero(rows == r0)[0])
        raw, spans = data[offsets[d] : offsets[d + 1]].tobytes(), []  # [start, end, documents]
        for start, n in sorted(items):
            if spans and start <= spans[-1][1]:
                spans[-1][1:] = max(spans[-1][1], start + config.min_bytes), max(spans[-1][2], n)
            else:
                spans.append([start, start + config.min_bytes, n])
        out += [
            {"text": raw[a:b].decode("utf-8", errors="replace"), "documents": int(c), "bytes": b - a}
            for a, b, c in spans
        ]
    out.sort(key=lambda x: (-x["documents"], -x["bytes"], x["text"]))
    return out[: config.top_spans]
