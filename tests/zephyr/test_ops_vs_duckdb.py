"""Every Dataset op checked against duckdb on random data (hypothesis), with nulls and skewed keys."""

from __future__ import annotations

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.compute  # noqa: F401  (pa.compute)
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import zephyr

RUN = dict(executor="inprocess", memory_budget="2MiB")
SETTINGS = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def tables(draw, min_rows=0, max_rows=300):
    """Random tables: a skewed int key with nulls, a string key with nulls, float values with nulls."""
    n = draw(st.integers(min_rows, max_rows))
    seed = draw(st.integers(0, 2**31))
    rng = np.random.default_rng(seed)
    keys = rng.zipf(1.6, n) % 17  # skew: a few very hot keys
    key_nulls = rng.random(n) < 0.1
    words = np.array(["a", "b", "cc", "ddd", "é", "日本", ""])
    skey = words[rng.integers(0, len(words), n)]
    skey_nulls = rng.random(n) < 0.1
    values = rng.normal(size=n).round(3)
    value_nulls = rng.random(n) < 0.15
    return pa.table(
        {
            "k": pa.array(keys, mask=key_nulls, type=pa.int64()),
            "s": pa.array(skey, mask=skey_nulls, type=pa.string()),
            "v": pa.array(values, mask=value_nulls, type=pa.float64()),
            "row": pa.array(np.arange(n), type=pa.int64()),
        }
    )


def _duck(sql: str, **tables: pa.Table) -> pa.Table:
    con = duckdb.connect()
    for name, table in tables.items():
        con.register(name, table)
    return con.sql(sql).to_arrow_table()


def _rows(table: pa.Table, order: list[str]) -> list[tuple]:
    if table.num_rows == 0:
        return []  # an empty shuffle result has no rows to say its schema with
    data = table.select(order).to_pylist()
    return sorted((tuple(r[c] for c in order) for r in data), key=lambda t: tuple((x is None, x) for x in t))


def _close(a: list[tuple], b: list[tuple]) -> bool:
    if len(a) != len(b):
        return False
    for ra, rb in zip(a, b):
        for x, y in zip(ra, rb):
            if isinstance(x, float) and isinstance(y, float):
                if not np.isclose(x, y, rtol=1e-9, atol=1e-9):
                    return False
            elif x != y:
                return False
    return True


@SETTINGS
@given(tables(), st.integers(1, 4), st.integers(1, 5))
def test_group_by_aggregates(table, shards, partitions):
    ds = zephyr.from_arrow(table, num_shards=shards)
    got = (
        ds.group_by("k", "s", num_partitions=partitions)
        .agg(n=("v", "count"), total=("v", "sum"), lo=("v", "min"), hi=("v", "max"), avg=("v", "mean"))
        .to_arrow(**RUN)
    )
    want = _duck(
        "select k, s, count(v) as n, sum(v) as total, min(v) as lo, max(v) as hi, avg(v) as avg "
        "from t group by k, s",
        t=table,
    )
    cols = ["k", "s", "n", "total", "lo", "hi", "avg"]
    assert _close(_rows(got, cols), _rows(want, cols))


@SETTINGS
@given(tables(), st.integers(1, 4), st.integers(1, 5))
def test_group_by_count_and_first_last_follow_input_order(table, shards, partitions):
    ds = zephyr.from_arrow(table, num_shards=shards)
    got = (
        ds.group_by("k", num_partitions=partitions)
        .agg(rows=("row", "count"), first=("row", "first"), last=("row", "last"))
        .to_arrow(**RUN)
    )
    want = _duck("select k, count(*) as rows, min(row) as first, max(row) as last from t group by k", t=table)
    assert _rows(got, ["k", "rows", "first", "last"]) == _rows(want, ["k", "rows", "first", "last"])
    counted = ds.group_by("k", num_partitions=partitions).count().to_arrow(**RUN)
    assert _rows(counted, ["k", "count"]) == _rows(
        want.rename_columns(["k", "count", "f", "l"]), ["k", "count"]
    )


