"""``TokenLoader``: a deterministic, resumable, rank-aware torch ``IterableDataset`` over token shards, and
``TokenDataLoader``, the torch DataLoader over it that keeps its position exact.

Overview
--------
The loader is a composition: a *source* is one token-shard set and its fixed samples for the packing mode
(``zephyr.tokenize._samples``: ``"tokens"`` windows, ``"documents"`` padded whole documents, ``"best-fit"``
bins); a ``Mixture`` (``zephyr.tokenize.mixing``) says which source each global sample index draws from
(weights, a schedule, per-source epoch caps); a ``Gatherer`` (``zephyr.tokenize._samples``) turns planned
samples into tensors; an optional instance filter (``RepetitionFilter``) masks the loss of repetitive samples;
an optional ``ShardPrefetcher`` (``zephyr.tokenize._storage``) copies remote shards ahead of use. Each source is
one shard set read through a ``ShardStore`` (local or fsspec, sha256-verified on first use); every argument is
checked before any source opens, naming the argument and the value it got.

Order. The loader walks one *global sample index* g = 0, 1, 2, ... For each g the mixture picks a source by a
counter-based hash of (seed, g) — a pure function, no RNG state; with one source it is always that source.
The source's own counter ``n_s`` (how many of its samples were drawn before) picks the sample: epoch
``e = n_s // N_s``, and sample ``perm_{seed,source,e}(n_s % N_s)``, a seeded Feistel permutation
(``zephyr.tokenize.mixing.permute``). So the order is a pure function of (seed, epoch, global index) and the
weights in effect, every sample of a source appears exactly once per epoch of it, and nothing is
materialized per sample. ``TokenLoader._plan`` computes it for a block of a rank's indices at once: the choices of
every rank in between are replayed (vectorized), so each source's counter, hence its permutation position, is
exact.

Ranks and workers. Rank r of W takes g = start + r, start + r + W, ... (start = the resumed position).
Inside a rank, DataLoader worker w of K takes the rank's chunks c with c % K == w, a chunk being one yielded
item (one sample, or one batch with ``batch_size``); ``DataLoader``'s in-order round robin then reproduces
the single-process sequence exactly (use ``loader.data_loader(num_workers=K)``, which also keeps
``state_dict`` right in the main process).

The DataLoader trap. ``torch.utils.data.DataLoader(loader, num_workers=K)`` works, but each worker process
iterates its own copy of the loader: the parent's position never moves, so ``loader.state_dict()["consumed"]``
stays where it was, and a resume from it silently restarts the epoch. With the DataLoader's own
``batch_size=B``, each batch is B consecutive samples of *one* worker (worker w holds every K-th sample), so
the order differs from the single-process one as well. The supported path is
``loader.data_loader(num_workers=K)`` (``TokenDataLoader``): ``batch_size=None`` in the DataLoader (batches come from
``TokenLoader(batch_size=B)``, gathered per worker in the single-process order), and every item received
advances the parent's position, so ``state_dict()`` is exact. Each ``TokenLoader`` holds a guard: a
one-element int64 tensor in shared memory; a forked worker maps the same pages and a spawned one receives it
through torch's shared-memory pickling. A worker iterating a copy that no ``TokenDataLoader`` started sets it;
afterwards the parent's ``state_dict()``, ``mix_counts()`` and ``set_weights()`` raise ``ResumeError`` naming
the fix (``_check_position``) instead of returning a stale position.
``load_state_dict`` sets the position again, and clears it. A plain DataLoader with ``num_workers=0`` iterates
the parent's own object: its position stays exact, and nothing is raised.

State. The position is three numbers: the global sample index where this run (re)started (``_start``), the
per-source counters there (``_start_counts``) and the samples this rank has handed out since (``_yielded``);
every other count is replayed from them by the mixture. ``state_dict()`` = {version, fingerprint, seed,
consumed (global samples), counts (per-source ``n_s`` at ``consumed``), weights (in effect at ``consumed``),
sources}: plain ints/floats/strings (``STATE_VERSION`` names the format). Every rank saves the same dict
(ranks step in lockstep). Loading it with any world size continues the same global sequence at ``consumed``:
rank r' of W' resumes at g = consumed + r'. It refuses state of other data or settings (the fingerprint: shard
manifests, ``seq_len``, packing), and the weights the loader was built with (evaluated at ``consumed``: its
schedule included) must equal the saved ones, else ``load_state_dict`` raises naming both, unless
``reweight=True``, which applies this loader's weights from ``consumed`` on. ``set_weights`` changes the
mixture from the next sample on; the counts carry over, so nothing is repeated or skipped within a source's
epoch.

Each yielded sample is a dict of int64 tensors ``input_ids``, ``labels`` and ``positions``, each
``[seq_len]`` (``[batch_size, seq_len]`` with ``batch_size`` or ``iter_batches``); ``positions`` restart at
0 at each document start (at each piece, for best-fit), for document-masked attention.

Samples are planned 4096 at a time (source choice, counters, Feistel permutation, shard and token offset: all
vectorized), then gathered a batch (or 64 single samples) at a time; benchmarks/loader_throughput.py
measures it (rows in benchmarks/RESULTS.md).
"""

