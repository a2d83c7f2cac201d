"""Prefetching remote shards: a throttled fsspec filesystem (each read sleeps) and a bounded cache."""

from __future__ import annotations

import io
import os
import time
from pathlib import Path

import fsspec
import numpy as np
import pytest
from fsspec.implementations.memory import MemoryFileSystem
from zephyr.tokenize import TokenLoader
from zephyr.tokenize._storage import CacheBudget, ShardStore
from zephyr.tokenize.shards import read_manifest

from .conftest import write_synthetic_set

SEQ = 64


class _SlowFile(io.BytesIO):
    def __init__(self, data: bytes, delay: float):
        super().__init__(data)
        self.delay = delay

    def read(self, size: int | None = -1) -> bytes:
        time.sleep(self.delay)
        return super().read(size)


class ThrottledFileSystem(MemoryFileSystem):
    """An in-memory filesystem whose every read sleeps ``delay`` seconds: a slow object store."""

    protocol = "throttled"
    store: dict = {}
    pseudo_dirs = [""]
    delay = 0.05

    @classmethod
    def _strip_protocol(cls, path):
        return super()._strip_protocol(str(path).removeprefix("throttled://"))

    def _open(self, path, mode="rb", **kwargs):
        f = super()._open(path, mode, **kwargs)
        return _SlowFile(f.getvalue(), self.delay) if "r" in mode else f


fsspec.register_implementation("throttled", ThrottledFileSystem, clobber=True)


@pytest.fixture
def remote(tmp_path: Path):
    """A 6-shard set on the throttled filesystem; yields (url, local copy of the same set)."""
    rng = np.random.default_rng(0)
    local = write_synthetic_set(tmp_path / "set", rng.integers(1, 300, size=300), num_shards=6)
    fs = fsspec.filesystem("throttled")
    root = f"throttled://{tmp_path.name}"
    for f in local.iterdir():
        fs.pipe(f"{root}/{f.name}", f.read_bytes())
    yield root, local
    fs.rm(root, recursive=True)


def _ids(batches) -> list[list[int]]:
    return [row.tolist() for b in batches for row in b["input_ids"]]


@pytest.mark.parametrize("packing", ["tokens", "best-fit"])
def test_primed_loader_never_waits_for_a_shard(remote, tmp_path: Path, packing: str) -> None:
    root, local = remote
    kw = dict(seq_len=SEQ, seed=3, num_epochs=2, batch_size=4, packing=packing)
    loader = TokenLoader(root, cache_dir=str(tmp_path / "cache"), prefetch_shards=6, **kw)
    assert loader.prime(timeout=60)
    primed = loader.waits()[0]  # the offsets files, copied by prime() itself
    got = _ids(loader)
    loader.close()
    assert loader.waits()[0] == primed  # not one blocking copy after priming
    assert got == _ids(TokenLoader(str(local), **kw))
    # without prefetch the reader copies each tokens file itself, blocked on the slow reads
    cold = TokenLoader(root, cache_dir=str(tmp_path / "cold"), **kw)
    list(cold)
    assert cold.waits()[0] >= 6 + 6 and cold.waits()[1] > 6 * ThrottledFileSystem.delay


def test_cache_stays_under_its_limit_and_the_data_is_unchanged(remote, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(ThrottledFileSystem, "delay", 0.0)  # the order has no shard locality: copies thrash
    root, local = remote
    manifest = read_manifest(root)
    sizes = [s.files["tokens"].bytes for s in manifest.shards]
    offsets = sum(s.files["offsets"].bytes for s in manifest.shards)
    limit = offsets + 3 * max(sizes)  # half the tokens files fit
    cache = tmp_path / "cache"
    kw = dict(seq_len=SEQ, seed=1, num_epochs=1, batch_size=4)
    loader = TokenLoader(root, cache_dir=str(cache), prefetch_shards=2, cache_limit_bytes=limit, **kw)
    got, peak = [], 0
    for batch in loader:
        got.append(batch)
        peak = max(peak, sum(f.stat().st_size for f in cache.iterdir()))  # copies in flight included
    evicted = loader._sources[0].store.budget.evicted
    loader.close()
    assert _ids(got) == _ids(TokenLoader(str(local), **kw))
    assert peak <= limit and evicted > 0


def test_eviction_never_touches_a_file_that_is_the_only_copy(remote, tmp_path: Path) -> None:
    root, _ = remote
    cache = tmp_path / "cache"
    store = ShardStore(read_manifest(root), cache_dir=str(cache))
    for k in range(3):
        store.fetch(k)
    foreign = cache / ("f" * 64 + ".npy")  # a file of no set this loader knows: maybe the only copy
    foreign.write_bytes(b"x" * 1000)
    gone = store.manifest.shards[0].files["tokens"]
    fsspec.filesystem("throttled").rm(
        f"{root}/{gone.path}"
    )  # shard 0's original is lost: ours is the only copy
    budget = CacheBudget(str(cache), limit_bytes=1, stores=[store])
    assert not budget.make_room(10**9, required=False)
    left = {p.name for p in cache.iterdir()}
    assert foreign.name in left and f"{gone.sha256}.npy" in left
    for k in (1, 2):
        assert (
            f"{store.manifest.shards[k].files['tokens'].sha256}.npy" not in left
        )  # copies of live originals
    assert all(os.path.getsize(cache / n) for n in left)


def test_a_copy_evicted_between_its_fetch_and_its_open_is_fetched_again(remote, tmp_path: Path) -> None:
    """The prefetcher's eviction can remove a cached copy after the reader's fetch returned its path and
    before the reader maps it (seen under load in the full suite): the reader copies it again, it does not fail."""
    root, local = remote
    store = ShardStore(read_manifest(root), cache_dir=str(tmp_path / "cache"))
    real, evicted = store._path, []

    def evicting(index: int, kind: str) -> str:
        path = real(index, kind)
        if kind == "tokens" and not evicted:
            evicted.append(path)
            os.unlink(path)  # what CacheBudget.make_room does from the prefetcher's thread
        return path

    store._path = evicting
    tokens = store.tokens(0)
    expected = ShardStore(read_manifest(str(local))).tokens(0)
    assert evicted and np.array_equal(tokens, expected)