@SETTINGS
@given(tables(), st.integers(1, 4), st.integers(1, 6), st.booleans())
def test_global_sort(table, shards, partitions, descending):
    ds = zephyr.from_arrow(table, num_shards=shards)
    got = ds.sort("s", "k", descending=descending, num_partitions=partitions).to_arrow(**RUN)
    direction = "desc" if descending else "asc"
    want = _duck(f"select * from t order by s {direction} nulls last, k {direction} nulls last, row", t=table)
    assert got.num_rows == table.num_rows
    if not table.num_rows:
        return
    key = ["s", "k"]
    assert got.select(key).to_pylist() == want.select(key).to_pylist()


@SETTINGS
@given(
    tables(max_rows=120),
    tables(max_rows=120),
    st.sampled_from(["inner", "left", "right", "outer"]),
    st.integers(1, 4),
)
def test_join_all_kinds(left, right, how, partitions):
    right = right.rename_columns(["k", "s2", "v2", "row2"])
    got = (
        zephyr.from_arrow(left, num_shards=2)
        .join(zephyr.from_arrow(right), on="k", how=how, num_partitions=partitions)
        .to_arrow(**RUN)
    )
    sql_how = {"inner": "inner", "left": "left", "right": "right", "outer": "full outer"}[how]
    want = _duck(
        f"select coalesce(l.k, r.k) as k, l.row, r.row2 from l {sql_how} join r on l.k = r.k", l=left, r=right
    )
    cols = ["k", "row", "row2"]
    if got.num_rows == 0:
        assert want.num_rows == 0
    else:
        assert _rows(got, cols) == _rows(want, cols)


@SETTINGS
@given(tables(), st.integers(1, 4), st.integers(1, 5))
def test_deduplicate_keeps_first_in_input_order(table, shards, partitions):
    got = (
        zephyr.from_arrow(table, num_shards=shards)
        .deduplicate("k", "s", num_partitions=partitions)
        .to_arrow(**RUN)
    )
    want = _duck("select k, s, min(row) as row from t group by k, s", t=table)
    assert _rows(got, ["k", "s", "row"]) == _rows(want, ["k", "s", "row"])


def test_group_reduce_sees_sorted_groups():
    rows = [{"g": i % 3, "t": (7 * i) % 11, "x": i} for i in range(40)]

    def summarize(group: pa.Table) -> dict:
        ts = group.column("t").to_pylist()
        assert ts == sorted(ts, reverse=True)
        return {"g": group.column("g")[0].as_py(), "ts": ts, "n": group.num_rows}

    got = (
        zephyr.from_items(rows, num_shards=3)
        .group_by("g", sort_by=[("t", True)], num_partitions=2)
        .reduce(summarize)
        .sort("g")
        .to_arrow(**RUN)
    )
    assert got.column("n").to_pylist() == [14, 13, 13]


def test_join_with_different_key_names_and_suffix():
    left = zephyr.from_items([{"id": 1, "name": "a"}, {"id": 2, "name": "b"}])
    right = zephyr.from_items([{"doc": 2, "name": "B"}, {"doc": 2, "name": "BB"}])
    got = left.join(right, left_on="id", right_on="doc", how="left").sort("id", "name_right").to_arrow(**RUN)
    assert got.to_pylist() == [
        {"id": 1, "name": "a", "name_right": None},
        {"id": 2, "name": "b", "name_right": "B"},
        {"id": 2, "name": "b", "name_right": "BB"},
    ]


def test_join_int32_with_int64_keys():
    left = zephyr.from_arrow(pa.table({"k": pa.array([1, 2, 3], pa.int32())}))
    right = zephyr.from_arrow(pa.table({"k": pa.array([2, 3, 4], pa.int64()), "v": [20, 30, 40]}))
    got = left.join(right, on="k", num_partitions=3).sort("k").to_arrow(**RUN)
    assert got.column("v").to_pylist() == [20, 30]


