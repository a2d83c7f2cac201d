"""Execution guarantees: byte-identical outputs across worker counts and executors, retries, resume after
kills (of a worker and of the whole driver), row accounting and quarantine."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import zephyr
from zephyr.errors import ConfigError, TaskError
from zephyr.io.quarantine import QUARANTINE_SCHEMA


def _write_shards(directory: Path, shards: int = 6, rows: int = 2000, seed: int = 0) -> str:
    rng = np.random.default_rng(seed)
    directory.mkdir(parents=True, exist_ok=True)
    for i in range(shards):
        ids = np.arange(i * rows, (i + 1) * rows)
        table = pa.table(
            {
                "id": ids,
                "key": rng.integers(0, 300, rows),
                "word": [f"w{v}" for v in rng.integers(0, 5000, rows)],
                "value": rng.normal(size=rows),
            }
        )
        pq.write_table(table, directory / f"in-{i:02d}.parquet")
    return str(directory / "*.parquet")


def _digest(directory: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(directory.glob("part-*"))}


def _plan(pattern: str) -> zephyr.Dataset:
    ds = zephyr.read_parquet(pattern)
    counts = ds.group_by("key").agg(n=("id", "count"), total=("value", "sum"))
    firsts = ds.deduplicate("word").select("word", "id")
    return (
        ds.filter(lambda r: r["id"] % 7 != 0)
        .join(counts, on="key", how="left")
        .join(firsts, on="word", how="inner", suffix="_first")
        .sort("word", "id")
    )


def test_outputs_byte_identical_across_workers_and_executors(tmp_path):
    pattern = _write_shards(tmp_path / "in")
    digests = {}
    for name, options in {
        "inprocess": dict(executor="inprocess"),
        "local-1": dict(executor="local", workers=1, small_job_bytes=0),
        "local-2": dict(executor="local", workers=2, small_job_bytes=0),
        "local-4": dict(executor="local", workers=4, small_job_bytes=0),
        "threads-3": dict(executor="threads", workers=3),
    }.items():
        out = tmp_path / f"out-{name}"
        _plan(pattern).write_parquet(str(out), memory_budget="4MiB", **options)
        digests[name] = _digest(out)
    assert digests["inprocess"], "no output written"
    assert digests["inprocess"] == digests["local-1"] == digests["local-2"] == digests["local-4"]
    assert digests["threads-3"] == digests["inprocess"]


def test_rerun_gives_same_bytes_and_skips_finished_tasks(tmp_path):
    pattern = _write_shards(tmp_path / "in", shards=3)
    work = tmp_path / "work"
    first = _plan(pattern).write_parquet(str(tmp_path / "a"), executor="inprocess", work_dir=str(work))
    second = _plan(pattern).write_parquet(str(tmp_path / "b"), executor="inprocess", work_dir=str(work))
    assert _digest(tmp_path / "a") == _digest(tmp_path / "b")
    assert all(s["tasks_resumed"] == 0 for s in first.stats["stages"])
    resumed = [s for s in second.stats["stages"] if s["tasks_resumed"] == s["tasks"]]
    assert len(resumed) >= len(second.stats["stages"]) - 1  # only the final sink (new directory) reruns


def test_failing_task_is_retried_then_fails_naming_its_shard(tmp_path):
    pattern = _write_shards(tmp_path / "in", shards=3, rows=10)
    flag = tmp_path / "flaky"

    def flaky(row):
        if row["id"] == 15 and not flag.exists():  # fails once, then works
            flag.write_text("x")
            raise RuntimeError("transient")
        return row

    result = zephyr.read_parquet(pattern).map(flaky).write_parquet(str(tmp_path / "ok"), executor="inprocess")
    assert sum(s["task_retries"] for s in result.stats["stages"]) == 1

    def poisoned(row):
        if row["id"] == 25:
            raise ValueError("bad row")
        return row

    with pytest.raises(TaskError, match=r"in-02\.parquet.*\n?.*failed after 3 tries") as info:
        zephyr.read_parquet(pattern).map(poisoned).to_arrow(executor="inprocess", max_retries=2)
    assert "bad row" in str(info.value)


def test_a_task_that_calls_sys_exit_in_a_worker_fails_as_itself_and_the_worker_lives_on(tmp_path):
    pattern = _write_shards(tmp_path / "in", shards=2, rows=10)

    def exits(row):
        if row["id"] == 15:
            sys.exit(3)
        return row

    with pytest.raises(TaskError, match=r"in-01\.parquet") as info:
        zephyr.read_parquet(pattern).map(exits).to_arrow(
            executor="local", workers=1, small_job_bytes=0, max_retries=1
        )
    assert "SystemExit: 3" in str(info.value)
    assert "died" not in str(info.value)


def test_threads_retry_a_failing_task_and_report_the_one_that_keeps_failing(tmp_path):
    pattern = _write_shards(tmp_path / "in", shards=4, rows=10)
    flag = str(tmp_path / "flaky")

    def flaky(row):
        if row["id"] == 15:
            try:  # O_EXCL: exactly one try of the task fails, whichever thread runs it
                os.close(os.open(flag, os.O_CREAT | os.O_EXCL))
            except FileExistsError:
                return row
            raise RuntimeError("transient")
        return row

    options = dict(executor="threads", workers=3)
    result = zephyr.read_parquet(pattern).map(flaky).write_parquet(str(tmp_path / "ok"), **options)
    assert sum(s["task_retries"] for s in result.stats["stages"]) == 1
    assert result.stats["executor"] == "ThreadExecutor"
    assert zephyr.read_parquet(str(tmp_path / "ok")).count(executor="inprocess") == 40

    def poisoned(row):
        if row["id"] == 25:
            raise ValueError("bad row")
        return row

    with pytest.raises(TaskError, match=r"in-02\.parquet.*failed after 2 tries") as info:
        zephyr.read_parquet(pattern).map(poisoned).to_arrow(max_retries=1, **options)
    assert "bad row" in str(info.value)


def test_thread_preloads_run_and_a_failing_one_is_logged(caplog):
    """``ThreadExecutor(preload=...)`` calls each ``module:function`` on its preload thread, and one that fails
    is logged, as local workers do (``executors.base.call_preloads``), not raised on the thread."""
    import logging
    import threading

    from zephyr.executors import base

    called = threading.Event()
    base._test_preload_mark = called.set  # an importable "module:function" for the preload to call
    try:
        with caplog.at_level(logging.WARNING, logger="zephyr.executors.base"):
            executor = base.ThreadExecutor(
                1, preload=["zephyr.executors.base:_test_preload_mark", "zephyr.no_such_module:f"]
            )
            assert called.wait(30)
            deadline = time.monotonic() + 30
            while "zephyr.no_such_module:f" not in caplog.text and time.monotonic() < deadline:
                time.sleep(0.05)
        executor.close()
    finally:
        del base._test_preload_mark
    assert "worker preload zephyr.no_such_module:f failed" in caplog.text


def test_worker_killed_mid_stage_reruns_only_its_task(tmp_path):
    pattern = _write_shards(tmp_path / "in", shards=4, rows=500)
    flag = tmp_path / "killed-once"
    log = tmp_path / "executions"
    log.mkdir()

    def record_and_maybe_die(table: pa.Table) -> pa.Table:
        first = table.column("id")[0].as_py()
        (log / f"{first}-{os.getpid()}-{time.monotonic_ns()}").write_text("")
        if first == 1000 and not flag.exists():
            flag.write_text("x")
            os.kill(os.getpid(), signal.SIGKILL)
        return table

    clean = tmp_path / "clean"
    zephyr.read_parquet(pattern).map_batches(lambda t: t).sort("word").write_parquet(
        str(clean), executor="inprocess"
    )
    out = tmp_path / "killed"
    result = (
        zephyr.read_parquet(pattern)
        .map_batches(record_and_maybe_die)
        .sort("word")
        .write_parquet(str(out), executor="local", workers=2, small_job_bytes=0)
    )
    assert _digest(out) == _digest(clean)
    first_stage = result.stats["stages"][0]
    assert first_stage["task_retries"] == 1
    starts = sorted(int(p.name.split("-")[0]) for p in log.iterdir())
    assert starts.count(1000) == 2 and all(starts.count(s) == 1 for s in (0, 500, 1500))


DRIVER = textwrap.dedent(
    """
    import os, sys, time, pyarrow as pa, zephyr
    pattern, out, work, log, slow = sys.argv[1:6]
    def step(table):
        first = table.column("id")[0].as_py()
        open(os.path.join(os.environ["ZEPHYR_TEST_LOG"], f"{first}-{time.monotonic_ns()}"), "w").close()
        if os.environ.get("ZEPHYR_TEST_SLOW") == "1" and first >= 1500:
            time.sleep(60)
        return table
    if __name__ == "__main__":  # spawned workers import this file too
        zephyr.read_parquet(pattern).map_batches(step).group_by("key").count().write_parquet(
            out, executor="local", workers=1, work_dir=work, small_job_bytes=0)
    """
)


def test_killed_job_resumes_without_redoing_finished_tasks(tmp_path):
    pattern = _write_shards(tmp_path / "in", shards=5, rows=500)
    script = tmp_path / "driver.py"
    script.write_text(DRIVER)
    work, log, out = tmp_path / "work", tmp_path / "log", tmp_path / "out"
    log.mkdir()
    env = {**os.environ, "ZEPHYR_TEST_LOG": str(log)}
    proc = subprocess.Popen(
        [sys.executable, str(script), pattern, str(out), str(work), str(log), "1"],
        start_new_session=True,
        env={**env, "ZEPHYR_TEST_SLOW": "1"},
    )
    deadline = time.monotonic() + 120
    try:
        while time.monotonic() < deadline:
            if len(list(work.glob("stage-*/_done/task-*.json"))) >= 3:
                break
            time.sleep(0.1)
        else:
            pytest.fail("the job never finished 3 tasks")
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    done_before = {int(p.name.split("-")[0]) for p in log.iterdir()}
    subprocess.run(
        [sys.executable, str(script), pattern, str(out), str(work), str(log), "0"], check=True, env=env
    )
    runs = [int(p.name.split("-")[0]) for p in log.iterdir()]
    redone = {s for s in done_before if runs.count(s) > 1}
    assert redone <= {1500, 2000}, f"finished tasks were redone: {sorted(redone)}"
    clean = tmp_path / "clean"
    zephyr.read_parquet(pattern).group_by("key").count().write_parquet(str(clean), executor="inprocess")
    assert _digest(out) == _digest(clean)


def test_row_accounting_balances_with_quarantine(tmp_path):
    rows = [{"id": i, "text": None if i % 10 == 0 else f"doc {i}"} for i in range(100)]

    def upper(row):
        return {"id": row["id"], "text": row["text"].upper()}  # AttributeError on null text

    work = tmp_path / "work"
    result = (
        zephyr.from_items(rows, num_shards=2)
        .map(upper, on_error="quarantine")
        .filter(lambda r: r["id"] % 3 != 0)
        .write_parquet(str(tmp_path / "out"), executor="inprocess", work_dir=str(work))
    )
    stage = result.stats["stages"][0]
    mapped, filtered = stage["ops"]
    assert mapped["rows_in"] == 100 and mapped["rows_quarantined"] == 10 and mapped["rows_out"] == 90
    assert filtered["rows_in"] == filtered["rows_out"] + filtered["rows_dropped"] == 90
    assert stage["rows_in"] == stage["rows_out"] + stage["rows_dropped"] + stage["rows_quarantined"]
    assert result.stats["rows_quarantined"] == 10
    quarantine = pa.concat_tables([pq.read_table(p) for p in stage["quarantine_files"]])
    assert sorted(json.loads(r)["id"] for r in quarantine.column("raw").to_pylist()) == list(
        range(0, 100, 10)
    )
    assert all("AttributeError" in r for r in quarantine.column("reason").to_pylist())
    for path in stage["quarantine_files"]:  # the one quarantine schema of zephyr.io, its version tag included
        schema = pq.read_schema(path)
        assert schema.equals(QUARANTINE_SCHEMA), schema
        assert schema.metadata[b"zephyr.quarantine.version"] == b"1"
    assert (work / "stats.json").exists()


def _null_text_upper(row):
    return {"id": row["id"], "text": row["text"].upper()}  # AttributeError on null text


def test_row_error_without_quarantine_names_shard_and_row(tmp_path):
    with pytest.raises(TaskError, match=r"row 3 of .*part-00000\.parquet"):
        zephyr.from_items([{"x": i} for i in range(5)]).map(lambda r: {"y": 1 / (r["x"] - 3)}).to_arrow(
            executor="inprocess", max_retries=0
        )


def test_counters_are_summed_per_stage(tmp_path):
    def count_long(table):
        zephyr.counters.increment("long_words", sum(len(w) > 3 for w in table.column("w").to_pylist()))
        return table

    result = (
        zephyr.from_items([{"w": w} for w in ["a", "bbbb", "cc", "dddd", "eeeee"]], num_shards=2)
        .map_batches(count_long)
        .write_parquet(str(tmp_path / "o"), executor="inprocess")
    )
    assert result.stats["stages"][0]["counters"] == {"long_words": 3}


def test_small_jobs_run_in_process_and_give_the_same_bytes(tmp_path):
    pattern = _write_shards(tmp_path / "in", shards=2, rows=200)
    small = _plan(pattern).write_parquet(str(tmp_path / "small"), executor="local", workers=2)
    assert small.stats["executor"] == "InProcessExecutor"
    forced = _plan(pattern).write_parquet(
        str(tmp_path / "forced"), executor="local", workers=2, small_job_bytes=0
    )
    assert forced.stats["executor"] == "LocalExecutor"
    assert _digest(tmp_path / "small") == _digest(tmp_path / "forced")


def test_aggregation_reads_only_the_columns_it_needs(tmp_path, monkeypatch):
    pattern = _write_shards(tmp_path / "in", shards=2, rows=100)
    from zephyr.io import sources

    seen = []
    original = sources.read_shard

    def spy(shard, **kwargs):
        seen.append(kwargs.get("columns"))
        return original(shard, **kwargs)

    monkeypatch.setattr("zephyr.tasks.read_shard", spy)
    got = (
        zephyr.read_parquet(pattern)
        .group_by("key")
        .agg(total=("value", "sum"))
        .to_arrow(executor="inprocess")
    )
    assert got.column_names == ["key", "total"]
    assert seen and all(tuple(c) == ("key", "value") for c in seen)


def test_memory_work_dir_needs_inprocess(tmp_path):
    with pytest.raises(zephyr.ConfigError, match="memory"):
        zephyr.from_items([{"a": 1}]).to_arrow(executor="local", work_dir="memory://zephyr-test")
    assert (
        zephyr.from_items([{"a": 1}]).to_arrow(executor="inprocess", work_dir="memory://zephyr-test").num_rows
        == 1
    )


def test_bad_input_fails_at_once_naming_file_and_line(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"a": 1}\n{"a": 2}\n{"a": \n')
    with pytest.raises(TaskError, match=r"bad\.jsonl:3.*not retried"):
        zephyr.read_jsonl(str(bad)).to_arrow(executor="inprocess", max_retries=5)
    corrupt = tmp_path / "corrupt.parquet"
    corrupt.write_bytes(b"PAR1 this is not parquet PAR1")
    with pytest.raises(TaskError, match=r"corrupt\.parquet"):
        zephyr.read_parquet(str(corrupt)).to_arrow(executor="local", workers=1, small_job_bytes=0)


def test_missing_column_is_a_schema_error_naming_it(tmp_path):
    with pytest.raises(TaskError, match=r"\['nope'\].*available"):
        zephyr.from_items([{"a": 1}]).select("nope").to_arrow(executor="inprocess")


def test_writers_round_trip_every_format(tmp_path):
    rows = [{"id": i, "text": f"doc {i}", "score": i / 3} for i in range(50)]
    ds = zephyr.from_items(rows, num_shards=3)
    jsonl = ds.write_jsonl(str(tmp_path / "j"), compression="zstd", executor="inprocess")
    assert [p.rsplit("/", 1)[-1] for p in jsonl.files] == [f"part-0000{i}.jsonl.zst" for i in range(3)]
    assert (
        zephyr.read_jsonl(str(tmp_path / "j")).sort("id").to_arrow(executor="inprocess").to_pylist() == rows
    )
    vortex = ds.write_vortex(str(tmp_path / "v"), executor="inprocess")
    assert len(vortex.files) == 3
    assert (
        zephyr.read(str(tmp_path / "v"), format="vortex")
        .sort("id")
        .to_arrow(executor="inprocess")
        .to_pylist()
        == rows
    )


def _keep_odd_shards(table: pa.Table) -> pa.Table:
    """Keeps shard 1's and 3's rows only (ids 1000-1999 and 3000-3999 with 1000 rows a shard)."""
    keep = [(i // 1000) % 2 == 1 for i in table.column("id").to_pylist()]
    return table.filter(pa.array(keep))


def test_parts_are_dense_when_tasks_keep_no_rows(tmp_path):
    pattern = _write_shards(tmp_path / "in", shards=5, rows=1000)
    out = tmp_path / "out"
    out.mkdir()
    (out / "part-00004.parquet").write_bytes(b"stale part of an older run")
    result = (
        zephyr.read_parquet(pattern)
        .map_batches(_keep_odd_shards)
        .write_parquet(str(out), executor="inprocess", overwrite=True)
    )
    names = sorted(p.name for p in out.iterdir())
    assert names == [
        "part-00000.parquet",
        "part-00001.parquet",
    ]  # tasks 1 and 3, renumbered; the stale part is gone
    assert not (tmp_path / "out.zephyr" / "staging").exists()
    assert [p.rsplit("/", 1)[-1] for p in result.files] == names
    firsts = [pq.read_table(out / n).column("id")[0].as_py() for n in names]
    assert firsts == [1000, 3000]  # task order is kept


def test_crash_between_publish_and_marker_resumes_to_the_same_parts(tmp_path, monkeypatch):
    """Killed after the new folder was swapped in, before any marker names a published file: the output is
    the complete new content, the claim accepts it (its pending manifest), and a rerun reruns only the tasks
    whose markers still name staged files, to the same bytes."""
    pattern = _write_shards(tmp_path / "in", shards=5, rows=1000)
    plan = zephyr.read_parquet(pattern).map_batches(_keep_odd_shards)
    plan.write_parquet(str(tmp_path / "clean"), executor="inprocess")
    from zephyr.io import claim  # publish rewrites the markers (``claim.publish``)

    original = claim.write_json_atomic

    def crash_on_publish(url, payload):
        if "_done" in url and payload.get("files") and not any("staging" in f for f in payload["files"]):
            raise KeyboardInterrupt("killed after the swap")  # the marker rewrite of a published file
        original(url, payload)

    out, work = tmp_path / "out", tmp_path / "work"
    monkeypatch.setattr(claim, "write_json_atomic", crash_on_publish)
    with pytest.raises(KeyboardInterrupt):
        plan.write_parquet(str(out), executor="inprocess", work_dir=str(work))
    monkeypatch.setattr(claim, "write_json_atomic", original)
    assert _digest(out) == _digest(tmp_path / "clean")  # swapped in whole
    resumed = plan.write_parquet(str(out), executor="inprocess", work_dir=str(work))
    assert resumed.stats["stages"][-1]["tasks_resumed"] == 3  # the two tasks with rows reran
    assert _digest(out) == _digest(tmp_path / "clean") and not (tmp_path / "out.zephyr" / "staging").exists()
    again = plan.write_parquet(str(out), executor="inprocess", work_dir=str(work))
    assert again.stats["stages"][-1]["tasks_resumed"] == 5 and _digest(out) == _digest(tmp_path / "clean")


@pytest.mark.parametrize(
    "build",
    [
        lambda t: zephyr.from_arrow(t, num_shards=0),
        lambda t: zephyr.from_arrow(t).reshard(None),
        lambda t: zephyr.from_arrow(t).reshard(2.0),
        lambda t: zephyr.from_arrow(t).map_batches(lambda b: b, batch_rows=0),
        lambda t: zephyr.from_arrow(t).deduplicate("k", num_partitions=-1),
        lambda t: zephyr.from_arrow(t).sort("k", num_partitions="2"),
    ],
)
def test_a_bad_count_is_refused_when_the_plan_is_built(build):
    with pytest.raises(ConfigError, match="must be a positive integer"):
        build(pa.table({"k": [1, 2, 3]}))


def test_counts_may_be_numpy_integers():
    table = pa.table({"k": [3, 1, 2, 1]})
    ds = zephyr.from_arrow(table, num_shards=np.int64(2)).reshard(np.int32(3))
    ds = ds.map_batches(lambda b: b, batch_rows=np.int64(2)).deduplicate("k", num_partitions=np.int64(2))
    assert sorted(ds.to_arrow(executor="inprocess")["k"].to_pylist()) == [1, 2, 3]
