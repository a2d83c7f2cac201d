"""zephyr.shuffle: Parquet-based shuffle — partitioned spill runs with a per-partition index, external merge, group-by, sort, join."""
