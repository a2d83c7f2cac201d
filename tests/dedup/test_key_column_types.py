"""Id, priority and text columns of the types Arrow's kernels do not take as they are.

Dictionary-encoded columns (categoricals: what pandas and polars hand over for repeated strings, and what a
Parquet file written from them reads back as) dedup as their values. Arrow's rank has no dictionary kernel, so
such an id failed with a bare "ArrowNotImplementedError: dictionary<values=string, ...>", and such a text was
refused. A null-typed id or priority (no value at all: a JSONL field that is always null) ties every row, so
the keep order is the input order, as without that column; it failed with "ArrowNotImplementedError: null".
"""

from __future__ import annotations

import pyarrow as pa
import pytest
from zephyr.dedup import exact_dedup, exact_dedup_dataset, fuzzy_dedup, fuzzy_dedup_dataset, paragraph_dedup
from zephyr.dedup.config import DedupColumns

import zephyr

from ..dedup_stats import dedup_counts

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


DEDUPS = {
    "exact": lambda t: exact_dedup(t, DedupColumns(priority_column="priority"), mode="annotate"),
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
    assert dedup_counts(encoded.stats) == dedup_counts(plain.stats)


def test_exact_dedup_removes_the_same_rows_from_a_categorical_id():
    out = exact_dedup(_encoded(["id", "text"]), mode="remove")
    assert out.table.num_rows == 4 and out.stats["duplicates"] == 1
    engine = exact_dedup_dataset(zephyr.from_arrow(_encoded(["id", "text"])), mode="remove")
    assert engine.to_arrow(executor="inprocess").num_rows == 4


NO_VALUES = PLAIN.append_column("none", pa.nulls(PLAIN.num_rows))


@pytest.mark.parametrize(
    "run",
    [
        lambda t, **kw: exact_dedup(t, DedupColumns(**kw), mode="annotate").table,
        lambda t, **kw: fuzzy_dedup(t, None, DedupColumns(**kw), mode="annotate").table,
        lambda t, **kw: exact_dedup_dataset(
            zephyr.from_arrow(t), DedupColumns(**kw), mode="annotate"
        ).to_arrow(executor="inprocess"),
        lambda t, **kw: fuzzy_dedup_dataset(
            zephyr.from_arrow(t), None, DedupColumns(**kw), mode="annotate"
        ).to_arrow(executor="inprocess"),
    ],
    ids=["exact", "fuzzy", "exact_dataset", "fuzzy_dataset"],
)
def test_null_typed_id_or_priority_keeps_in_input_order(run):
    without = run(NO_VALUES, id_column=None)
    for kw in ({"id_column": "none"}, {"id_column": None, "priority_column": "none"}):
        got = run(NO_VALUES, **kw)
        assert got["dup_keep"].to_pylist() == without["dup_keep"].to_pylist(), kw
        assert got["dup_cluster_size"].to_pylist() == without["dup_cluster_size"].to_pylist(), kw


@pytest.mark.parametrize("ids", [[None, None, "c", None], ["a", None, "c", "d"], [None, "b", "c", None]])
@pytest.mark.parametrize("kind", ["exact", "fuzzy"])
def test_null_ids_give_the_same_columns_on_both_surfaces(ids: list, kind: str):
    """A cluster whose kept row has a null id: the Dataset surface called its rows lone (size 1) because
    their cluster id was null, where the table functions say size 2."""
    table = pa.table({"id": pa.array(ids, pa.string()), "text": [TEXT, TEXT, "Another text.", TEXT.upper()]})
    table = table.append_column("row", pa.array(range(4)))
    plain = (exact_dedup if kind == "exact" else fuzzy_dedup)(table, mode="annotate").table
    surface = exact_dedup_dataset if kind == "exact" else fuzzy_dedup_dataset
    engine = surface(zephyr.from_arrow(table), mode="annotate").to_arrow(executor="inprocess").sort_by("row")
    columns = ["row", "dup_keep", "dup_cluster_size", "dup_cluster"]
    assert engine.select(columns).to_pylist() == plain.select(columns).to_pylist()
