"""View-typed columns (``string_view``, ``binary_view``, also inside lists and structs) are data like any other.

Arrow has no take or filter kernel for view types (pyarrow 26), so a filter, a sort, a dedup's keep mask or a
tokenize batch with a null text failed on them ("array_take has no kernel matching input types (string_view,
uint16)"), retried and all. They come from ``from_arrow`` tables, from Parquet files whose stored Arrow schema
has them, and from batch functions. The engine and the dedup functions cast them to plain types as they come in
(``zephyr.io.schema.without_view_types``); every step must give what it gives on the plain types.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from zephyr.dedup import exact_dedup, exact_dedup_dataset, fuzzy_dedup, paragraph_dedup
from zephyr.tokenize import write_token_shards

import zephyr
from zephyr.io.schema import without_view_types

from ..dedup_stats import dedup_counts
from .conftest import GOOD

PLAIN = pa.table(
    {
        "id": ["d", "a", "c", "b", "a"],  # "a" twice: rows that share an id stay two rows
        "text": [
            GOOD,
            GOOD.upper(),
            None,
            GOOD + "\n\nA second paragraph.",
            "Short text.\n\nA second paragraph.",
        ],
        "blob": pa.array([b"1", b"2", b"3", b"4", b"5"]),
        "tags": pa.array([["x"], None, ["y", "z"], [], ["x"]], pa.list_(pa.string())),
        "meta": pa.array(
            [{"src": "w"}, {"src": "m"}, None, {"src": "w"}, {"src": "c"}], pa.struct([("src", pa.string())])
        ),
    }
)
VIEW_SCHEMA = pa.schema(
    [
        ("id", pa.string_view()),
        ("text", pa.string_view()),
        ("blob", pa.binary_view()),
        ("tags", pa.list_(pa.string_view())),
        ("meta", pa.struct([("src", pa.string_view())])),
    ]
)
VIEWS = PLAIN.cast(VIEW_SCHEMA)
EX = {"executor": "inprocess"}


def _rows(table: pa.Table) -> list[str]:
    """The rows as JSON, sorted: for steps whose output order is not defined."""
    return sorted(json.dumps(r, sort_keys=True, default=str) for r in table.to_pylist())


def test_view_columns_are_cast_to_plain_types_at_any_depth():
    out = without_view_types(VIEWS)
    assert out.schema.equals(PLAIN.schema)
    assert out.to_pylist() == PLAIN.to_pylist()
    assert without_view_types(PLAIN) is PLAIN  # nothing to cast: no copy


STEPS = {
    "filter": lambda d: d.filter(lambda r: r["id"] != "c"),
    "sort on view keys": lambda d: d.sort("id", "text"),
    "deduplicate on a view key": lambda d: d.deduplicate("id"),
    "group_by a view key": lambda d: d.group_by("id").count(),
    "map_batches returning views, then a filter": lambda d: d.map_batches(
        lambda t: t.cast(VIEW_SCHEMA)
    ).filter(lambda r: r["text"] is not None),
}


@pytest.mark.parametrize("step", sorted(STEPS))
def test_engine_steps_give_the_same_rows_on_views(step):
    plain = STEPS[step](zephyr.from_arrow(PLAIN, num_shards=2)).to_arrow(**EX)
    views = STEPS[step](zephyr.from_arrow(VIEWS, num_shards=2)).to_arrow(**EX)
    assert _rows(views) == _rows(plain)
    if step.startswith(("filter", "sort", "map_batches")):  # order-preserving steps: the same order too
        assert views.to_pylist() == plain.to_pylist()


@pytest.mark.parametrize("executor", ["inprocess", "local"])
def test_parquet_file_with_view_types_filters_and_sorts(tmp_path: Path, executor: str):
    """pyarrow stores the Arrow schema in the file, so its views come back as views when it is read."""
    plain_path, view_path = tmp_path / "plain.parquet", tmp_path / "views.parquet"
    pq.write_table(PLAIN, plain_path)
    pq.write_table(VIEWS, view_path)
    assert pq.read_schema(view_path).field("text").type == pa.string_view()
    for step in (STEPS["filter"], STEPS["sort on view keys"]):
        plain = step(zephyr.read_parquet(str(plain_path))).to_arrow(executor=executor, workers=2)
        views = step(zephyr.read_parquet(str(view_path))).to_arrow(executor=executor, workers=2)
        assert views.to_pylist() == plain.to_pylist()


@pytest.mark.parametrize(
    "dedup",
    [
        lambda t: exact_dedup(t, mode="remove"),
        lambda t: paragraph_dedup(t),
        lambda t: fuzzy_dedup(t, mode="annotate"),
    ],
    ids=["exact", "paragraph", "fuzzy"],
)
def test_dedup_functions_give_the_same_result_on_views(dedup):
    plain, views = dedup(PLAIN), dedup(VIEWS)
    assert views.table.to_pylist() == plain.table.to_pylist()
    assert dedup_counts(views.stats) == dedup_counts(plain.stats)
    assert dedup(VIEWS.to_batches()[0]).table.to_pylist() == plain.table.to_pylist()  # a record batch too


def test_dedup_dataset_on_views():
    plain = exact_dedup_dataset(zephyr.from_arrow(PLAIN), mode="remove").to_arrow(**EX)
    views = exact_dedup_dataset(zephyr.from_arrow(VIEWS), mode="remove").to_arrow(**EX)
    assert _rows(views) == _rows(plain) and views.num_rows == 4  # the upper-cased copy is a duplicate


def test_tokenize_a_view_text_column_writes_the_same_shards(tmp_path: Path, tokenizer_json: Path):
    """The null text is quarantined (the step's filter used to fail on views), the others tokenized."""
    results = {}
    for name, table in (("plain", PLAIN), ("views", VIEWS)):
        out = tmp_path / name
        results[name] = write_token_shards(
            zephyr.from_arrow(table.select(["id", "text"])),
            tokenizer=str(tokenizer_json),
            output=str(out),
            **EX,
        )
        results[name] = (
            results[name].num_documents,
            results[name].stats["rows"],
            {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(out.glob("shard-*"))},
        )
    assert results["views"] == results["plain"]
    assert results["views"][0] == 4 and results["views"][1]["quarantined"] == 1


@pytest.mark.slow
def test_views_over_2_gib_become_large_types():
    """A chunk with more than 2 GiB of string bytes overflows ``string``'s int32 offsets (Arrow's own cast says
    "Negative offsets in binary array"): it becomes ``large_string`` instead, every value intact."""
    value = "x" * (1 << 20)
    table = pa.table({"text": pa.array([value] * 2100, pa.string_view()), "id": pa.array(range(2100))})
    out = without_view_types(table)
    assert out.schema.field("text").type == pa.large_string() and out.schema.field("id").type == pa.int64()
    assert out.num_rows == 2100 and out["text"][2099].as_py() == value
