"""The trainer's data side: batches of samples from a ``TokenLoader`` (or a synthetic stream), resumable.

A *sample source* follows the ``zephyr.tokenize.TokenLoader`` contract: iterating yields one sample at a time,
a dict of int64 tensors ``input_ids [L]``, ``labels [L]``, ``positions [L]`` (position within its document, 0
at each document start); ``state_dict()`` / ``load_state_dict()`` are JSON-serializable and exact.

``Batcher`` stacks ``batch_size`` samples per micro-batch (a source with ``iter_batches`` hands it the batch
already gathered, vectorized) and reads the source's state right after the last
sample of a batch, so a checkpoint taken between steps resumes at exactly the next sample.

``SyntheticTokens`` is a learnable stand-in used when no data directory is given (benchmarks, smoke tests):
documents of random length, each repeating a random short pattern of Zipf-distributed tokens and ending in an EOS token, packed
back to back. Sample ``i`` of rank ``r`` is a pure function of ``(seed, i·world_size + r)``.
"""

from __future__ import annotations

import collections
import itertools
from collections.abc import Iterator
from typing import Any, Protocol

import numpy as np
import torch

from zephyr.errors import ConfigError, ResumeError


class SampleSource(Protocol):
    def __iter__(self) -> Iterator[dict[str, torch.Tensor]]: ...
    def state_dict(self) -> dict[str, Any]: ...
    def load_state_dict(self, state: dict[str, Any], *, reweight: bool = False) -> None: ...


