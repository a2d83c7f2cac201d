"""``TokenLoader``: a deterministic, resumable, rank-aware torch ``IterableDataset`` over token shards.

Overview
--------
The loader is a composition: a *source* is one token-shard set and its fixed samples for the packing mode
(``zephyr.tokenize.sources``: ``"tokens"`` windows, ``"documents"`` padded whole documents, ``"best-fit"``
bins from ``zephyr.tokenize.packing``); a ``Mixture`` (``zephyr.tokenize.mixing``) says which source each
global sample index draws from (weights, a schedule, per-source epoch caps); a ``Gatherer``
(``zephyr.tokenize.gather``) turns planned samples into tensors; an optional instance filter
(``zephyr.tokenize.filters``) masks the loss of repetitive samples; an optional ``ShardPrefetcher``
(``zephyr.tokenize.prefetch``) copies remote shards ahead of use.

Order. The loader walks one *global sample index* g = 0, 1, 2, ... For each g the mixture picks a source by a
counter-based hash of (seed, g) — a pure function, no RNG state; with one source it is always that source.
The source's own counter ``n_s`` (how many of its samples were drawn before) picks the sample: epoch
``e = n_s // N_s``, and sample ``perm_{seed,source,e}(n_s % N_s)``, a seeded Feistel permutation
(``zephyr.tokenize.permutation``). So the order is a pure function of (seed, epoch, global index) and the
weights in effect, every sample of a source appears exactly once per epoch of it, and nothing is
materialized per sample.

Ranks and workers. Rank r of W takes g = start + r, start + r + W, ... (start = the resumed position).
Inside a rank, DataLoader worker w of K takes the rank's chunks c with c % K == w, a chunk being one yielded
item (one sample, or one batch with ``batch_size``); ``DataLoader``'s in-order round robin then reproduces
the single-process sequence exactly (use ``loader.data_loader(num_workers=K)``, which also keeps
``state_dict`` right in the main process). A plain ``DataLoader(loader, num_workers=K)`` cannot: its workers
advance copies the parent never sees, so afterwards ``state_dict()`` raises ``ResumeError`` pointing to
``data_loader`` rather than return a stale position (``zephyr.tokenize.data_loader``).

State. ``state_dict()`` = {version, fingerprint, seed, consumed (global samples), counts (per-source
``n_s`` at ``consumed``), weights (in effect at ``consumed``), sources}: plain ints/floats/strings. Every
rank saves the same dict (ranks step in lockstep). Loading it with any world size continues the same global
sequence at ``consumed``: rank r' of W' resumes at g = consumed + r'. The weights the loader was built with
(evaluated at ``consumed``: its schedule included) must equal the saved ones, else ``load_state_dict``
raises naming both, unless ``reweight=True``, which applies this loader's weights from ``consumed`` on.
``set_weights`` changes the mixture from the next sample on; the counts carry over, so nothing is repeated or
skipped within a source's epoch.

Each yielded sample is a dict of int64 tensors ``input_ids``, ``labels`` and ``positions``, each
``[seq_len]`` (``[batch_size, seq_len]`` with ``batch_size`` or ``iter_batches``); ``positions`` restart at
0 at each document start (at each piece, for best-fit), for document-masked attention.

Construction and iteration are here; the position and its state dict are ``zephyr.tokenize.loader_state``
(``LoaderPosition``, a base class of ``TokenLoader``).

Samples are planned 4096 at a time (source choice, counters, Feistel permutation, shard and token offset: all
vectorized), then gathered a batch (or 64 single samples) at a time; benchmarks/loader_throughput.py
measures it (rows in benchmarks/RESULTS.md).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Generator, Iterator, Mapping, Sequence
from typing import Any

import numpy as np
import torch
from zephyr.tokenize.data_loader import TokenDataLoader, WorkerGuard
from zephyr.tokenize.filters import RepetitionFilter
from zephyr.tokenize.gather import Gatherer, Plan, shared_empty
from zephyr.tokenize.loader_setup import check_arguments, open_sources, source_weights
from zephyr.tokenize.loader_state import STATE_VERSION, LoaderPosition
from zephyr.tokenize.mixing import Mixture
from zephyr.tokenize.packing import DEFAULT_WINDOW
from zephyr.tokenize.permutation import derive_key
from zephyr.tokenize.prefetch import CacheBudget, ShardPrefetcher, upcoming_shards
from zephyr.tokenize.sample_plan import plan_samples
from zephyr.tokenize.sources import Packing

from zephyr.errors import ConfigError

__all__ = ["TokenLoader", "TokenDataLoader", "Packing", "STATE_VERSION"]

log = logging.getLogger(__name__)

_PLAN_SAMPLES = 4096  # rank-local samples planned per vectorized block (rounded up to whole items)
_SAMPLE_GATHER = 64  # samples gathered at once when yielding single samples
_FIELDS = ("input_ids", "labels", "positions")


class TokenLoader(LoaderPosition, torch.utils.data.IterableDataset):
    """Samples of ``seq_len`` tokens (+1 for labels) from one token-shard set or a weighted mixture.

    Args:
        sources: a shard-set path/URL, ``{path: weight}`` for a mixture (weights need not sum to 1), or a
            list of paths when ``mix`` derives the weights.
        seq_len: tokens per sample (``input_ids`` length).
        seed: order seed (independent of the writer's shuffle seed).
        rank / world_size: this process's data-parallel rank and the number of ranks.
        batch_size: ``None`` yields single samples; an int yields ``[batch_size, seq_len]`` batches
            (rank-local micro-batches) and makes DataLoader workers split by batch.
        packing: ``"tokens"`` (contiguous windows), ``"documents"`` (document-aligned, padded) or
            ``"best-fit"`` (documents and pieces of long ones packed into bins, ``zephyr.tokenize.packing``).
        packing_window: best-fit only: documents packed together (bounds the packing's memory).
        num_epochs: stop after this many epochs of the (single) source; ``None`` runs forever.
        mix: weights from token counts instead of ``sources``' values: ``"temperature:T"`` or
            ``"unimax:epochs=N"`` (``zephyr.tokenize.mixing``).
        mix_budget_tokens: UniMax's training budget in tokens (unless the spec gives ``budget=``).
        max_epochs: cap on each source's repetition (one number, or ``{path: epochs}``); a capped source
            stops being drawn and the others share its weight. ``unimax:epochs=N`` implies N.
        schedule: weight changes ``[(global sample index, {path: weight}), ...]``, piecewise constant.
        instance_filter: a ``RepetitionFilter``: flagged samples get labels -100 (``filtered`` counts them).
        pad_id: padding id for ``"documents"``/``"best-fit"`` (default: the set's EOS id).
        cache_dir: local directory for copies of remote (fsspec) shards.
        cache_limit_bytes: bound on ``cache_dir`` (least recently used verified copies are evicted).
        prefetch_shards: remote shards copied ahead of use by a background thread (0: none).
        verify: check each shard file's sha256 before first use in a process.
        pin_memory: pin yielded tensors (default: when CUDA is available).
    """

    def __init__(
        self,
        sources: str | Mapping[str, float] | Sequence[str],
        *,
        seq_len: int,
        seed: int = 0,
        rank: int = 0,
        world_size: int = 1,
        batch_size: int | None = None,
        packing: Packing = "tokens",
        packing_window: int = DEFAULT_WINDOW,
        num_epochs: int | None = None,
        mix: str | None = None,
        mix_budget_tokens: float | None = None,
        max_epochs: float | Mapping[str, float] | None = None,
        schedule: Sequence[tuple[int, Mapping[str, float]]] = (),
        instance_filter: RepetitionFilter | None = None,
        pad_id: int | None = None,
        cache_dir: str | None = None,
        cache_limit_bytes: int | None = None,
        prefetch_shards: int = 0,
        verify: bool = True,
        pin_memory: bool | None = None,
    ):
        super().__init__()
        check_arguments(
            seq_len=seq_len,
            rank=rank,
            world_size=world_size,
            batch_size=batch_size,
            packing=packing,
            packing_window=packing_window,
            prefetch_shards=prefetch_shards,
        )
        weights = source_weights(sources)
        self.seq_len, self.seed, self.rank, self.world_size = seq_len, seed, rank, world_size
        self.batch_size, self.packing, self.num_epochs = batch_size, packing, num_epochs
        self.packing_window = packing_window
        self.cache_dir, self.verify, self.instance_filter = cache_dir, verify, instance_filter
        self.prefetch_shards, self.cache_limit_bytes = prefetch_shards, cache_limit_bytes
        self.pin_memory = torch.cuda.is_available() if pin_memory is None else pin_memory
        self._sources = open_sources(
            weights, seq_len, packing, packing_window, cache_dir=cache_dir, verify=verify
        )
        if num_epochs is not None and len(self._sources) > 1:
            raise ConfigError("num_epochs applies to a single source; a mixture runs until you stop it")
        self.pad_id = self._sources[0].store.manifest.eos_id if pad_id is None else pad_id
        self._mixture = Mixture.build(
            self.sources,
            weights,
            tokens=[src.store.manifest.num_tokens for src in self._sources],
            samples=[src.num_samples for src in self._sources],
            key=derive_key(seed, 0xC401CE),
            mix=mix,
            budget_tokens=mix_budget_tokens,
            max_epochs=max_epochs,
        )
        self._mixture.set_schedule(schedule)
        self._source_keys = [derive_key(seed, 0x5EED, i) for i in range(len(self._sources))]
        self._fingerprint = self._make_fingerprint()
        self._gatherer = Gatherer(self._sources, seq_len, self.pad_id)
        self._prefetcher: ShardPrefetcher | None = None
        # position: the global index where this run (re)started, the per-source counters there, and how many
        # samples this rank has handed out since
        self._start = 0
        self._start_counts = np.zeros(len(self._sources), dtype=np.int64)
        self._yielded = 0
        self.filtered = 0  # samples this rank's instance filter flagged (main process)
        self._weights_version = 0
        # set by DataLoader workers that no TokenDataLoader started; shared with them (zephyr.tokenize.data_loader)
        self.worker_guard = WorkerGuard()
        self._counts_cache = (0, self._start_counts.copy())  # (g, counters at g): state_dict stays O(step)

    # ---- configuration ---------------------------------------------------------------------------------
    def set_schedule(self, schedule: Sequence[tuple[int, Mapping[str, float]]]) -> None:
        """Replace the weight schedule: ``[(global sample index, {path: weight}), ...]`` on top of the initial
        weights (before iterating, or between steps on every rank)."""
        self._mixture.set_schedule(schedule)
        self._weights_version += 1

    @property
    def weights(self) -> dict[str, float]:
        """The configured weights in effect at the current position (before any cap)."""
        return dict(zip(self.sources, self._mixture.weights_at(self.consumed).tolist()))

    def num_samples(self, source: str | None = None) -> int:
        """Samples in one epoch of a source (the only one when ``source`` is None)."""
        index = 0 if source is None else self.sources.index(source)
        return self._sources[index].num_samples

    def source_tokens(self) -> dict[str, int]:
        """Tokens in each source (from the manifests)."""
        return {s.name: s.store.manifest.num_tokens for s in self._sources}

    def __len__(self) -> int:
        """Items this rank yields (only with ``num_epochs``; a mixture or endless loader has no length)."""
        if self.num_epochs is None:
            raise TypeError("an endless TokenLoader (num_epochs=None) has no len()")
        total = self.num_epochs * self._sources[0].num_samples
        mine = max(0, math.ceil((total - self._start - self.rank) / self.world_size))
        return mine if self.batch_size is None else math.ceil(mine / self.batch_size)

    # ---- planning --------------------------------------------------------------------------------------
    def _limit(self) -> int | None:
        if self.num_epochs is None:
            return None
        return self.num_epochs * self._sources[0].num_samples

    def _plan(self, count: int, base_g: int, base_counts: np.ndarray) -> Plan:
        """Plan this rank's next ``count`` samples (``sample_plan.plan_samples``)."""
        return plan_samples(
            self._mixture,
            self._sources,
            self._source_keys,
            self.rank,
            self.world_size,
            count,
            base_g,
            base_counts,
        )

    def _blocks(self, chunk: int, base_g: int, base_counts: np.ndarray) -> Iterator[tuple[int, Plan]]:
        """(samples planned before, plan) per block from ``base_g``; a block holds whole items of ``chunk``."""
        limit, k = self._limit(), 0
        while True:
            count = chunk * -(-_PLAN_SAMPLES // chunk)  # whole items: an item never straddles two blocks
            if limit is not None:
                count = min(count, math.ceil((limit - base_g - self.rank) / self.world_size))
            if count <= 0:
                return
            plan = self._plan(count, base_g, base_counts)
            yield k, plan
            if len(plan.source) < count:  # the mixture ran out of sources
                return
            k += count
            base_g += count * self.world_size
            base_counts = plan.counts_end

    # ---- iteration -------------------------------------------------------------------------------------
    def _allocate(self, n: int, in_worker: bool) -> torch.Tensor:
        """``[3, n, seq_len]`` int64 for one gather (input_ids, labels, positions).

        In a DataLoader worker it is allocated in shared memory: torch moves a tensor's storage to shared
        memory when it crosses the worker queue, which would otherwise copy every item once more.
        """
        shape = (3, n, self.seq_len)
        return shared_empty(shape) if in_worker else torch.empty(shape, dtype=torch.int64)

    def _start_prefetcher(self) -> ShardPrefetcher | None:
        """The prefetch thread of this process (remote sets with ``prefetch_shards`` > 0 only)."""
        stores = [src.store for src in self._sources]
        if self._prefetcher is None and self.prefetch_shards > 0 and any(s.remote for s in stores):
            budget = None
            if self.cache_limit_bytes is not None:
                cache_dir = next(s.cache_dir for s in stores if s.remote)
                budget = CacheBudget(cache_dir, self.cache_limit_bytes, [s for s in stores if s.remote])
                for store in stores:
                    store.budget = budget
            self._prefetcher = ShardPrefetcher(stores, self.prefetch_shards, budget)
        return self._prefetcher

    def prime(self, timeout: float | None = None) -> bool:
        """Start the prefetcher on the shards of the next samples and wait until they are cached (optional:
        iteration starts it too). True when every wanted shard is local."""
        prefetcher = self._start_prefetcher()
        if prefetcher is None:
            return True
        for src in self._sources:  # positions need every offsets file (small): copied here, in this thread
            src.doc_starts()
        plans = self._blocks(self.batch_size or 1, self.consumed, self._counts_at(self.consumed))
        plan = next(plans, (0, None))[1]
        if plan is not None:
            prefetcher.want(upcoming_shards([plan], 0, self.prefetch_shards))
        return prefetcher.wait_primed(timeout)

    def close(self) -> None:
        """Stop this process's prefetch thread (iterating again starts a new one)."""
        if self._prefetcher is not None:
            self._prefetcher.close()
            self._prefetcher = None

    def waits(self) -> tuple[int, float]:
        """(times, seconds) this process's reader blocked on a remote copy, over every source."""
        stores = [src.store for src in self._sources]
        return sum(s.waits for s in stores), sum(s.wait_seconds for s in stores)

    def __getstate__(self) -> dict:
        return {**self.__dict__, "_prefetcher": None}  # threads stay in their process

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
            self.worker_guard.mark_plain_worker()
        chunk = batch_size or 1
        version = self._weights_version
        start_yielded = self._yielded
        prefetcher = self._start_prefetcher()
        blocks = self._blocks(chunk, self.consumed, self._counts_at(self.consumed))
        for (k, plan), ahead in _with_next(blocks, prefetcher is not None):  # ahead: to prefetch its shards
            count = len(plan.source)
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
                if prefetcher is not None:
                    later = [plan] if ahead is None else [plan, ahead[1]]
                    prefetcher.want(upcoming_shards(later, int(positions[0]), self.prefetch_shards))
                out = self._allocate(len(positions), not in_main)
                array = out.numpy()
                self._gatherer.gather(plan, positions, array)
                dropped = self._filter(array, plan.length[positions])
                if self.pin_memory:
                    out = out.pin_memory()
                if batch_size is None:  # unbind: one call per field for all the rows' views
                    rows = zip(*(column.unbind(0) for column in out.unbind(0)))
                    items = [(dict(zip(_FIELDS, row)), p + 1) for row, p in zip(rows, positions.tolist())]
                else:
                    items = [(dict(zip(_FIELDS, out.unbind(0))), int(positions[-1]) + 1)]
                if in_main:
                    self.filtered += dropped
                for item, done in items:
                    if in_main:
                        self._yielded = start_yielded + k + done  # before the yield: state_dict() sees it
                    yield item
                    if in_main and self._weights_version != version:
                        return True  # set_weights/load_state_dict between steps: continue from the new state
        return False

    def _filter(self, out: np.ndarray, length: np.ndarray) -> int:
        """Apply the instance filter to a gathered block: flagged rows lose their labels; their count."""
        if self.instance_filter is None:
            return 0
        real = None if self.packing == "tokens" else np.minimum(length, self.seq_len)
        flagged = self.instance_filter.flags(out[0], real)
        if flagged.any():
            out[1][flagged] = -100
        return int(flagged.sum())

    def __iter__(self) -> Iterator[dict[str, torch.Tensor]]:
        return self._items(self.batch_size)

    def iter_batches(self, batch_size: int) -> Iterator[dict[str, torch.Tensor]]:
        """``[batch_size, seq_len]`` batches from the current position, whatever ``self.batch_size`` is.

        Batch i holds this rank's samples i*B .. i*B + B - 1 of the single-sample sequence (the last one may
        be short when the data ends), so stacking B samples and taking one batch agree exactly,
        ``state_dict()`` included; the gather is vectorized over the batch.
        """
        if batch_size < 1:
            raise ConfigError(f"batch_size must be >= 1, got {batch_size}")
        return self._items(batch_size)

    def data_loader(
        self, *, num_workers: int = 0, prefetch_factor: int | None = None, **kwargs: Any
    ) -> TokenDataLoader:
        """A torch DataLoader over this loader whose main process tracks the position (for ``state_dict``)."""
        return TokenDataLoader(self, num_workers=num_workers, prefetch_factor=prefetch_factor, **kwargs)


def _with_next(items: Iterator[Any], look_ahead: bool) -> Iterator[tuple[Any, Any]]:
    """(item, the next item or None) pairs; without ``look_ahead`` the next is never taken early (None)."""
    current = next(items, None)
    while current is not None:
        following = next(items, None) if look_ahead else None
        yield current, following
        current = following if look_ahead else next(items, None)
