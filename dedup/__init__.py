"""zephyr.dedup: exact and MinHash-LSH fuzzy deduplication with verified clusters.

Two surfaces share one set of numpy kernels (normalize → hash/shingle → MinHash → LSH → verify →
components):

- plain functions on ``pyarrow.Table`` / record batches, no cluster needed: ``exact_dedup``,
  ``paragraph_dedup``, ``fuzzy_dedup``, ``SignatureIndex``;
- Dataset functions taking and returning a ``zephyr.Dataset``: ``exact_dedup_dataset``,
  ``paragraph_dedup_dataset``, ``fuzzy_dedup_dataset`` (``zephyr.dedup.exact``).

Names are imported lazily so ``zephyr --help`` (which imports ``zephyr.dedup.cli``) stays fast.

>>> import pyarrow as pa
>>> from zephyr.dedup import exact_dedup
>>> exact_dedup(pa.table({"id": [1, 2], "text": ["A b", "a  B"]}), mode="remove").table["id"].to_pylist()
[1]
"""

from __future__ import annotations

from zephyr._lazy import lazy_exports as _lazy_exports

_LAZY = {
    "DedupResult": "zephyr.dedup._rows",
    "ExactDedupConfig": "zephyr.dedup.config",
    "FuzzyDedupConfig": "zephyr.dedup.config",
    "SubstringConfig": "zephyr.dedup.config",
    "PRESETS": "zephyr.dedup.config",
    "lsh_threshold": "zephyr.dedup.config",
    "optimal_bands": "zephyr.dedup.config",
    "exact_dedup": "zephyr.dedup.exact",
    "exact_dedup_dataset": "zephyr.dedup.exact",
    "paragraph_dedup": "zephyr.dedup.exact",
    "paragraph_dedup_dataset": "zephyr.dedup.exact",
    "url_dedup_dataset": "zephyr.dedup.exact",
    "fuzzy_dedup": "zephyr.dedup.fuzzy",
    "fuzzy_dedup_dataset": "zephyr.dedup.fuzzy",
    "SignatureIndex": "zephyr.dedup.fuzzy",
    "bloom_paragraph_dedup": "zephyr.dedup.bloom",
    "substring_dedup_dataset": "zephyr.dedup.substring",
    "open_index": "zephyr.dedup.index",
    "write_generation": "zephyr.dedup.index",
    "pair_scores": "zephyr.dedup.evaluate",
}

__all__ = sorted(_LAZY)


__getattr__, __dir__ = _lazy_exports(__name__, _LAZY, globals())
