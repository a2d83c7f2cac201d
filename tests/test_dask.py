"""zephyr on dask.distributed: a real ``dask scheduler`` and ``dask worker`` processes on loopback.

Covers: the engine's wide ops give the same bytes on dask as on the local executor; a worker SIGKILLed while
a slow map runs has its task rerun on the surviving worker with identical output; a task that keeps failing
fails the job naming its shard; a rerun skips finished tasks (also across executors); the CLI flags; a
LocalCluster started by zephyr listens on 127.0.0.1 only and is fully shut down on close.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import cloudpickle
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

import zephyr
from zephyr.errors import TaskError

from .held_task import killing_the_holder

distributed = pytest.importorskip("distributed")

pytestmark = pytest.mark.dask

# Workers import nothing from tests/: functions defined here travel by value, inside the stage the driver sends.
cloudpickle.register_pickle_by_value(sys.modules[__name__])

BUDGET = "4MiB"  # small, so every shuffle spills several runs per map task
STARTUP_TIMEOUT_S = 60


# -- cluster fixture ---------------------------------------------------------------------------------------
@dataclass
class DaskProcesses:
    address: str
    scheduler: subprocess.Popen
    workers: list[subprocess.Popen]

    def stop(self) -> None:
        for proc in [*self.workers, self.scheduler]:
            if proc.poll() is None:
                proc.terminate()
        for proc in [*self.workers, self.scheduler]:
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def _dask_cli() -> list[str]:
    script = Path(sys.executable).with_name("dask")
    return [str(script)] if script.exists() else [sys.executable, "-m", "dask"]


def start_dask(tmp: Path, workers: int = 2, *, cwd: Path | None = None) -> DaskProcesses:
    """``dask scheduler`` + ``workers`` × ``dask worker --nthreads 1 --no-nanny``, all on 127.0.0.1, started in
    the working directory ``cwd`` (default: this process's).

    The scheduler runs with ``allowed-failures 0`` (a worker death fails the task at once; zephyr retries), as
    docs/dask.md recommends, and dask's default ``worker-saturation``. No nanny, so a killed worker stays dead
    and its task must move to the other worker.
    """
    tmp.mkdir(parents=True, exist_ok=True)
    env = {
        **os.environ,
        "DASK_DISTRIBUTED__SCHEDULER__ALLOWED_FAILURES": "0",
        "POLARS_MAX_THREADS": "1",
    }
    scheduler_file = tmp / "scheduler.json"
    loopback = ["--host", "127.0.0.1", "--dashboard-address", "127.0.0.1:0"]
    log = open(tmp / "scheduler.log", "wb")  # noqa: SIM115 - the process owns it; closed below
    scheduler = subprocess.Popen(
        [*_dask_cli(), "scheduler", "--port", "0", "--scheduler-file", str(scheduler_file), *loopback],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        cwd=cwd,
    )
    log.close()
    procs = DaskProcesses("", scheduler, [])
    try:
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while not scheduler_file.exists() or not scheduler_file.read_text().strip():
            if scheduler.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(
                    f"dask scheduler did not start: {(tmp / 'scheduler.log').read_text()[-2000:]}"
                )
            time.sleep(0.1)
        import json

        procs.address = json.loads(scheduler_file.read_text())["address"]
        for i in range(workers):
            log = open(tmp / f"worker-{i}.log", "wb")  # noqa: SIM115
            procs.workers.append(
                subprocess.Popen(
                    [
                        *_dask_cli(),
                        "worker",
                        procs.address,
                        "--nthreads",
                        "1",
                        "--no-nanny",
                        "--name",
                        f"w{i}",
                        "--local-directory",
                        str(tmp / f"w{i}"),
                        *loopback,
                    ],
                    env=env,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    cwd=cwd,
                )
            )
            log.close()
        with distributed.Client(procs.address, set_as_default=False, timeout=STARTUP_TIMEOUT_S) as client:
            client.wait_for_workers(workers, timeout=STARTUP_TIMEOUT_S)
    except BaseException:
        procs.stop()
        raise
    return procs


@pytest.fixture(scope="module")
def dask_cluster(tmp_path_factory) -> Iterator[DaskProcesses]:
    procs = start_dask(tmp_path_factory.mktemp("dask"))
    yield procs
    procs.stop()


@pytest.fixture(scope="module")
def client(dask_cluster) -> Iterator[distributed.Client]:
    with distributed.Client(dask_cluster.address, set_as_default=False) as c:
        yield c


@pytest.fixture(scope="module")
def local_executor() -> Iterator[zephyr.executors.local.LocalExecutor]:
    """One pool of 2 spawned workers shared by the reference runs (spawning is the slow part)."""
    from zephyr.executors.local import LocalExecutor

    with LocalExecutor(2) as executor:
        # start both workers now, so the leak guard counts them as the fixture's, not the first test's
        zephyr.from_items([{"a": 1}, {"a": 2}], num_shards=2).count(executor=executor)
        yield executor


# -- data and plans ------------------------------------------------------------------------------------------
def _write_shards(directory: Path, shards: int = 4, rows: int = 1500, seed: int = 0) -> str:
    rng = np.random.default_rng(seed)
    directory.mkdir(parents=True, exist_ok=True)
    words = np.array(["alpha", "Beta", "gamma  delta", "ALPHA", "epsilon", "zeta eta"])
    for i in range(shards):
        ids = np.arange(i * rows, (i + 1) * rows)
        table = pa.table(
            {
                "id": ids,
                "key": rng.integers(0, 200, rows),
                "word": [f"w{v}" for v in rng.integers(0, 3000, rows)],
                "text": [
                    f"{words[a]} {b}"
                    for a, b in zip(rng.integers(0, len(words), rows), rng.integers(0, 400, rows))
                ],
                "value": rng.normal(size=rows),
            }
        )
        pq.write_table(table, directory / f"in-{i:02d}.parquet")
    return str(directory / "*.parquet")


def _digest(directory: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(directory.glob("part-*"))}


def _normalized(table: pa.Table) -> pa.Table:
    """Exact-dedup key: lowercased text with whitespace runs collapsed."""
    norm = pc.replace_substring_regex(pc.utf8_lower(table.column("text")), r"\s+", " ")
    return table.append_column("norm", norm)


PLANS = {
    "group_by": lambda ds: ds.group_by("key").agg(n=("id", "count"), total=("value", "sum")).sort("key"),
    "sort": lambda ds: ds.sort("word", "id"),
    "join": lambda ds: ds.join(ds.group_by("key").count(), on="key", how="left").sort("id"),
    "deduplicate": lambda ds: ds.map_batches(_normalized).deduplicate("norm").select("id", "norm"),
}


@pytest.fixture(scope="module")
def inputs(tmp_path_factory) -> str:
    return _write_shards(tmp_path_factory.mktemp("inputs"))


# -- tests ---------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("plan", list(PLANS))
def test_outputs_byte_identical_to_local_executor(plan, inputs, client, local_executor, tmp_path):
    dataset = PLANS[plan](zephyr.read_parquet(inputs))
    dataset.write_parquet(str(tmp_path / "local"), executor=local_executor, memory_budget=BUDGET)
    # the dask side coalesces its shuffle runs (the reference does not): the same bytes either way
    result = dataset.write_parquet(
        str(tmp_path / "dask"), executor=client, memory_budget=BUDGET, coalesce_runs="always"
    )
    assert any(s["stage"].endswith("coalesce runs") for s in result.stats["stages"])
    local, on_dask = _digest(tmp_path / "local"), _digest(tmp_path / "dask")
    assert local, "no output written"
    assert on_dask == local
    assert result.stats["executor"] == "DaskExecutor"
    assert any(s["bytes_out"] for s in result.stats["stages"][:-1]), "the plan did not shuffle"
    assert client.status == "running", "a Client passed in must stay open"


def test_cli_sort_on_cluster_address(inputs, dask_cluster, tmp_path):
    from zephyr.cli import main

    out = tmp_path / "sorted"
    code = main(
        [
            "sort",
            inputs,
            "--by",
            "word",
            "--output",
            str(out),
            "--executor",
            "dask",
            "--cluster",
            dask_cluster.address,
            "--memory-budget",
            BUDGET,
        ]
    )
    assert code == 0
    words = pq.read_table(sorted(out.glob("part-*.parquet"))).column("word").to_pylist()
    assert words == sorted(words) and len(words) == 4 * 1500


def test_rerun_skips_finished_tasks_across_executors(inputs, client, local_executor, tmp_path):
    work = str(tmp_path / "work")
    plan = PLANS["join"](zephyr.read_parquet(inputs))
    first = plan.write_parquet(str(tmp_path / "a"), executor=client, work_dir=work, memory_budget=BUDGET)
    assert all(s["tasks_resumed"] == 0 for s in first.stats["stages"])
    again = plan.write_parquet(str(tmp_path / "a"), executor=client, work_dir=work, memory_budget=BUDGET)
    assert [s["tasks_resumed"] for s in again.stats["stages"]] == [s["tasks"] for s in again.stats["stages"]]
    # the same work directory resumed by the local executor: same markers, nothing to redo
    local = plan.write_parquet(
        str(tmp_path / "a"), executor=local_executor, work_dir=work, memory_budget=BUDGET
    )
    assert [s["tasks_resumed"] for s in local.stats["stages"]] == [s["tasks"] for s in local.stats["stages"]]
    assert _digest(tmp_path / "a")


def test_failing_task_fails_job_naming_its_shard(inputs, client, tmp_path):
    tries = tmp_path / "tries"
    tries.mkdir()

    def poisoned(table: pa.Table) -> pa.Table:
        if table.column("id")[0].as_py() == 3000:
            (tries / f"{os.getpid()}-{time.monotonic_ns()}").write_text("")
            raise ValueError("bad shard content")
        return table

    with pytest.raises(TaskError, match=r"in-02\.parquet.*failed after 2 tries") as info:
        zephyr.read_parquet(inputs).map_batches(poisoned).to_arrow(executor=client, max_retries=1)
    assert "ValueError: bad shard content" in str(info.value)
    assert info.value.shard and "in-02.parquet" in info.value.shard
    assert len(list(tries.iterdir())) == 2  # tried exactly 1 + max_retries times; dask itself did not retry


def test_local_cluster_listens_on_loopback_only_and_closes(inputs, tmp_path):
    import psutil

    from zephyr.executors.dask import DaskExecutor
    from zephyr.options import ExecutionOptions

    executor = DaskExecutor.from_options(ExecutionOptions(executor="dask", workers=1))
    try:
        me = psutil.Process()
        processes = [me, *me.children(recursive=True)]
        assert len(processes) >= 2, "expected a worker process"
        listening = [
            c.laddr
            for p in processes
            for c in p.net_connections(kind="inet")
            if c.status == psutil.CONN_LISTEN
        ]
        assert listening, "the cluster listens nowhere?"
        assert all(addr.ip in ("127.0.0.1", "::1") for addr in listening), listening
        assert executor.client.run_on_scheduler(lambda dask_scheduler: dask_scheduler.allowed_failures) == 0
        assert list(executor.client.nthreads().values()) == [1]
        rows = zephyr.read_parquet(inputs).deduplicate("key").count(executor=executor)
        assert rows == 200
    finally:
        executor.close()
        executor.close()  # twice is fine
    assert executor.client.status == "closed"


def test_worker_killed_mid_stage_reruns_elsewhere(inputs, dask_cluster, local_executor, tmp_path):
    """SIGKILL the worker running a slow map task: the task reruns on the other worker, same bytes.

    Runs last among the tests on ``dask_cluster``: it leaves the cluster with one worker (no nanny restarts it).
    """
    cluster = dask_cluster
    assert all(p.poll() is None for p in cluster.workers), "needs both workers alive"
    with killing_the_holder(tmp_path, 1500, timeout_s=120, poll_s=0.05) as held:
        plan = PLANS["sort"](zephyr.read_parquet(inputs).map_batches(held.map))
        result = plan.write_parquet(
            str(tmp_path / "killed"), executor="dask", cluster=cluster.address, memory_budget=BUDGET
        )
    log, victim = held.log, held.victim
    worker_pids = {p.pid for p in cluster.workers}
    assert victim and victim[0] in worker_pids, "the slow task never started on a worker"
    runs = sorted(log.iterdir())
    attempts = [int(p.name.split("-")[1]) for p in runs if p.name.startswith("1500-")]
    assert len(attempts) == 2 and attempts[1 - attempts.index(victim[0])] in worker_pids - {victim[0]}
    map_stage = result.stats["stages"][0]
    assert map_stage["task_retries"] == 1  # only the task the dead worker was running (docs/dask.md)
    PLANS["sort"](zephyr.read_parquet(inputs)).write_parquet(
        str(tmp_path / "clean"), executor=local_executor, memory_budget=BUDGET
    )
    assert _digest(tmp_path / "killed") == _digest(tmp_path / "clean")


def test_counters_exact_with_several_tasks_per_worker(tmp_path):
    """A worker with several threads runs several tasks at once; each task's counters stay its own."""

    def count_slowly(table: pa.Table) -> pa.Table:
        for _ in range(5):
            zephyr.counters.increment("rows_seen", table.num_rows)
            time.sleep(0.01)  # let the other threads' tasks interleave
        return table

    with (
        distributed.LocalCluster(
            n_workers=1,
            threads_per_worker=4,
            processes=False,
            dashboard_address=None,
            scheduler_kwargs={"dashboard_address": "127.0.0.1:0"},
        ) as cluster,
        distributed.Client(cluster, set_as_default=False) as threaded,
    ):
        result = (
            zephyr.from_items([{"a": i} for i in range(800)], num_shards=8)
            .map_batches(count_slowly)
            .write_parquet(str(tmp_path / "out"), executor=threaded)
        )
    assert result.stats["stages"][0]["counters"] == {"rows_seen": 5 * 800}


def test_tasks_on_a_dask_worker_keep_the_heap_rules_of_local_workers(client):
    """Every task a dask worker runs goes through ``on_worker``: glibc's mmap threshold is fixed in the worker
    process (``zephyr.executors.base``), as local workers do, so freed arrays go back to the OS."""
    import importlib

    from zephyr.executors.dask import DaskExecutor

    executor = DaskExecutor(client)
    outcomes = dict(executor.run(lambda _: importlib.import_module("zephyr.executors.base")._done, [0, 1]))
    assert [outcomes[i].value for i in (0, 1)] == [True, True]


def test_unreachable_scheduler_is_a_config_error(monkeypatch, tmp_path):
    import socket
    import tempfile

    import zephyr.executors.dask as zephyr_dask

    monkeypatch.setattr(zephyr_dask, "CONNECT_TIMEOUT_S", 1)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # where the job's temporary work_dir would go
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        address = f"tcp://127.0.0.1:{sock.getsockname()[1]}"  # bound, not listening: refuses connections
        with pytest.raises(zephyr.ConfigError, match="cannot reach the dask scheduler"):
            zephyr.from_items([{"a": 1}]).count(executor="dask", cluster=address)
    assert not list(tmp_path.iterdir()), "the temporary work directory was left behind"


def test_workers_on_other_machines_need_a_shared_work_dir(caplog):
    from zephyr.executors.dask import DaskExecutor

    class RemoteWorkers:  # stands for a Client whose scheduler knows workers on another machine
        def nthreads(self) -> dict[str, int]:
            return {"tcp://203.0.113.7:40000": 1, "tcp://127.0.0.1:40001": 4}

    executor = DaskExecutor(RemoteWorkers())  # type: ignore[arg-type]
    with pytest.raises(zephyr.ConfigError, match=r"203\.0\.113\.7.*work_dir"):
        executor._check_cluster(None)
    caplog.clear()
    with caplog.at_level("WARNING", logger="zephyr.executors.dask"):
        executor._check_cluster("/data/zephyr-work")
        executor._check_cluster("s3://bucket/zephyr-work")
    messages = [r.getMessage() for r in caplog.records]
    assert sum("shared mount" in m for m in messages) == 1  # the local path only
    assert sum("--nthreads 1" in m for m in messages) == 2  # the 4-thread worker, both times
