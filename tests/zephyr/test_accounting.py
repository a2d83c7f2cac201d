"""Every stage accounts for its rows: in = out + dropped + quarantined, wide ops included."""

from __future__ import annotations

import zephyr


def _balanced(stage: dict) -> bool:
    return stage["rows_in"] == stage["rows_out"] + stage["rows_dropped"] + stage["rows_quarantined"]


def test_filter_then_deduplicate_accounts_every_row(tmp_path, executor):
    rows = [{"k": i % 3, "v": i} for i in range(12)]
    ds = zephyr.from_items(rows, num_shards=2).filter(lambda r: r["v"] < 9).deduplicate("k")
    stats = ds.write_parquet(str(tmp_path / "out"), executor=executor, workers=2).stats
    first, dedup = stats["stages"]
    assert all(_balanced(s) for s in stats["stages"])
    assert (first["rows_in"], first["rows_out"], first["rows_dropped"]) == (12, 9, 3)
    # the map-side combiner removes most duplicates before the reducer sees them: still counted here
    assert (dedup["rows_in"], dedup["rows_out"], dedup["rows_dropped"]) == (9, 3, 6)
    assert dedup["wide"]["dropped_by_reason"] == {"duplicate": 6}
    assert first["rows_in"] == dedup["rows_out"] + sum(
        s["rows_dropped"] + s["rows_quarantined"] for s in stats["stages"]
    )


def test_aggregations_and_joins_say_what_they_did(tmp_path):
    ds = zephyr.from_items([{"k": i % 4, "v": i} for i in range(10)])
    stats = ds.group_by("k").count().write_parquet(str(tmp_path / "g"), executor="inprocess").stats
    grouped = stats["stages"][-1]
    assert (grouped["rows_in"], grouped["rows_out"], grouped["wide"]["groups"]) == (10, 4, 4)
    right = zephyr.from_items([{"k": 1, "w": "x"}, {"k": 2, "w": "y"}])
    stats = ds.join(right, on="k").write_parquet(str(tmp_path / "j"), executor="inprocess").stats
    joined = stats["stages"][-1]
    assert joined["wide"]["op"] == "Join" and joined["rows_in"] == 12 and joined["rows_out"] == 5
