"""Row identity is the engine's: rows that share an id, rows with null ids and inputs without an id column
dedup like any others, on every path (plain functions, engine stages in memory and through the shuffle,
the CLI, ``zephyr run``), for exact, paragraph and fuzzy dedup.

The corpus: 100 unrelated documents plus copies of 20 of them. How the copies are named is the case:
- ``same_id``: each copy repeats its original's id and text (a crawl merged twice);
- ``null_id``: the copies have null ids (and one original too);
- ``no_id``: there is no id column at all (``id_column=None`` / ``--id-column none``);
plus ``same_id_other_text``: 20 *other* documents reuse existing ids with new, unrelated texts (nothing may
be removed). Every path must keep exactly one row per distinct text.
"""

from __future__ import annotations

import random
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
import yaml
from zephyr.dedup import (
    FuzzyDedupConfig,
    exact_dedup,
    exact_dedup_dataset,
    fuzzy_dedup,
    fuzzy_dedup_dataset,
    paragraph_dedup,
    paragraph_dedup_dataset,
)
from zephyr.dedup.config import DedupColumns

import zephyr
from zephyr.cli import main

CASES = ["same_id", "null_id", "no_id", "same_id_other_text"]
EXPECTED_KEPT = {"same_id": 100, "null_id": 100, "no_id": 100, "same_id_other_text": 120}
INPROCESS = {"executor": "inprocess"}


def _text(rng: random.Random) -> str:
    words = [f"w{rng.randrange(50_000)}" for _ in range(rng.randrange(60, 120))]
    return " ".join(words)


def corpus(case: str) -> pa.Table:
    rng = random.Random(7)
    ids = [f"doc-{i:03d}" for i in range(100)]
    texts = [_text(rng) for _ in range(100)]
    picks = rng.sample(range(100), 20)
    if case == "same_id_other_text":
        extra_ids, extra_texts = [ids[i] for i in picks], [_text(rng) for _ in picks]
    else:
        extra_ids, extra_texts = [ids[i] for i in picks], [texts[i] for i in picks]
    all_ids, all_texts = ids + extra_ids, texts + extra_texts
    order = list(range(120))
    rng.shuffle(order)  # copies before and after their originals
    all_ids, all_texts = [all_ids[i] for i in order], [all_texts[i] for i in order]
    if case == "null_id":
        all_ids = [None if i >= 100 or i == picks[0] else x for i, x in zip(order, all_ids)]
    if case == "no_id":
        return pa.table({"text": all_texts})
    return pa.table({"id": pa.array(all_ids, pa.string()), "text": all_texts})


def _id_column(case: str) -> str | None:
    return None if case == "no_id" else "id"


def _check(case: str, out: pa.Table) -> None:
    """One row per distinct text survives; with a null-id copy of a named row, the named row is kept."""
    assert out.num_rows == EXPECTED_KEPT[case]
    assert pc.count_distinct(out["text"]).as_py() == out.num_rows
    if case == "null_id":  # ids order rows, nulls last: a null-id copy never wins over its named original
        assert out["id"].null_count == 1  # only the original whose id is null itself


def _fuzzy_config() -> FuzzyDedupConfig:
    return FuzzyDedupConfig(threshold=0.8)


@pytest.mark.parametrize("case", CASES)
def test_plain_functions(case):
    t = corpus(case)
    idc = _id_column(case)
    _check(case, exact_dedup(t, DedupColumns(id_column=idc), mode="remove").table)
    _check(case, fuzzy_dedup(t, _fuzzy_config(), DedupColumns(id_column=idc), mode="remove").table)
    # paragraph: each document is one paragraph, so a copy is emptied rather than dropped
    texts = paragraph_dedup(t, DedupColumns(id_column=idc), mode="remove").table["text"]
    assert pc.sum(pc.not_equal(texts, "")).as_py() == EXPECTED_KEPT[case]


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("path", ["in_memory", "shuffle"])
def test_engine_stages(case, path):
    t = corpus(case)
    idc = _id_column(case)
    ds = zephyr.from_arrow(t, num_shards=3)
    limit = 0 if path == "shuffle" else None
    exact = exact_dedup_dataset(
        ds, DedupColumns(id_column=idc), mode="remove", execution=INPROCESS, driver_rows=limit
    )
    _check(case, exact.to_arrow(**INPROCESS))
    lazy = exact_dedup_dataset(
        ds, DedupColumns(id_column=idc), mode="remove"
    )  # the plan without an eager pass
    _check(case, lazy.to_arrow(**INPROCESS))
    fuzzy = fuzzy_dedup_dataset(
        ds,
        _fuzzy_config(),
        DedupColumns(id_column=idc),
        mode="remove",
        execution=INPROCESS,
        driver_rows=limit,
    )
    _check(case, fuzzy.to_arrow(**INPROCESS))
    para = paragraph_dedup_dataset(ds, DedupColumns(id_column=idc), mode="remove").to_arrow(**INPROCESS)
    assert pc.sum(pc.not_equal(para["text"], "")).as_py() == EXPECTED_KEPT[case]


