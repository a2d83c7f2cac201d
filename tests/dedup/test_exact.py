"""Exact dedup (plain functions): keep rules, modes, nulls, duckdb parity, paragraphs."""

from __future__ import annotations

import duckdb
import pyarrow as pa
import pytest
from zephyr.dedup import exact_dedup, paragraph_dedup
from zephyr.dedup.config import DedupColumns

from zephyr.errors import ConfigError, SchemaError


def _table():
    return pa.table(
        {
            "id": ["d3", "d1", "d2", "d4", "d5", "d6"],
            "text": ["Hello  World", "hello world", "Other", None, "hello world", "HELLO WORLD\n"],
            "prio": [5, 1, 0, 0, 9, 9],
        }
    )


def test_annotate_min_id_rule():
    r = exact_dedup(_table(), mode="annotate")
    rows = {row["id"]: row for row in r.table.to_pylist()}
    assert {rows[i]["dup_cluster"] for i in ("d1", "d3", "d5", "d6")} == {"d1"}
    assert rows["d1"]["dup_keep"] and not rows["d3"]["dup_keep"]
    assert rows["d3"]["dup_cluster_size"] == 4
    assert rows["d2"] == {**rows["d2"], "dup_cluster": "d2", "dup_cluster_size": 1, "dup_keep": True}
    # null text: passed through unchanged, counted, kept
    assert rows["d4"]["dup_cluster"] is None and rows["d4"]["dup_keep"]
    assert r.stats["null_text"] == 1
    assert r.stats["rows_in"] == r.stats["rows_out"] + r.stats["rows_dropped"] + r.stats["rows_quarantined"]
    assert r.stats["cluster_size_histogram"] == {"1": 1, "4": 1}


def test_priority_rule_max_priority_ties_to_min_id():
    r = exact_dedup(_table(), DedupColumns(priority_column="prio"), mode="remove")
    assert r.table["id"].to_pylist() == ["d2", "d4", "d5"]  # d5 and d6 tie at 9: d5 has the smaller id
    assert r.stats["rows_dropped"] == 3


def test_normalize_none_is_byte_exact():
    r = exact_dedup(_table(), normalize="none", mode="remove")
    assert sorted(r.table["id"].to_pylist()) == ["d1", "d2", "d3", "d4", "d6"]


def test_remove_with_no_id_column_keeps_first_row():
    t = pa.table({"text": ["b", "a", "b", "a"]})
    assert exact_dedup(t, DedupColumns(id_column=None), mode="remove").table["text"].to_pylist() == ["b", "a"]


def test_normalize_none_matches_duckdb_count_distinct(tmp_path):
    texts = [f"doc {i % 37}" + (" " if i % 5 == 0 else "") for i in range(500)] + ["", "", None]
    t = pa.table({"id": list(range(len(texts))), "text": texts})
    kept = exact_dedup(t, normalize="none", mode="remove").table
    distinct = duckdb.sql("select count(distinct text) from t").fetchall()[0][0]
    nulls = duckdb.sql("select count(*) from t where text is null").fetchall()[0][0]
    assert kept.num_rows == distinct + nulls  # duckdb skips nulls; we pass them through


def test_record_batches_and_errors():
    t = _table()
    r = exact_dedup(iter(t.to_batches(max_chunksize=2)), mode="annotate")
    assert r.table.num_rows == t.num_rows
    with pytest.raises(SchemaError, match="text column 'body' not found"):
        exact_dedup(t, DedupColumns(text_column="body"), mode="annotate")
    with pytest.raises(ConfigError):
        exact_dedup(t, mode="drop")
    with pytest.raises(ConfigError):
        exact_dedup(t, normalize="nfkc", mode="annotate")


def test_paragraph_dedup_removes_earlier_seen_paragraphs_in_id_order():
    t = pa.table(
        {
            "id": ["b", "a", "c", "n"],
            "text": ["shared line\nB own\n\nshared line", "Shared   LINE\nA own", "A own\nC own", None],
            "source": ["web", "web", "mail", "mail"],
        }
    )
    r = paragraph_dedup(t, mode="remove")
    out = dict(zip(r.table["id"].to_pylist(), r.table["text"].to_pylist()))
    assert out == {"a": "Shared   LINE\nA own", "b": "B own\n", "c": "C own", "n": None}
    assert r.stats["paragraphs_removed"] == 3
    assert r.stats["per_source"]["web"] == {"paragraphs_removed": 2, "bytes_removed": 22}
    assert r.stats["per_source"]["mail"] == {"paragraphs_removed": 1, "bytes_removed": 5}
    ann = paragraph_dedup(t, mode="annotate").table
    assert ann["text"].to_pylist() == t["text"].to_pylist()
    assert ann["dup_paragraphs"].to_pylist() == [2, 0, 1, 0]
