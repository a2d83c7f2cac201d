"""``TokenLoader``: a deterministic, resumable, rank-aware torch ``IterableDataset`` over token shards.

Overview
--------
A *source* is one token-shard set (``zephyr.tokenize.format``). Its *samples* are fixed per shard:

- ``packing="tokens"`` (default): windows of ``seq_len + 1`` tokens starting every ``seq_len`` tokens
  (consecutive windows share one token, so every token but a shard's last is some sample's label);
  a shard of T tokens has ``(T - 1) // seq_len`` samples; windows cross document boundaries.
- ``packing="documents"``: each sample starts at a document start and holds whole consecutive documents
  while they fit in ``seq_len + 1`` tokens; the rest is padding (``pad_id``, label -100). A document longer
  than that is split into ``seq_len``-token chunks (its positions keep counting across chunks).

Order. The loader walks one *global sample index* g = 0, 1, 2, ... For each g, the source is drawn with
probability proportional to its weight by a counter-based hash of (seed, g) — a pure function, no RNG
state; with one source it is always that source. The source's own counter ``n_s`` (how many of its samples
were drawn before) picks the sample: epoch ``e = n_s // N_s``, and sample ``perm_{seed,source,e}(n_s % N_s)``,
a seeded Feistel permutation (``zephyr.tokenize.permutation``). So with fixed weights the order is a pure
function of (seed, epoch, global index), every sample of a source appears exactly once per epoch of it,
and nothing is materialized per sample.

Ranks and workers. Rank r of W takes g = start + r, start + r + W, ... (start = the resumed position).
Inside a rank, DataLoader worker w of K takes the rank's chunks c with c % K == w, a chunk being one yielded
item (one sample, or one batch with ``batch_size``); ``DataLoader``'s in-order round robin then reproduces
the single-process sequence exactly (use ``loader.data_loader(num_workers=K)``, which also keeps
``state_dict`` right in the main process). A plain ``DataLoader(loader, num_workers=K)`` cannot: its workers
advance copies the parent never sees, so afterwards ``state_dict()`` raises ``ResumeError`` pointing to
``data_loader`` rather than return a stale position (``zephyr.tokenize.data_loader``).

State. ``state_dict()`` = {version, fingerprint, seed, consumed (global samples), counts (per-source
``n_s`` at ``consumed``), weights}: plain ints/floats/strings. Every rank saves the same dict (ranks step
in lockstep). Loading it with any world size continues the same global sequence at ``consumed``: rank r'
of W' resumes at g = consumed + r'. ``set_weights`` changes the mixture from the next sample on; the
counts carry over, so nothing is repeated or skipped within a source's epoch.

Each yielded sample is a dict of int64 tensors ``input_ids``, ``labels`` and ``positions``, each
``[seq_len]`` (``[batch_size, seq_len]`` with ``batch_size`` or ``iter_batches``); ``positions`` restart at
0 at each document start, for document-masked attention (e.g. ``positions == 0`` marks the boundaries).

Gathering (the hot path). Samples are planned 4096 at a time (source choice, counters, Feistel permutation,
shard and token offset, and each window's position *segments*: all vectorized; the segments come from one
``searchsorted`` of the windows in the source's document starts — every shard's offsets folded into one
sorted array in stream coordinates, built on first use, replacing per-shard offset arrays). A batch (64
samples at a time for single samples) is then one slice copy per sample from the memory-mapped shard into a
buffer in the token dtype, one widening cast per field, and one ``np.repeat`` of its slice of the segments
for the positions. The three fields are contiguous views of one ``[3, n, seq_len]`` int64 tensor; inside
DataLoader workers that tensor is allocated in shared memory, so handing it over copies nothing more.
Single samples are row views of the gathered block. benchmarks/loader_throughput.py measures it against
the numpy memmap limit (rows in benchmarks/RESULTS.md).
"""

from __future__ import annotations

