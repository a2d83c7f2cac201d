"""zephyr on object storage: inputs, shuffle spills, markers and outputs on a real S3 server (moto) on loopback.

The server is ``python -m moto.server`` in a subprocess bound to 127.0.0.1; credentials and the endpoint reach
every process (driver, local workers, dask workers) through the standard AWS environment variables, set here in
the fixture and nowhere in library code. Checks: byte-identical outputs against the same plan on local disk with
the local executor and with dask (a LocalCluster started by zephyr), spill runs really on S3, and resume after
finished tasks' markers are found on S3 (a lost marker reruns only its task).
"""

from __future__ import annotations

import hashlib
import json
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import cloudpickle
import fsspec
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import zephyr

from .bpe import train_tiny_bpe
from .moto_server import serving

pytest.importorskip("s3fs")
pytest.importorskip("moto")

pytestmark = pytest.mark.s3

cloudpickle.register_pickle_by_value(sys.modules[__name__])

BUDGET = "4MiB"


@pytest.fixture(scope="module")
def s3_endpoint(tmp_path_factory) -> Iterator[str]:
    """A moto S3 server on 127.0.0.1 and the AWS_* environment pointing every process at it."""
    log_path = tmp_path_factory.mktemp("moto") / "moto.log"
    with serving(
        lambda port: [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        "/moto-api/",
        log_path,
    ) as endpoint:
        yield endpoint


@pytest.fixture
def bucket(s3_endpoint) -> str:
    name = f"zephyr-{uuid.uuid4().hex[:12]}"
    fsspec.filesystem("s3").mkdir(name)
    return name


def _write_shards(directory: Path, shards: int = 4, rows: int = 1500) -> Path:
    rng = np.random.default_rng(7)
    directory.mkdir(parents=True, exist_ok=True)
    for i in range(shards):
        ids = np.arange(i * rows, (i + 1) * rows)
        pq.write_table(
            pa.table(
                {
                    "id": ids,
                    "key": rng.integers(0, 200, rows),
                    "word": [f"w{v}" for v in rng.integers(0, 3000, rows)],
                    "value": rng.normal(size=rows),
                }
            ),
            directory / f"in-{i:02d}.parquet",
        )
    return directory


def _plan(pattern: str) -> zephyr.Dataset:
    """Two shuffles (an exact dedup, then a hashed group-by), so runs are written to and merged from S3."""
    return (
        zephyr.read_parquet(pattern)
        .deduplicate("word")
        .group_by("key")
        .agg(n=("id", "count"), total=("value", "sum"), first=("word", "min"))
    )


@pytest.fixture(scope="module")
def local_inputs(tmp_path_factory) -> Path:
    return _write_shards(tmp_path_factory.mktemp("s3-inputs"))


@pytest.fixture(scope="module")
def reference(local_inputs, tmp_path_factory) -> dict[str, str]:
    """The plan's output on local disk (in-process; equal to the local executor's, see tests/zephyr)."""
    out = tmp_path_factory.mktemp("s3-reference")
    _plan(str(local_inputs / "*.parquet")).write_parquet(str(out), executor="inprocess", memory_budget=BUDGET)
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(out.glob("part-*"))}


def _s3_digest(url: str) -> dict[str, str]:
    fs, root = fsspec.core.url_to_fs(url)
    fs.invalidate_cache()
    return {
        path.rsplit("/", 1)[-1]: hashlib.sha256(fs.cat_file(path)).hexdigest()
        for path in sorted(fs.find(root))
        if path.rsplit("/", 1)[-1].startswith("part-")
    }


def _upload(local_inputs: Path, bucket: str) -> str:
    fs = fsspec.filesystem("s3")
    for path in sorted(local_inputs.glob("*.parquet")):
        fs.put_file(str(path), f"{bucket}/in/{path.name}")
    return f"s3://{bucket}/in/*.parquet"


def test_local_executor_on_s3_matches_local_disk_and_resumes(local_inputs, reference, bucket):
    pattern = _upload(local_inputs, bucket)
    work, out = f"s3://{bucket}/work", f"s3://{bucket}/out"
    options = dict(executor="local", workers=2, work_dir=work, memory_budget=BUDGET)
    first = _plan(pattern).write_parquet(out, **options)
    assert reference and _s3_digest(out) == reference
    assert all(f.startswith(f"s3://{bucket}/out/part-") for f in first.files)
    fs = fsspec.filesystem("s3")
    fs.invalidate_cache()
    spills = [p for p in fs.find(f"{bucket}/work") if "/runs/" in p]
    assert spills, "no shuffle run files on S3"
    assert fs.exists(f"{bucket}/work/stats.json")

    # lose one map task's marker: a rerun redoes that task only and gives the same bytes
    markers = sorted(p for p in fs.find(f"{bucket}/work") if "/_done/task-" in p)
    first_stage = first.stats["stages"][0]
    lost = next(m for m in markers if f"stage-{first_stage['fingerprint']}/_done/task-00001" in m)
    fs.rm(lost)
    again = _plan(pattern).write_parquet(out, **{**options, "executor": "inprocess"})
    stages = {s["fingerprint"]: s for s in again.stats["stages"]}
    assert stages[first_stage["fingerprint"]]["tasks_resumed"] == first_stage["tasks"] - 1
    # the runs were coalesced (on S3 by default): the coalescing of the rerun task's runs reruns with it
    rerun = [s for s in again.stats["stages"] if s["tasks"] > s["tasks_resumed"]]
    assert (
        sum(s["tasks"] - s["tasks_resumed"] for s in rerun if not s["stage"].endswith("coalesce runs")) == 1
    )
    assert any(s["stage"].endswith("coalesce runs") for s in rerun)
    assert _s3_digest(out) == reference


