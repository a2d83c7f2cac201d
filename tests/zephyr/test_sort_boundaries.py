"""Dataset.sort(boundaries=...): the caller's split points instead of a key sample's, the same partitions
whatever the input layout, checked arguments, and a plan without a sample stage."""

from __future__ import annotations

import pyarrow.parquet as pq
import pytest

import zephyr
from zephyr.errors import ConfigError


def _keys(n: int = 500) -> list[dict[str, int]]:
    return [{"k": (i * 7919) % 1000, "i": i} for i in range(n)]


@pytest.mark.parametrize("descending", [False, True])
def test_partitions_follow_the_given_boundaries(tmp_path, descending):
    cuts = [700, 300] if descending else [300, 700]
    ds = zephyr.from_items(_keys(), num_shards=4).sort("k", "i", descending=descending, boundaries=cuts)
    written = ds.write_parquet(str(tmp_path / "out"), executor="local", workers=2)
    parts = [pq.read_table(f).to_pylist() for f in sorted(written.files)]
    assert len(parts) == 3
    inside = (
        [lambda k: k > 700, lambda k: 300 < k <= 700, lambda k: k <= 300]  # a cut starts its partition
        if descending
        else [lambda k: k < 300, lambda k: 300 <= k < 700, lambda k: k >= 700]
    )
    assert all(all(rule(r["k"]) for r in part) for rule, part in zip(inside, parts))
    rows = [r for part in parts for r in part]
    assert rows == sorted(_keys(), key=lambda r: (r["k"], r["i"]), reverse=descending)


def test_given_boundaries_cut_the_same_partitions_from_any_layout(tmp_path):
    """A key sample is taken per task, so sampled cuts move with the input split; given ones do not."""
    cuts = [1 << 63, (1 << 63) + (1 << 62)]  # past int64: uint64 hash keys
    rows = [{"h": (i * 0x9E3779B97F4A7C15) % (1 << 64)} for i in range(20000)]
    import pyarrow as pa

    table = pa.table({"h": pa.array([r["h"] for r in rows], pa.uint64())})
    files = []
    for shards in (1, 7):
        out = zephyr.from_arrow(table, num_shards=shards).sort("h", boundaries=cuts)
        files.append(
            [pq.read_table(f) for f in sorted(out.write_parquet(str(tmp_path / f"s{shards}")).files)]
        )
    assert [t.num_rows for t in files[0]] == [t.num_rows for t in files[1]]
    assert all(a.equals(b) for a, b in zip(*files))


def test_boundaries_are_checked():
    ds = zephyr.from_items(_keys())
    with pytest.raises(ConfigError, match="strictly increasing"):
        ds.sort("k", boundaries=[5, 5])
    with pytest.raises(ConfigError, match="strictly decreasing"):
        ds.sort("k", descending=True, boundaries=[1, 2])
    with pytest.raises(ConfigError, match="null"):
        ds.sort("k", boundaries=[1, None])
    with pytest.raises(ConfigError, match="make 3 partitions, not num_partitions=4"):
        ds.sort("k", boundaries=[1, 2], num_partitions=4)


def test_the_plan_has_no_sample_stage():
    text = zephyr.from_items(_keys()).sort("k", boundaries=[100, 200, 300]).explain(executor="inprocess")
    assert "sample" not in text and "4 partitions = the given boundaries + 1" in text
    assert "sample" in zephyr.from_items(_keys()).sort("k", num_partitions=4).explain(executor="inprocess")
