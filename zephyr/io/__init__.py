"""zephyr.io: sources (Parquet, JSONL, Vortex, Arrow) split into shards, and sinks that write shard-numbered files."""
