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
        """Best-fit bins: each slot of the ``[n, L]`` grid gets its token's index in its shard from one
        ``np.repeat`` over the segments (the pieces, then each row's padding), and the tokens come from one
        fancy index per shard (labels: the same indices + 1)."""
        n, L = len(bins), self.seq_len
        row_shard = np.empty(n, dtype=np.int64)
        rows, starts, lengths, ends = [], [], [], []
        for s, src in enumerate(self.sources):
            sel = np.arange(n) if len(self.sources) == 1 else np.flatnonzero(source == s)
            if not len(sel):
                continue
            row, start, length = src.bins.pieces(bins[sel])
            row_shard[sel] = src.bins.shard[bins[sel]]
            base = src.token_base[row_shard[sel]][row]
            rows.append(sel[row])
            starts.append(start - base)  # shard-local
            lengths.append(length)
            ends.append(start + length == src.token_base[row_shard[sel] + 1][row])
        padded = np.flatnonzero(fill < L)
        row = np.concatenate([*rows, padded])
        start = np.concatenate([*starts, np.zeros(len(padded), np.int64)])  # padding reads token 0
        length = np.concatenate([*lengths, L - fill[padded]])
        shard_end = np.concatenate([*ends, np.zeros(len(padded), bool)])  # a piece ends its shard
        if len(self.sources) > 1 or len(padded):  # by row; pieces keep stream order, padding comes last
            order = np.argsort(row, kind="stable")
            row, start, length, shard_end = row[order], start[order], length[order], shard_end[order]
        before = np.cumsum(length) - length  # flat start of each segment (every row's segments fill it)
        grid = ramp(n * L)
        index = (grid + np.repeat(start - before, length)).reshape(n, L)  # shard-local index of every slot
        np.subtract(grid, np.repeat(before, length), out=out[2].reshape(-1))  # positions restart per segment
        groups = source * (1 << 32) + row_shard
        for key in np.unique(groups).tolist():
            tokens = self.sources[key >> 32].store.open(key & 0xFFFFFFFF).tokens
            if len(groups) == 1 or (groups[0] == groups).all():
                np.copyto(out[0], tokens[index], casting="unsafe")
                np.copyto(out[1], tokens[np.minimum(index + 1, len(tokens) - 1)], casting="unsafe")
                break
            sel = np.flatnonzero(groups == key)
            idx = index[sel]
            out[0][sel] = tokens[idx]
            out[1][sel] = tokens[np.minimum(idx + 1, len(tokens) - 1)]
        last = (before + length - 1)[shard_end]  # a shard's last token has no successor
        if len(last):
            out[1].reshape(-1)[last] = IGNORE_INDEX
        if len(padded):
            pad = self._arange >= fill[padded, None]
            ids, labels = out[0][padded], out[1][padded]
            ids[pad] = self.pad_id
            labels[pad] = IGNORE_INDEX
            out[0][padded], out[1][padded] = ids, labels


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
