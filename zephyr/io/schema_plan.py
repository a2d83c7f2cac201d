"""Plans a multi-file input's one schema: reads each file's schema cheaply, then applies the rule.

The rule and the casts live in ``zephyr.io.input_schema`` (which the readers import); reading schemas needs
the readers, so it lives here, above both, and the job planner calls ``plan_input_schema``.
"""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

import pyarrow as pa

from zephyr.io.input_schema import SCHEMA_PEEK_BYTES, merge_schemas
from zephyr.io.parquet_source import open_parquet, plain_schema
from zephyr.io.sources import Shard, read_shard

__all__ = ["peek_schema", "peek_schemas", "plan_input_schema"]

_PEEK_THREADS = 8  # footer and first-block reads wait on storage, not CPU


def peek_schema(shard: Shard, *, peek_bytes: int = SCHEMA_PEEK_BYTES) -> tuple[str, pa.Schema | None]:
    """(path, the file's schema as a reader yields it), or (path, None) for a JSONL/Vortex file without rows.

    Parquet: the footer (even a 0-row file has typed columns). JSONL/Vortex: the first batch; bad lines are the
    job's business (it raises or quarantines them by its own ``on_error``), so they are skipped here.
    """
    if shard.format == "parquet":
        with open_parquet(shard.path) as parquet_file:
            return shard.path, plain_schema(parquet_file.schema_arrow, shard.path)
    if shard.format == "warc":  # one fixed schema; peeking would parse records
        from zephyr.io.warc import WARC_SCHEMA

        return shard.path, WARC_SCHEMA
    batches = iter(
        read_shard(shard, on_error="quarantine", quarantine=lambda table: None, batch_bytes=peek_bytes)
    )
    try:
        first = next(batches, None)
    finally:
        close = getattr(batches, "close", None)
        if close is not None:
            close()  # a generator: closes the file now
    return shard.path, None if first is None else first.schema


def peek_schemas(
    shards: Sequence[Shard], *, peek_bytes: int = SCHEMA_PEEK_BYTES
) -> list[tuple[str, pa.Schema | None]]:
    """``peek_schema`` of each distinct file of ``shards``, in order, 8 files at a time."""
    seen: dict[str, Shard] = {}
    for shard in shards:
        seen.setdefault(shard.path, shard)
    files = [s if s.byte_range is None and s.row_groups is None else _whole(s) for s in seen.values()]
    with ThreadPoolExecutor(max_workers=min(_PEEK_THREADS, max(1, len(files)))) as pool:
        return list(pool.map(lambda s: peek_schema(s, peek_bytes=peek_bytes), files))


def _whole(shard: Shard) -> Shard:
    from dataclasses import replace

    return replace(shard, byte_range=None, row_groups=None)


def plan_input_schema(
    shards: Sequence[Shard],
    *,
    unify: bool = False,
    schema: pa.Schema | None = None,
    columns: Sequence[str] | None = None,
) -> pa.Schema | None:
    """The schema every task of this input casts to, or None when no rule is needed (one shard, no schema).

    ``columns``: only these take part (a projection never fails on a column it does not read).
    """
    if schema is not None:
        return schema
    if len(shards) <= 1:
        return None
    peeks = peek_schemas(shards)
    if columns is not None:
        wanted = list(columns)
        peeks = [
            (p, None if s is None else pa.schema([s.field(c) for c in wanted if c in s.names]))
            for p, s in peeks
        ]
    return merge_schemas(peeks, unify=unify)
