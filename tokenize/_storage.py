"""Open token shards: local or any fsspec URL, a local cache for remote files, sha256 verification, and remote
shards prefetched ahead of the sampling order.

Contract:

- A local shard file is memory-mapped in place. A remote one (any fsspec URL other than ``file://``) is
  copied once into ``cache_dir`` under its sha256 (``<cache_dir>/<sha256>.npy``), via a temporary name
  and a rename, so concurrent ranks/workers on one node share one copy and a half-copied file is never used.
- Every file's sha256 is checked against the manifest before its first use in a process (verified files are
  remembered per process by path, size and mtime). A mismatch raises ``InputError`` naming the shard and the
  file: a corrupt or half-synced shard fails loudly instead of training on garbage.
- ``ShardStore.tokens`` maps a shard's tokens (cached per store); ``ShardStore.offsets`` reads and validates a
  shard's document offsets and does not cache them: the loader folds every shard's offsets into one sorted
  array of document starts (``zephyr.tokenize.loader``), so a second per-shard copy would double that memory.
- Prefetch (below): a background thread may copy remote shards ahead of use through
  ``fetch(..., background=True)``; one lock per cache file makes the thread and the reader share one copy.
  Time the reader spends blocked on a copy (its own, or the thread's) is counted in ``wait_seconds`` and
  ``waits``; a ``CacheBudget`` attached as ``budget`` makes room under ``cache_limit_bytes`` before a copy.
- ``read_documents`` yields each document's tokens (EOS included) as a NumPy array, in manifest order.

Prefetching remote shards ahead of the sampling order, into a cache bounded by ``cache_limit_bytes``:

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
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
from zephyr.tokenize.shards import Manifest, ShardFile, ShardInfo, join_path, read_manifest, sha256_file

from zephyr.errors import InputError

log = logging.getLogger(__name__)

_VERIFIED: set[tuple[str, int, int, str]] = set()
_LOCK = threading.Lock()  # guards ``_VERIFIED`` and every store's table of per-file locks


class ShardStore:
    """Resolves and opens the shards of one manifest; caches open shards for the life of the object."""

    def __init__(self, manifest: Manifest, *, cache_dir: str | None = None, verify: bool = True):
        self.manifest = manifest
        self.verify = verify
        self.cache_dir = cache_dir
        self.remote = "://" in manifest.root and not manifest.root.startswith("file://")
        self.budget: Any = None  # a zephyr.tokenize._storage.CacheBudget when the cache is bounded
        self.wait_seconds = 0.0  # time the reader was blocked on a remote copy (its own or the prefetcher's)
        self.waits = 0
        self._open: dict[int, np.ndarray] = {}  # the mapped tokens of each shard opened
        self._locks: dict[str, threading.Lock] = {}
        if self.remote and cache_dir is None:
            self.cache_dir = os.path.join(tempfile.gettempdir(), "zephyr-token-cache")

    def __getstate__(self) -> dict:
        # open memmaps would pickle as full copies, locks not at all: workers reopen (and re-verify) lazily
        return {**self.__dict__, "_open": {}, "_locks": {}, "budget": None}

    def cache_path(self, file: ShardFile) -> str:
        """Where the local copy of a remote file lives: ``<cache_dir>/<sha256>.npy``."""
        assert self.cache_dir is not None  # set in __init__ for remote roots
        return os.path.join(self.cache_dir, f"{file.sha256}.npy")

    def is_cached(self, index: int, kind: str = "tokens") -> bool:
        """Whether the shard's file is local already (always, for a local set)."""
        if not self.remote:
            return True
        file = self.manifest.shards[index].files[kind]
        target = self.cache_path(file)
        return os.path.exists(target) and os.path.getsize(target) == file.bytes

    def _lock(self, target: str) -> threading.Lock:
        with _LOCK:
            return self._locks.setdefault(target, threading.Lock())

    def fetch(self, index: int, kind: str = "tokens", *, background: bool = False) -> str | None:
        """The local path of a shard file, copying a remote one into the cache first (once per cache).

        ``background`` marks the prefetcher's calls: only the reader's blocked time counts as waiting, and
        a background copy that the cache budget has no room for is skipped (None).
        """
        shard = self.manifest.shards[index]
        file = shard.files[kind]
        if not self.remote:
            return os.path.join(self.manifest.root.removeprefix("file://"), file.path)
        target = self.cache_path(file)
        if self.is_cached(index, kind):
            return target
        started = time.perf_counter()
        with self._lock(target):
            copied = self.is_cached(index, kind)  # the prefetcher may have copied it while we waited
            if not copied and not self._download(shard, file, target, required=not background):
                return None
        if not background:
            self.wait_seconds += time.perf_counter() - started
            self.waits += 1
        return target

    def _download(self, shard: ShardInfo, file: ShardFile, target: str, *, required: bool = True) -> bool:
        """Copy one remote file into the cache, verified under a temporary name (False: skipped, the budget
        had no room and it can wait)."""
        import fsspec

        assert self.cache_dir is not None
        os.makedirs(self.cache_dir, exist_ok=True)
        budget = self.budget
        if budget is not None and not budget.make_room(file.bytes, required=required) and not required:
            return False
        tmp = None
        try:
            url = join_path(self.manifest.root, file.path)
            fs, remote_path = fsspec.core.url_to_fs(url)
            fd, tmp = tempfile.mkstemp(dir=self.cache_dir, prefix=".part-")
            os.close(fd)
            log.info("caching shard %s file %s -> %s", shard.name, url, target)
            fs.get_file(remote_path, tmp)
            self._check(shard, file, tmp, where=url)
            os.replace(tmp, target)
        finally:
            if tmp is not None and os.path.exists(tmp):
                os.unlink(tmp)
            if budget is not None:
                budget.release(file.bytes)
        return True

    def close(self, index: int) -> None:
        """Forget the shard's memory map (before its cached copy is evicted)."""
        self._open.pop(index, None)

    def _check(self, shard: ShardInfo, file: ShardFile, path: str, *, where: str | None = None) -> None:
        if not self.verify:
            return
        stat = os.stat(path)
        key = (os.path.abspath(path), stat.st_size, stat.st_mtime_ns, file.sha256)
        with _LOCK:
            if key in _VERIFIED:
                return
        actual = sha256_file(path) if stat.st_size == file.bytes else f"size {stat.st_size} != {file.bytes}"
        if actual != file.sha256:
            raise InputError(
                f"shard {shard.name!r}: file {file.path} does not match its manifest checksum "
                f"(expected sha256 {file.sha256}, got {actual}); the shard is corrupt or partly copied — "
                "re-copy it or rewrite the shard set",
                path=where or path,
            )
        with _LOCK:
            _VERIFIED.add(key)

    def _path(self, index: int, kind: str) -> str:
        shard = self.manifest.shards[index]
        path = self.fetch(index, kind)
        if not self.remote:
            self._check(shard, shard.files[kind], path)
        return path

    def offsets(self, index: int) -> np.ndarray:
        """The shard's document offsets (int64, in memory, not cached); verifies only the offsets file."""
        shard = self.manifest.shards[index]
        path = self._path(index, "offsets")
        try:
            offsets = np.array(np.load(path), dtype=np.int64)
        except (ValueError, OSError) as exc:
            raise InputError(f"shard {shard.name!r}: offsets cannot be read: {exc}", path=path) from exc
        if (
            offsets.ndim != 1
            or len(offsets) != shard.num_documents + 1
            or offsets[0] != 0
            or offsets[-1] != shard.num_tokens
            or (np.diff(offsets) < 0).any()
        ):
            raise InputError(
                f"shard {shard.name!r}: offsets disagree with the manifest ({len(offsets)} entries for "
                f"{shard.num_documents} documents / {shard.num_tokens} tokens)",
                path=path,
            )
        return offsets

    def tokens(self, index: int) -> np.ndarray:
        """The tokens of the shard at manifest position ``index``, verified and memory-mapped (a plain ndarray
        view of the map; cached after the first call)."""
        cached = self._open.get(index)
        if cached is not None:
            return cached
        shard = self.manifest.shards[index]
        for again in (self.remote, False):  # a cached copy evicted between its fetch and here: fetch it again
            path = self._path(index, "tokens")
            try:
                # a plain ndarray view of the map: np.memmap's per-slice Python hooks cost more than the copy
                tokens = np.load(path, mmap_mode="r").view(np.ndarray)
                break
            except FileNotFoundError:
                if not again:
                    raise InputError(f"shard {shard.name!r}: tokens file is missing", path=path) from None
            except (ValueError, OSError) as exc:
                raise InputError(f"shard {shard.name!r}: tokens cannot be read: {exc}", path=path) from exc
        if tokens.ndim != 1 or tokens.dtype != self.manifest.dtype or len(tokens) != shard.num_tokens:
            raise InputError(
                f"shard {shard.name!r}: tokens {tokens.dtype}[{len(tokens)}] disagree with the manifest "
                f"({self.manifest.dtype}[{shard.num_tokens}])",
                path=path,
            )
        self._open[index] = tokens
        if self.budget is not None:
            self.budget.touch(path)
        return tokens


