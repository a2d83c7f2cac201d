"""The ``TokenLoader``'s arguments checked and its sources opened, apart from the loader's order and state.

Each check names the argument and the value it got; each source is one shard set read through a
``ShardStore`` (local or fsspec, sha256-verified on first use) with its fixed samples for the packing mode.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from zephyr.tokenize.format import read_manifest
from zephyr.tokenize.sources import PACKINGS, Packing, TokenSource
from zephyr.tokenize.storage import ShardStore

from zephyr.errors import ConfigError

__all__ = ["check_arguments", "open_sources", "source_weights"]


def check_arguments(
    *,
    seq_len: int,
    rank: int,
    world_size: int,
    batch_size: int | None,
    packing: str,
    packing_window: int,
    prefetch_shards: int,
) -> None:
    """Refuse, naming the argument, what the loader cannot run with (see ``TokenLoader``'s Args)."""
    if seq_len < 1:
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


def source_weights(sources: str | Mapping[str, float] | Sequence[str]) -> dict[str, float]:
    """``{path: weight}`` from a path, a mapping or a list of paths (weight 1 each); refuses none."""
    if isinstance(sources, str):
        weights = {sources: 1.0}
    elif isinstance(sources, Mapping):
        weights = {str(k): float(v) for k, v in sources.items()}
    else:
        weights = {str(p): 1.0 for p in sources}
    if not weights:
        raise ConfigError("sources is empty; give a shard-set path or {path: weight}")
    return weights


def open_sources(
    weights: Mapping[str, float],
    seq_len: int,
    packing: Packing,
    packing_window: int,
    *,
    cache_dir: str | None,
    verify: bool,
) -> list[TokenSource]:
    """One ``TokenSource`` per path of ``weights``, in order: its manifest read, its store opened."""
    return [
        TokenSource(
            str(path),
            ShardStore(read_manifest(str(path)), cache_dir=cache_dir, verify=verify),
            seq_len,
            packing,
            packing_window,
        )
        for path in weights
    ]