from __future__ import annotations

import hashlib
import itertools
import logging
import math
from collections.abc import Generator, Iterator, Mapping, Sequence
from typing import Any

import numpy as np
import torch
from zephyr.tokenize._samples import (
    DEFAULT_WINDOW,
    PACKINGS,
    Gatherer,
    Packing,
    Plan,
    RepetitionFilter,
    TokenSource,
    shared_empty,
)
from zephyr.tokenize._storage import CacheBudget, ShardPrefetcher, ShardStore, upcoming_shards
from zephyr.tokenize.mixing import Mixture, derive_key, normalize_weights, permute
from zephyr.tokenize.shards import read_manifest

from zephyr.config import describe_type, describe_value, fits
from zephyr.errors import ConfigError, ResumeError

log = logging.getLogger(__name__)

STATE_VERSION = 1
"""The loader state's format (``state_dict``); checkpoints hold it."""

_PLAN_SAMPLES = 4096  # rank-local samples planned per vectorized block (rounded up to whole items)
_SAMPLE_GATHER = 64  # samples gathered at once when yielding single samples
_FIELDS = ("input_ids", "labels", "positions")
_OWN_KWARGS = ("batch_size", "batch_sampler", "sampler", "shuffle", "drop_last", "collate_fn")
"""DataLoader arguments ``TokenDataLoader`` sets itself: batches and order come from the ``TokenLoader``."""