def read_documents(path: str, *, cache_dir: str | None = None, verify: bool = True) -> Iterator[np.ndarray]:
    """Yield every document's tokens (EOS included, BOS if the set was written with one), in shard order.

    >>> # for doc in read_documents("shards/"): ...   (each ``doc`` a 1-D uint16/uint32 array)

    The arrays are copies, safe to keep after the shard is closed.
    """
    store = ShardStore(read_manifest(path), cache_dir=cache_dir, verify=verify)
    for index in range(len(store.manifest.shards)):
        offsets = store.offsets(index)
        tokens = store.tokens(index)
        for start, stop in zip(offsets[:-1].tolist(), offsets[1:].tolist()):
            yield np.array(tokens[start:stop])


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
                self._owners[f"{shard.files['tokens'].sha256}.npy"] = (store, index)  # its name in the cache

    def touch(self, path: str) -> None:
        self._used[os.path.basename(path)] = time.monotonic()

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
            entries = []  # (name, size, last use) of each cache file; the last use falls back to its mtime
            if os.path.isdir(self.cache_dir):
                with os.scandir(self.cache_dir) as it:
                    for entry in it:
                        if entry.is_file() and not entry.name.startswith(".part-"):
                            stat = entry.stat()
                            entries.append(
                                (entry.name, stat.st_size, self._used.get(entry.name, stat.st_mtime - 1e12))
                            )
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
            if fits or required:
                self._reserved += new_bytes
            return fits


