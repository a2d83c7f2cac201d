"""Instance filters: samples the loader keeps out of the loss, decided from their tokens at load time.

``RepetitionFilter`` flags a sample whose inputs hold a token pattern of period p (``min_period <= p <=
max_period``) repeated more than ``max_count`` times in a row, i.e. a run of ``x[i] == x[i + p]`` at least
``max_count * p`` long (k back-to-back copies of a p-token pattern give a run of ``(k - 1) * p``). The
defaults (periods 1–13, more than 32 repeats) are OLMo-core's. Padding never counts as a pattern.

What "dropped" means. A flagged sample keeps its slot in the order and every label of it becomes -100, so it
adds nothing to the loss. Removing the slot instead would make a rank's position depend on the tokens it read,
so ranks would drift apart and the loader state (a few integers, shared by every rank and valid for any world
size) could no longer say where each rank is; a masked slot keeps the order a pure function of (seed, epoch,
global index). The decision is a pure function of the sample's tokens, so it is the same on every run, rank
and resume. The loader counts flagged samples (``TokenLoader.filtered``).

Cost: per period, one comparison of the shifted inputs and a run test by doubling (``O(log run)`` boolean
ANDs), all on the ``[n, seq_len]`` block; no per-token Python.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from zephyr.errors import ConfigError

__all__ = ["RepetitionFilter", "INSTANCE_FILTERS"]

INSTANCE_FILTERS = ("repetition",)


def _has_run(eq: np.ndarray, run: int) -> np.ndarray:
    """Per row of the boolean ``eq``: whether it holds ``run`` consecutive True values (run >= 1)."""
    width = 1
    acc = eq  # acc[:, i] = all(eq[:, i : i + width])
    while width * 2 <= run:
        acc = acc[:, :-width] & acc[:, width:]
        width *= 2
        if acc.shape[1] == 0:
            return np.zeros(eq.shape[0], dtype=bool)
    rest = run - width
    if rest:  # all(eq[i : i + width]) and all(eq[i + rest : i + rest + width]) covers i .. i + run - 1
        if acc.shape[1] <= rest:
            return np.zeros(eq.shape[0], dtype=bool)
        acc = acc[:, :-rest] & acc[:, rest:]
    return acc.any(axis=1)


@dataclass(frozen=True)
class RepetitionFilter:
    """Flags samples with a repeated token pattern (see the module docstring)."""

    min_period: int = 1
    """Shortest pattern length in tokens."""
    max_period: int = 13
    """Longest pattern length in tokens."""
    max_count: int = 32
    """A pattern repeated more than this many times in a row flags the sample."""

    def __post_init__(self) -> None:
        if not 1 <= self.min_period <= self.max_period:
            raise ConfigError(
                f"repetition filter: need 1 <= min_period <= max_period, got min_period={self.min_period}, "
                f"max_period={self.max_period}"
            )
        if self.max_count < 1:
            raise ConfigError(f"repetition filter: max_count must be >= 1, got {self.max_count}")

    def flags(self, ids: np.ndarray, lengths: np.ndarray | None = None) -> np.ndarray:
        """Boolean ``[n]``: which rows of ``ids [n, L]`` to drop; ``lengths`` = real inputs per row (the rest
        is padding), None when every row is full."""
        n, L = ids.shape
        flagged = np.zeros(n, dtype=bool)
        valid = None if lengths is None else np.arange(L) < np.asarray(lengths)[:, None]
        for p in range(self.min_period, self.max_period + 1):
            run = self.max_count * p
            if run > L - p:
                break  # longer periods need even longer runs
            eq = ids[:, p:] == ids[:, :-p]
            if valid is not None:
                eq &= valid[:, p:]  # both tokens real (valid is a prefix, so the later one decides)
            rows = np.flatnonzero(~flagged & (eq.sum(axis=1) >= run))  # cheap necessary condition first
            if len(rows):
                flagged[rows] = _has_run(eq[rows], run)
        return flagged
