"""Trust: nothing found in a work directory or job folder is executed or followed blindly, and resume checks
the bytes it keeps (docs/engine.md, "Trust and security").

Each case is what someone who can write the work directory (a shared ``s3://.../zephyr-work``), or a failing
disk, does between two runs, on inputs made here:

- a pickle planted where a stage description used to be is never loaded (the stage reaches the workers from
  the driver), with worker processes and in process;
- a task marker forged to name a file of the user's outside the stage's folders: that file is left alone,
  the task reruns and says so;
- a published part overwritten (other size, or the same size) or a shuffle run file corrupted: the task
  that wrote it reruns and the output is byte-identical to the first run's;
- the same for a ``zephyr run`` step folder (a corrupted part, a record naming a file elsewhere, a tokenize
  step's shard) and for ``write_token_shards`` resuming its finished pack tasks;
- dask workers started in another directory, with a relative ``--output`` and ``--work-dir``.

Commands: ``convert``, ``sort`` and ``dedup exact`` through ``zephyr.cli.main``, the Python API for the
cases that need a hand inside the run.
"""

from __future__ import annotations

import json
import logging
import pickle
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

import zephyr
from zephyr.cli import main
from zephyr.executors.base import Executor, InProcessExecutor
from zephyr.executors.local import LocalExecutor
from zephyr.io.checksum import file_checksum

from .conftest import GOOD

FAST = ["--executor", "inprocess"]
COMMANDS = {
    "convert": ["convert"],
    "sort": ["sort", "--by", "text"],
    "dedup-exact": ["dedup", "exact"],
}


def _corpus(folder: Path, files: int = 3, rows: int = 40) -> Path:
    """JSONL files of documents, some texts repeated (dedup has work), ids unique."""
    folder.mkdir(parents=True, exist_ok=True)
    for f in range(files):
        lines = [
            json.dumps(
                {"id": f * rows + i, "text": f"document {(f * rows + i) % 31} of the corpus, line {i % 7}"}
            )
            for i in range(rows)
        ]
        (folder / f"docs-{f}.jsonl").write_text("\n".join(lines) + "\n")
    return folder


def _run(command: str, inputs: Path, out: Path, work: Path) -> None:
    words = COMMANDS[command]
    argv = (
        [*words[:2], str(inputs), *words[2:]]
        if command == "dedup-exact"
        else [words[0], str(inputs), *words[1:]]
    )
    assert main([*argv, "--output", str(out), "--work-dir", str(work), *FAST]) == 0


def _parts(out: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(out.glob("part-*"))}


def _markers_naming(work: Path, folder: Path) -> Iterator[Path]:
    """Task markers under ``work`` whose ``files`` lie in ``folder``."""
    for path in sorted(work.rglob("_done/task-*.json")):
        files = json.loads(path.read_text()).get("files") or []
        if any(Path(f).parent == folder for f in files):
            yield path


def _warned(caplog, *words: str) -> bool:
    return any(
        all(w in r.getMessage() for w in words) for r in caplog.records if r.levelno >= logging.WARNING
    )


# -- a planted pickle is never loaded ---------------------------------------------------------------------
class _Plant:
    """``__reduce__`` of a pickle that creates ``path`` when loaded (``open(path, "w")``): code run by loading."""

    def __init__(self, path: Path):
        self.path = str(path)

    def __reduce__(self):
        return (open, (self.path, "w"))


class _Planting(Executor):
    """Runs tasks on ``inner``, after writing a malicious ``stage.pkl`` and ``inputs.json`` into every stage
    folder of the work directory: what someone who can write it does once the driver has written its own files
    there and before the workers look. ``zephyr_pickles`` counts the pickles zephyr itself had left there."""

    def __init__(self, inner: Executor, work: Path, planted: Path):
        self.inner, self.work, self.planted = inner, work, planted
        self.zephyr_pickles = 0

    def _run(self, fn, tasks, shared):
        for stage in self.work.glob("stage-*"):
            self.zephyr_pickles += (stage / "stage.pkl").exists()
            (stage / "stage.pkl").write_bytes(pickle.dumps(_Plant(self.planted)))
            (stage / "inputs.json").write_text(json.dumps({"runs": [["/etc/hostname"]], "schemas": [None]}))
        return self.inner.run(fn, tasks, shared)

    def close(self) -> None:
        self.inner.close()


