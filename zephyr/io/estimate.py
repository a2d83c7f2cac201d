"""How many in-memory (Arrow) bytes an input file holds, estimated before reading it.

One rule for every planner: the engine sizes shuffle partitions and decides small jobs from it, and the
tokenize writer splits its inputs by it. Parquet footers give exact uncompressed column sizes
(``parquet_column_bytes``); otherwise the file size is scaled by a per-format factor (``estimated_bytes``).
"""

from __future__ import annotations

import fsspec
import pyarrow.parquet as pq

__all__ = ["FOOTER_ESTIMATE_MAX_FILES", "estimated_bytes", "parquet_column_bytes"]

SIZE_FACTOR = {"parquet": 3.0, "vortex": 3.0, "jsonl": 1.0, "warc": 1.0}
"""In-memory bytes per stored byte: zstd/snappy Parquet and Vortex of prose and code hold 2-4x; plain JSONL's
text is about its size in Arrow."""
COMPRESSED_FACTOR = {".gz": 4.0, ".zst": 5.0}
"""The same for a compressed JSONL stream (its suffix decides)."""
FOOTER_ESTIMATE_MAX_FILES = 2000
"""Above this many Parquet files, sizes are estimated from file sizes instead of reading every footer."""


def estimated_bytes(path: str, size: int, fmt: str) -> int:
    """In-memory bytes of a ``fmt`` file of ``size`` stored bytes at ``path``."""
    factor = SIZE_FACTOR.get(fmt, 1.0)
    for suffix, compressed in COMPRESSED_FACTOR.items():
        if path.endswith(suffix):
            factor = compressed
    return int(size * factor)


def parquet_column_bytes(paths: list[str]) -> dict[str, int]:
    """Uncompressed bytes per top-level column over all row groups of these files (one footer read each)."""
    totals: dict[str, int] = {}
    for url in paths:
        fs, path = fsspec.core.url_to_fs(url)
        try:
            with fs.open(path, "rb") as f:
                metadata = pq.ParquetFile(f).metadata
        except Exception:  # unreadable here: the reading task reports it with its path
            continue
        for group in range(metadata.num_row_groups):
            row_group = metadata.row_group(group)
            for i in range(row_group.num_columns):
                chunk = row_group.column(i)
                name = chunk.path_in_schema.split(".")[0]
                totals[name] = totals.get(name, 0) + chunk.total_uncompressed_size
    return totals
