"""zephyr.io: sources (Parquet, JSONL, Vortex) split into shards, and sinks that write shard-numbered files.

Reading::

    from zephyr.io import list_shards, read_shard
    for shard in list_shards("data/*.jsonl.zst"):
        for batch in read_shard(shard, on_error="quarantine", quarantine=rejects.append):
            ...

Writing::

    from zephyr.io import ShardWriter, output_name
    with ShardWriter(f"out/{output_name(7, 'parquet')}", "parquet") as writer:
        writer.write(batch)
    writer.result  # WrittenFile(path=..., rows=..., bytes=...)

Contracts (memory bound, bad-input handling, atomicity, determinism) are in the docstrings of
``zephyr.io.sources``, ``zephyr.io.jsonl_source``, ``zephyr.io.parquet``, ``zephyr.io.vortex_source``,
``zephyr.io.sinks`` and ``zephyr.io.quarantine``; the rule for text columns (``require_text_column``) in
``zephyr.io.quarantine``, its check of every input file before a job (``check_text_inputs``) in ``zephyr.io.sources``.
"""

from __future__ import annotations

from zephyr.io.paths import expand_paths, infer_compression, infer_format
from zephyr.io.quarantine import QUARANTINE_SCHEMA, quarantine_table, require_text_column
from zephyr.io.schema import conform, promote_schemas, promote_types
from zephyr.io.sinks import ShardWriter, WrittenFile, encode_ndjson, output_name
from zephyr.io.sources import DEFAULT_BATCH_BYTES, Shard, check_text_inputs, list_shards, read_shard

__all__ = [
    "DEFAULT_BATCH_BYTES",
    "QUARANTINE_SCHEMA",
    "Shard",
    "ShardWriter",
    "WrittenFile",
    "check_text_inputs",
    "conform",
    "encode_ndjson",
    "expand_paths",
    "infer_compression",
    "infer_format",
    "list_shards",
    "output_name",
    "promote_schemas",
    "promote_types",
    "quarantine_table",
    "read_shard",
    "require_text_column",
]