def test_reshard_keeps_every_row():
    table = pa.table({"x": list(range(1000))})
    ds = zephyr.from_arrow(table, num_shards=3).reshard(7)
    got = ds.to_arrow(**RUN)
    assert sorted(got.column("x").to_pylist()) == list(range(1000))
    assert "Reshard" in ds.explain()


def test_count_action_and_empty_results():
    ds = zephyr.from_items([{"x": i} for i in range(10)])
    assert ds.count(**RUN) == 10
    assert ds.filter(lambda r: False).count(**RUN) == 0
    assert ds.filter(lambda r: False).to_arrow(**RUN).num_rows == 0
    assert ds.filter(lambda r: False).sort("x").to_arrow(**RUN).num_rows == 0


@pytest.mark.parametrize("how", ["sum", "n_unique", "list"])
def test_non_decomposable_aggregations(how):
    table = pa.table({"k": [1, 1, 2, 1], "v": [1, 2, 3, 2]})
    got = (
        zephyr.from_arrow(table, num_shards=2)
        .group_by("k", num_partitions=2)
        .agg(out=("v", how))
        .sort("k")
        .to_arrow(**RUN)
    )
    want = {"sum": [5, 3], "n_unique": [2, 1], "list": [[1, 2, 2], [3]]}[how]
    assert got.column("out").to_pylist() == want


def test_uint64_keys_above_int64_range():
    keys = pa.array([2**64 - 1, 2**63, 5, 2**64 - 1], pa.uint64())
    ds = zephyr.from_arrow(pa.table({"h": keys, "x": [1, 2, 3, 4]}))
    got = ds.group_by("h", num_partitions=3).agg(total=("x", "sum")).sort("h").to_arrow(**RUN)
    assert got.to_pylist() == [{"h": 5, "total": 3}, {"h": 2**63, "total": 2}, {"h": 2**64 - 1, "total": 5}]
    joined = ds.join(ds.deduplicate("h").select("h"), on="h", num_partitions=2).count(**RUN)
    assert joined == 4


@st.composite
def float_key_tables(draw, max_rows=200):
    """Random tables keyed on a float with NaN, ±inf, ±0.0 and nulls (NaN sorts after every number and equals
    itself, as in duckdb and polars; a merge that took NaN != NaN looped forever on it)."""
    n = draw(st.integers(0, max_rows))
    rng = np.random.default_rng(draw(st.integers(0, 2**31)))
    pool = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1.5, -2.25, 3.0])
    keys = pool[rng.integers(0, len(pool), n)]
    nulls = rng.random(n) < 0.1
    return pa.table(
        {"f": pa.array(keys, mask=nulls, type=pa.float64()), "row": pa.array(np.arange(n), pa.int64())}
    )


def _nan_safe(rows: list) -> list:
    """Rows (tuples or values) with NaN as a marker string: Python's NaN != NaN would fail equal lists."""

    def fix(x):
        return "NaN" if isinstance(x, float) and np.isnan(x) else x

    return [tuple(map(fix, r)) if isinstance(r, tuple) else fix(r) for r in rows]