import hashlib
import logging
import math
from collections.abc import Generator, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
import torch
from zephyr.tokenize.data_loader import (
    TokenDataLoader,
    check_position_known,
    mark_plain_worker,
    new_worker_flag,
)
from zephyr.tokenize.format import read_manifest
from zephyr.tokenize.permutation import derive_key, permute, uniform01
from zephyr.tokenize.storage import ShardStore

from zephyr.errors import ConfigError, ResumeError

__all__ = ["TokenLoader", "TokenDataLoader", "Packing", "STATE_VERSION"]

log = logging.getLogger(__name__)

Packing = Literal["tokens", "documents"]
STATE_VERSION = 1
IGNORE_INDEX = -100
_PLAN_SAMPLES = 4096  # rank-local samples planned per vectorized block (rounded up to whole items)
_SAMPLE_GATHER = 64  # samples gathered at once when yielding single samples
_FIELDS = ("input_ids", "labels", "positions")


@dataclass
class _Source:
    """One shard set and its fixed sample spans."""

    name: str
    store: ShardStore
    seq_len: int
    packing: Packing
    shard_samples: np.ndarray = field(init=False)
    cum_samples: np.ndarray = field(init=False)
    token_base: np.ndarray = field(init=False)  # stream position of each shard's first token, + the total
    doc_base: np.ndarray = field(init=False)  # index of each shard's first document, + the total
    _doc_starts: np.ndarray | None = field(init=False, default=None)
    _spans: dict[int, tuple[np.ndarray, np.ndarray]] = field(init=False, default_factory=dict)

    def __post_init__(self) -> None:
        shards = self.store.manifest.shards
        self.token_base = np.concatenate([[0], np.cumsum([s.num_tokens for s in shards])]).astype(np.int64)
        self.doc_base = np.concatenate([[0], np.cumsum([s.num_documents for s in shards])]).astype(np.int64)
        if self.packing == "tokens":
            counts = [max(0, (s.num_tokens - 1) // self.seq_len) for s in shards]
        else:
            counts = [len(self._doc_spans(i)[0]) for i in range(len(shards))]
        self.shard_samples = np.asarray(counts, dtype=np.int64)
        self.cum_samples = np.concatenate([[0], np.cumsum(self.shard_samples)])
        if self.num_samples == 0:
            raise ConfigError(
                f"token set {self.name!r} has no sample of seq_len + 1 = {self.seq_len + 1} tokens "
                f"({self.store.manifest.num_tokens} tokens in {len(shards)} shards); lower seq_len"
            )

    def __getstate__(self) -> dict:
        # spawned DataLoader workers rebuild the document starts from the (verified) offsets files instead of
        # receiving a copy through a pipe; forked ones inherit them
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
        offsets = self.shard_offsets(shard)
        capacity = self.seq_len + 1
        starts: list[int] = []
        lengths: list[int] = []
        pos, end = 0, int(offsets[-1])
        while end - pos >= 2:  # a sample needs at least one input with a label
            limit = pos + capacity
            boundary = int(offsets[int(np.searchsorted(offsets, limit, side="right")) - 1])
            if boundary > pos:  # whole documents (or the tail of a split one) fit: stop at the last boundary
                stop, following = boundary, boundary
            else:  # the document runs past the sample: take a chunk; the next one starts at its last token,
                stop, following = limit, limit - 1  # which had no label in this chunk
            starts.append(pos)
            lengths.append(stop - pos)
            pos = following
        spans = (np.asarray(starts, dtype=np.int64), np.asarray(lengths, dtype=np.int64))
        self._spans[shard] = spans
        return spans

    def locate(self, sample: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(shard, token start, length) of source-local sample indices (vectorized, one pass per shard)."""
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


@dataclass
class _Plan:
    """The next rank-local samples, planned as one vectorized block."""

    source: np.ndarray
    shard: np.ndarray
    start: np.ndarray
    length: np.ndarray
    counts_end: np.ndarray  # per-source counters after the block's last global index
    segments: _Segments | None = None  # position segments of all the block's samples (filled lazily)


@dataclass
class _Segments:
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
        np.subtract(_ramp(n * seq_len), np.repeat(origin, self.length[a:b]), out=out.reshape(-1))


class TokenLoader(torch.utils.data.IterableDataset):
    """Samples of ``seq_len`` tokens (+1 for labels) from one token-shard set or a weighted mixture.

    Args:
        sources: a shard-set path/URL, or ``{path: weight}`` for a mixture (weights need not sum to 1).
        seq_len: tokens per sample (``input_ids`` length).
        seed: order seed (independent of the writer's shuffle seed).
        rank / world_size: this process's data-parallel rank and the number of ranks.
        batch_size: ``None`` yields single samples; an int yields ``[batch_size, seq_len]`` batches
            (rank-local micro-batches) and makes DataLoader workers split by batch.
        packing: ``"tokens"`` (contiguous windows) or ``"documents"`` (document-aligned, padded).
        num_epochs: stop after this many epochs of the (single) source; ``None`` runs forever.
        pad_id: padding id for ``packing="documents"`` (default: the set's EOS id).
        cache_dir: local directory for copies of remote (fsspec) shards.
        verify: check each shard file's sha256 before first use in a process.
        pin_memory: pin yielded tensors (default: when CUDA is available).
    """

    def __init__(
        self,
        sources: str | Mapping[str, float],
        *,
        seq_len: int,
        seed: int = 0,
        rank: int = 0,
        world_size: int = 1,
        batch_size: int | None = None,
        packing: Packing = "tokens",
        num_epochs: int | None = None,
        pad_id: int | None = None,
        cache_dir: str | None = None,
        verify: bool = True,
        pin_memory: bool | None = None,
    ):
        super().__init__()
        if seq_len < 1:
            raise ConfigError(f"seq_len must be >= 1, got {seq_len}")
        if world_size < 1 or not 0 <= rank < world_size:
            raise ConfigError(f"need 0 <= rank < world_size, got rank={rank}, world_size={world_size}")
        if batch_size is not None and batch_size < 1:
            raise ConfigError(f"batch_size must be >= 1 or None, got {batch_size}")
        if packing not in ("tokens", "documents"):
            raise ConfigError(f"packing must be 'tokens' or 'documents', got {packing!r}")
        weights = {sources: 1.0} if isinstance(sources, str) else dict(sources)
        if not weights:
            raise ConfigError("sources is empty; give a shard-set path or {path: weight}")
        self.seq_len, self.seed, self.rank, self.world_size = seq_len, seed, rank, world_size
        self.batch_size, self.packing, self.num_epochs = batch_size, packing, num_epochs
        self.cache_dir, self.verify = cache_dir, verify
        self.pin_memory = torch.cuda.is_available() if pin_memory is None else pin_memory
        self._sources = [
            _Source(
                str(path),
                ShardStore(read_manifest(str(path)), cache_dir=cache_dir, verify=verify),
                seq_len,
                packing,
            )
            for path in weights
        ]
        if num_epochs is not None and len(self._sources) > 1:
            raise ConfigError("num_epochs applies to a single source; a mixture runs until you stop it")
        first = self._sources[0].store.manifest
        self.pad_id = first.eos_id if pad_id is None else pad_id
        self._weights = self._check_weights(weights)
        self._source_keys = [derive_key(seed, 0x5EED, i) for i in range(len(self._sources))]
        self._choice_key = derive_key(seed, 0xC401CE)
        self._fingerprint = self._make_fingerprint()
        # position: the global index where this run (re)started, the per-source counters there, and how many
        # samples this rank has handed out since
        self._start = 0
        self._start_counts = np.zeros(len(self._sources), dtype=np.int64)
        self._yielded = 0
        self._weights_version = 0
        # set by DataLoader workers that no TokenDataLoader started; shared with them (zephyr.tokenize.data_loader)
        self._worker_flag = new_worker_flag()
        self._wrapped = False  # True while TokenDataLoader starts workers over this loader
        self._counts_cache = (0, self._start_counts.copy())  # (g, counters at g): state_dict stays O(step)
        self._arange = np.arange(seq_len, dtype=np.int64)
        # gather buffer dtype: the widest token dtype of the sources (a mixture may mix uint16 and uint32)
        self._buffer_dtype = np.result_type(*[src.store.manifest.dtype for src in self._sources])
        self._shard_stride = max(len(src.store.manifest.shards) for src in self._sources)

    # ---- configuration ---------------------------------------------------------------------------------
    def _check_weights(self, weights: Mapping[str, float]) -> np.ndarray:
        names = [s.name for s in self._sources]
        if sorted(map(str, weights)) != sorted(names):
            raise ConfigError(f"weights must name exactly the loader's sources {names}, got {list(weights)}")
        values = np.array([float(weights[n]) for n in names], dtype=np.float64)
        if not np.all(np.isfinite(values)) or (values < 0).any() or values.sum() <= 0:
            raise ConfigError(f"mixture weights must be finite, >= 0 and not all 0, got {dict(weights)}")
        return values / values.sum()

    def _make_fingerprint(self) -> str:
        digest = hashlib.sha256(f"{self.seq_len}|{self.packing}|".encode())
        for source in self._sources:
            digest.update(source.store.manifest.fingerprint().encode())
        return digest.hexdigest()[:16]

    @property
    def sources(self) -> list[str]:
        return [s.name for s in self._sources]

    @property
    def weights(self) -> dict[str, float]:
        return {s.name: float(w) for s, w in zip(self._sources, self._weights)}

    def num_samples(self, source: str | None = None) -> int:
        """Samples in one epoch of a source (the only one when ``source`` is None)."""
        index = 0 if source is None else self.sources.index(source)
        return self._sources[index].num_samples

    def __len__(self) -> int:
        """Items this rank yields (only with ``num_epochs``; a mixture or endless loader has no length)."""
        if self.num_epochs is None:
            raise TypeError("an endless TokenLoader (num_epochs=None) has no len()")
        total = self.num_epochs * self._sources[0].num_samples
        mine = max(0, math.ceil((total - self._start - self.rank) / self.world_size))
        return mine if self.batch_size is None else math.ceil(mine / self.batch_size)

    # ---- state -----------------------------------------------------------------------------------------
    @property
    def consumed(self) -> int:
        """Global samples consumed, assuming every rank has yielded as many as this one."""
        return self._start + self._yielded * self.world_size

    def _counts_at(self, g_end: int) -> np.ndarray:
        """Per-source counters at global index ``g_end`` (>= the start).

        One source: every index drew from it. A mixture replays the choices from the last computed point
        (cached), so calling ``state_dict()`` every step costs O(samples per step), not O(consumed).
        """
        if len(self._sources) == 1:
            return self._start_counts + (g_end - self._start)
        cached_g, cached = self._counts_cache
        lo, counts = (
            (cached_g, cached.copy())
            if self._start <= cached_g <= g_end
            else (
                self._start,
                self._start_counts.copy(),
            )
        )
        for block in range(lo, g_end, 1 << 20):
            hi = min(g_end, block + (1 << 20))
            counts += np.bincount(self._choose(np.arange(block, hi)), minlength=len(self._sources))
        self._counts_cache = (g_end, counts.copy())
        return counts

    def _set_start(self, g: int, counts: np.ndarray) -> None:
        self._start, self._start_counts, self._yielded = g, counts, 0
        self._counts_cache = (g, counts.copy())

    def _rebase(self) -> None:
        """Move the start to the current position (needed before the weights change)."""
        g = self.consumed
        self._set_start(g, self._counts_at(g))

    def mix_counts(self) -> dict[str, int]:
        """Realized mixture: samples drawn from each source so far, over all ranks (global counters)."""
        check_position_known(self, "mix_counts()")
        return dict(zip(self.sources, self._counts_at(self.consumed).tolist()))

    def set_weights(self, weights: Mapping[str, float]) -> None:
        """Change the mixture weights from the next sample on (call between steps, on every rank)."""
        values = self._check_weights(weights)
        check_position_known(self, "set_weights()")
        self._rebase()
        self._weights = values
        self._weights_version += 1

    def state_dict(self) -> dict[str, Any]:
        """Plain JSON-serializable resume state (see the module docstring)."""
        check_position_known(self, "state_dict()")
        g = self.consumed
        return {
            "version": STATE_VERSION,
            "fingerprint": self._fingerprint,
            "seed": self.seed,
            "consumed": g,
            "counts": [int(c) for c in self._counts_at(g)],
            "weights": [float(w) for w in self._weights],
            "sources": self.sources,
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Resume at ``state``; refuses state from other data, seq_len, packing or seed (``ResumeError``)."""
        if state.get("version") != STATE_VERSION:
            raise ResumeError(f"loader state version {state.get('version')!r} is not {STATE_VERSION}")
        if state.get("fingerprint") != self._fingerprint or state.get("seed") != self.seed:
            raise ResumeError(
                f"loader state belongs to other data or settings (fingerprint {state.get('fingerprint')}, "
                f"seed {state.get('seed')}; this loader: {self._fingerprint}, seed {self.seed}); build the "
                "loader with the same shard sets, seq_len, packing and seed"
            )
        counts = np.asarray(state["counts"], dtype=np.int64)
        weights = np.asarray(state["weights"], dtype=np.float64)
        if len(counts) != len(self._sources) or len(weights) != len(self._sources):
            raise ResumeError(f"loader state has {len(counts)} sources, this loader {len(self._sources)}")
        self._set_start(int(state["consumed"]), counts)
        self._worker_flag.zero_()  # the position is known again
        self._weights = weights
        self._weights_version += 1

    # ---- planning --------------------------------------------------------------------------------------
    def _choose(self, g: np.ndarray) -> np.ndarray:
        if len(self._sources) == 1:
            return np.zeros(len(g), dtype=np.int64)
        cum = np.cumsum(self._weights)
        cum[-1] = 1.0
        return np.searchsorted(cum, uniform01(g, self._choice_key), side="right").astype(np.int64)

    def _limit(self) -> int | None:
        if self.num_epochs is None:
            return None
        return self.num_epochs * self._sources[0].num_samples

    def _plan(self, count: int, base_g: int, base_counts: np.ndarray) -> _Plan:
        """Plan this rank's next ``count`` samples: global indices base_g + rank + j * W.

        ``base_counts`` are the per-source counters at ``base_g``; the choices of every rank in between are
        replayed (vectorized) so each source's counter, hence its permutation position, is exact.
        """
        width, num_sources = self.world_size, len(self._sources)
        mine = np.arange(count, dtype=np.int64) * width + self.rank  # offsets from base_g of this rank's g
        if num_sources == 1:  # every global index draws from the one source: its counter is base + offset
            source = np.zeros(count, dtype=np.int64)
            n = base_counts[0] + mine
            counts_end = base_counts + count * width
        else:
            choice = self._choose(np.arange(base_g, base_g + count * width, dtype=np.int64))
            source = choice[mine]
            n = np.empty(count, dtype=np.int64)
            counts_end = base_counts.copy()
            for s in range(num_sources):
                drawn = np.cumsum(choice == s)  # draws of source s up to and including each global index
                sel = source == s
                n[sel] = base_counts[s] + drawn[mine[sel]] - 1  # the counter before that index
                counts_end[s] += int(drawn[-1])
        shard = np.empty(count, dtype=np.int64)
        start = np.empty(count, dtype=np.int64)
        length = np.empty(count, dtype=np.int64)
        for s, src in enumerate(self._sources):
            sel = np.flatnonzero(source == s)
            if not len(sel):
                continue
            epoch, local = np.divmod(n[sel], src.num_samples)
            epochs, which = np.unique(epoch, return_inverse=True)  # a block spans few epochs (many if tiny)
            keys = np.array([derive_key(self._source_keys[s], e) for e in epochs.tolist()], dtype=np.uint64)
            sample = permute(local, src.num_samples, keys[which] if len(keys) > 1 else int(keys[0]))
            shard[sel], start[sel], length[sel] = src.locate(sample)
        return _Plan(source, shard, start, length, counts_end)

    # ---- gathering -------------------------------------------------------------------------------------
    def _segments(
        self, source: np.ndarray, shard: np.ndarray, start: np.ndarray, length: np.ndarray
    ) -> _Segments:
        """Position segments of any number of samples, vectorized over all of them.

        Per source one ``searchsorted`` of the windows in its document starts gives each window's document
        and the documents starting strictly inside it; documents packing adds a segment for the padding
        (and drops document starts inside it). Sorted on the flattened grid, the segment starts give the
        lengths by differences. Done once per plan block (4096 samples), so a batch only slices it.
        """
        n, L = len(start), self.seq_len
        heads = np.arange(0, n * L, L, dtype=np.int64)
        head_origin = heads.copy()  # minus the position of each window's first token in its document
        keys = [heads]  # flat starts of every segment: row heads, then document starts and padding
        for s, src in enumerate(self._sources):
            rows = np.arange(n) if len(self._sources) == 1 else np.flatnonzero(source == s)
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
        return _Segments(origin, lengths, ptr)

    def _gather(self, plan: _Plan, positions: np.ndarray, out: np.ndarray) -> None:
        """Fill ``out[0]`` (input_ids), ``out[1]`` (labels), ``out[2]`` (positions), ``[n, seq_len]`` each,
        for the block's samples at ``positions``.

        Per sample: one slice copy of its ``length`` tokens from the memory-mapped shard into a buffer in the
        token dtype (a memcpy from the page cache). Per batch: one widening cast per field, and the
        positions from the block's segments (``_segments``, computed once per block) with one
        ``np.repeat``. No per-token Python; the output is one contiguous int64 array.
        """
        n, L = len(positions), self.seq_len
        source, shard = plan.source[positions], plan.shard[positions]
        start, length = plan.start[positions], plan.length[positions]
        buffer = np.empty((n, L + 1), dtype=self._buffer_dtype)
        sources = self._sources
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
                plan.segments = self._segments(plan.source, plan.shard, plan.start, plan.length)
            plan.segments.positions(first, n, L, out[2])
        else:  # every K-th sample (single samples across DataLoader workers)
            self._segments(source, shard, start, length).positions(0, n, L, out[2])

    # ---- iteration -------------------------------------------------------------------------------------
    def _allocate(self, n: int, in_worker: bool) -> torch.Tensor:
        """``[3, n, seq_len]`` int64 for one gather (input_ids, labels, positions).

        In a DataLoader worker it is allocated in shared memory: torch moves a tensor's storage to shared
        memory when it crosses the worker queue, which would otherwise copy every item once more.
        """
        shape = (3, n, self.seq_len)
        return _shared_empty(shape) if in_worker else torch.empty(shape, dtype=torch.int64)

    def _items(self, batch_size: int | None) -> Iterator[dict[str, torch.Tensor]]:
        """Items from the current position; restarts from the new state after set_weights/load_state_dict."""
        while True:
            restarted = yield from self._items_from_position(batch_size)
            if not restarted:
                return

    def _items_from_position(self, batch_size: int | None) -> Generator[dict[str, torch.Tensor], None, bool]:
        """Yield items until the end (returns False) or until the state changed under us (returns True)."""
        info = torch.utils.data.get_worker_info()
        worker, num_workers = (0, 1) if info is None else (info.id, info.num_workers)
        in_main = info is None
        if not in_main:
            mark_plain_worker(self)
        chunk = batch_size or 1
        limit = self._limit()
        version = self._weights_version
        base_g = self.consumed
        base_counts = self._counts_at(base_g)
        start_yielded = self._yielded
        k = 0  # rank-local samples planned so far by this iterator (a multiple of chunk)
        while True:
            count = chunk * -(-_PLAN_SAMPLES // chunk)  # whole items: an item never straddles two blocks
            if limit is not None:
                count = min(count, math.ceil((limit - base_g - self.rank) / self.world_size))
                if count <= 0:
                    return False
            plan = self._plan(count, base_g, base_counts)
            # item c (counted from this iterator's start) belongs to worker c % K
            first = (worker - k // chunk) % num_workers
            if batch_size is None:  # single samples: gather a few of this worker's at once, yield row views
                mine = np.arange(first, count, num_workers)
                groups = [mine[i : i + _SAMPLE_GATHER] for i in range(0, len(mine), _SAMPLE_GATHER)]
            else:
                groups = [
                    np.arange(i, min(i + chunk, count))
                    for i in range(first * chunk, count, num_workers * chunk)
                ]
            for positions in groups:
                out = self._allocate(len(positions), not in_main)
                self._gather(plan, positions, out.numpy())
                if self.pin_memory:
                    out = out.pin_memory()
                if batch_size is None:  # unbind: one call per field for all the rows' views
                    rows = zip(*(column.unbind(0) for column in out.unbind(0)))
                    items = [(dict(zip(_FIELDS, row)), p + 1) for row, p in zip(rows, positions.tolist())]
                else:
                    items = [(dict(zip(_FIELDS, out.unbind(0))), int(positions[-1]) + 1)]
                for item, done in items:
                    if in_main:
                        self._yielded = start_yielded + k + done  # before the yield: state_dict() sees it
                    yield item
                    if in_main and self._weights_version != version:
                        return True  # set_weights/load_state_dict between steps: continue from the new state
            k += count
            base_g += count * self.world_size
            base_counts = plan.counts_end

    def __iter__(self) -> Iterator[dict[str, torch.Tensor]]:
        return self._items(self.batch_size)

    def iter_batches(self, batch_size: int) -> Iterator[dict[str, torch.Tensor]]:
        """``[batch_size, seq_len]`` batches from the current position, whatever ``self.batch_size`` is.

        Batch i holds this rank's samples i*B .. i*B + B - 1 of the single-sample sequence (the last one may
        be short when ``num_epochs`` ends the data), so stacking B samples and taking one batch agree
        exactly, ``state_dict()`` included; the gather is vectorized over the batch.
        """
        if batch_size < 1:
            raise ConfigError(f"batch_size must be >= 1, got {batch_size}")
        return self._items(batch_size)

    def data_loader(
        self, *, num_workers: int = 0, prefetch_factor: int | None = None, **kwargs: Any
    ) -> TokenDataLoader:
        """A torch DataLoader over this loader whose main process tracks the position (for ``state_dict``)."""
        return TokenDataLoader(self, num_workers=num_workers, prefetch_factor=prefetch_factor, **kwargs)


_RAMP = np.arange(0, dtype=np.int64)


def _ramp(size: int) -> np.ndarray:
    """``arange(size)`` as a view of a cached, growing array (one allocation per process, not per batch)."""
    global _RAMP
    if len(_RAMP) < size:
        _RAMP = np.arange(max(size, 2 * len(_RAMP)), dtype=np.int64)
    return _RAMP[:size]


def _shared_empty(shape: tuple[int, ...]) -> torch.Tensor:
    """An uninitialized int64 tensor in shared memory (what DataLoader's own collate does in workers)."""
    new_shared = getattr(torch.UntypedStorage, "_new_shared", None)
    if new_shared is None:  # a torch without the (private) constructor: allocate, then move (one copy)
        return torch.empty(shape, dtype=torch.int64).share_memory_()
    return torch.empty(0, dtype=torch.int64).set_(new_shared(math.prod(shape) * 8), 0, shape)
