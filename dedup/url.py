"""Exact URL dedup: one row per normalized URL, kept by the exact-dedup keep rule.

The key is ``zephyr.pipelines.web.urls.normalize_url`` of the url column (lower-case host, no default port,
fragment or tracking parameters), and the rest is ``exact_dedup_dataset`` on that key with ``normalize="none"``:
the same keep rule (largest priority, then smallest id, then input order), the same ``dup_cluster`` /
``dup_cluster_size`` / ``dup_keep`` columns, the same driver-or-shuffle paths. Rows whose URL is null or not a
web URL are in no cluster and pass through (counted as ``dedup/null_text``: no key).

>>> import zephyr
>>> ds = zephyr.from_items([{"id": 2, "url": "http://A.com/x#top"}, {"id": 1, "url": "http://a.com:80/x?utm_source=t"}])
>>> url_dedup_dataset(ds, mode="remove").to_arrow(executor="inprocess").to_pylist()
[{'id': 1, 'url': 'http://a.com:80/x?utm_source=t'}]
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pyarrow as pa

from zephyr.errors import SchemaError

if TYPE_CHECKING:
    from zephyr.dataset import Dataset
    from zephyr.options import ExecutionOptions

__all__ = ["url_dedup_dataset", "url_exact_arguments", "url_keyed", "without_url_key", "URL_KEY"]

URL_KEY = "__dedup_url_key"


class _AddUrlKey:
    def __init__(self, url_column: str):
        self.url_column = url_column

    def __call__(self, table: pa.Table) -> pa.Table:
        from zephyr.pipelines.web.urls import normalize_urls

        if self.url_column not in table.column_names:
            if table.num_rows == 0:
                return table.append_column(URL_KEY, pa.array([], pa.string()))
            raise SchemaError(
                f"url column {self.url_column!r} not found; the input has {', '.join(table.column_names)} "
                "(pass --url-column / url_column=)"
            )
        return table.append_column(URL_KEY, normalize_urls(table.column(self.url_column)))


def _drop_key(table: pa.Table) -> Any:
    return table.drop_columns([URL_KEY]) if URL_KEY in table.column_names else table


def url_keyed(ds: Dataset, url_column: str = "url") -> Dataset:
    """``ds`` with the normalized URL in ``URL_KEY``: the text exact dedup hashes."""
    return ds.map_batches(_AddUrlKey(url_column), name="dedup.url.key")


def url_exact_arguments(
    *, id_column: str | None = "id", mode: str = "annotate", priority_column: str | None = None
) -> dict[str, Any]:
    """The arguments URL dedup gives ``exact_dedup_dataset`` and ``exact_job_plans`` (the key, byte-exact):
    one list, so ``zephyr explain dedup url`` shows the plans ``zephyr dedup url`` runs."""
    return {
        "text_column": URL_KEY,
        "id_column": id_column,
        "normalize": "none",
        "mode": mode,
        "priority_column": priority_column,
    }


def without_url_key(out: Dataset) -> Dataset:
    """The exact dedup's output without the key column: URL dedup's output."""
    return out.map_batches(_drop_key, name="dedup.url.finish")


def url_dedup_dataset(
    ds: Dataset,
    *,
    url_column: str = "url",
    id_column: str | None = "id",
    mode: str = "annotate",
    priority_column: str | None = None,
    execution: ExecutionOptions | dict[str, Any] | None = None,
    stats: dict[str, Any] | None = None,
) -> Dataset:
    """Keep one row per normalized URL (module docstring); arguments as in ``exact_dedup_dataset``."""
    from zephyr.dedup.dataset_ops import exact_dedup_dataset

    out = exact_dedup_dataset(
        url_keyed(ds, url_column),
        **url_exact_arguments(id_column=id_column, mode=mode, priority_column=priority_column),
        execution=execution,
        stats=stats,
    )
    return without_url_key(out)
