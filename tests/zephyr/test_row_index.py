"""``Dataset.with_row_index``: a row identity that every job over one plan agrees on."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import zephyr
from zephyr.errors import ZephyrError
from zephyr.ops import ROW_INDEX_SHARD_SHIFT


def _files(tmp_path, sizes):
    paths = []
    start = 0
    for i, n in enumerate(sizes):
        path = tmp_path / f"in-{i}.parquet"
        pq.write_table(pa.table({"x": list(range(start, start + n))}), path)
        paths.append(str(path))
        start += n
    return paths


def test_row_index_is_unique_increasing_and_counts_after_filters(tmp_path, executor):
    paths = _files(tmp_path, [5, 0, 7])
    ds = zephyr.read_parquet(paths).filter(lambda r: r["x"] % 3 != 0).with_row_index("row")
    out = ds.to_arrow(executor=executor, workers=2)
    rows = out["row"].to_pylist()
    assert rows == sorted(rows) and len(set(rows)) == len(rows)
    shards = [r >> ROW_INDEX_SHARD_SHIFT for r in rows]
    positions = [r & ((1 << ROW_INDEX_SHARD_SHIFT) - 1) for r in rows]
    # positions count the rows that reach the op, per shard, from 0
    for shard in set(shards):
        assert [p for s, p in zip(shards, positions) if s == shard] == list(range(shards.count(shard)))
    assert out["x"].to_pylist() == [x for x in range(12) if x % 3 != 0]


def test_row_index_same_in_two_jobs_and_any_worker_count(tmp_path):
    paths = _files(tmp_path, [4, 9, 3])
    ds = zephyr.read_parquet(paths).with_row_index("row")
    a = ds.to_arrow(executor="inprocess")
    b = ds.to_arrow(executor="local", workers=2)
    c = ds.select("row").to_arrow(executor="local", workers=1)
    assert a.equals(b)
    assert a["row"].to_pylist() == c["row"].to_pylist()


def test_row_index_refuses_an_existing_column():
    with pytest.raises(ZephyrError, match="already exists"):
        zephyr.from_items([{"row": 1}]).with_row_index("row").to_arrow(executor="inprocess")


def test_materialize_scratch_lives_as_long_as_a_dataset_reads_it():
    """``materialize()`` without a directory or work_dir writes to a scratch folder; it goes when the last
    Dataset reading it goes (it used to stay in /tmp for good)."""
    import gc
    import os

    ds = zephyr.from_items([{"x": i} for i in range(10)]).materialize(executor="inprocess")
    folder = os.path.dirname(ds.files[0])
    derived = ds.map_batches(lambda t: t, name="same")
    del ds
    gc.collect()
    assert os.path.isdir(folder)
    assert derived.count(executor="inprocess") == 10
    del derived
    gc.collect()
    assert not os.path.exists(folder)


def test_files_of_a_materialized_dataset():
    """``Dataset.files``: what a plain read reads (the public accessor dedup uses), and an error otherwise."""
    import os

    from zephyr.errors import ConfigError

    ds = zephyr.from_items([{"x": i} for i in range(10)]).materialize(executor="inprocess")
    assert ds.files and all(os.path.isfile(f) and f.endswith(".parquet") for f in ds.files)
    assert zephyr.read_parquet(list(ds.files)).files == ds.files
    assert zephyr.from_items([{"x": 1}]).filter(lambda r: False).materialize(executor="inprocess").files == ()
    with pytest.raises(ConfigError, match="materialize it first"):
        _ = ds.map_batches(lambda t: t, name="same").files
