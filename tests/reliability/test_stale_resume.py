"""Resume never keeps an output whose input changed: an input edited in place with the same byte size is
recomputed (the fingerprint holds its mtime / ETag, ``zephyr.io.paths.file_stat``), an unchanged input still
resumes. Through the Python API, ``zephyr dedup exact --work-dir``, ``zephyr run`` and on fsspec's memory
filesystem (the loopback S3 server: tests/test_s3.py)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import fsspec
import pyarrow.parquet as pq
import yaml

import zephyr
from zephyr.cli import main
from zephyr.io.layout import stats_path

FAST = ["--executor", "inprocess"]


def _write_docs(path: Path, word: str, rows: int = 12) -> None:
    path.write_text("".join(json.dumps({"id": i, "text": f"{word} number {i}"}) + "\n" for i in range(rows)))


def _edit_same_size(path: Path, old: bytes, new: bytes) -> None:
    """Rewrite ``path`` in place (same inode, same byte size) with ``old`` replaced by ``new``."""
    before = path.stat()
    data = path.read_bytes().replace(old, new)
    assert len(data) == before.st_size and data != path.read_bytes()
    with open(path, "r+b") as f:
        f.write(data)
    after = path.stat()
    assert after.st_size == before.st_size and after.st_ino == before.st_ino
    if after.st_mtime_ns == before.st_mtime_ns:  # coarse filesystem clock: the edit lands one tick later
        os.utime(path, ns=(after.st_atime_ns, before.st_mtime_ns + 1_000_000_000))


def _texts(directory: Path) -> list[str]:
    texts = [
        t for p in sorted(directory.glob("part-*.parquet")) for t in pq.read_table(p)["text"].to_pylist()
    ]
    return sorted(texts)


def _resumed(stats: dict) -> tuple[int, int]:
    """(tasks resumed, tasks) over every stage of a job's stats."""
    return sum(s["tasks_resumed"] for s in stats["stages"]), sum(s["tasks"] for s in stats["stages"])


def test_python_api_same_size_edit_recomputes(tmp_path):
    src, work, out = tmp_path / "docs.jsonl", tmp_path / "work", tmp_path / "out"
    _write_docs(src, "alpha")

    def run():
        return zephyr.read_jsonl(str(src)).write_parquet(str(out), executor="inprocess", work_dir=str(work))

    first = run()
    assert _resumed(first.stats) == (0, 1)
    unchanged = run()
    assert _resumed(unchanged.stats) == (1, 1)  # nothing changed: the finished task is kept
    _edit_same_size(src, b"alpha", b"omega")
    edited = run()
    assert _resumed(edited.stats) == (0, 1)
    assert _texts(out) == sorted(f"omega number {i}" for i in range(12))


def test_memory_filesystem_same_size_object_recomputes(tmp_path):
    fs = fsspec.filesystem("memory")
    url, work, out = "memory:///stale-resume/docs.jsonl", "memory:///stale-resume-work", tmp_path / "out"
    body = "".join(json.dumps({"id": i, "text": f"alpha number {i}"}) + "\n" for i in range(12)).encode()
    fs.pipe(url, body)
    try:

        def run():
            return zephyr.read_jsonl(url).write_parquet(str(out), executor="inprocess", work_dir=work)

        assert _resumed(run().stats) == (0, 1)
        assert _resumed(run().stats) == (1, 1)
        fs.pipe(url, body.replace(b"alpha", b"omega"))  # a new object of the same size
        assert _resumed(run().stats) == (0, 1)
        assert _texts(out) == sorted(f"omega number {i}" for i in range(12))
    finally:
        fs.rm("/stale-resume", recursive=True)
        fs.rm("/stale-resume-work", recursive=True)


def test_dedup_exact_cli_same_size_edit_recomputes(tmp_path):
    src, work, out = tmp_path / "docs.jsonl", tmp_path / "work", tmp_path / "out"
    _write_docs(src, "alpha")
    argv = ["dedup", "exact", str(src), "--output", str(out), "--work-dir", str(work), *FAST]
    assert main(argv) == 0
    assert main(argv) == 0
    stats = json.loads(Path(stats_path(out)).read_text())
    resumed, tasks = _resumed(stats)
    assert resumed == tasks > 0  # unchanged input: every task resumes
    _edit_same_size(src, b"alpha", b"omega")
    assert main(argv) == 0
    stats = json.loads(Path(stats_path(out)).read_text())
    assert _resumed(stats)[0] == 0
    assert _texts(out) == sorted(f"omega number {i}" for i in range(12))


def _pipeline(tmp_path: Path, paths: list[str]) -> Path:
    config = {"name": "stale", "steps": [{"step": "read", "paths": paths}, {"step": "normalize"}]}
    path = tmp_path / "stale.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def _run_stats(job: Path) -> dict[str, dict]:
    return {s["step"]: s for s in json.loads((job / "stats.json").read_text())["steps"]}


def test_zephyr_run_same_size_edit_recomputes(tmp_path):
    src, job = tmp_path / "docs.jsonl", tmp_path / "job"
    _write_docs(src, "alpha")
    argv = ["run", str(_pipeline(tmp_path, [str(src)])), "--job-dir", str(job), *FAST, "--no-report"]
    assert main(argv) == 0
    assert main(argv) == 0
    assert {s["status"] for s in _run_stats(job).values()} == {"skipped"}
    _edit_same_size(src, b"alpha", b"omega")
    assert main(argv) == 0
    assert {s["status"] for s in _run_stats(job).values()} == {"ran"}
    assert _texts(job / "01-normalize") == sorted(f"omega number {i}" for i in range(12))


def test_zephyr_run_same_size_object_recomputes(tmp_path):
    """Inputs on an object store: the read stage's fingerprint holds each object's version stamp, not only
    its URL."""
    fs = fsspec.filesystem("memory")
    url, job = "memory:///stale-run/docs.jsonl", tmp_path / "job"
    body = "".join(json.dumps({"id": i, "text": f"alpha number {i}"}) + "\n" for i in range(12)).encode()
    fs.pipe(url, body)
    try:
        argv = ["run", str(_pipeline(tmp_path, [url])), "--job-dir", str(job), *FAST, "--no-report"]
        assert main(argv) == 0
        assert main(argv) == 0
        assert {s["status"] for s in _run_stats(job).values()} == {"skipped"}
        fs.pipe(url, body.replace(b"alpha", b"omega"))
        assert main(argv) == 0
        assert {s["status"] for s in _run_stats(job).values()} == {"ran"}
        assert _texts(job / "01-normalize") == sorted(f"omega number {i}" for i in range(12))
    finally:
        fs.rm("/stale-run", recursive=True)
