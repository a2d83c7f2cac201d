"""zephyr.io: sources (Parquet, JSONL, Vortex, WARC) split into shards, and sinks that write shard-numbered files.

Reading::

    from zephyr.io.sources import list_shards, read_shard
    for shard in list_shards("data/*.jsonl.zst"):
        for batch in read_shard(shard, on_error="quarantine", quarantine=rejects.append):
            ...

Writing::

    from zephyr.io.sinks import ShardWriter, output_name
    with ShardWriter(f"out/{output_name(7, 'parquet')}", "parquet") as writer:
        writer.write(batch)
    writer.result  # WrittenFile(path=..., rows=..., bytes=...)

Contracts (memory bound, bad-input handling, atomicity, determinism) are in the docstrings of
``zephyr.io.sources``, ``zephyr.io.jsonl``, ``zephyr.io.parquet``, ``zephyr.io.vortex``, ``zephyr.io.warc``,
``zephyr.io.sinks`` and ``zephyr.io.quarantine``; the rule for text columns (``require_text_column``) in
``zephyr.io.quarantine``, its check of every input file before a job (``check_text_inputs``) in ``zephyr.io.sources``;
schema promotion and casts in ``zephyr.io.schema``; paths, formats and atomic writes in ``zephyr.io.paths``; what
a command claims, locks and publishes in ``zephyr.io.claim`` (the folder layout: ``zephyr.io.layout``).
"""