@SETTINGS
@given(
    float_key_tables(),
    st.integers(1, 4),
    st.integers(1, 5),
    st.booleans(),
    st.sampled_from(["inner", "left", "right", "outer"]),
)
def test_float_keys_with_nan_sort_group_deduplicate_and_join(table, shards, partitions, descending, how):
    ds = zephyr.from_arrow(table, num_shards=shards)
    direction = "desc" if descending else "asc"
    got = ds.sort("f", descending=descending, num_partitions=partitions).to_arrow(**RUN)
    if not table.num_rows:  # an empty shuffle result has no rows to say its schema with
        assert got.num_rows == 0 and ds.group_by("f", num_partitions=partitions).count().count(**RUN) == 0
        return
    want = _duck(f"select f from t order by f {direction} nulls last, row", t=table)
    assert _nan_safe(got.column("f").to_pylist()) == _nan_safe(want.column("f").to_pylist())

    def ordered(t: pa.Table, cols: list[str]) -> list[tuple]:
        rows = _nan_safe([tuple(r[c] for c in cols) for r in t.select(cols).to_pylist()])
        return sorted(rows, key=lambda r: tuple((x is None, str(x)) for x in r))

    counted = ds.group_by("f", num_partitions=partitions).count().to_arrow(**RUN)
    want = _duck("select f, count(*) as count from t group by f", t=table)
    assert ordered(counted, ["f", "count"]) == ordered(want, ["f", "count"])
    firsts = ds.deduplicate("f", num_partitions=partitions).to_arrow(**RUN)
    want = _duck("select f, min(row) as row from t group by f", t=table)
    assert ordered(firsts, ["f", "row"]) == ordered(want, ["f", "row"])
    other = table.rename_columns(["f", "row2"]).filter(
        pa.compute.less(table["row"], max(1, table.num_rows // 2))
    )
    joined = ds.join(zephyr.from_arrow(other, num_shards=2), on="f", how=how, num_partitions=partitions)
    sql_how = {"inner": "inner", "left": "left", "right": "right", "outer": "full outer"}[how]
    key = "coalesce(b.f, a.f)" if how == "right" else "coalesce(a.f, b.f)"  # the kept side's key: -0.0 or 0.0
    want = _duck(
        f"select {key} as f, a.row, b.row2 from t a {sql_how} join o b on a.f = b.f", t=table, o=other
    )
    got = joined.to_arrow(**RUN)
    if got.num_rows == 0:
        assert want.num_rows == 0
    else:
        assert sorted(got.column_names) == ["f", "row", "row2"]  # the helper key of a float join is gone
        assert ordered(got, ["f", "row", "row2"]) == ordered(want, ["f", "row", "row2"])


@pytest.mark.parametrize("how", ["inner", "left", "right", "outer"])
@pytest.mark.parametrize(
    "left, right, shards",
    [([np.nan], [np.nan], 1), ([-2.25, np.nan], [-2.25, np.nan], 2), ([None, np.nan], [np.nan], 2)],
)
def test_nan_keys_match_in_one_row_partitions(left, right, shards, how):
    """The shapes that lost NaN matches: one-row partitions (polars flags them sorted and merge-joins them)."""
    lt = pa.table({"f": pa.array(left, pa.float64()), "row": pa.array(range(len(left)), pa.int64())})
    rt = pa.table({"f": pa.array(right, pa.float64()), "row2": pa.array(range(len(right)), pa.int64())})
    got = (
        zephyr.from_arrow(lt, num_shards=shards)
        .join(zephyr.from_arrow(rt, num_shards=shards), on="f", how=how, num_partitions=1)
        .to_arrow(**RUN)
    )
    pairs = {(r["row"], r["row2"]) for r in got.to_pylist()}
    same = _nan_safe(left), _nan_safe(right)  # NaN equals NaN; null matches nothing
    matched = {
        (i, j) for i, a in enumerate(same[0]) for j, b in enumerate(same[1]) if a is not None and a == b
    }
    assert {p for p in pairs if None not in p} == matched


@pytest.mark.timeout(120)
def test_sort_on_nan_keys_ends():
    """A source whose last key is NaN: the merge took NaN != NaN, so that source never read on and the merge
    looped forever (shard 0 sorts to [1.0, NaN], shard 1 to [2.0, 3.0])."""
    table = pa.table({"f": pa.array([1.0, np.nan, 3.0, 2.0], pa.float64())})
    for shards, partitions in [(2, None), (2, 1), (1, 2)]:
        got = zephyr.from_arrow(table, num_shards=shards).sort("f", num_partitions=partitions)
        assert _nan_safe(got.to_arrow(executor="inprocess").column("f").to_pylist()) == [1.0, 2.0, 3.0, "NaN"]
