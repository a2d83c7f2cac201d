"""One token-shard set and its fixed samples, for each packing mode of ``zephyr.tokenize.loader``.

A *sample* is fixed per shard and numbered within the set (shard 0's samples first):

- ``"tokens"``: windows of ``seq_len + 1`` tokens starting every ``seq_len`` tokens of a shard; a shard of
  T tokens has ``(T - 1) // seq_len`` samples; windows cross document boundaries.
- ``"documents"``: each sample starts at a document start and holds whole consecutive documents while they
  fit in ``seq_len + 1`` tokens, then padding; a longer document is split into ``seq_len``-token chunks.
- ``"best-fit"``: bins of ``seq_len`` inputs filled by best-fit decreasing (``zephyr.tokenize.packing``).

``locate`` maps sample numbers to what the gather reads: for the two contiguous modes one span
``(shard, token start, length)`` per sample; for ``"best-fit"`` the shard, the bin number and its fill (the
pieces come from ``bins.pieces``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

import numpy as np
from zephyr.tokenize.packing import DEFAULT_WINDOW, BinIndex, document_spans, pack_best_fit
from zephyr.tokenize.storage import ShardStore

from zephyr.errors import ConfigError

__all__ = ["Packing", "PACKINGS", "TokenSource"]

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

    def shard_offsets(self, shard: int) -> np.ndarray:
        """One shard's document offsets (shard-local, documents + 1), from ``doc_starts``."""
        lo, hi = int(self.doc_base[shard]), int(self.doc_base[shard + 1])
        return self.doc_starts()[lo : hi + 1] - self.token_base[shard]

    def _doc_spans(self, shard: int) -> tuple[np.ndarray, np.ndarray]:
        """(start, length) of each document-aligned sample of a shard (greedy whole-document fill)."""
        cached = self._spans.get(shard)
        if cached is not None:
            return cached
        spans = document_spans(self.shard_offsets(shard), self.seq_len)
        self._spans[shard] = spans
        return spans

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
