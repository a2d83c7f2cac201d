"""Fixtures for zephyr.io tests: a private memory:// root per test, small helpers to write raw files."""

from __future__ import annotations

import uuid

import fsspec
import pyarrow as pa
import pytest

from zephyr.io.sources import Shard, list_shards, read_shard


@pytest.fixture
def mem_root():
    """A fresh ``memory://`` directory, removed after the test."""
    root = f"/zephyr-io-test-{uuid.uuid4().hex}"
    fs = fsspec.filesystem("memory")
    yield f"memory://{root}"
    if fs.exists(root):
        fs.rm(root, recursive=True)


def _read_all(paths, fmt=None, **kwargs) -> pa.Table:
    """Every row of every shard of ``paths``, in shard order."""
    batch_kwargs = {k: kwargs.pop(k) for k in list(kwargs) if k != "approx_shard_bytes"}
    shards = list_shards(paths, fmt, **kwargs)
    return _read_shards(shards, **batch_kwargs)


def _read_shards(shards: list[Shard], **kwargs) -> pa.Table:
    batches = [b for s in shards for b in read_shard(s, **kwargs)]
    if not batches:
        return pa.table({})
    if all(b.schema.equals(batches[0].schema) for b in batches):
        return pa.Table.from_batches(batches)
    # batch schemas of one JSONL shard may widen (null -> string); a consumer unifies them like this
    return pa.concat_tables([pa.Table.from_batches([b]) for b in batches], promote_options="permissive")


class _Quarantine:
    """Collects the quarantine tables a reader hands over."""

    def __init__(self):
        self.tables: list[pa.Table] = []

    def __call__(self, table: pa.Table) -> None:
        self.tables.append(table)

    @property
    def table(self) -> pa.Table:
        from zephyr.io.quarantine import QUARANTINE_SCHEMA

        return pa.concat_tables(self.tables) if self.tables else QUARANTINE_SCHEMA.empty_table()


@pytest.fixture
def read_all():
    """``read_all(paths, fmt=None, approx_shard_bytes=None, **read_shard_kwargs) -> pa.Table``."""
    return _read_all


@pytest.fixture
def read_shards():
    """``read_shards(shards, **read_shard_kwargs) -> pa.Table``."""
    return _read_shards


@pytest.fixture
def quarantine():
    """A callable collecting quarantine tables; ``.table`` concatenates them."""
    return _Quarantine()
