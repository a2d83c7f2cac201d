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
``state_dict`` right in the main process).

State. ``state_dict()`` = {version, fingerprint, seed, consumed (global samples), counts (per-source
``n_s`` at ``consumed``), weights}: plain ints/floats/strings. Every rank saves the same dict (ranks step
in lockstep). Loading it with any world size continues the same global sequence at ``consumed``: rank r'
of W' resumes at g = consumed + r'. ``set_weights`` changes the mixture from the next sample on; the
counts carry over, so nothing is repeated or skipped within a source's epoch.

Each yielded sample is a dict of int64 tensors ``input_ids``, ``labels`` and ``positions``, each
``[seq_len]`` (``[batch_size, seq_len]`` with ``batch_size``); ``positions`` restart at 0 at each document
start, for document-masked attention (e.g. ``positions == 0`` marks the boundaries).
"""

from __future__ import annotations

import hashlib
import logging
import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
import torch
from zephyr.tokenize.format import read_manifest
from zephyr.tokenize.permutation import derive_key, permute, uniform01
from zephyr.tokenize.storage import ShardStore

from zephyr.errors import ConfigError, ResumeError

__all__ = ["TokenLoader", "TokenDataLoader", "Packing", "STATE_VERSION"]

log = logging.getLogger(__name__)

Packing = Literal["tokens", "documents"]
STATE_VERSION = 1
IGNORE_INDEX = -100
_PLAN_BLOCK = 256


@dataclass
class _Source:
    """One shard set and its fixed sample spans."""

    name: str
    store: ShardStore
    seq_len: int
    packing: Packing
    shard_samples: np.ndarray = field(init=False)
    cum_samples: np.ndarray = field(init=False)
    _spans: dict[int, tuple[np.ndarray, np.ndarray]] = field(init=False, default_factory=dict)

    def __post_init__(self) -> None:
        shards = self.store.manifest.shards
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

    @property
    def num_samples(self) -> int:
        return int(self.cum_samples[-1])

    def _doc_spans(self, shard: int) -> tuple[np.ndarray, np.ndarray]:
        """(start, length) of each document-aligned sample of a shard (greedy whole-document fill)."""
        cached = self._spans.get(shard)
        if cached is not None:
            return cached
        offsets = self.store.offsets(shard)
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
        """(shard, token start, length) of source-local sample indices."""
        shard = np.searchsorted(self.cum_samples, sample, side="right") - 1
        local = sample - self.cum_samples[shard]
        if self.packing == "tokens":
            return shard, local * self.seq_len, np.full(len(sample), self.seq_len + 1, dtype=np.int64)
        starts = np.empty(len(sample), dtype=np.int64)
        lengths = np.empty(len(sample), dtype=np.int64)
        for i, (s, j) in enumerate(zip(shard.tolist(), local.tolist())):
            spans = self._doc_spans(s)
            starts[i], lengths[i] = spans[0][j], spans[1][j]
        return shard, starts, lengths


@dataclass
class _Plan:
    """The next rank-local samples, planned as one vectorized block."""

    g: np.ndarray  # global indices
    source: np.ndarray
    shard: np.ndarray
    start: np.ndarray
    length: np.ndarray
    counts_end: np.ndarray  # per-source counters after the block's last global index


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
        self._arange = np.arange(seq_len, dtype=np.int64)

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
        counts = self._start_counts.copy()
        for lo in range(self._start, g_end, 1 << 20):
            hi = min(g_end, lo + (1 << 20))
            counts += np.bincount(self._choose(np.arange(lo, hi)), minlength=len(self._sources))
        return counts

    def _rebase(self) -> None:
        """Move the start to the current position (needed before the weights change)."""
        g = self.consumed
        self._start_counts = self._counts_at(g)
        self._start, self._yielded = g, 0

    def mix_counts(self) -> dict[str, int]:
        """Realized mixture: samples drawn from each source so far, over all ranks (global counters)."""
        return dict(zip(self.sources, self._counts_at(self.consumed).tolist()))

    def set_weights(self, weights: Mapping[str, float]) -> None:
        """Change the mixture weights from the next sample on (call between steps, on every rank)."""
        values = self._check_weights(weights)
        self._rebase()
        self._weights = values
        self._weights_version += 1

    def state_dict(self) -> dict[str, Any]:
        """Plain JSON-serializable resume state (see the module docstring)."""
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
        self._start, self._start_counts, self._yielded = int(state["consumed"]), counts, 0
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
        width = self.world_size
        all_g = np.arange(base_g, base_g + count * width, dtype=np.int64)
        choice = self._choose(all_g)
        onehot = np.zeros((len(all_g), len(self._sources)), dtype=np.int64)
        onehot[np.arange(len(all_g)), choice] = 1
        before = np.cumsum(onehot, axis=0) - onehot + base_counts  # counters before each global index
        mine = np.arange(count) * width + self.rank
        g, source = all_g[mine], choice[mine]
        n = before[mine, source]
        shard = np.empty(count, dtype=np.int64)
        start = np.empty(count, dtype=np.int64)
        length = np.empty(count, dtype=np.int64)
        for s, src in enumerate(self._sources):
            sel = np.flatnonzero(source == s)
            if not len(sel):
                continue
            epoch = n[sel] // src.num_samples
            local = n[sel] % src.num_samples
            sample = np.empty(len(sel), dtype=np.int64)
            for e in np.unique(epoch).tolist():
                in_epoch = epoch == e
                sample[in_epoch] = permute(
                    local[in_epoch], src.num_samples, derive_key(self._source_keys[s], e)
                )
            shard[sel], start[sel], length[sel] = src.locate(sample)
        counts_end = base_counts + onehot.sum(axis=0)  # counters after all count * W global indices
        return _Plan(g, source, shard, start, length, counts_end)

    # ---- iteration -------------------------------------------------------------------------------------
    def _worker_split(self) -> tuple[int, int]:
        info = torch.utils.data.get_worker_info()
        return (0, 1) if info is None else (info.id, info.num_workers)

    def _sample_arrays(
        self, source: int, shard: int, start: int, length: int, out: np.ndarray, pos: np.ndarray
    ) -> None:
        """Fill ``out[:seq_len+1]`` (tokens, padded) and ``pos[:seq_len]`` for one planned sample."""
        opened = self._sources[source].store.open(shard)
        out[:length] = opened.tokens[start : start + length]
        L = self.seq_len
        if length <= L:
            out[length:] = self.pad_id
        offsets = opened.offsets
        first = int(offsets.searchsorted(start, side="right")) - 1
        last = int(offsets.searchsorted(start + L, side="left"))
        # segment starts (relative to the window) and their lengths; positions = t - start of t's segment
        bounds = offsets[first + 1 : last] - start
        if length < L:  # padding (documents packing) is its own segment, starting at input index `length`
            bounds = np.append(bounds[bounds < length], length)
        seg_starts = np.empty(len(bounds) + 1, dtype=np.int64)
        seg_starts[0] = offsets[first] - start
        seg_starts[1:] = bounds
        edges = np.empty(len(bounds) + 2, dtype=np.int64)
        edges[0], edges[-1] = 0, L
        edges[1:-1] = bounds
        np.subtract(self._arange, np.repeat(seg_starts, np.diff(edges)), out=pos)

    def _emit(
        self, tokens: np.ndarray, positions: np.ndarray, lengths: np.ndarray
    ) -> dict[str, torch.Tensor]:
        L = self.seq_len
        ids = torch.from_numpy(tokens[:, :L].copy())
        labels = torch.from_numpy(tokens[:, 1:].copy())
        short = lengths < L + 1
        if short.any():
            mask = np.arange(L)[None, :] >= (lengths[:, None] - 1)
            labels[torch.from_numpy(mask)] = IGNORE_INDEX
        batch = {"input_ids": ids, "labels": labels, "positions": torch.from_numpy(positions)}
        if self.batch_size is None:
            batch = {k: v[0] for k, v in batch.items()}
        if self.pin_memory:
            batch = {k: v.pin_memory() for k, v in batch.items()}
        return batch

    def __iter__(self) -> Iterator[dict[str, torch.Tensor]]:
        worker, num_workers = self._worker_split()
        in_main = torch.utils.data.get_worker_info() is None
        chunk = self.batch_size or 1
        limit = self._limit()
        version = self._weights_version
        base_g = self.consumed
        base_counts = self._counts_at(base_g)
        start_yielded = self._yielded
        k = 0  # rank-local samples planned so far by this iterator
        L = self.seq_len
        while True:
            count = _PLAN_BLOCK * chunk  # a multiple of chunk: items never straddle blocks
            if limit is not None:
                count = min(count, math.ceil((limit - base_g - self.rank) / self.world_size))
                if count <= 0:
                    return
            plan = self._plan(count, base_g, base_counts)
            src_l, shard_l = plan.source.tolist(), plan.shard.tolist()
            start_l, len_l = plan.start.tolist(), plan.length.tolist()
            for i in range(0, count, chunk):
                n = min(chunk, count - i)
                if ((k + i) // chunk) % num_workers != worker:
                    continue
                tokens = np.empty((n, L + 1), dtype=np.int64)
                positions = np.empty((n, L), dtype=np.int64)
                lengths = np.empty(n, dtype=np.int64)
                for j in range(n):
                    self._sample_arrays(
                        src_l[i + j], shard_l[i + j], start_l[i + j], len_l[i + j], tokens[j], positions[j]
                    )
                    lengths[j] = len_l[i + j]
                item = self._emit(tokens, positions, lengths)
                if in_main:
                    self._yielded = start_yielded + k + i + n  # before the yield: state_dict() sees it
                yield item
                if in_main and self._weights_version != version:
                    # set_weights/load_state_dict between steps: continue from the new state
                    yield from self.__iter__()
                    return
            k += count
            base_g += count * self.world_size
            base_counts = plan.counts_end

    def data_loader(
        self, *, num_workers: int = 0, prefetch_factor: int | None = None, **kwargs: Any
    ) -> TokenDataLoader:
        """A torch DataLoader over this loader whose main process tracks the position (for ``state_dict``)."""
        return TokenDataLoader(self, num_workers=num_workers, prefetch_factor=prefetch_factor, **kwargs)


class TokenDataLoader:
    """Wraps ``torch.utils.data.DataLoader(loader, batch_size=None, num_workers=K)``.

    Workers each produce every K-th item; DataLoader returns them in order, so the sequence equals the
    single-process one. Each item received advances the wrapped loader's position in the main process, so
    ``loader.state_dict()`` is exact. Pinned memory follows ``loader.pin_memory``. After ``set_weights`` or
    ``load_state_dict`` the worker iterator is rebuilt from the new state (workers hold copies).
    """

    def __init__(
        self, loader: TokenLoader, *, num_workers: int = 0, prefetch_factor: int | None = None, **kwargs: Any
    ):
        self.loader = loader
        self.num_workers = num_workers
        self.kwargs = dict(kwargs)
        if num_workers > 0:
            self.kwargs.setdefault("prefetch_factor", prefetch_factor or 4)
            self.kwargs.setdefault("persistent_workers", False)

    def __iter__(self) -> Iterator[dict[str, torch.Tensor]]:
        loader = self.loader
        while True:
            version = loader._weights_version
            pinned = loader.pin_memory
            loader.pin_memory = False  # workers cannot pin; the DataLoader's pin thread does it
            try:
                data_loader = torch.utils.data.DataLoader(
                    loader, batch_size=None, num_workers=self.num_workers, pin_memory=pinned, **self.kwargs
                )
                iterator = iter(data_loader)
            finally:
                loader.pin_memory = pinned
            restarted = False
            try:
                for item in iterator:
                    if self.num_workers > 0:  # workers advanced their own copies; mirror it here
                        loader._yielded += 1 if loader.batch_size is None else int(item["input_ids"].shape[0])
                    yield item
                    if self.num_workers > 0 and loader._weights_version != version:
                        restarted = True
                        break
            finally:
                del iterator
            if not restarted:
                return
