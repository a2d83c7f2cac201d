"""Best-fit packing of documents into ``seq_len`` bins, and the packing statistics of every mode.

Contract (``packing="best-fit"`` in ``zephyr.tokenize.loader``):

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
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = [
    "best_fit_decreasing",
    "BinIndex",
    "pack_best_fit",
    "cut_pieces",
    "document_spans",
    "packing_stats",
]

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

    @property
    def num_bins(self) -> int:
        return len(self.shard)

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


def packing_stats(shard_lengths: list[np.ndarray], seq_len: int, packing: str, **kwargs) -> dict[str, float]:
    """Padding and splitting of one packing mode over shards of documents (``shard_lengths``: lengths per shard).

    Returns ``padding_fraction`` (pad inputs / input slots), ``split_fraction`` (documents whose inputs land
    in more than one sample), ``fit_split_fraction`` (the same among documents of at most ``seq_len``
    tokens: the splits a packing could avoid), ``unused_fraction`` (tokens that are in no sample's inputs)
    and ``samples``. ``"tokens"``: windows start every ``seq_len`` tokens of a shard; ``"best-fit"``: as
    ``pack_best_fit`` (``window`` in ``kwargs``).
    """
    lengths = np.concatenate(shard_lengths) if shard_lengths else np.zeros(0, np.int64)
    fits = lengths <= seq_len
    total = int(lengths.sum())
    if packing == "tokens":
        split = []
        samples = used = 0
        for docs in shard_lengths:
            ends = np.cumsum(docs)
            n = max(0, (int(ends[-1]) - 1) // seq_len) if len(docs) else 0
            starts = ends - docs
            last = np.minimum(ends, n * seq_len) - 1  # the last input token of each document
            inside = starts < n * seq_len
            split.append(inside & (last // seq_len > starts // seq_len))
            samples += n
            used += n * seq_len
        split_mask = np.concatenate(split) if split else np.zeros(0, bool)
        padding = 0.0
    elif packing == "best-fit":
        offsets = [np.concatenate([[0], np.cumsum(d)]) for d in shard_lengths]
        base = np.concatenate([[0], np.cumsum([o[-1] for o in offsets])])
        doc_starts = np.concatenate([o[:-1] + b for o, b in zip(offsets, base)] + [[base[-1]]]).astype(
            np.int64
        )
        doc_base = np.concatenate([[0], np.cumsum([len(d) for d in shard_lengths])]).astype(np.int64)
        index = pack_best_fit(doc_starts, doc_base, seq_len, **kwargs)
        samples, used = index.num_bins, total
        padding = 1.0 - total / max(1, samples * seq_len)
        split_mask = lengths > seq_len
    elif packing == "documents":
        split, samples, slots_used = [], 0, 0
        for docs in shard_lengths:
            offsets = np.concatenate([[0], np.cumsum(docs)]).astype(np.int64)
            starts, spans = document_spans(offsets, seq_len)
            samples += len(starts)
            slots_used += int(np.minimum(spans, seq_len).sum())
            first = np.searchsorted(starts, offsets[:-1], side="right") - 1  # the sample holding each start
            last_in = np.searchsorted(starts, np.maximum(offsets[1:] - 1, offsets[:-1]), side="right") - 1
            split.append(last_in > first)
        split_mask = np.concatenate(split) if split else np.zeros(0, bool)
        used = total
        padding = 1.0 - slots_used / max(1, samples * seq_len)
    else:
        raise ValueError(f"packing_stats knows 'tokens', 'documents' and 'best-fit', got {packing!r}")
    docs = max(1, len(lengths))
    return {
        "samples": float(samples),
        "padding_fraction": float(padding),
        "split_fraction": float(split_mask.sum() / docs),
        "fit_split_fraction": float((split_mask & fits).sum() / max(1, int(fits.sum()))),
        "unused_fraction": float(1.0 - used / max(1, total)),
    }