@pytest.mark.parametrize("where", ["worker-process", "in-process"])
def test_a_pickle_planted_in_the_work_dir_is_never_loaded(tmp_path, where):
    inputs, work, planted = _corpus(tmp_path / "in"), tmp_path / "work", tmp_path / "planted-was-run"

    def sort(executor, out):
        return (
            zephyr.read_jsonl(str(inputs))
            .sort("text", "id")
            .write_parquet(str(out), executor=executor, work_dir=str(work), max_retries=0)
        )

    reference = sort("inprocess", tmp_path / "reference")
    inner = LocalExecutor(1) if where == "worker-process" else InProcessExecutor()
    with _Planting(inner, work, planted) as executor:
        result = sort(executor, tmp_path / "out")
    assert not planted.exists()  # nothing loaded the pickle
    assert executor.zephyr_pickles == 0  # and zephyr keeps none in the work dir
    assert _parts(tmp_path / "out") == _parts(tmp_path / "reference")
    assert result.stats["rows_quarantined"] == 0 and len(result.files) == len(reference.files)


# -- a forged marker --------------------------------------------------------------------------------------
@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_a_forged_marker_cannot_move_a_users_file_into_the_output(tmp_path, caplog, command):
    inputs, out, work = _corpus(tmp_path / "in"), tmp_path / "out", tmp_path / "work"
    _run(command, inputs, out, work)
    reference = _parts(out)
    victim = tmp_path / "home" / "private.parquet"  # the user's own file, nothing to do with the run
    victim.parent.mkdir()
    pq.write_table(pa.table({"id": [7, 8], "text": ["mine", "not yours"]}), victim)
    before = victim.read_bytes()
    [marker_path, *_] = _markers_naming(work, out)
    marker = json.loads(marker_path.read_text())
    size, digest = file_checksum(str(victim))  # a careful forger records the right checksum too
    marker.update(files=[str(victim)], checksums={str(victim): {"bytes": size, "xxh3_128": digest}})
    marker_path.write_text(json.dumps(marker))

    with caplog.at_level(logging.WARNING):
        _run(command, inputs, out, work)
    assert victim.read_bytes() == before  # left where it was, as it was
    assert _parts(out) == reference  # the task reran: the output is the command's, not the victim
    assert _warned(caplog, str(marker_path), str(victim), "reruns")


