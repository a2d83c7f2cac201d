"""The position and resume state of a ``TokenLoader`` (``LoaderPosition``, a mixin of it).

The position is three numbers: the global sample index where this run (re)started (``_start``), the per-source
counters there (``_start_counts``) and the samples this rank has handed out since (``_yielded``); every other
count is replayed from them by the mixture, a pure function of (seed, global index). ``state_dict`` /
``load_state_dict`` turn the position into plain ints, floats and strings and back, refusing state of other
data or settings (the fingerprint: shard manifests, ``seq_len``, packing) and, unless ``reweight``, other
mixture weights. The format is in ``zephyr.tokenize.loader``'s module docstring; ``STATE_VERSION`` names it.

Split out of ``zephyr.tokenize.loader`` so that module holds construction and iteration.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np
from zephyr.tokenize.mixing import normalize_weights

from zephyr.errors import ResumeError

if TYPE_CHECKING:
    import torch
    from zephyr.tokenize.data_loader import WorkerGuard
    from zephyr.tokenize.filters import RepetitionFilter
    from zephyr.tokenize.mixing import Mixture
    from zephyr.tokenize.sources import TokenSource

__all__ = ["LoaderPosition", "STATE_VERSION"]

log = logging.getLogger(__name__)

STATE_VERSION = 1


class LoaderPosition:
    """Position, realized mixture counts and resume state of a ``TokenLoader``; the loader's ``__init__`` sets
    the attributes declared here (the position starts at 0 with zero counters)."""

    seq_len: int
    seed: int
    world_size: int
    packing: str
    packing_window: int
    instance_filter: RepetitionFilter | None
    filtered: int
    worker_guard: WorkerGuard
    _sources: list[TokenSource]
    _mixture: Mixture
    _fingerprint: str
    _start: int
    _start_counts: np.ndarray
    _yielded: int
    _weights_version: int
    _counts_cache: tuple[int, np.ndarray]

    @property
    def sources(self) -> list[str]:
        return [s.name for s in self._sources]

    def _make_fingerprint(self) -> str:
        packing = f"{self.packing}:{self.packing_window}" if self.packing == "best-fit" else self.packing
        digest = hashlib.sha256(f"{self.seq_len}|{packing}|".encode())
        for source in self._sources:
            digest.update(source.store.manifest.fingerprint().encode())
        return digest.hexdigest()[:16]

    @property
    def consumed(self) -> int:
        """Global samples consumed, assuming every rank has yielded as many as this one."""
        return self._start + self._yielded * self.world_size

    @property
    def weights_version(self) -> int:
        """Changes whenever the weights or the position are set anew (``set_weights``, ``set_schedule``,
        ``load_state_dict``): iterators and DataLoader workers started before then hold stale copies."""
        return self._weights_version

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

    def mix_counts(self) -> dict[str, int]:
        """Realized mixture: samples drawn from each source so far, over all ranks (global counters)."""
        self.worker_guard.check_position_known("mix_counts()", self.consumed)
        return dict(zip(self.sources, self._counts_at(self.consumed).tolist()))

    def set_weights(self, weights: Mapping[str, float]) -> None:
        """Change the mixture weights from the next sample on (call between steps, on every rank); later
        schedule entries still apply."""
        self.worker_guard.check_position_known("set_weights()", self.consumed)
        values = normalize_weights(self.sources, dict(weights))
        g = self.consumed
        self._set_start(g, self._counts_at(g))
        self._mixture.set_weights(g, values)
        self._weights_version += 1

    def state_dict(self) -> dict[str, Any]:
        """Plain JSON-serializable resume state (see the module docstring)."""
        self.worker_guard.check_position_known("state_dict()", self.consumed)
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
        self.worker_guard.reset()  # the position is known again
        self._weights_version += 1


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _check_plain(state: Any) -> None:
    """Refuse, in one line, loader state that is not the plain numbers ``state_dict`` writes: non-negative
    ints for the position and counts, finite numbers for the weights, strings for the names. A checkpoint
    may come from a folder others can write; nothing in it is taken as anything but these numbers."""
    import math

    def refuse(key: str, what: str) -> ResumeError:
        return ResumeError(
            f"loader state {key!r} must be {what}, got {_short(state.get(key))}; resume from "
            "a checkpoint zephyr wrote"
        )

    if not isinstance(state, Mapping):
        raise ResumeError(f"loader state must be a mapping of plain numbers, got {type(state).__name__}")
    for key in ("version", "seed", "consumed"):
        if not _is_int(state.get(key)) or state[key] < 0:
            raise refuse(key, "a non-negative int")
    if not isinstance(state.get("fingerprint"), str):
        raise refuse("fingerprint", "a string")
    counts, weights, sources = state.get("counts"), state.get("weights"), state.get("sources")
    if not isinstance(counts, list) or not all(_is_int(c) and c >= 0 for c in counts):
        raise refuse("counts", "a list of non-negative ints")
    if not isinstance(weights, list) or not all(
        (_is_int(w) or isinstance(w, float)) and math.isfinite(w) for w in weights
    ):
        raise refuse("weights", "a list of finite numbers")
    if sources is not None and (
        not isinstance(sources, list) or not all(isinstance(x, str) for x in sources)
    ):
        raise refuse("sources", "a list of strings")


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
