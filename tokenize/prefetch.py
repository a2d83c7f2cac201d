"""Prefetching remote shards ahead of the sampling order, into a cache bounded by ``cache_limit_bytes``.

Contract:

- ``ShardPrefetcher`` runs one daemon thread per loader. The loader tells it, once per batch, which shards its
  next samples read (``want``: the next ``depth`` distinct (source, shard) pairs in first-use order, from
  the current plan block and the one after it). The thread copies the ones not cached yet, in that order,
  through ``ShardStore.fetch(background=True)``; a reader that needs a shard meanwhile blocks on that file's
  lock only (and the time is counted as waiting: ``waits``, ``wait_seconds``).
- ``CacheBudget`` keeps the cache directory at or under ``cache_limit_bytes``: before a copy it evicts the
  least recently used cache entries that are not wanted (the next ``depth`` shards) until the new file fits.
  Eviction never touches a file that is the only copy: a candidate is deleted only if it is a tokens file of
  one of the loader's remote sets (``<sha256>.npy``) and its remote original is still there with the same
  size; anything else in the directory (other sets' files, offsets, files whose original is gone) is counted
  but kept. When nothing more can go, the copy still happens if a reader needs it now (logged: the limit is
  below the working set), while the prefetcher stops ahead of the limit.
- Memory maps of an evicted file are dropped from its store (``ShardStore.close``), so the disk space is
  freed once no reader holds the map.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import threading
import time
from collections.abc import Sequence
from typing import Any

import numpy as np
from zephyr.tokenize.format import join_path
from zephyr.tokenize.storage import ShardStore

__all__ = ["CacheBudget", "ShardPrefetcher", "upcoming_shards"]

log = logging.getLogger(__name__)

_ENTRY = re.compile(r"^[0-9a-f]{64}\.npy$")


def upcoming_shards(plans: Sequence[Any], position: int, depth: int) -> list[tuple[int, int]]:
    """The next ``depth`` distinct (source, shard) pairs in first-use order, from sample ``position`` of
    ``plans[0]`` on through the later plans (objects with ``source`` and ``shard`` arrays)."""
    source = np.concatenate([plans[0].source[position:], *(p.source for p in plans[1:])])
    shard = np.concatenate([plans[0].shard[position:], *(p.shard for p in plans[1:])])
    for window in (1024, len(source)):  # the next shards are usually close: look near first
        key = source[:window] << 32 | shard[:window]
        _, first = np.unique(key, return_index=True)
        if len(first) >= depth or window >= len(source):
            break
    order = np.sort(first)[:depth]
    return list(zip(source[order].tolist(), shard[order].tolist()))


class CacheBudget:
    """Keeps one cache directory under ``limit_bytes`` by evicting verified copies (see the module doc)."""

    def __init__(self, cache_dir: str, limit_bytes: int, stores: Sequence[ShardStore]):
        self.cache_dir = cache_dir
        self.limit_bytes = int(limit_bytes)
        self.stores = list(stores)
        self.pinned: set[str] = set()  # cache files of the wanted shards
        self.evicted = 0
        self._used: dict[str, float] = {}  # last use in this process (falls back to the file's mtime)
        self._reserved = 0  # bytes of copies admitted and still in flight
        self._lock = threading.Lock()
        self._owners: dict[str, tuple[ShardStore, int]] = {}
        for store in self.stores:
            for index, shard in enumerate(store.manifest.shards):
                self._owners[os.path.basename(store.cache_path(shard.files["tokens"]))] = (store, index)

    def touch(self, path: str) -> None:
        self._used[os.path.basename(path)] = time.monotonic()

    def _entries(self) -> list[tuple[str, int, float]]:
        out = []
        with os.scandir(self.cache_dir) as it:
            for entry in it:
                if entry.is_file() and not entry.name.startswith(".part-"):
                    stat = entry.stat()
                    out.append((entry.name, stat.st_size, self._used.get(entry.name, stat.st_mtime - 1e12)))
        return out

    def used_bytes(self) -> int:
        return sum(size for _, size, _ in self._entries()) if os.path.isdir(self.cache_dir) else 0

    def _has_other_copy(self, name: str, size: int) -> bool:
        owner = self._owners.get(name)
        if owner is None:
            return False  # not ours: we cannot tell where else it lives
        store, index = owner
        file = store.manifest.shards[index].files["tokens"]
        import fsspec

        try:
            fs, path = fsspec.core.url_to_fs(join_path(store.manifest.root, file.path))
            return int(fs.info(path)["size"]) == size == file.bytes
        except (OSError, KeyError, ValueError):
            return False

    def release(self, new_bytes: int) -> None:
        """A copy that ``make_room`` admitted is in place (or failed): stop reserving its bytes."""
        with self._lock:
            self._reserved -= new_bytes

    def make_room(self, new_bytes: int, *, required: bool = True) -> bool:
        """Evict until ``new_bytes`` more fit under the limit, counting copies in flight; on True (or when
        ``required``: a reader needs the file now) the bytes are reserved until ``release``."""
        with self._lock:
            fits = self._make_room(new_bytes, required)
            if fits or required:
                self._reserved += new_bytes
            return fits

    def _make_room(self, new_bytes: int, required: bool) -> bool:
        entries = self._entries() if os.path.isdir(self.cache_dir) else []
        used = sum(size for _, size, _ in entries) + self._reserved
        for name, size, _ in sorted(entries, key=lambda e: e[2]):  # least recently used first
            if used + new_bytes <= self.limit_bytes:
                break
            if name in self.pinned or not _ENTRY.match(name) or not self._has_other_copy(name, size):
                continue
            store, index = self._owners[name]
            store.close(index)
            with contextlib.suppress(FileNotFoundError):
                os.unlink(os.path.join(self.cache_dir, name))
            used -= size
            self.evicted += 1
            log.info("cache: evicted %s (%d bytes) to stay under %d bytes", name, size, self.limit_bytes)
        fits = used + new_bytes <= self.limit_bytes
        if not fits and required:
            log.warning(
                "cache: %d bytes in use + %d to copy exceed cache_limit_bytes=%d and nothing more can be "
                "evicted (wanted shards, or files whose only copy is here); copying anyway",
                used,
                new_bytes,
                self.limit_bytes,
            )
        return fits


class ShardPrefetcher:
    """Copies the next ``depth`` shards of the sampling order into the cache in a background thread."""

    def __init__(self, stores: Sequence[ShardStore], depth: int, budget: CacheBudget | None = None):
        self.stores = list(stores)
        self.depth = depth
        self.budget = budget
        self.fetched = 0
        self._wanted: list[tuple[int, int]] = []
        self._cond = threading.Condition()
        self._closed = False
        self._generation = 0  # bumped by want(); the thread is idle for the wanted set of _idle_at
        self._idle_at = 0
        self._thread = threading.Thread(target=self._run, name="zephyr-shard-prefetch", daemon=True)
        self._thread.start()

    def want(self, shards: Sequence[tuple[int, int]]) -> None:
        """The next shards the reader needs, in order (only the first ``depth`` count)."""
        wanted = list(shards)[: self.depth]
        with self._cond:
            if wanted == self._wanted:
                return
            self._wanted = wanted
            self._generation += 1
            if self.budget is not None:
                self.budget.pinned = {
                    os.path.basename(
                        self.stores[s].cache_path(self.stores[s].manifest.shards[k].files["tokens"])
                    )
                    for s, k in wanted
                    if self.stores[s].remote
                }
            self._cond.notify_all()

    def _next(self) -> tuple[int, int] | None:
        for s, k in self._wanted:
            if not self.stores[s].is_cached(k):
                return s, k
        return None

    def _idle(self) -> None:
        """Wait (holding the condition) until the wanted set changes or the prefetcher closes."""
        generation = self._generation
        self._idle_at = generation
        self._cond.notify_all()
        while not self._closed and self._generation == generation:
            self._cond.wait()

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._closed and (job := self._next()) is None:
                    self._idle()
                if self._closed:
                    return
            s, k = job
            store = self.stores[s]
            try:
                if store.fetch(k, background=True) is None:
                    with self._cond:  # the cache is full of wanted shards: wait until the wanted set changes
                        self._idle()
                    continue
                self.fetched += 1
            except Exception as exc:  # the reader fetches it again and raises with the shard's name
                log.warning("prefetch of shard %s failed: %s", store.manifest.shards[k].name, exc)
                with self._cond:
                    self._wanted = [w for w in self._wanted if w != (s, k)]

    def wait_primed(self, timeout: float | None = None) -> bool:
        """Block until the thread is idle for the current wanted set; True if every wanted shard is cached
        (False: still copying at the timeout, or stopped at the cache limit)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            while self._idle_at != self._generation and self._thread.is_alive():
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return False
                self._cond.wait(left)
            return self._next() is None

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        self._thread.join(timeout=5)
