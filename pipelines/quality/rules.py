"""The common shape of a heuristic rule family and of its verdicts.

A rule family (``GopherQuality``, ``GopherRepetition``, ``C4Quality``, ``FineWebQuality``) is a frozen
dataclass of thresholds with one method, ``evaluate(texts, langs) -> Verdict``: it computes its per-document
statistics column-wise for the whole batch and returns, in rule order, a boolean "fails" mask per reason.
``apply_filters`` (filters.py) gives each row the first reason it fails, so per-reason drop counts are
exclusive and add up: ``rows_in = kept + Σ dropped[reason] + quarantined``.

Reason strings name the failing condition (``gopher_too_few_stop_words``), never the passing one.
A threshold set to ``None`` disables its rule.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

import numpy as np

if TYPE_CHECKING:
    import polars as pl

__all__ = ["Verdict", "RuleFamily", "fails_above", "fails_below"]


@dataclass
class Verdict:
    """One rule family's result for a batch of non-null texts."""

    reasons: list[tuple[str, np.ndarray]] = field(default_factory=list)
    """(reason, fails[bool, rows]) in the order the rules are checked."""
    text: pl.Series | None = None
    """Rewritten texts (e.g. C4 line cleaning) for the rows that pass, or None when unchanged."""
    counters: dict[str, int] = field(default_factory=dict)
    """Extra counts, e.g. lines removed by a line-level rule."""

    def add(self, reason: str, fails: np.ndarray | pl.Series | None) -> None:
        if fails is None:
            return
        arr = fails.to_numpy() if hasattr(fails, "to_numpy") else np.asarray(fails)
        # a null statistic (rule not applicable, e.g. 0 lines) never fails a row
        self.reasons.append((reason, np.nan_to_num(arr.astype(float), nan=0.0).astype(bool)))


class RuleFamily(Protocol):
    name: str

    def evaluate(self, texts: pl.Series, langs: pl.Series) -> Verdict: ...

    def reasons(self) -> list[str]: ...


def fails_below(value: pl.Series | np.ndarray, threshold: float | None) -> np.ndarray | None:
    """``value < threshold`` (None → rule off; NaN/null statistic → passes)."""
    if threshold is None:
        return None
    v = value.to_numpy() if hasattr(value, "to_numpy") else value
    v = np.asarray(v, dtype=float)
    return np.nan_to_num(v, nan=np.inf) < threshold


def fails_above(
    value: pl.Series | np.ndarray, threshold: float | None, *, inclusive: bool = False
) -> np.ndarray | None:
    """``value > threshold`` (or ``>=`` with ``inclusive``); None → rule off; NaN/null → passes."""
    if threshold is None:
        return None
    v = value.to_numpy() if hasattr(value, "to_numpy") else value
    v = np.nan_to_num(np.asarray(v, dtype=float), nan=-np.inf)
    return v >= threshold if inclusive else v > threshold
