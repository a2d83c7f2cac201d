"""Mixing token sets: which source each global sample index draws from.

Contract. The loader walks global sample indices g = 0, 1, 2, ...; ``Mixture.choose(lo, hi, counts)`` says
which source each g in ``[lo, hi)`` draws from, given ``counts`` (samples drawn from each source before
``lo``). Index g draws source s when a counter-based uniform ``u(seed, g)`` falls in s's slice of the
cumulative weights, so the choice is a pure function of (seed, g, the weights in effect at g, which sources
are still active) and needs no RNG state.

- **Weights** are piecewise constant in g: the initial weights, then ``(g, weights)`` changes (a schedule,
  ``set_weights``). Weights are normalized; a source of weight 0 is never drawn.
- **Caps.** ``max_epochs`` per source: once a source has been drawn ``cap = floor(max_epochs * samples)``
  times it stops being drawn and the others share its weight (renormalized) from the next index on. The
  index where that happens follows from the counts, so it is the same after any resume and for any number of
  ranks. When every source with weight is exhausted, ``choose`` returns -1: the data ends.
- **Weights from token counts** (``mix_weights``): ``temperature:T`` gives ``p_i ∝ n_i^(1/T)`` (T = 1:
  proportional to tokens; T > 1 flattens towards uniform, T < 1 sharpens; the UniMax paper's convention,
  Chung et al. 2023, "UniMax: Fairer and More Effective Language Sampling"); ``unimax:epochs=N`` spreads a
  token budget uniformly over the sources, smallest first, none beyond N epochs (the paper's Algorithm 1),
  and caps each source at N epochs.

Seeded pseudo-random permutations of ``[0, n)`` evaluated pointwise, in O(1) memory, vectorized: ``permute(indices, n, key)`` maps each index through a balanced Feistel network over the smallest even
bit width covering ``n``, with cycle walking (re-encrypt while the result is ``>= n``) to stay inside the
domain. A Feistel network is a bijection for any round function, so the result is a true permutation; the
loader uses it so that sample order is a pure function of (seed, epoch, global index) without materializing
an n-element array (8 bytes x 500M samples for a trillion-token set). Expected cycle-walk steps are < 4,
because the domain is at most 4n.

``mix64`` is SplitMix64's finalizer (Steele et al., "Fast splittable pseudorandom number generators", 2014),
used both as the Feistel round function and to derive per-(seed, epoch, source) keys.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping, Sequence

import numpy as np

from zephyr.errors import ConfigError

_M64 = (1 << 64) - 1
_ROUNDS = 6


def mix64(x: np.ndarray) -> np.ndarray:
    """SplitMix64 finalizer on a uint64 array (wrapping arithmetic)."""
    z = np.asarray(x, dtype=np.uint64) + np.uint64(0x9E3779B97F4A7C15)
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


def derive_key(*parts: int) -> int:
    """A 64-bit key from integers (seed, epoch, source, ...), each mixed in turn."""
    state = np.zeros(1, dtype=np.uint64)
    for part in parts:
        state = mix64(state ^ np.array([int(part) & _M64], dtype=np.uint64))
    return int(state[0])


def uniform01(indices: np.ndarray, key: int) -> np.ndarray:
    """A float64 in [0, 1) per index, a pure function of (key, index): 53 high bits of the mixed value."""
    mixed = mix64(np.asarray(indices, dtype=np.uint64) ^ np.uint64(key))
    return (mixed >> np.uint64(11)).astype(np.float64) * (1.0 / (1 << 53))


def _encrypt(x: np.ndarray, half_bits: int, round_keys: np.ndarray) -> np.ndarray:
    """Feistel rounds on ``x``; ``round_keys`` is ``[rounds]`` (one key) or ``[rounds, len(x)]`` (per index)."""
    mask = np.uint64((1 << half_bits) - 1)
    shift = np.uint64(half_bits)
    left, right = x >> shift, x & mask
    for k in round_keys:
        left, right = right, left ^ (mix64(right ^ k) & mask)
    return (left << shift) | right


def permute(indices: np.ndarray, n: int, key: int | np.ndarray) -> np.ndarray:
    """``perm(indices)`` for the permutation of ``[0, n)`` selected by ``key`` (int64 in, int64 out).

    ``key`` may also be an array of one key per index (e.g. per-epoch keys for a block of samples that
    spans epochs): the result equals calling ``permute`` per distinct key, in one vectorized pass.
    """
    idx = np.asarray(indices, dtype=np.int64)
    if n <= 1:
        return np.zeros_like(idx)
    if idx.size and (idx.min() < 0 or idx.max() >= n):
        raise IndexError(f"permutation index out of range [0, {n})")
    bits = max(2, int(n - 1).bit_length())
    bits += bits & 1
    rounds = np.arange(1, _ROUNDS + 1, dtype=np.uint64)
    if np.ndim(key) == 0:
        round_keys = mix64(np.uint64(int(key) & _M64) ^ rounds)
    else:
        keys = np.broadcast_to(np.asarray(key, dtype=np.uint64), idx.shape).reshape(-1)
        round_keys = mix64(keys[None, :] ^ rounds[:, None])  # [rounds, indices]
    flat = idx.reshape(-1).astype(np.uint64)
    out = _encrypt(flat, bits // 2, round_keys)
    outside = np.flatnonzero(out >= np.uint64(n))
    while len(outside):  # cycle walking: re-encrypt until inside [0, n) (< 4 steps expected)
        keys_out = round_keys if round_keys.ndim == 1 else round_keys[:, outside]
        out[outside] = _encrypt(out[outside], bits // 2, keys_out)
        outside = outside[out[outside] >= np.uint64(n)]
    return out.astype(np.int64).reshape(idx.shape)


log = logging.getLogger(__name__)

_UNCAPPED = np.iinfo(np.int64).max


def normalize_weights(names: Sequence[str], weights: dict[str, float]) -> np.ndarray:
    """Weights in ``names`` order, normalized to sum 1; ``ConfigError`` naming the sets on any problem."""
    names = list(names)
    if sorted(map(str, weights)) != sorted(names):
        raise ConfigError(f"weights must name exactly the loader's sources {names}, got {list(weights)}")
    values = np.array([float(weights[n]) for n in names], dtype=np.float64)
    if not np.all(np.isfinite(values)) or (values < 0).any() or values.sum() <= 0:
        raise ConfigError(f"mixture weights must be finite, >= 0 and not all 0, got {dict(weights)}")
    return values / values.sum()


def parse_mix(spec: str) -> tuple[str, dict[str, float]]:
    """``"temperature:0.7"`` -> ("temperature", {"t": 0.7}); ``"unimax:epochs=4"`` -> ("unimax", {"epochs": 4})."""
    kind, _, rest = spec.partition(":")
    kind = kind.strip().lower()
    try:
        if kind == "temperature":
            value = float(rest)
            if not value > 0 or not math.isfinite(value):
                raise ValueError
            return kind, {"t": value}
        if kind == "unimax":
            params = dict(item.split("=", 1) for item in rest.split(",") if item.strip())
            unknown = set(params) - {"epochs", "budget"}
            if unknown or "epochs" not in params:
                raise ValueError
            parsed = {k: float(v) for k, v in params.items()}
            if parsed["epochs"] <= 0 or parsed.get("budget", 1) <= 0:
                raise ValueError
            return kind, parsed
    except ValueError:
        pass
    raise ConfigError(
        f"mix {spec!r} is not understood; write temperature:T (T > 0, e.g. temperature:0.7) or "
        "unimax:epochs=N[,budget=TOKENS] (N > 0, e.g. unimax:epochs=4)"
    )


def mix_weights(
    spec: str, tokens: Sequence[int], *, budget_tokens: float | None = None
) -> tuple[np.ndarray, float | None]:
    """(normalized weights, the epoch cap the spec implies or None) from each source's token count."""
    kind, params = parse_mix(spec)
    n = np.asarray(tokens, dtype=np.float64)
    if (n <= 0).any():
        raise ConfigError(f"mix {spec!r}: every source needs tokens, got counts {list(map(int, n))}")
    if kind == "temperature":
        logits = np.log(n) / params["t"]
        w = np.exp(logits - logits.max())
        return w / w.sum(), None
    epochs = params["epochs"]
    budget = params.get("budget", budget_tokens)
    if budget is None:
        raise ConfigError(
            f"mix {spec!r}: UniMax needs the training budget in tokens; give unimax:epochs=N,budget=TOKENS "
            "(zephyr train passes steps x tokens per step)"
        )
    alloc = np.zeros_like(n)
    left = float(budget)
    order = np.argsort(n, kind="stable")  # smallest source first
    for i, s in enumerate(order.tolist()):
        share = left / (len(order) - i)
        alloc[s] = min(share, epochs * n[s])
        left -= alloc[s]
    return alloc / alloc.sum(), epochs


