"""Which sample each of a rank's global sample indices draws: the loader's order as one vectorized function.

For global indices base_g + rank + j * world_size the mixture picks a source (a pure function of seed and
index), the replayed per-source counters give each draw's epoch and position, and a seeded Feistel
permutation per (source, epoch) gives the sample, located in its shard (see ``zephyr.tokenize.loader``).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from zephyr.tokenize.gather import Plan
from zephyr.tokenize.mixing import Mixture
from zephyr.tokenize.permutation import derive_key, permute
from zephyr.tokenize.sources import TokenSource

__all__ = ["plan_samples"]


def plan_samples(
    mixture: Mixture,
    sources: Sequence[TokenSource],
    source_keys: Sequence[int],
    rank: int,
    world_size: int,
    count: int,
    base_g: int,
    base_counts: np.ndarray,
) -> Plan:
    """Plan this rank's next ``count`` samples: global indices base_g + rank + j * W.

    ``base_counts`` are the per-source counters at ``base_g``; the choices of every rank in between are
    replayed (vectorized) so each source's counter, hence its permutation position, is exact. The plan
    ends early where the mixture has no source left (every capped source exhausted).
    """
    width = world_size
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
    for s, src in enumerate(sources):
        sel = np.flatnonzero(source == s)
        if not len(sel):
            continue
        epoch, local = np.divmod(n[sel], src.num_samples)
        epochs, which = np.unique(epoch, return_inverse=True)  # a block spans few epochs (many if tiny)
        keys = np.array([derive_key(source_keys[s], e) for e in epochs.tolist()], dtype=np.uint64)
        sample = permute(local, src.num_samples, keys[which] if len(keys) > 1 else int(keys[0]))
        shard[sel], start[sel], length[sel] = src.locate(sample)
    return Plan(source, shard, start, length, counts_end)
