"""The shuffle's requests on a real S3 server (moto on loopback, counting every request it answers:
tests/s3_requests.py) are exactly what the cost model (benchmarks/shuffle_model.py) predicts, kind by kind, for a
sort and a group-by of M map tasks into R partitions, with the map runs read as they are and coalesced; and a
reducer's requests then follow the coalesced groups, not the map tasks.

The model is given what the job left (each run's blob lengths, read back from its index after the counting)
and predicts the requests on every object of the work directory's stage folders: markers, runs, samples.
Requests on the bucket alone (s3fs's bucket lookup in ``makedirs``, multi-object DELETEs) name no object and
are left out; so are the inputs and the reducers' output parts, which are not the shuffle's.
"""

from __future__ import annotations

import re
import sys
import uuid
from collections import Counter
from collections.abc import Iterator

import fsspec
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import shuffle_model as cost
from zephyr.shuffle.runs import Run, read_index

import zephyr
from zephyr import job_stats
from zephyr.budget import Budget

from .. import s3_requests
from ..moto_server import serving
from ..s3_requests import fetch

pytest.importorskip("s3fs")
pytest.importorskip("moto")

pytestmark = pytest.mark.s3

BUDGET = 64 << 20
ROWS_PER_FILE = 200


@pytest.fixture(scope="module")
def endpoint(tmp_path_factory) -> Iterator[str]:
    """The counting moto server on 127.0.0.1 and the AWS_* environment pointing every process at it."""
    log = tmp_path_factory.mktemp("moto") / "moto.log"
    with serving(lambda port: [sys.executable, s3_requests.__file__, str(port)], "/_requests", log) as url:
        yield url


def _inputs(endpoint: str, files: int) -> str:
    """``files`` Parquet files of ``ROWS_PER_FILE`` rows on S3: one map task each."""
    fs = fsspec.filesystem("s3")
    bucket = f"zephyr-{uuid.uuid4().hex[:12]}"
    fs.mkdir(bucket)
    rng = np.random.default_rng(files)
    for i in range(files):
        table = pa.table(
            {
                "id": np.arange(i * ROWS_PER_FILE, (i + 1) * ROWS_PER_FILE),
                "key": rng.integers(0, 1 << 40, ROWS_PER_FILE),
                "word": [f"w{v}" for v in rng.integers(0, 50, ROWS_PER_FILE)],
            }
        )
        with fs.open(f"{bucket}/in/f{i:05d}.parquet", "wb") as f:
            pq.write_table(table, f)
    return bucket


def _run(bucket: str, op: str, partitions: int, mode: str, **options) -> tuple[pa.Table, list[dict]]:
    ds = zephyr.read_parquet(f"s3://{bucket}/in/*.parquet")
    if op == "sort":
        ds = ds.sort("key", num_partitions=partitions)
    else:
        ds = ds.group_by("word", num_partitions=partitions).agg(n=("id", "count"), first=("id", "min"))
    with job_stats.recording() as jobs:
        table = ds.to_arrow(
            work_dir=f"s3://{bucket}/work",
            memory_budget=BUDGET,
            coalesce_runs=mode,
            small_job_bytes=0,
            **options,
        )
    return table, jobs[-1]["stages"]


def _folder(key: str) -> tuple[str, str] | None:
    """(stage fingerprint, what) of a work-directory object: ``done`` (markers), ``runs``, ``sample``,
    ``output`` (the reducers' parts); None for anything else (inputs, stats)."""
    match = re.match(r"[^/]+/work/stage-([0-9a-f]{16})/(_done|runs|sample|output)/", key)
    return (match.group(1), match.group(2).lstrip("_")) if match else None


def _measured(requests: list[s3_requests.Request], output: bool = False) -> dict[tuple[str, str], Counter]:
    """Requests by stage folder; the reducers' output parts only with ``output`` (a sink's costs are its own)."""
    out: dict[tuple[str, str], Counter] = {}
    for r in requests:
        where = _folder(r.key)
        if where is not None and (output or where[1] != "output"):
            out.setdefault(where, Counter())[r.kind] += 1
    return out


