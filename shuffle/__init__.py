"""zephyr.shuffle: Parquet-based shuffle — partitioned spill runs with a per-partition index, coalesced runs,
external merge, group-by, sort, join, and when to coalesce runs on an object store."""