def test_dask_local_cluster_on_s3_matches_local_disk(local_inputs, reference, bucket):
    pattern = _upload(local_inputs, bucket)
    out = f"s3://{bucket}/out"
    result = _plan(pattern).write_parquet(
        out, executor="dask", workers=2, work_dir=f"s3://{bucket}/work", memory_budget=BUDGET
    )
    assert _s3_digest(out) == reference
    assert result.stats["executor"] == "DaskExecutor"
    assert sum(s["bytes_out"] for s in result.stats["stages"][:-1]) > 0


def test_long_lived_driver_sees_changes_made_by_other_processes(local_inputs, bucket, tmp_path):
    """s3fs caches listings per filesystem instance, shared by the whole driver process. Files another process
    adds or removes between two jobs must still be seen: a new input is read, a lost output is rewritten."""
    other = fsspec.filesystem("s3", skip_instance_cache=True)  # stands for another process: its own cache
    pattern = _upload(local_inputs, bucket)
    total = 4 * 1500
    assert zephyr.read_parquet(pattern).count(executor="inprocess") == total
    other.put_file(str(local_inputs / "in-00.parquet"), f"{bucket}/in/in-99.parquet")
    assert zephyr.read_parquet(pattern).count(executor="inprocess") == total + 1500
    assert zephyr.read_parquet(f"s3://{bucket}/in").count(executor="inprocess") == total + 1500

    # inputs on local disk, so nothing else in the job touches the S3 instance's cache
    source = zephyr.read_parquet(str(local_inputs / "*.parquet"))
    options = dict(executor="inprocess", work_dir=f"s3://{bucket}/work")
    first = source.write_parquet(f"s3://{bucket}/out", **options)
    other.rm(first.files[0])
    again = source.write_parquet(f"s3://{bucket}/out", **options)
    assert [s["tasks_resumed"] for s in again.stats["stages"]] == [len(first.files) - 1]
    other.invalidate_cache()
    assert all(other.exists(f) for f in again.files)


def test_same_size_object_rewritten_by_another_process_is_recomputed(bucket, tmp_path):
    """The resume fingerprint holds each object's ETag: an object replaced by one of the same size (by another
    process) is read again, while an untouched object still resumes."""
    other = fsspec.filesystem("s3", skip_instance_cache=True)
    body = b"".join(b'{"id": %d, "text": "alpha number %d"}\n' % (i, i) for i in range(12))
    url = f"s3://{bucket}/in/docs.jsonl"
    other.pipe(f"{bucket}/in/docs.jsonl", body)
    out = tmp_path / "out"

    def run():
        result = zephyr.read_jsonl(url).write_parquet(
            str(out), executor="inprocess", work_dir=f"s3://{bucket}/w"
        )
        texts = sorted(t for p in sorted(out.glob("part-*")) for t in pq.read_table(p)["text"].to_pylist())
        return [s["tasks_resumed"] for s in result.stats["stages"]], texts

    assert run() == ([0], sorted(f"alpha number {i}" for i in range(12)))
    assert run()[0] == [1]
    other.pipe(f"{bucket}/in/docs.jsonl", body.replace(b"alpha", b"omega"))
    assert run() == ([0], sorted(f"omega number {i}" for i in range(12)))


def _bpe(path: Path) -> str:
    texts = [f"document {i} about topic {i % 7}, with words." for i in range(200)]
    return str(train_tiny_bpe(path, texts, vocab_size=400))