class ShardPrefetcher:
    """Copies the next ``depth`` shards of the sampling order into the cache in a background thread."""

    def __init__(self, stores: Sequence[ShardStore], depth: int, budget: CacheBudget | None = None):
        self.stores = list(stores)
        self.depth = depth
        self.budget = budget
        self.fetched = 0
        self._wanted: list[tuple[int, int]] = []
        # wanted, but no room or the copy failed: until `want` changes
        self._skipped: set[tuple[int, int]] = set()
        self._cond = threading.Condition()
        self._closed = False
        self._thread = threading.Thread(target=self._run, name="zephyr-shard-prefetch", daemon=True)
        self._thread.start()

    def want(self, shards: Sequence[tuple[int, int]]) -> None:
        """The next shards the reader needs, in order (only the first ``depth`` count)."""
        wanted = list(shards)[: self.depth]
        with self._cond:
            if wanted == self._wanted:
                return
            self._wanted, self._skipped = wanted, set()
            if self.budget is not None:
                stores = self.stores  # the cache names of the wanted tokens files
                pinned = [stores[s].manifest.shards[k].files["tokens"] for s, k in wanted if stores[s].remote]
                self.budget.pinned = {f"{file.sha256}.npy" for file in pinned}
            self._cond.notify_all()

    def _next(self) -> tuple[int, int] | None:
        """The first wanted shard to copy (called holding the condition); None: the thread is idle."""
        for s, k in self._wanted:
            if (s, k) not in self._skipped and not self.stores[s].is_cached(k):
                return s, k
        return None

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._closed and (job := self._next()) is None:
                    self._cond.wait()
                if self._closed:
                    return
            s, k = job
            store = self.stores[s]
            try:
                # None: the cache is full of wanted shards
                copied = store.fetch(k, background=True) is not None
            except Exception as exc:  # the reader fetches it again and raises with the shard's name
                log.warning("prefetch of shard %s failed: %s", store.manifest.shards[k].name, exc)
                copied = False
            with self._cond:
                self.fetched += copied
                if not copied:
                    self._skipped.add(job)
                self._cond.notify_all()

    def wait_primed(self, timeout: float | None = None) -> bool:
        """Block until the thread is idle for the current wanted set; True if every wanted shard is cached
        (False: still copying at the timeout, or stopped at the cache limit)."""
        with self._cond:
            self._cond.wait_for(lambda: self._next() is None or not self._thread.is_alive(), timeout)
            return all(self.stores[s].is_cached(k) for s, k in self._wanted)

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        self._thread.join(timeout=5)
