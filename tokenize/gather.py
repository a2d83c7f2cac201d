"""Gathering planned samples into ``[3, n, seq_len]`` int64 blocks (input_ids, labels, positions): the hot path.

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
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
from zephyr.tokenize.sources import TokenSource

__all__ = ["IGNORE_INDEX", "Plan", "Segments", "Gatherer", "shared_empty", "ramp"]

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
            buffer[row, :m] = sources[s].store.open(k).tokens[a : a + m]
        np.copyto(out[0], buffer[:, :L], casting="unsafe")
        np.copyto(out[1], buffer[:, 1:], casting="unsafe")
        short = np.flatnonzero(length < L + 1)
        if len(short):  # documents packing: padding after the sample's tokens, no labels past its last
            ids = out[0][short]
            ids[self._arange >= length[short, None]] = self.pad_id
            out[0][short] = ids
            labels = out[1][short]
            labels[self._arange >= (length[short] - 1)[:, None]] = IGNORE_INDEX
            out[1][short] = labels
        first = int(positions[0])
        if first + n - 1 == int(
            positions[-1]
        ):  # consecutive samples (batches, single process): slice the block's
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
            parts.append(
                (
                    sel[row],
                    np.full(len(row), s),
                    shard,
                    index.start[piece],
                    index.length[piece],
                    index.offset[piece],
                )
            )
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
            tokens = self.sources[key >> 32].store.open(key & 0xFFFFFFFF).tokens
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
            pad = self._arange >= fill[padded, None]
            ids_p, labels_p = out[0][padded], out[1][padded]
            ids_p[pad] = self.pad_id
            labels_p[pad] = IGNORE_INDEX
            out[0][padded], out[1][padded] = ids_p, labels_p
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
