"""Dictionary-encoded columns (categoricals: what pandas and polars hand over for repeated strings, and what a
Parquet file written from them reads back as) are ids, priorities and texts like any other: the plain dedup
functions rank and read their values. Arrow's rank has no dictionary kernel, so an id of that type failed with
a bare "ArrowNotImplementedError: dictionary<values=string, ...>", and a text of that type was refused."""

from __future__ import annotations

import pyarrow as pa
import pytest
from zephyr.dedup import exact_dedup, exact_dedup_dataset, fuzzy_dedup, paragraph_dedup

import zephyr

TEXT = "The river runs through the old town and the market sits beside it on the eastern bank. " * 3
PLAIN = pa.table(
    {
        "id": ["d", "a", "c", "b", "a"],
        "text": [TEXT, TEXT.upper(), None, TEXT + "\n\nA second paragraph.", "Short.\n\nA second paragraph."],
        "priority": ["low", "high", "low", "high", "mid"],
    }
)


def _encoded(columns: list[str]) -> pa.Table:
    """PLAIN with ``columns`` dictionary-encoded."""
    return pa.table(
        {n: PLAIN[n].dictionary_encode() if n in columns else PLAIN[n] for n in PLAIN.column_names}
    )


def _counts(stats: dict) -> dict:
    return {k: v for k, v in stats.items() if not k.endswith("_s") and k != "seconds"}


DEDUPS = {
    "exact": lambda t: exact_dedup(t, mode="annotate", priority_column="priority"),
    "fuzzy": lambda t: fuzzy_dedup(t, mode="annotate"),
    "paragraph": lambda t: paragraph_dedup(t),
}


@pytest.mark.parametrize(
    "columns", [["id"], ["text"], ["priority"], ["id", "text", "priority"]], ids="+".join
)
@pytest.mark.parametrize("dedup", sorted(DEDUPS))
def test_dictionary_columns_dedup_as_their_values(dedup: str, columns: list[str]):
    plain, encoded = DEDUPS[dedup](PLAIN), DEDUPS[dedup](_encoded(columns))
    kept = [c for c in plain.table.column_names if c not in columns]  # the user's own columns keep their type
    assert encoded.table.select(kept).to_pylist() == plain.table.select(kept).to_pylist()
    for name in set(columns) & set(plain.table.column_names):
        assert encoded.table[name].to_pylist() == plain.table[name].to_pylist()
    assert _counts(encoded.stats) == _counts(plain.stats)


def test_exact_dedup_removes_the_same_rows_from_a_categorical_id():
    out = exact_dedup(_encoded(["id", "text"]), mode="remove")
    assert out.table.num_rows == 4 and out.stats["duplicates"] == 1
    engine = exact_dedup_dataset(zephyr.from_arrow(_encoded(["id", "text"])), mode="remove")
    assert engine.to_arrow(executor="inprocess").num_rows == 4