# -- corrupted bytes --------------------------------------------------------------------------------------
def _corrupt(path: Path, how: str) -> None:
    if how == "garbage":  # echo garbage > part-00000.parquet
        path.write_bytes(b"garbage\n")
    elif how == "zeros":  # same size, every byte lost
        path.write_bytes(bytes(path.stat().st_size))
    else:  # same size, one byte changed in the middle
        data = bytearray(path.read_bytes())
        data[len(data) // 2] ^= 0xFF
        path.write_bytes(bytes(data))


@pytest.mark.parametrize("how", ["garbage", "same-size"])
@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_a_corrupted_output_part_is_recomputed(tmp_path, caplog, command, how):
    inputs, out, work = _corpus(tmp_path / "in"), tmp_path / "out", tmp_path / "work"
    _run(command, inputs, out, work)
    reference = _parts(out)
    _corrupt(out / "part-00000.parquet", how)
    with caplog.at_level(logging.WARNING):
        _run(command, inputs, out, work)
    assert _parts(out) == reference
    assert _warned(caplog, "part-00000.parquet", "reruns")


def test_a_corrupted_shuffle_run_reruns_its_map_task(tmp_path, caplog):
    """A job killed after its map stage, a run file zeroed before the rerun (same size): the map task that
    wrote it reruns, the reducers read the new runs, the output is the one an intact run gives."""
    inputs, out, work = _corpus(tmp_path / "in", files=4, rows=300), tmp_path / "out", tmp_path / "work"

    def group():
        plan = zephyr.read_jsonl(str(inputs)).group_by("text").agg(n=("id", "count"), low=("id", "min"))
        return plan.write_parquet(str(out), executor="inprocess", work_dir=str(work), memory_budget="1MiB")

    group()
    reference = _parts(out)
    for marker in _markers_naming(work, out):  # killed before the reduce tasks finished
        marker.unlink()
    [run_file, *_] = sorted(work.glob("stage-*/runs/map-00000/*/run-00000.data"))
    _corrupt(run_file, "zeros")
    with caplog.at_level(logging.WARNING):
        result = group()
    assert _parts(out) == reference
    map_stage = next(s for s in result.stats["stages"] if s["tasks"] == 4)
    assert map_stage["tasks_resumed"] == 3  # the one map task whose run changed ran again
    assert _warned(caplog, str(run_file), "reruns")


# -- zephyr run job folders -------------------------------------------------------------------------------
@pytest.mark.parametrize("how", ["garbage", "same-size", "record-names-another-file"])
def test_a_zephyr_run_step_whose_files_changed_reruns(tmp_path, caplog, how):
    inputs = _corpus(tmp_path / "in")
    config = {
        "name": "trust",
        "steps": [{"step": "read", "paths": [str(inputs)], "num_shards": 2}, {"step": "heuristic_filter"}],
    }
    path, job = tmp_path / "pipeline.yaml", tmp_path / "job"
    path.write_text(yaml.safe_dump(config))
    argv = ["run", str(path), "--job-dir", str(job), "--no-report", *FAST]
    assert main(argv) == 0
    read_dir = job / "00-read"
    reference = _parts(read_dir)
    record = job / "00-read.zephyr" / "stats.json"  # the step's record, in its sidecar
    if how == "record-names-another-file":
        victim = tmp_path / "home" / "private.parquet"
        victim.parent.mkdir()
        pq.write_table(pq.read_table(read_dir / "part-00000.parquet"), victim)  # rows that look right
        data = json.loads(record.read_text())
        data["files"][0] = str(victim)
        data["checksums"][str(victim)] = data["checksums"].pop(str(read_dir / "part-00000.parquet"))
        record.write_text(json.dumps(data))
    else:
        _corrupt(read_dir / "part-00000.parquet", how)

    with caplog.at_level(logging.WARNING):
        assert main(argv) == 0
    steps = json.loads((job / "stats.json").read_text())["steps"]
    assert [s["status"] for s in steps] == [
        "ran",
        "skipped",
    ]  # the filter's config and input fingerprint held
    assert _parts(read_dir) == reference
    assert steps[0]["files"] == [str(read_dir / name) for name in reference]
    assert _warned(caplog, str(record), "reruns")


# -- token shards ------------------------------------------------------------------------------------------
def _texts(folder: Path, rows: int = 120) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    docs = [{"id": f"d{i}", "text": f"{GOOD} Story {i} of {rows}, part {i % 9}."} for i in range(rows)]
    (folder / "docs.jsonl").write_text("".join(json.dumps(d) + "\n" for d in docs))
    return folder


def _digests(folder: Path) -> dict[str, str]:
    return {p.name: file_checksum(str(p))[1] for p in sorted(folder.glob("shard-*"))}


def test_a_resumed_tokenize_packs_again_when_a_shard_changed(tmp_path, tokenizer_json, monkeypatch, caplog):
    """Killed after its shards were packed and before the manifest; a shard damaged before the rerun (same
    size): the rerun, which skips the finished pack tasks, sees the shard no longer holds the bytes recorded
    for it and packs again, so the manifest vouches only for bytes it saw written."""
    import zephyr.tokenize.writer as writer

    inputs, out, work = _texts(tmp_path / "in"), tmp_path / "out", tmp_path / "work"
    common = dict(tokenizer=str(tokenizer_json), shard_bytes="4KB", seed=3, executor="inprocess")

    def killed(*args, **kwargs):
        raise RuntimeError("killed before the manifest")

    with monkeypatch.context() as patch:
        patch.setattr(writer, "write_manifest", killed)
        with pytest.raises(RuntimeError, match="killed before the manifest"):
            writer.write_token_shards(str(inputs), output=str(out), work_dir=str(work), **common)
    _corrupt(
        Path(f"{out}.zephyr") / "staging" / "shards" / "shard-00000.tokens.npy", "same-size"
    )  # unpublished
    with caplog.at_level(logging.WARNING):
        writer.write_token_shards(str(inputs), output=str(out), work_dir=str(work), **common)
    writer.write_token_shards(str(inputs), output=str(tmp_path / "clean"), **common)
    assert _digests(out) == _digests(tmp_path / "clean")
    assert _warned(caplog, "shard-00000.tokens.npy", "does not hold the bytes written", "the task reruns")


def test_a_resumed_tokenize_reencodes_when_a_token_spill_changed(
    tmp_path, tokenizer_json, monkeypatch, caplog
):
    """Killed while packing, a token spill file (what the tokenize tasks leave for the pack step, beside their
    output) damaged before the rerun: the tokenize task that wrote it reruns, so the shards hold the tokens of
    the text, not of the damage."""
    import zephyr.tokenize._pack as pack_step
    import zephyr.tokenize.writer as writer

    inputs, out, work = _texts(tmp_path / "in"), tmp_path / "out", tmp_path / "work"
    common = dict(tokenizer=str(tokenizer_json), shard_bytes="4KB", seed=3, executor="inprocess")

    def killed(self, table):
        raise RuntimeError("killed while packing")

    with monkeypatch.context() as patch:
        patch.setattr(pack_step.PackPartition, "__call__", killed)
        with pytest.raises(Exception, match="killed while packing"):
            writer.write_token_shards(
                str(inputs), output=str(out), work_dir=str(work), max_retries=0, **common
            )
    [spill, *_] = sorted(work.glob("tokenize-*/spill/*.tokens"))
    _corrupt(spill, "same-size")
    with caplog.at_level(logging.WARNING):
        writer.write_token_shards(str(inputs), output=str(out), work_dir=str(work), **common)
    writer.write_token_shards(str(inputs), output=str(tmp_path / "clean"), **common)
    assert _digests(out) == _digests(tmp_path / "clean")
    assert _warned(caplog, spill.name, "reruns")


def test_a_zephyr_run_tokenize_step_whose_shard_changed_reruns(tmp_path, tokenizer_json, caplog):
    inputs = _texts(tmp_path / "in")
    config = {
        "name": "tokens",
        "steps": [
            {"step": "read", "paths": [str(inputs)]},
            {"step": "tokenize", "tokenizer": str(tokenizer_json), "shard_bytes": "4KB"},
        ],
    }
    path, job = tmp_path / "pipeline.yaml", tmp_path / "job"
    path.write_text(yaml.safe_dump(config))
    argv = ["run", str(path), "--job-dir", str(job), "--no-report", *FAST]
    assert main(argv) == 0
    shards = job / "01-tokenize" / "shards"
    reference = _digests(shards)
    _corrupt(shards / "shard-00000.tokens.npy", "same-size")
    with caplog.at_level(logging.WARNING):
        assert main(argv) == 0
    steps = json.loads((job / "stats.json").read_text())["steps"]
    assert [s["status"] for s in steps] == ["skipped", "ran"]
    assert _digests(shards) == reference
    assert _warned(caplog, "shard-00000.tokens.npy", "reruns")


# -- dask workers in another working directory ------------------------------------------------------------
@pytest.mark.dask
def test_dask_workers_in_another_directory_with_relative_output_and_work_dir(tmp_path, monkeypatch):
    pytest.importorskip("distributed")
    from ..test_dask import start_dask

    inputs = _corpus(tmp_path / "in", files=4, rows=200)
    elsewhere, driver = tmp_path / "workers-cwd", tmp_path / "driver"
    elsewhere.mkdir()
    driver.mkdir()
    cluster = start_dask(tmp_path / "dask", cwd=elsewhere)
    try:
        monkeypatch.chdir(driver)
        argv = ["sort", str(inputs), "--by", "text", "--output", "out", "--work-dir", "work"]
        assert (
            main([*argv, "--executor", "dask", "--cluster", cluster.address, "--memory-budget", "1MiB"]) == 0
        )
    finally:
        cluster.stop()
    assert main([*argv[:5], "ref", *FAST]) == 0  # the same sort, in process
    assert _parts(driver / "out") == _parts(driver / "ref")
    assert sum(pq.read_metadata(p).num_rows for p in (driver / "out").glob("part-*")) == 800
    assert sorted(p.name for p in elsewhere.iterdir()) == []  # nothing written where the workers started