class TokenLoader(torch.utils.data.IterableDataset):
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
            ``"best-fit"`` (documents and pieces of long ones packed into bins, ``zephyr.tokenize._samples``).
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
        self.seq_len, self.seed, self.rank, self.world_size = seq_len, seed, rank, world_size
        self.batch_size, self.packing, self.num_epochs = batch_size, packing, num_epochs
        self.packing_window = packing_window
        self.cache_dir, self.verify, self.instance_filter = cache_dir, verify, instance_filter
        self.prefetch_shards, self.cache_limit_bytes = prefetch_shards, cache_limit_bytes
        if seq_len < 1:  # refuse, naming the argument, what the loader cannot run with (see the Args above)
            raise ConfigError(f"seq_len must be >= 1, got {seq_len}")
        if world_size < 1 or not 0 <= rank < world_size:
            raise ConfigError(f"need 0 <= rank < world_size, got rank={rank}, world_size={world_size}")
        if batch_size is not None and batch_size < 1:
            raise ConfigError(f"batch_size must be >= 1 or None, got {batch_size}")
        if packing not in PACKINGS:
            raise ConfigError(f"packing must be one of {', '.join(map(repr, PACKINGS))}, got {packing!r}")
        if packing_window < 1 or prefetch_shards < 0:
            raise ConfigError(
                f"need packing_window >= 1 and prefetch_shards >= 0, got {packing_window}, {prefetch_shards}"
            )
        if isinstance(sources, str):  # {path: weight}: a path, a mapping or a list of paths (weight 1 each)
            weights = {sources: 1.0}
        elif isinstance(sources, Mapping):
            weights = {str(k): float(v) for k, v in sources.items()}
        else:
            weights = {str(p): 1.0 for p in sources}
        if not weights:
            raise ConfigError("sources is empty; give a shard-set path or {path: weight}")
        self.pin_memory = torch.cuda.is_available() if pin_memory is None else pin_memory
        # one source per path, in order: its manifest read, its store opened
        opened = [(p, ShardStore(read_manifest(p), cache_dir=cache_dir, verify=verify)) for p in weights]
        self._sources = [TokenSource(p, store, seq_len, packing, packing_window) for p, store in opened]
        if num_epochs is not None and len(self._sources) > 1:
            raise ConfigError("num_epochs applies to a single source; a mixture runs until you stop it")
        self.pad_id = self._sources[0].store.manifest.eos_id if pad_id is None else pad_id
        self._mixture = Mixture(
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
        # the data and settings a saved position belongs to: the shard sets, seq_len and packing
        packing_key = f"{packing}:{packing_window}" if packing == "best-fit" else packing
        digest = hashlib.sha256(f"{seq_len}|{packing_key}|".encode())
        for source in self._sources:
            digest.update(source.store.manifest.fingerprint().encode())
        self._fingerprint = digest.hexdigest()[:16]
        self._gatherer = Gatherer(self._sources, seq_len, self.pad_id)
        self._prefetcher: ShardPrefetcher | None = None
        # position: the global index where this run (re)started, the per-source counters there, and how many
        # samples this rank has handed out since
        self._start = 0
        self._start_counts = np.zeros(len(self._sources), dtype=np.int64)
        self._yielded = 0
        self.filtered = 0  # samples this rank's instance filter flagged (main process)
        # changes whenever the weights or the position are set anew (set_weights, set_schedule,
        # load_state_dict): iterators and DataLoader workers started before then hold stale copies
        self.weights_version = 0
        # set to 1 by DataLoader workers that no TokenDataLoader started (``_wrapped``: one did), in shared
        # memory: a forked worker maps the same pages, a spawned one receives it through torch's pickling
        self._plain_workers = torch.zeros(1, dtype=torch.int64).share_memory_()
        self._wrapped = False
        self._counts_cache = (0, self._start_counts.copy())  # (g, counters at g): state_dict stays O(step)

    # ---- configuration ---------------------------------------------------------------------------------
    def set_schedule(self, schedule: Sequence[tuple[int, Mapping[str, float]]]) -> None:
        """Replace the weight schedule: ``[(global sample index, {path: weight}), ...]`` on top of the initial
        weights (before iterating, or between steps on every rank)."""
        self._mixture.set_schedule(schedule)
        self.weights_version += 1

    @property
    def weights(self) -> dict[str, float]:
        """The configured weights in effect at the current position (before any cap)."""
        return dict(zip(self.sources, self._mixture.weights_at(self.consumed).tolist()))

    def num_samples(self, source: str | None = None) -> int:
        """Samples in one epoch of a source (the only one when ``source`` is None)."""
        index = 0 if source is None else self.sources.index(source)
        return self._sources[index].num_samples

    def __len__(self) -> int:
        """Items this rank yields (only with ``num_epochs``; a mixture or endless loader has no length)."""
        if self.num_epochs is None:
            raise TypeError("an endless TokenLoader (num_epochs=None) has no len()")
        mine = max(0, math.ceil((self._limit() - self._start - self.rank) / self.world_size))
        return mine if self.batch_size is None else math.ceil(mine / self.batch_size)

    # ---- position and state ----------------------------------------------------------------------------
    @property
    def sources(self) -> list[str]:
        return [s.name for s in self._sources]

    @property
    def consumed(self) -> int:
        """Global samples consumed, assuming every rank has yielded as many as this one."""
        return self._start + self._yielded * self.world_size

    def count_worker_samples(self, labels: torch.Tensor) -> None:
        """Advance this rank's position past the samples (rows of ``labels``) that DataLoader workers produced
        from their copies, and count those their instance filter masked (``TokenDataLoader`` calls it)."""
        rows = labels.reshape(-1, self.seq_len)
        self._yielded += rows.shape[0]
        if self.instance_filter is not None:
            self.filtered += int((rows == -100).all(dim=1).sum())

    def _counts_at(self, g_end: int) -> np.ndarray:
        """Per-source counters at global index ``g_end`` (>= the start).

        The choices are replayed from the last computed point (cached), so calling ``state_dict()`` every
        step costs O(samples per step), not O(consumed).
        """
        cached_g, cached = self._counts_cache
        lo, counts = (
            (cached_g, cached) if self._start <= cached_g <= g_end else (self._start, self._start_counts)
        )
        for block in range(lo, g_end, 1 << 20):
            _, counts = self._mixture.choose(block, min(g_end, block + (1 << 20)), counts)
        self._counts_cache = (g_end, np.array(counts, dtype=np.int64))
        return self._counts_cache[1].copy()

    def _set_start(self, g: int, counts: np.ndarray) -> None:
        self._start, self._start_counts, self._yielded = g, counts, 0
        self._counts_cache = (g, counts.copy())

    def _check_position(self, what: str) -> None:
        """Raise ``ResumeError`` from ``what`` (``state_dict()``...) when plain DataLoader workers consumed
        samples the loader cannot count (its position ``consumed`` is then stale)."""
        if int(self._plain_workers[0]) == 0:
            return
        raise ResumeError(
            f"TokenLoader.{what}: this loader was iterated by the workers of a plain torch DataLoader "
            f"(num_workers > 0), which advance their own copies, so its position (consumed={self.consumed}) is "
            "stale and resuming from it would restart the epoch; a DataLoader batch_size also groups each "
            "worker's samples and changes the order. Iterate loader.data_loader(num_workers=K) instead (batches: "
            "TokenLoader(batch_size=B)), which keeps the single-process order and an exact state_dict()"
        )

    def mix_counts(self) -> dict[str, int]:
        """Realized mixture: samples drawn from each source so far, over all ranks (global counters)."""
        self._check_position("mix_counts()")
        return dict(zip(self.sources, self._counts_at(self.consumed).tolist()))

    def set_weights(self, weights: Mapping[str, float]) -> None:
        """Change the mixture weights from the next sample on (call between steps, on every rank); later
        schedule entries still apply."""
        self._check_position("set_weights()")
        values = normalize_weights(self.sources, dict(weights))
        g = self.consumed
        self._set_start(g, self._counts_at(g))
        self._mixture.set_weights(g, values)
        self.weights_version += 1

    def state_dict(self) -> dict[str, Any]:
        """Plain JSON-serializable resume state (see the module docstring)."""
        self._check_position("state_dict()")
        g = self.consumed
        return {
            "version": STATE_VERSION,
            "fingerprint": self._fingerprint,
            "seed": self.seed,
            "consumed": g,
            "counts": [int(c) for c in self._counts_at(g)],
            "weights": [float(w) for w in self._mixture.weights_at(g)],
            "sources": self.sources,
        }

    def load_state_dict(self, state: Mapping[str, Any], *, reweight: bool = False) -> None:
        """Resume at ``state``; refuses state from other data, seq_len, packing or seed (``ResumeError``), and
        other weights than this loader's at that point unless ``reweight`` (then this loader's apply)."""
        _check_plain(state)
        if state.get("version") != STATE_VERSION:
            raise ResumeError(f"loader state version {state.get('version')!r} is not {STATE_VERSION}")
        if state.get("fingerprint") != self._fingerprint or state.get("seed") != self.seed:
            raise ResumeError(
                f"loader state belongs to other data or settings (fingerprint {state.get('fingerprint')}, "
                f"seed {state.get('seed')}; this loader: {self._fingerprint}, seed {self.seed}); build the "
                "loader with the same shard sets, seq_len, packing and seed"
            )
        counts = np.array(state["counts"], dtype=np.int64)
        saved = np.array(state["weights"], dtype=np.float64)
        if len(counts) != len(self._sources) or len(saved) != len(self._sources):
            raise ResumeError(f"loader state has {len(counts)} sources, this loader {len(self._sources)}")
        g = int(state["consumed"])
        mine = self._mixture.weights_at(g)
        if not np.allclose(saved, mine, rtol=0, atol=1e-9):
            if not reweight:
                names = self.sources
                raise ResumeError(
                    f"the checkpoint's mixture weights at sample {g} are "
                    f"{dict(zip(names, np.round(saved, 6).tolist()))}, this run's are "
                    f"{dict(zip(names, np.round(mine, 6).tolist()))}; resume with the checkpoint's weights, "
                    "or pass --reweight (reweight=True) to apply the new ones from here on"
                )
            log.info("reweight: mixture weights from sample %d on: %s (checkpoint had %s)", g, mine, saved)
        self._set_start(g, counts)
        self._plain_workers.zero_()  # the position is known again
        self.weights_version += 1

    # ---- planning --------------------------------------------------------------------------------------
    def _limit(self) -> int | None:
        if self.num_epochs is None:
            return None
        return self.num_epochs * self._sources[0].num_samples

    def _plan(self, count: int, base_g: int, base_counts: np.ndarray) -> Plan:
        """Plan this rank's next ``count`` samples: global indices base_g + rank + j * W.

        ``base_counts`` are the per-source counters at ``base_g``; the choices of every rank in between are
        replayed (vectorized) so each source's counter, hence its permutation position, is exact. The plan
        ends early where the mixture has no source left (every capped source exhausted).
        """
        mixture, rank, width = self._mixture, self.rank, self.world_size
        mine = np.arange(count, dtype=np.int64) * width + rank  # offsets from base_g of this rank's g
        choice, counts_end = mixture.choose(base_g, base_g + count * width, base_counts)
        source = choice[mine]
        ended = np.flatnonzero(source < 0)
        if len(ended):
            count = int(ended[0])
            source, mine = source[:count], mine[:count]
        n = np.empty(count, dtype=np.int64)
        for s in np.unique(source).tolist():
            drawn = np.cumsum(choice == s)  # draws of source s up to and including each global index
            sel = source == s
            n[sel] = base_counts[s] + drawn[mine[sel]] - 1  # the counter before that index
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
        return Plan(source, shard, start, length, counts_end)

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
        if not in_main and not self._wrapped:  # a plain DataLoader's worker: the parent's position is stale
            self._plain_workers.fill_(1)
        chunk = batch_size or 1
        version = self.weights_version
        start_yielded = self._yielded
        prefetcher = self._start_prefetcher()
        blocks = self._blocks(chunk, self.consumed, self._counts_at(self.consumed))
        # each block with the next one (None after the last), planned one block ahead: to prefetch its shards
        for (k, plan), ahead in itertools.pairwise(itertools.chain(blocks, [None])):
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
                # int64 [3, n, seq_len] (input_ids, labels, positions); in a DataLoader worker in shared memory:
                # torch moves a tensor there when it crosses the worker queue, which would copy every item again
                shape = (3, len(positions), self.seq_len)
                out = torch.empty(shape, dtype=torch.int64) if in_main else shared_empty(shape)
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
                    if in_main and self.weights_version != version:
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


_STATE_KEYS = {"version": int, "seed": int, "consumed": int, "fingerprint": str, "counts": list[int]}
_STATE_KEYS |= {"weights": list[float], "sources": list[str] | None}
"""What ``state_dict`` writes: numbers >= 0 but the weights, which are finite."""


def _check_plain(state: Any) -> None:
    """Refuse, in one line, loader state that is not the plain values ``state_dict`` writes (``_STATE_KEYS``,
    checked by ``zephyr.config.fits``: nothing is converted). A checkpoint may come from a folder others can
    write; nothing in it is taken as anything but these numbers and names."""
    if not isinstance(state, Mapping):
        raise ResumeError(f"loader state must be a mapping of plain numbers, got {type(state).__name__}")
    for key, hint in _STATE_KEYS.items():
        value = state.get(key)
        numbers = [v for v in (value if isinstance(value, list) else [value]) if isinstance(v, int | float)]
        if not fits(value, hint) or not all(
            math.isfinite(v) and (v >= 0 or key == "weights") for v in numbers
        ):
            what = describe_type(hint) + ("" if key in ("weights", "fingerprint", "sources") else " >= 0")
            raise ResumeError(
                f"loader state {key!r} must be {what}, got {describe_value(value)}; resume from a checkpoint zephyr wrote"
            )


class TokenDataLoader:
    """Wraps ``torch.utils.data.DataLoader(loader, batch_size=None, num_workers=K)``.

    Workers each produce every K-th item; DataLoader returns them in order, so the sequence equals the
    single-process one. Each item received advances the wrapped loader's position in the main process, so
    ``loader.state_dict()`` is exact (and ``loader.filtered`` counts the rows whose labels the workers'
    instance filter masked). Pinned memory follows ``loader.pin_memory``. After ``set_weights`` or
    ``load_state_dict`` the worker iterator is rebuilt from the new state (workers hold copies).
    """

    def __init__(
        self, loader: TokenLoader, *, num_workers: int = 0, prefetch_factor: int | None = None, **kwargs: Any
    ):
        given = [name for name in _OWN_KWARGS if name in kwargs]
        if given:
            raise ConfigError(
                f"data_loader({given[0]}=...): batches and order come from the TokenLoader, so workers split "
                "by whole batches in the single-process order; build it with TokenLoader(..., batch_size=B) "
                f"(or use loader.iter_batches(B)) and leave {', '.join(_OWN_KWARGS)} to data_loader"
            )
        if num_workers < 0:
            raise ConfigError(f"num_workers must be >= 0, got {num_workers}")
        self.loader = loader
        self.num_workers = num_workers
        self.kwargs = dict(kwargs)
        if num_workers > 0:
            self.kwargs.setdefault("prefetch_factor", prefetch_factor or 4)
            self.kwargs.setdefault("persistent_workers", False)

    def __iter__(self) -> Iterator[dict[str, torch.Tensor]]:
        loader = self.loader
        while True:
            version = loader.weights_version
            pinned = loader.pin_memory
            loader.pin_memory = False  # workers cannot pin; the DataLoader's pin thread does it
            # the workers' copies (forked or pickled now) are ours: no guard
            loader._wrapped = True
            try:
                data_loader = torch.utils.data.DataLoader(
                    loader, batch_size=None, num_workers=self.num_workers, pin_memory=pinned, **self.kwargs
                )
                iterator = iter(data_loader)
            finally:
                loader.pin_memory = pinned
                loader._wrapped = False
            restarted = False
            try:
                for item in iterator:
                    if self.num_workers > 0:  # workers advanced their own copies; mirror it here
                        loader.count_worker_samples(item["labels"])
                    yield item
                    if self.num_workers > 0 and loader.weights_version != version:
                        restarted = True
                        break
            finally:
                del iterator
            if not restarted:
                return
