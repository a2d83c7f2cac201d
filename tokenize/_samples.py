"""The loader's samples: one token-shard set and its fixed samples for each packing mode (``TokenSource``), the
best-fit packing of documents into bins, the gather of planned samples into tensors, and the instance filter.

A *sample* is fixed per shard and numbered within the set (shard 0's samples first):

- ``"tokens"``: windows of ``seq_len + 1`` tokens starting every ``seq_len`` tokens of a shard; a shard of
  T tokens has ``(T - 1) // seq_len`` samples; windows cross document boundaries.
- ``"documents"``: each sample starts at a document start and holds whole consecutive documents while they
  fit in ``seq_len + 1`` tokens, then padding; a longer document is split into ``seq_len``-token chunks.
- ``"best-fit"``: bins of ``seq_len`` inputs filled by best-fit decreasing (below).

``locate`` maps sample numbers to what the gather reads: for the two contiguous modes one span
``(shard, token start, length)`` per sample; for ``"best-fit"`` the shard, the bin number and its fill (the
pieces come from ``bins.pieces``).

Best-fit packing (``pack_best_fit``) of documents into ``seq_len`` bins. Contract (``packing="best-fit"`` in ``zephyr.tokenize.loader``):

- Documents longer than ``seq_len`` are cut into ``seq_len``-token *pieces* (the last one shorter); the other
  documents are one piece each. Nothing is dropped: across the bins of a shard every token is an input
  exactly once.
- The pieces of each *window* (``window`` consecutive documents of one shard, the last window shorter) are
  packed into bins of ``seq_len`` tokens by best-fit decreasing: pieces by decreasing length (ties in stream
  order), each into the open bin with the least room that still holds it, else into a new bin. Memory and
  time stay bounded by the window, not the set; a window never crosses a shard, so a bin reads one file.
- The packing is a pure function of the document lengths, ``seq_len`` and ``window`` (no seed): a bin is a
  fixed sample, so the loader's order (a seeded permutation of the samples per epoch), exact resume and
  elastic resume work exactly as for ``"tokens"``.
- A bin's pieces are listed in stream order. Its inputs are the pieces back to back, then padding; the label
  of each input is its successor in the stream (as for ``"tokens"``: a cut piece's last token is labelled with
  the next piece's first token), -100 on padding and on a shard's last token. Positions restart at 0 at each
  piece (and at the padding), so document-masked attention never crosses pieces.

Why a hand-written loop: best-fit decreasing is sequential (each placement depends on the previous ones) and
no library on the loader's dependency list (numpy, torch, fsspec) packs bins; the PyPI bin-packing packages
(``binpacking``, ``prtpy``) keep per-item Python objects and scan all bins per item. Here the loop does O(1)
work per piece: open bins are kept in stacks by remaining room (an integer in ``[1, seq_len]``), and the
non-empty stacks are the set bits of one Python integer, so "the least room >= s" is one shift and one
lowest-set-bit. Pieces of exactly ``seq_len`` tokens fill a bin alone and skip the loop. Total: the sort,
O(n log n), plus O(n) constant-time steps (each bit operation touches ``seq_len / 64`` machine words).

Gathering (``Gatherer``) planned samples into ``[3, n, seq_len]`` int64 blocks (input_ids, labels, positions):
the hot path.

Contiguous packings (``"tokens"``, ``"documents"``): one slice copy per sample from the memory-mapped shard
into a buffer in the token dtype (a memcpy from the page cache), one widening cast per field, and the
positions from the block's *segments*: one ``searchsorted`` of the windows in the source's document starts
gives the documents inside each window; sorted on the flattened grid, the segment starts give the lengths by
differences, and the positions are one ``np.repeat`` and one subtraction. Segments are computed once per plan
block (4096 samples), so a batch only slices them.

Best-fit bins: the pieces of the batch's bins come from the set's ``BinIndex`` (vectorized); then two slice
copies per piece (inputs, and labels = the stream successors), one cast per field, and positions that restart
at every piece and at the padding (one ``np.repeat``). The slice loop beats a fancy-index gather here because
pieces are long (hundreds of tokens): per token it is a memcpy, not an index load.

No per-token Python anywhere; the output is one contiguous int64 array (in shared memory inside DataLoader
workers, see ``shared_empty``).

Instance filters: samples the loader keeps out of the loss, decided from their tokens at load time.

``RepetitionFilter`` flags a sample whose inputs hold a token pattern of period p (``min_period <= p <=
max_period``) repeated more than ``max_count`` times in a row, i.e. a run of ``x[i] == x[i + p]`` at least
``max_count * p`` long (k back-to-back copies of a p-token pattern give a run of ``(k - 1) * p``). The
defaults (periods 1–13, more than 32 repeats) are OLMo-core's. Padding never counts as a pattern.

What "dropped" means. A flagged sample keeps its slot in the order and every label of it becomes -100, so it
adds nothing to the loss. Removing the slot instead would make a rank's position depend on the tokens it read,
so ranks would drift apart and the loader state (a few integers, shared by every rank and valid for any world
size) could no longer say where each rank is; a masked slot keeps the order a pure function of (seed, epoch,
global index). The decision is a pure function of the sample's tokens, so it is the same on every run, rank
and resume. The loader counts flagged samples (``TokenLoader.filtered``).

Cost: per period, one comparison of the shifted inputs and a run test by doubling (``O(log run)`` boolean
ANDs), all on the ``[n, seq_len]`` block; no per-token Python.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
import torch
from zephyr.tokenize._storage import ShardStore

from zephyr.errors import ConfigError

DEFAULT_WINDOW = 1 << 16  # documents per best-fit window


def best_fit_decreasing(sizes: np.ndarray, capacity: int) -> tuple[np.ndarray, int]:
    """Bin of each item (``sizes`` all in ``[1, capacity]``) under best-fit decreasing; and the bin count.

    Bins are numbered in the order they are opened. Deterministic: ties in size keep the input order, and
    among bins with the same room the most recently filled one is taken (a stack).
    """
    sizes = np.asarray(sizes, dtype=np.int64)
    n = len(sizes)
    out = np.empty(n, dtype=np.int64)
    if n == 0:
        return out, 0
    if sizes.min() < 1 or sizes.max() > capacity:
        raise ValueError(f"item sizes must lie in [1, {capacity}], got {sizes.min()}..{sizes.max()}")
    order = np.argsort(-sizes, kind="stable")
    full = int(np.count_nonzero(sizes == capacity))  # first in the order: a bin each, no search
    out[order[:full]] = np.arange(full)
    count = full
    stacks: list[list[int]] = [[] for _ in range(capacity + 1)]  # open bins by remaining room
    rooms = 0  # bit r set <=> stacks[r] is not empty
    rest = order[full:].tolist()
    placed = []
    for s in sizes[order[full:]].tolist():
        fits = rooms >> s
        if fits:
            room = (fits & -fits).bit_length() - 1 + s  # the least room that holds s
            stack = stacks[room]
            b = stack.pop()
            if not stack:
                rooms ^= 1 << room
        else:
            b, room = count, capacity
            count += 1
        left = room - s
        if left:
            stack = stacks[left]
            if not stack:
                rooms |= 1 << left
            stack.append(b)
        placed.append(b)
    out[rest] = placed
    return out, count


def cut_pieces(lengths: np.ndarray, capacity: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Cut documents into pieces of at most ``capacity`` tokens: (document, offset in it, length) per piece.

    A document of length l gives ``ceil(l / capacity)`` pieces, all full but the last; empty documents none.
    """
    lengths = np.asarray(lengths, dtype=np.int64)
    count = -(-lengths // capacity)
    doc = np.repeat(np.arange(len(lengths), dtype=np.int64), count)
    first = np.cumsum(count) - count  # index of each document's first piece
    k = np.arange(len(doc), dtype=np.int64) - first[doc]
    offset = k * capacity
    return doc, offset, np.minimum(capacity, lengths[doc] - offset)


def document_spans(offsets: np.ndarray, seq_len: int) -> tuple[np.ndarray, np.ndarray]:
    """``packing="documents"``: (start, length) of each sample of a shard with document ``offsets``.

    Greedy: a sample starts at a document start and takes whole documents while they fit in ``seq_len + 1``
    tokens; a longer document is cut into chunks of ``seq_len + 1`` that overlap by one token (the next
    chunk starts at the last token of the previous one, which had no label there).
    """
    capacity = seq_len + 1
    starts: list[int] = []
    lengths: list[int] = []
    pos, end = 0, int(offsets[-1])
    while end - pos >= 2:  # a sample needs at least one input with a label
        limit = pos + capacity
        boundary = int(offsets[int(np.searchsorted(offsets, limit, side="right")) - 1])
        if boundary > pos:  # whole documents (or the tail of a split one) fit: stop at the last boundary
            stop, following = boundary, boundary
        else:  # the document runs past the sample: take a chunk; the next one starts at its last token
            stop, following = limit, limit - 1
        starts.append(pos)
        lengths.append(stop - pos)
        pos = following
    return np.asarray(starts, dtype=np.int64), np.asarray(lengths, dtype=np.int64)


@dataclass
class BinIndex:
    """Best-fit bins of one token set, in CSR form: bin b holds pieces ``ptr[b]:ptr[b+1]`` (never none).

    Per piece: ``start`` (its first token, shard-local), ``length`` and ``offset`` (where it begins inside
    its bin). Per bin: ``shard`` (its file) and ``fill`` (its tokens, <= seq_len). Bins are ordered by shard,
    so a shard's bins are a contiguous range (``shard_bins`` of them).
    """

    ptr: np.ndarray
    start: np.ndarray
    length: np.ndarray
    offset: np.ndarray
    shard: np.ndarray
    fill: np.ndarray
    shard_bins: np.ndarray

    def pieces(self, bins: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(row, piece) of every piece of ``bins`` (row = position in ``bins``), bins in order.

        Built with cumulative sums of unit steps rather than ``np.repeat``: a batch has a few dozen pieces,
        where every numpy call's fixed cost counts.
        """
        lo = self.ptr[bins]
        count = self.ptr[bins + 1] - lo
        ends = np.cumsum(count)
        step = np.ones(int(ends[-1]), dtype=np.int64)
        step[0] = lo[0]
        step[ends[:-1]] = lo[1:] - (lo[:-1] + count[:-1]) + 1  # jump to the next bin's first piece
        row = np.zeros(len(step), dtype=np.int64)
        row[ends[:-1]] = 1
        return np.cumsum(row), np.cumsum(step)


def pack_best_fit(
    doc_starts: np.ndarray, doc_base: np.ndarray, seq_len: int, *, window: int = DEFAULT_WINDOW
) -> BinIndex:
    """Pack every shard's documents, ``window`` documents at a time (see the module docstring).

    ``doc_starts`` are the set's document starts in stream coordinates followed by the total token count;
    ``doc_base[k]`` is the index of shard k's first document (and ``doc_base[-1]`` the document count).
    """
    if window < 1:
        raise ValueError(f"window must be >= 1 document, got {window}")
    ptrs, starts, lengths, offsets, shards, fills, per_shard = [], [], [], [], [], [], []
    bins_so_far = pieces_so_far = 0
    token_base = doc_starts[doc_base]  # each shard's first token in stream coordinates, + the total
    for k in range(len(doc_base) - 1):
        before_shard = bins_so_far
        for lo in range(int(doc_base[k]), int(doc_base[k + 1]), window):
            hi = min(lo + window, int(doc_base[k + 1]))
            docs = np.diff(doc_starts[lo : hi + 1])
            doc, offset, length = cut_pieces(docs, seq_len)
            bin_of, count = best_fit_decreasing(length, seq_len)
            order = np.lexsort((doc, bin_of))  # by bin, then stream order inside a bin
            bin_of, length, doc = bin_of[order], length[order], doc[order]
            ptr = np.searchsorted(bin_of, np.arange(count, dtype=np.int64))
            before = np.cumsum(length) - length
            starts.append(doc_starts[lo + doc] + offset[order] - token_base[k])
            lengths.append(length)
            offsets.append(before - np.repeat(before[ptr], np.diff(np.append(ptr, len(length)))))
            ptrs.append(ptr + pieces_so_far)
            fills.append(np.bincount(bin_of, weights=length, minlength=count).astype(np.int64))
            bins_so_far += count
            pieces_so_far += len(length)
        shards.append(np.full(bins_so_far - before_shard, k, dtype=np.int64))
        per_shard.append(bins_so_far - before_shard)
    empty = np.zeros(0, np.int64)
    return BinIndex(
        ptr=np.concatenate([*ptrs, [pieces_so_far]]).astype(np.int64),
        start=np.concatenate(starts).astype(np.int64) if starts else empty,
        length=np.concatenate(lengths).astype(np.int64) if lengths else empty,
        offset=np.concatenate(offsets).astype(np.int64) if offsets else empty,
        shard=np.concatenate(shards) if shards else empty,
        fill=np.concatenate(fills) if fills else empty,
        shard_bins=np.asarray(per_shard, dtype=np.int64),
    )


Packing = Literal["tokens", "documents", "best-fit"]
PACKINGS: tuple[str, ...] = ("tokens", "documents", "best-fit")


@dataclass
class TokenSource:
    """One shard set and its fixed samples (see the module docstring)."""

    name: str
    store: ShardStore
    seq_len: int
    packing: Packing
    window: int = DEFAULT_WINDOW  # best-fit: documents per packing window
    shard_samples: np.ndarray = field(init=False)
    cum_samples: np.ndarray = field(init=False)
    token_base: np.ndarray = field(init=False)  # stream position of each shard's first token, + the total
    doc_base: np.ndarray = field(init=False)  # index of each shard's first document, + the total
    bins: BinIndex | None = field(init=False, default=None)
    _doc_starts: np.ndarray | None = field(init=False, default=None)
    _spans: dict[int, tuple[np.ndarray, np.ndarray]] = field(init=False, default_factory=dict)

    def __post_init__(self) -> None:
        shards = self.store.manifest.shards
        self.token_base = np.concatenate([[0], np.cumsum([s.num_tokens for s in shards])]).astype(np.int64)
        self.doc_base = np.concatenate([[0], np.cumsum([s.num_documents for s in shards])]).astype(np.int64)
        if self.packing == "tokens":
            counts = [max(0, (s.num_tokens - 1) // self.seq_len) for s in shards]
        elif self.packing == "documents":
            counts = [len(self._doc_spans(i)[0]) for i in range(len(shards))]
        else:
            self.bins = pack_best_fit(self.doc_starts(), self.doc_base, self.seq_len, window=self.window)
            counts = self.bins.shard_bins.tolist()
        self.shard_samples = np.asarray(counts, dtype=np.int64)
        self.cum_samples = np.concatenate([[0], np.cumsum(self.shard_samples)]).astype(np.int64)
        if self.num_samples == 0:
            raise ConfigError(
                f"token set {self.name!r} has no sample of seq_len + 1 = {self.seq_len + 1} tokens "
                f"({self.store.manifest.num_tokens} tokens in {len(shards)} shards); lower seq_len"
            )

    def __getstate__(self) -> dict:
        # spawned DataLoader workers rebuild the document starts from the (verified) offsets files instead of
        # receiving a copy through a pipe; forked ones inherit them. The bins travel: packing costs more.
        return {**self.__dict__, "_doc_starts": None}

    @property
    def num_samples(self) -> int:
        return int(self.cum_samples[-1])

    def doc_starts(self) -> np.ndarray:
        """Every document start of the set in stream coordinates (shard k's token t is at
        ``token_base[k] + t``), then the total token count: one sorted int64 array, so the documents of a
        whole batch are found with one ``searchsorted``. Built on first use from every shard's offsets file
        (each verified); it replaces per-shard offset arrays, so it costs no extra memory.
        """
        if self._doc_starts is None:
            shards = self.store.manifest.shards
            starts = np.empty(int(self.doc_base[-1]) + 1, dtype=np.int64)
            for k in range(len(shards)):
                lo, hi = int(self.doc_base[k]), int(self.doc_base[k + 1])
                np.add(self.store.offsets(k)[:-1], self.token_base[k], out=starts[lo:hi])
            starts[-1] = self.token_base[-1]
            self._doc_starts = starts
        return self._doc_starts

    def _doc_spans(self, shard: int) -> tuple[np.ndarray, np.ndarray]:
        """(start, length) of each document-aligned sample of a shard (greedy whole-document fill), from the
        shard's document offsets in ``doc_starts`` (cached per shard)."""
        if shard not in self._spans:
            lo, hi = int(self.doc_base[shard]), int(self.doc_base[shard + 1])
            offsets = self.doc_starts()[lo : hi + 1] - self.token_base[shard]
            self._spans[shard] = document_spans(offsets, self.seq_len)
        return self._spans[shard]

    def locate(self, sample: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(shard, token start, length) of source-local sample indices (vectorized, one pass per shard).

        Best-fit: (shard, bin number, tokens in the bin) instead; a bin's pieces come from ``bins.pieces``.
        """
        if self.bins is not None:
            return self.bins.shard[sample], sample, self.bins.fill[sample]
        shard = np.searchsorted(self.cum_samples, sample, side="right") - 1
        local = sample - self.cum_samples[shard]
        if self.packing == "tokens":
            return shard, local * self.seq_len, np.full(len(sample), self.seq_len + 1, dtype=np.int64)
        starts = np.empty(len(sample), dtype=np.int64)
        lengths = np.empty(len(sample), dtype=np.int64)
        for s in np.unique(shard).tolist():
            sel = shard == s
            spans = self._doc_spans(s)
            starts[sel], lengths[sel] = spans[0][local[sel]], spans[1][local[sel]]
        return shard, starts, lengths


IGNORE_INDEX = -100


@dataclass
class Plan:
    """The next rank-local samples, planned as one vectorized block (best-fit: start = bin, length = fill)."""

    source: np.ndarray
    shard: np.ndarray
    start: np.ndarray
    length: np.ndarray
    counts_end: np.ndarray  # per-source counters after the block's last global index
    segments: Segments | None = None  # position segments of all the block's samples (filled lazily)


@dataclass
class Segments:
    """The position segments of n samples, in CSR form: the segments of sample j are ``ptr[j]:ptr[j+1]``.

    On the flattened ``[n, seq_len]`` grid a segment covers ``length[k]`` tokens, and the position of flat
    token f inside it is ``f - origin[k]`` (origin = the flat index where its document, or the padding,
    began: before the row for a window that starts inside a document).
    """

    origin: np.ndarray
    length: np.ndarray
    ptr: np.ndarray

    def positions(self, first: int, n: int, seq_len: int, out: np.ndarray) -> None:
        """``out[:n]`` = positions of samples ``first .. first + n - 1``: one ``np.repeat``, one subtraction."""
        a, b = int(self.ptr[first]), int(self.ptr[first + n])
        origin = self.origin[a:b] - first * seq_len  # rebase the flat grid at row `first`
        np.subtract(ramp(n * seq_len), np.repeat(origin, self.length[a:b]), out=out.reshape(-1))


class Gatherer:
    """Fills ``[3, n, seq_len]`` blocks from planned samples of ``sources`` (see the module docstring)."""

    def __init__(self, sources: list[TokenSource], seq_len: int, pad_id: int):
        self.sources, self.seq_len, self.pad_id = sources, seq_len, pad_id
        self.best_fit = sources[0].bins is not None
        self._arange = np.arange(seq_len, dtype=np.int64)
        # buffer dtype: the widest token dtype of the sources (a mixture may mix uint16 and uint32)
        self._dtype = np.result_type(*[src.store.manifest.dtype for src in sources])

    def gather(self, plan: Plan, positions: np.ndarray, out: np.ndarray) -> None:
        """Fill ``out[0]`` (input_ids), ``out[1]`` (labels), ``out[2]`` (positions), ``[n, seq_len]`` each,
        for the block's samples at ``positions``."""
        if self.best_fit:
            self._gather_bins(plan.source[positions], plan.start[positions], plan.length[positions], out)
        else:
            self._gather_spans(plan, positions, out)

    def _pad(self, out: np.ndarray, rows: np.ndarray, ids_from: np.ndarray, labels_from: np.ndarray) -> None:
        """In ``rows``: the pad id from column ``ids_from`` on, no label (``IGNORE_INDEX``) from ``labels_from`` on."""
        ids, labels = out[0][rows], out[1][rows]
        ids[self._arange >= ids_from[:, None]] = self.pad_id
        labels[self._arange >= labels_from[:, None]] = IGNORE_INDEX
        out[0][rows], out[1][rows] = ids, labels

    # ---- contiguous packings --------------------------------------------------------------------------
    def segments(
        self, source: np.ndarray, shard: np.ndarray, start: np.ndarray, length: np.ndarray
    ) -> Segments:
        """Position segments of any number of contiguous samples, vectorized over all of them.

        Per source one ``searchsorted`` of the windows in its document starts gives each window's document
        and the documents starting strictly inside it; documents packing adds a segment for the padding
        (and drops document starts inside it).
        """
        n, L = len(start), self.seq_len
        heads = np.arange(0, n * L, L, dtype=np.int64)
        head_origin = heads.copy()  # minus the position of each window's first token in its document
        keys = [heads]  # flat starts of every segment: row heads, then document starts and padding
        for s, src in enumerate(self.sources):
            rows = np.arange(n) if len(self.sources) == 1 else np.flatnonzero(source == s)
            if not len(rows):
                continue
            at = src.token_base[shard[rows]] + start[rows]  # window starts in stream coordinates
            doc_starts = src.doc_starts()
            # (#starts <= a) - 1 is the document holding token a; #starts <= a + L - 1 is the first one at or
            # after the window's end: the ones between start strictly inside the window
            found = doc_starts.searchsorted(np.concatenate([at, at + (L - 1)]), side="right")
            first, last = found[: len(rows)] - 1, found[len(rows) :]
            head_origin[rows] -= at - doc_starts[first]
            inside = last - first - 1
            total = int(inside.sum())
            if total:
                doc = np.arange(total) + np.repeat(first + 1 - (np.cumsum(inside) - inside), inside)
                bound = doc_starts[doc] - np.repeat(at, inside)  # window-relative, in (0, L)
                row = np.repeat(rows, inside)
                if (length < L + 1).any():  # documents packing: starts at or past the padding do not count
                    keep = bound < length[row]
                    bound, row = bound[keep], row[keep]
                keys.append(row * L + bound)
        padded = np.flatnonzero(length < L)  # the padding is a segment of its own, from the first pad input
        if len(padded):
            keys.append(padded * L + length[padded])
        starts = np.sort(np.concatenate(keys)) if len(keys) > 1 else heads
        ptr = np.append(starts.searchsorted(heads), len(starts))  # heads are unique: bounds lie inside rows
        origin = starts.copy()
        origin[ptr[:-1]] = head_origin
        lengths = np.empty_like(starts)  # (np.diff with append= costs ~50 us: it broadcasts the scalar)
        np.subtract(starts[1:], starts[:-1], out=lengths[:-1])
        lengths[-1] = n * L - starts[-1]
        return Segments(origin, lengths, ptr)

    def _gather_spans(self, plan: Plan, positions: np.ndarray, out: np.ndarray) -> None:
        n, L = len(positions), self.seq_len
        source, shard = plan.source[positions], plan.shard[positions]
        start, length = plan.start[positions], plan.length[positions]
        buffer = np.empty((n, L + 1), dtype=self._dtype)
        sources = self.sources
        for row, (s, k, a, m) in enumerate(
            zip(source.tolist(), shard.tolist(), start.tolist(), length.tolist())
        ):
            buffer[row, :m] = sources[s].store.tokens(k)[a : a + m]
        np.copyto(out[0], buffer[:, :L], casting="unsafe")
        np.copyto(out[1], buffer[:, 1:], casting="unsafe")
        short = np.flatnonzero(length < L + 1)
        if len(short):  # documents packing: padding after the sample's tokens, no labels past its last
            self._pad(out, short, length[short], length[short] - 1)
        first = int(positions[0])
        # consecutive samples (batches, single process): slice the block's segments
        if first + n - 1 == int(positions[-1]):
            if plan.segments is None:
                plan.segments = self.segments(plan.source, plan.shard, plan.start, plan.length)
            plan.segments.positions(first, n, L, out[2])
        else:  # every K-th sample (single samples across DataLoader workers)
            self.segments(source, shard, start, length).positions(0, n, L, out[2])

    # ---- best-fit bins --------------------------------------------------------------------------------
    def _gather_bins(self, source: np.ndarray, bins: np.ndarray, fill: np.ndarray, out: np.ndarray) -> None:
        """Best-fit bins: one slice copy per piece into a token-dtype buffer (reading the token after the
        piece on the way: the label of its last input), one cast for the inputs and one for the labels (the
        inputs shifted by one), then the pieces' last labels and the padding."""
        n, L = len(bins), self.seq_len
        parts = []  # per source: row, source, shard, start, length, offset of its pieces
        for s, src in enumerate(self.sources):
            sel = np.arange(n) if len(self.sources) == 1 else np.flatnonzero(source == s)
            if not len(sel):
                continue
            index = src.bins
            row, piece = index.pieces(bins[sel])
            shard = index.shard[bins[sel]][row]
            pieces = (index.start[piece], index.length[piece], index.offset[piece])
            parts.append((sel[row], np.full(len(row), s), shard, *pieces))
        if len(parts) > 1:  # back to row order (stable: a row's pieces stay in stream order)
            columns = [np.concatenate(c) for c in zip(*parts)]
            order = np.argsort(columns[0], kind="stable")
            parts = [tuple(c[order] for c in columns)]
        row, src_of, shard, start, length, offset = parts[0]
        buffer = np.empty(n * L, dtype=self._dtype)
        dest = row * L + offset  # flat slot of each piece's first input
        after = start + length  # the token after each piece (its last input's label), shard-local
        successor = np.full(len(row), IGNORE_INDEX, dtype=np.int64)
        keys = src_of << 32 | shard
        files = np.unique(keys).tolist()
        for key in files:  # usually one file per batch
            tokens = self.sources[key >> 32].store.tokens(key & 0xFFFFFFFF)
            sel = np.flatnonzero(keys == key) if len(files) > 1 else None
            d, a, m = (dest, start, length) if sel is None else (dest[sel], start[sel], length[sel])
            for d0, a0, m0 in zip(d.tolist(), a.tolist(), m.tolist()):
                buffer[d0 : d0 + m0] = tokens[a0 : a0 + m0]
            nxt = after if sel is None else after[sel]
            inside = np.flatnonzero(nxt < len(tokens))  # none at a shard end
            target = inside if sel is None else sel[inside]
            successor[target] = tokens[nxt[inside]]
        grid = buffer.reshape(n, L)
        np.copyto(out[0], grid, casting="unsafe")
        np.copyto(out[1][:, :-1], grid[:, 1:], casting="unsafe")
        out[1].reshape(-1)[dest + length - 1] = successor  # every row ends with a piece or padding
        padded = np.flatnonzero(fill < L)
        seg_start, seg_len = row * L + offset, length  # positions: a segment per piece, one per padding
        if len(padded):
            self._pad(out, padded, fill[padded], fill[padded])
            seg_start = np.concatenate([seg_start, padded * L + fill[padded]])
            seg_len = np.concatenate([seg_len, L - fill[padded]])
            order = np.argsort(seg_start)
            seg_start, seg_len = seg_start[order], seg_len[order]
        np.subtract(ramp(n * L), np.repeat(seg_start, seg_len), out=out[2].reshape(-1))


_RAMP = np.arange(0, dtype=np.int64)


def ramp(size: int) -> np.ndarray:
    """``arange(size)`` as a view of a cached, growing array (one allocation per process, not per batch)."""
    global _RAMP
    if len(_RAMP) < size:
        _RAMP = np.arange(max(size, 2 * len(_RAMP)), dtype=np.int64)
    return _RAMP[:size]


def shared_empty(shape: tuple[int, ...]) -> torch.Tensor:
    """An uninitialized int64 tensor in shared memory (what DataLoader's own collate does in workers)."""
    new_shared = getattr(torch.UntypedStorage, "_new_shared", None)
    if new_shared is None:  # a torch without the (private) constructor: allocate, then move (one copy)
        return torch.empty(shape, dtype=torch.int64).share_memory_()
    return torch.empty(0, dtype=torch.int64).set_(new_shared(math.prod(shape) * 8), 0, shape)


def _has_run(eq: np.ndarray, run: int) -> np.ndarray:
    """Per row of the boolean ``eq``: whether it holds ``run`` consecutive True values (run >= 1)."""
    width = 1
    acc = eq  # acc[:, i] = all(eq[:, i : i + width])
    while width * 2 <= run:
        acc = acc[:, :-width] & acc[:, width:]
        width *= 2
        if acc.shape[1] == 0:
            return np.zeros(eq.shape[0], dtype=bool)
    rest = run - width
    if rest:  # all(eq[i : i + width]) and all(eq[i + rest : i + rest + width]) covers i .. i + run - 1
        if acc.shape[1] <= rest:
            return np.zeros(eq.shape[0], dtype=bool)
        acc = acc[:, :-rest] & acc[:, rest:]
    return acc.any(axis=1)


@dataclass(frozen=True)
class RepetitionFilter:
    """Flags samples with a repeated token pattern (see the module docstring)."""

    min_period: int = 1
    """Shortest pattern length in tokens."""
    max_period: int = 13
    """Longest pattern length in tokens."""
    max_count: int = 32
    """A pattern repeated more than this many times in a row flags the sample."""

    def __post_init__(self) -> None:
        if not 1 <= self.min_period <= self.max_period:
            raise ConfigError(
                f"repetition filter: need 1 <= min_period <= max_period, got min_period={self.min_period}, "
                f"max_period={self.max_period}"
            )
        if self.max_count < 1:
            raise ConfigError(f"repetition filter: max_count must be >= 1, got {self.max_count}")

    def flags(self, ids: np.ndarray, lengths: np.ndarray | None = None) -> np.ndarray:
        """Boolean ``[n]``: which rows of ``ids [n, L]`` to drop; ``lengths`` = real inputs per row (the rest
        is padding), None when every row is full."""
        n, L = ids.shape
        flagged = np.zeros(n, dtype=bool)
        valid = None if lengths is None else np.arange(L) < np.asarray(lengths)[:, None]
        for p in range(self.min_period, self.max_period + 1):
            run = self.max_count * p
            if run > L - p:
                break  # longer periods need even longer runs
            eq = ids[:, p:] == ids[:, :-p]
            if valid is not None:
                eq &= valid[:, p:]  # both tokens real (valid is a prefix, so the later one decides)
            rows = np.flatnonzero(~flagged & (eq.sum(axis=1) >= run))  # cheap necessary condition first
            if len(rows):
                flagged[rows] = _has_run(eq[rows], run)
        return flagged