def test_tokenize_on_dask_writes_shards_to_s3_and_the_loader_streams_them_back(bucket, tmp_path):
    """Inputs, spills (the work_dir) and the shard set all on S3, tokenized by dask workers that share no
    local directory: the set equals one written on local disk, and the loader reads it back through its cache."""
    from zephyr.tokenize import TokenLoader, write_token_shards
    from zephyr.tokenize.shards import read_manifest

    rng = np.random.default_rng(3)
    inputs = tmp_path / "in"
    inputs.mkdir()
    for i in range(3):
        texts = [" ".join(f"w{v}" for v in rng.integers(0, 50, rng.integers(5, 60))) for _ in range(150)]
        pq.write_table(
            pa.table({"id": [f"{i}-{j}" for j in range(150)], "text": texts}), inputs / f"{i}.parquet"
        )
    fs = fsspec.filesystem("s3")
    for path in sorted(inputs.glob("*.parquet")):
        fs.put_file(str(path), f"{bucket}/docs/{path.name}")
    common = dict(tokenizer=_bpe(tmp_path / "tok.json"), shard_bytes="4KB", seed=5, megatron=True)
    local = write_token_shards(str(inputs), output=str(tmp_path / "local"), executor="inprocess", **common)
    remote = write_token_shards(
        f"s3://{bucket}/docs",
        output=f"s3://{bucket}/tokens",
        executor="dask",
        workers=2,
        work_dir=f"s3://{bucket}/tokwork",
        **common,
    )
    assert remote.num_tokens == local.num_tokens and len(local.manifest["shards"]) > 2

    def digests(manifest: dict) -> list[dict]:
        return [{k: f["sha256"] for k, f in s["files"].items()} for s in manifest["shards"]]

    assert digests(remote.manifest) == digests(local.manifest)
    fs.invalidate_cache()
    assert read_manifest(f"s3://{bucket}/tokens").num_tokens == local.num_tokens
    assert not fs.exists(f"{bucket}/tokens/_work")  # spills went to the work_dir, removed once complete
    assert not [p for p in fs.find(f"{bucket}/tokwork") if "/spill/" in p]

    def samples(root: str, **kw) -> list[list[int]]:
        loader = TokenLoader(root, seq_len=32, seed=1, num_epochs=1, **kw)
        return [s["input_ids"].tolist() for s in loader]

    streamed = samples(f"s3://{bucket}/tokens", cache_dir=str(tmp_path / "cache"))
    assert streamed and streamed == samples(str(tmp_path / "local"))


# -- claims and locks on an object store (zephyr.io.claim) ----------------
def test_a_lock_on_s3_is_created_by_a_conditional_write(bucket):
    """``If-None-Match: *`` (s3fs ``pipe_file(mode="create")``): of two creates of one lock, the second fails
    on the server."""
    from zephyr.io import claim

    fs = fsspec.filesystem("s3")
    path = f"{bucket}/out.zephyr/lock.json"
    assert claim._create(fs, path, b'{"first": 1}') is True
    assert claim._create(fs, path, b'{"second": 2}') is False
    assert fs.cat_file(path) == b'{"first": 1}'


def test_a_second_command_on_an_s3_output_is_refused_naming_the_holder(
    local_inputs, bucket, tmp_path, capsys
):
    from zephyr.cli import main
    from zephyr.errors import ClaimError

    from .held_command import held_command

    out = f"s3://{bucket}/out"
    source = str(local_inputs / "in-00.parquet")
    argv = ["convert", source, "--output", out, "--executor", "inprocess"]
    with held_command(argv, "claim", tmp_path) as held:
        with pytest.raises(
            ClaimError, match=rf"the output {out} is in use by another zephyr command: .*pid {held.proc.pid}"
        ):
            zephyr.read_parquet(source).write_parquet(out, executor="inprocess")
        assert main(["sort", source, "--by", "key", "--output", out, "--executor", "inprocess"]) == 1
        assert f"pid {held.proc.pid}" in capsys.readouterr().err
        done = held.release()
    assert done.returncode == 0, done.stderr
    fs = fsspec.filesystem("s3")
    fs.invalidate_cache()
    assert not fs.exists(f"{bucket}/out.zephyr/lock.json") and not fs.exists(f"{bucket}/out.zephyr/staging")
    manifest = json.loads(fs.cat_file(f"{bucket}/out.zephyr/manifest.json"))
    assert list(manifest["files"]) == ["part-00000.parquet"]
    assert manifest["files"]["part-00000.parquet"]["xxh3_128"]
    assert sorted(p.rsplit("/", 1)[-1] for p in fs.find(f"{bucket}/out")) == ["part-00000.parquet"]


def test_a_stale_lock_on_s3_is_taken_over_and_foreign_files_are_refused(local_inputs, bucket, caplog):

    from zephyr.errors import ClaimError

    fs = fsspec.filesystem("s3")
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    stale = {"host": socket.gethostname(), "pid": dead.pid, "since": time.time(), "command": "zephyr old"}
    fs.pipe_file(f"{bucket}/out.zephyr/lock.json", json.dumps(stale).encode())
    fs.pipe_file(f"{bucket}/out/notes.txt", b"not zephyr's")
    source = zephyr.read_parquet(str(local_inputs / "in-00.parquet"))
    out = f"s3://{bucket}/out"
    with pytest.raises(ClaimError, match=r"holds files zephyr did not write \(notes.txt\)"):
        source.write_parquet(out, executor="inprocess")
    assert "taking over the lock of 'zephyr old'" in caplog.text
    source.write_parquet(out, executor="inprocess", overwrite=True)
    fs.invalidate_cache()
    assert sorted(p.rsplit("/", 1)[-1] for p in fs.find(f"{bucket}/out")) == ["part-00000.parquet"]
    source.write_parquet(out, executor="inprocess")  # a finished run's folder: replaced without overwrite