class SyntheticTokens:
    """A deterministic stream of packed documents with in-context-learnable repetition (see module doc)."""

    STATE_VERSION = 1

    def __init__(
        self, vocab_size: int, seq_len: int, *, seed: int = 0, rank: int = 0, world_size: int = 1
    ) -> None:
        if vocab_size < 16:
            raise ConfigError(f"synthetic tokens need vocab_size >= 16, got {vocab_size}")
        self.vocab_size = vocab_size
        self.seq_len = seq_len
        self.seed = seed
        self.rank = rank
        self.world_size = world_size
        self.eos = vocab_size - 1
        self._index = 0  # samples of this rank already yielded
        # Zipf-distributed pattern tokens: unigram statistics are learnable in a few steps (the loss visibly
        # falls), the repetition within a document rewards attention (in-context copying).
        weights = 1.0 / np.arange(1, vocab_size, dtype=np.float64)
        self._zipf = weights / weights.sum()

    def sample(self, global_index: int) -> dict[str, torch.Tensor]:
        rng = np.random.default_rng([self.seed, global_index])
        L = self.seq_len + 1
        tokens = np.empty(L, dtype=np.int64)
        positions = np.empty(L, dtype=np.int64)
        filled = 0
        while filled < L:
            doc_len = int(rng.integers(8, max(9, L // 2)))
            period = int(rng.integers(2, 9))
            pattern = rng.choice(self.vocab_size - 1, size=period, p=self._zipf)
            doc = np.resize(pattern, doc_len)
            doc[-1] = self.eos
            n = min(doc_len, L - filled)
            tokens[filled : filled + n] = doc[:n]
            positions[filled : filled + n] = np.arange(n)
            filled += n
        return {
            "input_ids": torch.from_numpy(tokens[:-1].copy()),
            "labels": torch.from_numpy(tokens[1:].copy()),
            "positions": torch.from_numpy(positions[:-1].copy()),
        }

    def __iter__(self) -> Iterator[dict[str, torch.Tensor]]:
        while True:
            index = self._index
            self._index += 1  # before the yield: state_dict() taken after a sample must not repeat it
            yield self.sample(index * self.world_size + self.rank)

    def state_dict(self) -> dict[str, Any]:
        return {
            "version": self.STATE_VERSION,
            "kind": "synthetic",
            "seed": self.seed,
            "seq_len": self.seq_len,
            "vocab_size": self.vocab_size,
            "index": self._index,
        }

    def load_state_dict(self, state: dict[str, Any], *, reweight: bool = False) -> None:
        """Resume at ``state``; refuses a state of other data or of a stream with another seed, seq_len or
        vocabulary (the samples would differ from the checkpointed run's). States saved before seq_len and
        vocab_size were recorded are checked on the seed alone. ``reweight`` changes nothing: the stream has
        no mixture."""
        if state.get("kind") != "synthetic":
            raise ResumeError(
                "the checkpoint's loader state is from token shards, not the synthetic stream; give the same --data"
            )
        mine = {"seed": self.seed, "seq_len": self.seq_len, "vocab_size": self.vocab_size}
        differ = [
            f"{k}: checkpoint {state[k]!r}, this run {v!r}" for k, v in mine.items() if state.get(k, v) != v
        ]
        if differ:
            raise ResumeError(
                f"the checkpoint's synthetic token stream had other settings ({'; '.join(differ)}); "
                "resume with the checkpoint's settings or use another --checkpoint-dir"
            )
        self._index = int(state["index"])


def build_source(
    cfg: Any, *, vocab_size: int, rank: int, world_size: int, samples_per_step: int
) -> tuple[SampleSource, int | None]:
    """A ``TokenLoader`` over a ``TrainConfig``'s ``data`` (directory or ``{dir: weight}`` mixture) with its
    data-loading keys (packing, mix, max_epochs, mix_schedule, instance filter, prefetch...), or synthetic
    tokens if it has none (they have no such keys). Also returns the data's vocabulary size (the largest in the
    shard sets' manifests; None for synthetic).
    """
    if cfg.data is None:
        return SyntheticTokens(vocab_size, cfg.seq_len, seed=cfg.seed, rank=rank, world_size=world_size), None
    from zephyr.tokenize import RepetitionFilter, TokenLoader, read_manifest

    paths = [cfg.data] if isinstance(cfg.data, str) else list(cfg.data)
    data_vocab = max(read_manifest(p).vocab_size for p in paths)
    periods = (cfg.repetition_min_period, cfg.repetition_max_period, cfg.repetition_max_count)
    loader = TokenLoader(
        cfg.data,
        seq_len=cfg.seq_len,
        seed=cfg.seed,
        rank=rank,
        world_size=world_size,
        packing=cfg.packing,
        mix=cfg.mix,
        mix_budget_tokens=cfg.steps * samples_per_step * cfg.seq_len,  # UniMax's budget: the whole run
        max_epochs=cfg.max_epochs,
        schedule=schedule_samples(cfg.mix_schedule or [], samples_per_step),
        instance_filter=RepetitionFilter(*periods) if cfg.instance_filter == "repetition" else None,
        prefetch_shards=cfg.prefetch_shards,
        cache_limit_bytes=cfg.cache_limit_bytes,
    )
    return loader, data_vocab


class Batcher:
    """Stacks ``batch_size`` samples into ``[B, L]`` tensors; ``state_dict`` is the source's state between batches."""

    def __init__(self, source: SampleSource, batch_size: int, vocab_size: int | None = None) -> None:
        self.source = source
        self.batch_size = batch_size
        self.vocab_size = vocab_size
        self._it: Iterator[dict[str, torch.Tensor]] | None = None
        self._state = source.state_dict()
        self.batches = 0

    def _batches(self) -> Iterator[dict[str, torch.Tensor]]:
        """Whole ``[B, L]`` batches; ends where a full one cannot be made.

        A source with ``iter_batches`` (``TokenLoader``) gathers each batch vectorized: it holds the same
        samples as stacking B single ones, and its ``state_dict()`` after the batch is the same.
        """
        if hasattr(self.source, "iter_batches"):
            for batch in self.source.iter_batches(self.batch_size):
                if batch["input_ids"].shape[0] < self.batch_size:
                    return
                yield batch
            return
        it = iter(self.source)
        while len(samples := list(itertools.islice(it, self.batch_size))) == self.batch_size:
            yield {k: torch.stack([s[k] for s in samples]) for k in ("input_ids", "labels", "positions")}

    def next_batch(self) -> dict[str, torch.Tensor]:
        if self._it is None:
            self._it = self._batches()
        try:
            batch = next(self._it)
        except StopIteration:
            raise ConfigError(
                f"the data ran out after {self.batches} batches; train fewer --steps or add data"
            ) from None
        if self.vocab_size is not None:
            top = int(batch["input_ids"].max())
            if top >= self.vocab_size:
                raise ConfigError(
                    f"token id {top} in batch {self.batches} is >= the model's vocab_size {self.vocab_size}; "
                    "use a preset whose vocabulary covers the tokenizer (or --vocab-size)"
                )
        self._state = self.source.state_dict()
        self.batches += 1
        return batch

    def state_dict(self) -> dict[str, Any]:
        return self._state

    def load_state_dict(self, state: dict[str, Any], *, reweight: bool = False) -> None:
        """Resume the source at ``state``; ``reweight`` lets a ``TokenLoader`` take new mixture weights."""
        self.source.load_state_dict(state, reweight=reweight)
        self._it = None
        self._state = self.source.state_dict()


def schedule_samples(
    schedule: list, samples_per_step: int, *, origin_step: int = 0, origin_sample: int = 0
) -> list[tuple[int, dict[str, float]]]:
    """``[[step, weights], ...]`` as ``[(global sample index, weights), ...]``.

    Steps count from ``origin_step``, which began at global sample ``origin_sample`` (a resume point), so the
    switches land on their steps even when a resume changed the samples per step (world size, batch size).
    Entries at or before the origin map to indices at or before it, in order.
    """
    return [
        (max(0, origin_sample + (int(step) - origin_step) * samples_per_step), dict(weights))
        for step, weights in schedule
    ]


class MixTracker:
    """The realized mix for train.jsonl: per source, tokens drawn so far (samples x seq_len, all ranks) and
    the share of the samples drawn over the last ``window`` steps."""

    def __init__(self, source: Any, seq_len: int, window: int) -> None:
        self.source = source
        self.seq_len = seq_len
        self.enabled = hasattr(source, "mix_counts") and len(getattr(source, "sources", [])) > 1
        self._history: collections.deque[dict[str, int]] = collections.deque(maxlen=window + 1)

    def record(self) -> dict[str, Any]:
        """This step's entries (none for a single source or the synthetic stream)."""
        if not self.enabled:
            return {}
        counts = self.source.mix_counts()
        self._history.append(counts)
        first = self._history[0] if len(self._history) > 1 else dict.fromkeys(counts, 0)
        drawn = {k: counts[k] - first[k] for k in counts}
        total = sum(drawn.values()) or 1
        return {
            "mix_tokens": {k: c * self.seq_len for k, c in counts.items()},
            "mix_share": {k: round(d / total, 5) for k, d in drawn.items()},
        }
