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

from typing import TYPE_CHECKING

from zephyr._lazy import lazy_exports as _lazy_exports

if TYPE_CHECKING:  # the public names, for type checkers and IDEs; loaded lazily at run time (zephyr._lazy)
    from zephyr.dedup._rows import DedupResult
    from zephyr.dedup.bloom import bloom_paragraph_dedup, bloom_paragraph_dedup_dataset
    from zephyr.dedup.config import (
        PRESETS,
        DedupColumns,
        ExactDedupConfig,
        FuzzyDedupConfig,
        SubstringConfig,
        lsh_threshold,
        optimal_bands,
    )
    from zephyr.dedup.exact import (
        exact_dedup,
        exact_dedup_dataset,
        paragraph_dedup,
        paragraph_dedup_dataset,
        url_dedup_dataset,
    )
    from zephyr.dedup.fuzzy import fuzzy_dedup, fuzzy_dedup_dataset
    from zephyr.dedup.index import open_index, write_generation
    from zephyr.dedup.substring import substring_dedup_dataset


__getattr__, __dir__, __all__ = _lazy_exports(__name__, globals())