class Mixture:
    """The source of each global sample index (see the module docstring): the mixture of a loader, from
    explicit ``weights`` or ``mix_weights(mix)`` of the sources' ``tokens``.

    Args:
        names: source names (for messages and logs).
        weights: ``{name: weight}`` (at g = 0, or at the loader's start), unless ``mix`` derives them.
        tokens: tokens in each source (what ``mix`` weighs).
        samples: samples in one epoch of each source.
        key: the choice key (derived from the seed).
        mix / budget_tokens: ``mix_weights``' spec and UniMax's training budget.
        max_epochs: one cap for all sources or ``{name: epochs}`` (default: the cap ``mix`` implies; none).
    """

    def __init__(
        self,
        names: Sequence[str],
        weights: Mapping[str, float],
        *,
        tokens: Sequence[int],
        samples: Sequence[int],
        key: int,
        mix: str | None = None,
        budget_tokens: float | None = None,
        max_epochs: float | Mapping[str, float] | None = None,
    ):
        self.names = names = list(names)
        implied = None
        if mix is not None:
            values, implied = mix_weights(mix, tokens, budget_tokens=budget_tokens)
            log.info(
                "mix %s over %s tokens: weights %s",
                mix,
                dict(zip(names, tokens)),
                ", ".join(f"{n}={w:.4f}" for n, w in zip(names, values)),
            )
        else:
            values = normalize_weights(names, dict(weights))
        if max_epochs is None:
            max_epochs = implied
        if isinstance(max_epochs, Mapping):
            unknown = sorted(set(map(str, max_epochs)) - set(names))
            if unknown:
                raise ConfigError(f"max_epochs names {unknown}, which are not sources of this loader {names}")
            caps = [float(max_epochs.get(n, math.inf)) for n in names]
        else:
            caps = [math.inf if max_epochs is None else float(max_epochs)] * len(names)
        if any(not c > 0 for c in caps):
            raise ConfigError(f"max_epochs must be > 0, got {dict(zip(names, caps))}")
        self.key = key
        self.initial = values
        self.changes: list[tuple[int, np.ndarray]] = [(0, self.initial)]
        self.max_epochs = caps
        self.caps = np.array(
            [_UNCAPPED if math.isinf(e) else int(e * n) for e, n in zip(caps, samples)], dtype=np.int64
        )
        self._logged: set[int] = set()

    def set_schedule(self, schedule: Sequence[tuple[int, Mapping[str, float]]]) -> None:
        """Weights ``[(g, {name: weight}), ...]`` on top of the initial weights (replacing any earlier schedule
        and ``set_weights``)."""
        entries = sorted(((int(at), dict(w)) for at, w in schedule), key=lambda e: e[0])
        if entries and entries[0][0] < 0:
            raise ConfigError(f"schedule: sample index {entries[0][0]} is negative")
        self.changes = [(0, self.initial)]
        for at, weights in entries:
            self.set_weights(at, normalize_weights(self.names, weights))

    # ---- weights over g -------------------------------------------------------------------------------
    def weights_at(self, g: int) -> np.ndarray:
        """The configured weights in effect at index g (before caps); ``changes`` is sorted and starts at 0."""
        return next(weights for at, weights in reversed(self.changes) if at <= g)

    def set_weights(self, g: int, weights: np.ndarray) -> None:
        """``weights`` from index g on; later scheduled changes still apply."""
        later = [(a, w) for a, w in self.changes if a > g]
        earlier = [(a, w) for a, w in self.changes if a < g]
        self.changes = [*earlier, (g, np.asarray(weights, dtype=np.float64)), *later]

    # ---- choices ---------------------------------------------------------------------------------------
    def choose(self, lo: int, hi: int, counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(source of each index in ``[lo, hi)``, -1 once no source is left; the counts at ``hi``)."""
        counts = np.array(counts, dtype=np.int64)
        out = np.empty(max(0, hi - lo), dtype=np.int64)
        g = lo
        while g < hi:
            end = min(hi, next((a for a, _ in self.changes if a > g), _UNCAPPED))  # the next weight change
            weights = self.weights_at(g) * (counts < self.caps)
            if weights.sum() <= 0:
                out[g - lo :] = -1
                break
            if len(weights) == 1:
                choice = np.zeros(end - g, dtype=np.int64)
            else:
                cum = np.cumsum(weights / weights.sum())
                cum[-1] = 1.0
                u = uniform01(np.arange(g, end, dtype=np.int64), self.key)
                choice = np.searchsorted(cum, u, side="right").astype(np.int64)
            stop = end
            for s in np.flatnonzero((self.caps < _UNCAPPED) & (weights > 0)).tolist():
                room = int(self.caps[s] - counts[s])  # > 0: the source is active
                hits = np.flatnonzero(choice[: stop - g] == s)
                if len(hits) >= room:
                    stop = g + int(hits[room - 1]) + 1  # the draw that fills the cap is the source's last
            taken = choice[: stop - g]
            out[g - lo : stop - lo] = taken
            counts += np.bincount(taken, minlength=len(counts))
            for s in np.flatnonzero((counts >= self.caps) & (weights > 0)).tolist():
                self._log_exhausted(s, stop, counts)
            g = stop
        return out, counts

    def _log_exhausted(self, s: int, g: int, counts: np.ndarray) -> None:
        if s in self._logged:
            return
        self._logged.add(s)
        active = self.weights_at(g) * (counts < self.caps)
        share = active / active.sum() if active.sum() > 0 else active
        log.info(
            "mix: source %s reached max_epochs=%g (%d samples) at global sample %d; from there the others "
            "take its share: %s",
            self.names[s],
            self.max_epochs[s],
            int(self.caps[s]),
            g,
            ", ".join(f"{n}={w:.4f}" for n, w in zip(self.names, share)) or "none left",
        )