def _expected(bucket: str, stages: list[dict], partitions: int, coalesced: bool, op: str) -> dict:
    """What the model predicts, per stage folder, from the runs the job left."""
    fs = fsspec.filesystem("s3", skip_instance_cache=True)
    shares = Budget(BUDGET)
    chunk = shares.spill_row_group_bytes
    names = iter(stages)
    sample = next(names) if op == "sort" else None
    mapped = next(names)
    grouped = next(names) if coalesced else None
    reduce = next(names)
    assert next(names, None) is None
    expected: dict[tuple[str, str], Counter] = {}

    def add(fingerprint: str, what: str, c: cost.Cost, n: int = 1) -> None:
        expected.setdefault((fingerprint, what), Counter()).update(c.times(n).requests)

    marker = cost.MARKER_CHECK + cost.ATOMIC_WRITE  # a task's own marker: looked for, then written
    if sample is not None:
        add(sample["fingerprint"], "done", marker, sample["tasks"])
        add(sample["fingerprint"], "sample", cost.ATOMIC_WRITE + cost.MARKER_READ, sample["tasks"])
    add(mapped["fingerprint"], "done", marker, mapped["tasks"])
    map_runs = [
        p for p in sorted(fs.find(f"{bucket}/work/stage-{mapped['fingerprint']}/runs")) if p.endswith(".data")
    ]
    assert len(map_runs) == mapped["tasks"]  # one spill per map task at this size
    for path in map_runs:
        add(mapped["fingerprint"], "runs", cost.upload(fs.size(path)) + cost.upload(partitions * 48))
    add(reduce["fingerprint"], "done", marker, reduce["tasks"])
    if grouped is None:
        read_runs, where = [Run(p) for p in map_runs], mapped["fingerprint"]
    else:
        add(grouped["fingerprint"], "done", marker, grouped["tasks"])
        group_runs = sorted(
            p for p in fs.find(f"{bucket}/work/stage-{grouped['fingerprint']}/runs") if p.endswith(".data")
        )
        read_runs, where = [], grouped["fingerprint"]
        for path in group_runs:
            slots = (fs.size(path[: -len(".data")] + ".index") // partitions - 24) // 24
            read_runs.append(Run(path, slots))
            add(
                where,
                "runs",
                cost.upload(fs.size(path), shares.upload_part_bytes)
                + cost.upload(partitions * (24 + 24 * slots)),
            )
        sizes = [read_index(fs, Run(run), partitions)[1][:, 0, 1].tolist() for run in map_runs]
        groups = _groups(map_runs, group_runs, slots_of=[r.slots for r in read_runs])
        for members in groups:
            reads = cost.coalesce_reads([sizes[i] for i in members], shares.coalesce_window_bytes)
            add(mapped["fingerprint"], "runs", cost.Cost.of(GET=len(members) + sum(reads)))
    reads = Counter()
    for run in read_runs:
        lengths = read_index(fs, run, partitions)[1][:, :, 1]
        reads["GET"] += sum(1 + cost.chunk_reads(mine.tolist(), chunk) for mine in lengths)
    expected.setdefault((where, "runs"), Counter()).update(reads)
    return expected


def _groups(map_runs: list[str], group_runs: list[str], slots_of: list[int]) -> list[range]:
    """Which map runs (by position, in task order) each coalesced run holds: consecutive, ``slots`` each."""
    starts = np.cumsum([0, *slots_of])
    assert starts[-1] == len(map_runs)
    return [range(int(a), int(b)) for a, b in zip(starts[:-1], starts[1:])]


def _check(endpoint: str, op: str, files: int, partitions: int, mode: str, **options) -> dict:
    bucket = _inputs(endpoint, files)
    fetch(endpoint, clear=True)
    table, stages = _run(bucket, op, partitions, mode, **options)
    measured = _measured(fetch(endpoint, clear=True))
    coalesced = any("coalesce" in s["stage"] for s in stages)
    assert coalesced == (mode != "never")
    expected = _expected(bucket, stages, partitions, coalesced, op)
    assert measured == expected
    return {"table": table, "stages": stages, "measured": measured, "bucket": bucket}


def _expected_resume(bucket: str, stages: list[dict]) -> dict:
    """A rerun that finds every task finished: each marker read, each file it names checked whole, and the
    driver reading the sort's samples and the output parts again."""
    fs = fsspec.filesystem("s3", skip_instance_cache=True)
    expected: dict[tuple[str, str], Counter] = {}
    for stage in stages:
        root = f"{bucket}/work/stage-{stage['fingerprint']}"
        expected[(stage["fingerprint"], "done")] = cost.MARKER_READ.times(stage["tasks"]).requests
        for what in ("runs", "sample", "output"):
            files = [p for p in fs.find(f"{root}/{what}") if "/_" not in p]
            if files:
                checked = sum((cost.check_file(fs.size(p)) for p in files), cost.Cost())
                read_again = cost.MARKER_READ.times(len(files)) if what != "runs" else cost.Cost()
                expected[(stage["fingerprint"], what)] = (checked + read_again).requests
    return expected


@pytest.mark.parametrize("op", ["sort", "group_by"])
def test_small_shuffle_requests_match_the_model(endpoint, op):
    """M = 8 map tasks, R = 6 partitions, in this process: the map runs read as they are, and coalesced
    (``auto``: the work dir is on S3 and the parts are tiny), give the same rows and exactly the requests the
    model predicts; so does a rerun that resumes every task (its markers read, their files checked)."""
    plain = _check(endpoint, op, 8, 6, "never", executor="inprocess")
    merged = _check(endpoint, op, 8, 6, "auto", executor="inprocess")
    assert merged["table"].equals(plain["table"])
    fetch(endpoint, clear=True)  # not the reads that worked out the expected counts
    again, stages = _run(merged["bucket"], op, 6, "auto", executor="inprocess")
    assert again.equals(plain["table"])
    assert all(s["tasks_resumed"] == s["tasks"] for s in stages)
    assert _measured(fetch(endpoint, clear=True), output=True) == _expected_resume(merged["bucket"], stages)


@pytest.mark.slow
@pytest.mark.parametrize("op", ["sort", "group_by"])
def test_shuffle_of_500_map_tasks_into_500_partitions_matches_the_model(endpoint, op):
    """M = R = 500 on two worker processes (their requests counted at the server like the driver's): the
    runs coalesced into one per worker, so each reducer reads 2 index blocks and at most 2 chunks instead of
    500 of each — exactly as the model predicts."""
    done = _check(endpoint, op, 500, 500, "auto", executor="local", workers=2)
    groups = next(s for s in done["stages"] if "coalesce" in s["stage"])
    assert groups["tasks"] == 2
    reads = sum(
        c["GET"]
        for (fp, what), c in done["measured"].items()
        if fp == groups["fingerprint"] and what == "runs"
    )
    assert reads <= 500 * 2 * 2  # per reducer: one index block and at most one chunk per group
