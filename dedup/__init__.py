"""zephyr.dedup: exact and MinHash-LSH fuzzy deduplication with verified clusters."""
