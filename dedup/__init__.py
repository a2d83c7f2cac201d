"""zephyr.dedup: exact and MinHash-LSH fuzzy deduplication with verified clusters.

One path per method, two ways in, each reading the columns one ``DedupColumns`` names: the Dataset functions
(``exact_dedup_dataset``, ``fuzzy_dedup_dataset``, ``paragraph_dedup_dataset``,
``bloom_paragraph_dedup_dataset``, ``url_dedup_dataset``, ``substring_dedup_dataset``) append the method's
ops to a ``zephyr.Dataset``; the table functions ``exact_dedup`` and ``fuzzy_dedup`` run the Dataset
function in process on one in-memory ``pyarrow.Table`` (``paragraph_dedup`` and ``bloom_paragraph_dedup``
are the kernels their Dataset functions run on each batch). Each Dataset function is its method's one
description: given a listing ``jobs=`` (``_rows.Jobs``) it lists the engine jobs it runs instead of running
them (what ``zephyr explain dedup`` prints). An on-disk index (``open_index``,
``write_generation``) lets a later corpus be deduped against an earlier one.

Names are imported lazily so ``zephyr --help`` (which imports ``zephyr.dedup.cli``) stays fast.

>>> import pyarrow as pa
>>> from zephyr.dedup import exact_dedup
>>> exact_dedup(pa.table({"id": [1, 2], "text": ["A b", "a  B"]})).table["id"].to_pylist()
[1]
"""

from __future__ import annotations

from zephyr._lazy import lazy_exports as _lazy_exports

_LAZY = {
    "DedupResult": "zephyr.dedup._rows",
    "DedupColumns": "zephyr.dedup.config",
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
    "bloom_paragraph_dedup": "zephyr.dedup.bloom",
    "bloom_paragraph_dedup_dataset": "zephyr.dedup.bloom",
    "substring_dedup_dataset": "zephyr.dedup.substring",
    "open_index": "zephyr.dedup.index",
    "write_generation": "zephyr.dedup.index",
}

__all__ = sorted(_LAZY)


__getattr__, __dir__ = _lazy_exports(__name__, _LAZY, globals())
