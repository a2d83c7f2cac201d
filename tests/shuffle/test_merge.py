"""``merge_sorted``: a k-way merge of sorted sources equals a stable sort of their concatenation (ties in
source order, then row order), for one or several keys, ascending or descending, with null keys (last) and
empty sources; every key's rows come out in one batch (what the group-wise reducers rely on)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from zephyr.shuffle.reduce import merge_sorted
from zephyr.shuffle.writer import KEY_HASH, sort_table


def _concat(tables: list[pa.Table]) -> pa.Table:
    """Emitted batches may differ in string width (a batch the merge re-sorted comes back from polars as
    ``large_string``); values are what the merge promises, so compare those."""
    return pa.concat_tables(tables, promote_options="permissive")


def _reference(tables: list[pa.Table], columns) -> list[dict]:
    """A stable sort of the concatenation in plain Python (``sorted`` is stable), nulls last either way."""

    def key(row: dict) -> tuple:
        parts = []
        for name, descending in columns:
            value = row[name]
            if value is None:
                parts.append((1, 0))
            else:
                parts.append((0, -value if descending else value))
        return tuple(parts)

    return sorted(_concat(tables).to_pylist(), key=key)


def _chunks(table: pa.Table, sizes: list[int]) -> list[pa.Table]:
    """``table`` cut into consecutive pieces (a source yields several tables, like a run's row groups)."""
    out, start = [], 0
    for size in sizes:
        if start >= table.num_rows:
            break
        out.append(table.slice(start, size))
        start += size
    if start < table.num_rows:
        out.append(table.slice(start))
    return out


def _merged(sources: list[list[pa.Table]], columns) -> list[pa.Table]:
    return list(merge_sorted([iter(s) for s in sources], columns))


def _check(sources: list[list[pa.Table]], columns, key_names) -> None:
    tables = [t for s in sources for t in s]
    batches = _merged(sources, columns)
    if not any(t.num_rows for t in tables):
        assert sum(b.num_rows for b in batches) == 0
        return
    got = _concat([b for b in batches if b.num_rows]) if batches else None
    want = _reference(tables, columns)
    assert got is not None and got.to_pylist() == want
    # every key lives in exactly one emitted batch
    seen: dict[tuple, int] = {}
    for i, batch in enumerate(batches):
        for key in set(zip(*(batch.column(k).to_pylist() for k in key_names))):
            assert seen.setdefault(key, i) == i, f"key {key} split across batches {seen[key]} and {i}"


def _source(rng, n: int, columns, *, null_share: float = 0.0, key_range: int = 20) -> list[pa.Table]:
    data = {}
    for name, _ in columns:
        values = rng.integers(0, key_range, n).astype(object)
        values[rng.random(n) < null_share] = None
        data[name] = pa.array(values.tolist(), pa.int64())
    data["payload"] = pa.array(rng.random(n))
    table = sort_table(pa.table(data), columns)
    sizes = rng.integers(1, max(2, n // 2 + 1), 8).tolist()
    return _chunks(table, sizes)


@pytest.mark.parametrize("descending", [False, True], ids=["asc", "desc"])
@pytest.mark.parametrize("keys", [1, 2], ids=["one-key", "two-keys"])
@pytest.mark.parametrize("null_share", [0.0, 0.3], ids=["no-nulls", "nulls"])
def test_merge_equals_stable_sort(descending, keys, null_share):
    rng = np.random.default_rng(keys * 10 + int(descending) + int(null_share * 100))
    columns = [(f"k{i}", descending if i == 0 else not descending) for i in range(keys)]
    sources = [_source(rng, int(rng.integers(0, 300)), columns, null_share=null_share) for _ in range(6)]
    _check(sources, columns, [c for c, _ in columns])


def test_ties_keep_source_order_then_row_order():
    a = pa.table({"k": [1, 1, 2], "src": ["a0", "a1", "a2"]})
    b = pa.table({"k": [0, 1, 1], "src": ["b0", "b1", "b2"]})
    c = pa.table({"k": [1], "src": ["c0"]})
    got = _concat(_merged([[a], [b], [c]], [("k", False)]))
    assert got.column("src").to_pylist() == ["b0", "a0", "a1", "b1", "b2", "c0", "a2"]


def test_null_keys_sort_last_in_both_directions():
    for descending in (False, True):
        a = sort_table(pa.table({"k": [3, None, 1]}), [("k", descending)])
        b = sort_table(pa.table({"k": [None, 2]}), [("k", descending)])
        got = _concat(_merged([[a], [b]], [("k", descending)])).column("k").to_pylist()
        assert got == ([3, 2, 1] if descending else [1, 2, 3]) + [None, None]


def test_empty_and_missing_sources():
    columns = [("k", False)]
    assert _merged([], columns) == []
    assert _merged([[], []], columns) == []
    empty = pa.table({"k": pa.array([], pa.int64())})
    one = pa.table({"k": [1, 2, 3]})
    got = _merged([[empty], [], [empty, one, empty]], columns)
    assert _concat(got).column("k").to_pylist() == [1, 2, 3]


def test_string_keys():
    a = pa.table({"u": ["a", "c", "e"]})
    b = pa.table({"u": ["b", "c", "d"]})
    got = _concat(_merged([[a.slice(0, 1), a.slice(1)], [b]], [("u", False)]))
    assert got.column("u").to_pylist() == ["a", "b", "c", "c", "d", "e"]


def test_uint64_hash_key_path_matches_general_path():
    """The key hash of a hash shuffle (``KEY_HASH``, ascending ``uint64``) takes the numpy fast path."""
    rng = np.random.default_rng(7)
    sources = []
    for _ in range(5):
        keys = np.sort(rng.integers(0, 2**64 - 1, 500, dtype=np.uint64) % np.uint64(97) * np.uint64(2**57))
        table = pa.table({KEY_HASH: pa.array(keys, pa.uint64()), "row": np.arange(500)})
        sources.append(_chunks(table, [37, 100, 1, 200]))
    _check(sources, [(KEY_HASH, False)], [KEY_HASH])


def test_batches_are_globally_ordered():
    rng = np.random.default_rng(3)
    columns = [("k", False)]
    sources = [_source(rng, 400, columns, key_range=1000) for _ in range(4)]
    batches = [b for b in _merged(sources, columns) if b.num_rows]
    assert len(batches) > 1  # the merge streams: it does not buffer everything into one batch
    for before, after in zip(batches, batches[1:]):
        assert before.column("k")[-1].as_py() < after.column("k")[0].as_py()


_keys = st.lists(st.one_of(st.none(), st.integers(-5, 5)), max_size=30)


@settings(max_examples=150, deadline=None)
@given(
    sources=st.lists(st.tuples(_keys, st.lists(st.integers(1, 10), min_size=1, max_size=5)), max_size=6),
    descending=st.booleans(),
)
def test_merge_property(sources, descending):
    columns = [("k", descending)]
    built = []
    for i, (keys, cuts) in enumerate(sources):
        table = pa.table({"k": pa.array(keys, pa.int64()), "src": [f"{i}:{j}" for j in range(len(keys))]})
        built.append(_chunks(sort_table(table, columns), cuts))
    _check(built, columns, ["k"])
