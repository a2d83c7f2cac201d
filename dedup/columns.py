"""Helper columns the dedup stages add to the rows they carry; all start with ``__dedup_`` and never reach
an output (``dup_columns.Finish`` drops them), except ROW and KEEPER when an index records row numbers."""

from __future__ import annotations

__all__ = ["ROW", "H0", "H1", "CLUSTER", "SIZE", "KEEP", "KEEPER", "HELPERS"]

ROW = "__dedup_row"
"""The engine's row number (``Dataset.with_row_index``): row identity on every dedup path."""
H0, H1 = "__dedup_h0", "__dedup_h1"
"""The two 64-bit halves of a document's exact hash."""
CLUSTER, SIZE, KEEP, KEEPER = "__dedup_cluster", "__dedup_size", "__dedup_keep", "__dedup_keeper"
"""A row's cluster (its kept row's id), the cluster's size, whether the row is kept, its kept row's number."""
HELPERS = (ROW, H0, H1, CLUSTER, SIZE, KEEP, KEEPER)