def test_engine_components_rounds_on_repeated_ids():
    """The external components path (graph beyond the driver) also keeps rows apart by row number."""
    t = corpus("same_id")
    ex = {**INPROCESS, "memory_budget": "64MB"}
    cfg = FuzzyDedupConfig(threshold=0.8, clusters="components")
    from zephyr import budget

    original = budget.GRAPH_BYTES_PER_EDGE
    budget.GRAPH_BYTES_PER_EDGE = 1 << 40  # no verified graph fits the driver: engine rounds
    try:
        out = fuzzy_dedup_dataset(zephyr.from_arrow(t), cfg, mode="remove", execution=ex, driver_rows=0)
        _check("same_id", out.to_arrow(**ex))
    finally:
        budget.GRAPH_BYTES_PER_EDGE = original


def test_engine_anchored_refuses_a_graph_beyond_the_driver_by_name():
    from zephyr import budget
    from zephyr.errors import ZephyrError

    original = budget.GRAPH_BYTES_PER_EDGE
    budget.GRAPH_BYTES_PER_EDGE = 1 << 40
    try:
        with pytest.raises(ZephyrError, match="--clusters components"):
            fuzzy_dedup_dataset(
                zephyr.from_arrow(corpus("same_id")),
                _fuzzy_config(),
                execution=INPROCESS,
                driver_rows=0,
                mode="annotate",
            )
    finally:
        budget.GRAPH_BYTES_PER_EDGE = original


@pytest.mark.parametrize("case", CASES)
def test_cli(tmp_path, case):
    path = tmp_path / "in.parquet"
    pq.write_table(corpus(case), path)
    id_flag = ["--id-column", "none"] if case == "no_id" else []
    common = ["--mode", "remove", "--executor", "inprocess", *id_flag]
    for kind in ("exact", "fuzzy", "paragraph"):
        out = tmp_path / kind
        assert main(["dedup", kind, str(path), "--output", str(out), *common]) == 0
        table = pq.read_table(sorted(out.glob("part-*.parquet")))
        if kind == "paragraph":
            assert pc.sum(pc.not_equal(table["text"], "")).as_py() == EXPECTED_KEPT[case]
        else:
            _check(case, table)


@pytest.mark.parametrize("case", ["same_id", "same_id_other_text"])
def test_zephyr_run(tmp_path, case):
    """(``zephyr run``'s read stage quarantines null ids itself, by name and count: its token shuffle keys on
    ids; the dedup stages never see them.)"""
    path = tmp_path / "in.parquet"
    pq.write_table(corpus(case), path)
    config = {
        "name": "row-identity",
        "steps": [
            {"step": "read", "paths": [str(path)], "num_shards": 2},
            {"step": "exact_dedup"},
            {"step": "fuzzy_dedup"},
        ],
    }
    pipeline = tmp_path / "p.yaml"
    pipeline.write_text(yaml.safe_dump(config))
    job = tmp_path / "job"
    assert main(["run", str(pipeline), "--job-dir", str(job), "--executor", "inprocess", "--no-report"]) == 0
    exact = pq.read_table(sorted(Path(job).glob("01-*/part-*.parquet")))
    fuzzy = pq.read_table(sorted(Path(job).glob("02-*/part-*.parquet")))
    _check(case, exact)
    _check(case, fuzzy)
