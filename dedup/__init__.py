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

_EXPORTS = {  # module: the names it exports here
    "_rows": "DedupResult",
    "config": "DedupColumns ExactDedupConfig FuzzyDedupConfig SubstringConfig PRESETS lsh_threshold "
    "optimal_bands",
    "exact": "exact_dedup exact_dedup_dataset paragraph_dedup paragraph_dedup_dataset url_dedup_dataset",
    "fuzzy": "fuzzy_dedup fuzzy_dedup_dataset",
    "bloom": "bloom_paragraph_dedup bloom_paragraph_dedup_dataset",
    "substring": "substring_dedup_dataset",
    "index": "open_index write_generation",
}
_LAZY = {name: f"zephyr.dedup.{module}" for module, names in _EXPORTS.items() for name in names.split()}

__all__ = sorted(_LAZY)


__getattr__, __dir__ = _lazy_exports(__name__, _LAZY, globals())
