"""map_batches with a function that holds batches back (it has ``finish``): a copy per task, the same rows in
the same order as a function that does not, every row accounted over the task, errors named."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc
import pytest

import zephyr
from zephyr.errors import TaskError
from zephyr.ops import BatchOutput


class Delayed:
    """Returns each batch (doubled) one call late; ``finish`` returns the last. Optionally drops the rows whose
    value is a multiple of ``drop_every`` without naming them, and rejects negative values."""

    def __init__(self, drop_every: int = 0):
        self.drop_every = drop_every

    held: pa.Table | None = None

    def __call__(self, table: pa.Table):
        held, self.held = self.held, table
        return self._output(held)

    def finish(self):
        held, self.held = self.held, None
        return self._output(held)

    def _output(self, table: pa.Table | None):
        if table is None:
            return None
        rejected = table.filter(pc.less(table["v"], 0))
        kept = table.filter(pc.greater_equal(table["v"], 0))
        if self.drop_every:
            kept = kept.filter(pc.not_equal(pc.bit_wise_and(kept["v"], self.drop_every - 1), 0))
        kept = kept.set_column(0, "v", pc.multiply(kept["v"], 2))
        return BatchOutput(
            kept=kept, quarantined=rejected if rejected.num_rows else None, quarantine_reason="negative"
        )


def _rows(n: int = 50) -> list[dict[str, int]]:
    return [{"v": -i if i % 17 == 5 else i} for i in range(n)]


def test_a_holding_function_gives_the_rows_of_a_plain_one(tmp_path, executor):
    plain = zephyr.from_items(_rows(), num_shards=3).map_batches(lambda t: Delayed()._output(t), batch_rows=4)
    held = zephyr.from_items(_rows(), num_shards=3).map_batches(Delayed(), batch_rows=4)
    a = plain.write_parquet(str(tmp_path / "plain"), executor=executor, workers=2)
    b = held.write_parquet(str(tmp_path / "held"), executor=executor, workers=2)
    assert (
        zephyr.read_parquet(b.files)
        .to_arrow(executor="inprocess")
        .equals(zephyr.read_parquet(a.files).to_arrow(executor="inprocess"))
    )
    (op,) = b.stats["stages"][0]["ops"]
    assert (op["rows_in"], op["rows_out"], op["rows_quarantined"], op["rows_dropped"]) == (50, 47, 3, 0)


def test_rows_a_holding_function_drops_unnamed_are_counted_over_the_task(tmp_path):
    ds = zephyr.from_items(_rows(40), num_shards=2).map_batches(Delayed(drop_every=4), batch_rows=3)
    stage = ds.write_parquet(str(tmp_path / "out"), executor="inprocess").stats["stages"][0]
    (op,) = stage["ops"]
    kept = [r for r in _rows(40) if r["v"] >= 0 and r["v"] % 4]
    assert op["rows_out"] == len(kept) and op["rows_quarantined"] == 3
    assert op["dropped_by_reason"] == {"unspecified": 40 - len(kept) - 3}
    assert stage["rows_in"] == stage["rows_out"] + stage["rows_dropped"] + stage["rows_quarantined"]


def test_each_task_gets_its_own_copy(tmp_path):
    """Tasks running side by side (threads share one unpickled stage) never emit each other's held batch."""
    import pyarrow.parquet as pq

    ds = zephyr.from_items([{"v": i} for i in range(60)], num_shards=6).map_batches(Delayed(), batch_rows=2)
    written = ds.write_parquet(str(tmp_path / "out"), executor="threads", workers=3)
    per_file = [pq.read_table(f)["v"].to_pylist() for f in sorted(written.files)]
    assert per_file == [[2 * v for v in range(10 * s, 10 * s + 10)] for s in range(6)]


def test_finish_runs_once_per_task_even_without_a_batch(tmp_path):
    ds = zephyr.from_arrow(pa.table({"v": pa.array([], pa.int64())}), num_shards=1)
    ds = ds.map_batches(Marking(str(tmp_path / "marks")))
    assert ds.to_arrow(executor="inprocess").num_rows == 0
    assert len(list((tmp_path / "marks").iterdir())) == 1


class Marking(Delayed):
    """Leaves a file per ``finish`` call (the engine runs a copy of the unpickled function: files are how a
    test sees its calls)."""

    def __init__(self, directory: str):
        super().__init__()
        self.directory = directory

    def finish(self):
        import os
        import uuid

        os.makedirs(self.directory, exist_ok=True)
        open(os.path.join(self.directory, uuid.uuid4().hex), "w").close()
        return super().finish()


def test_an_error_in_finish_names_the_op_and_the_shard(tmp_path):
    ds = zephyr.from_items(_rows(8), num_shards=1).map_batches(Failing(), name="encode")
    with pytest.raises(TaskError, match=r"map_batches\(encode\) failed on .*RuntimeError: the encoder died"):
        ds.write_parquet(str(tmp_path / "out"), executor="inprocess")


class Failing(Delayed):
    def finish(self):
        raise RuntimeError("the encoder died")
