"""``zephyr explain tokenize``: the writer's jobs (tokenize, reference sort, pack), the shard-count rule and
where the jobs run, with no job run and nothing written, and the stages a run records."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from ..explain_plans import explain, listing, planned_jobs, ran_jobs


@pytest.fixture
def corpus(tmp_path: Path) -> Path:
    path = tmp_path / "in" / "docs.parquet"
    path.parent.mkdir()
    texts = [f"The quick brown fox {i} jumps over the lazy dog." * (1 + i % 3) for i in range(60)]
    pq.write_table(pa.table({"id": list(range(60)), "text": texts}), path, row_group_size=10)
    return path


def test_explain_tokenize_prints_the_three_jobs_and_the_shard_rule(
    tmp_path: Path, corpus: Path, bpe_tokenizer: Path, capsys
) -> None:
    before = listing(tmp_path)
    argv = [
        "tokenize",
        str(corpus),
        "--tokenizer",
        str(bpe_tokenizer),
        "--shard-bytes",
        "4KB",
        "--batch-rows",
        "16",
    ]
    out = explain([*argv, "--executor", "local", "--workers", "2"], capsys)
    assert listing(tmp_path) == before
    jobs = planned_jobs(out)
    assert jobs["job 1"] == ["ReadFiles → map_batches(tokenize)"]
    assert jobs["job 2"] == ["ReadFiles → map_batches(tokenize)", "ReadFiles", "Sort"]  # no key sample
    assert jobs["job 3"] == ["FromTable → map_batches(pack)"]
    assert "range(key_hi, key_lo) into 1 partition" in out and "1 partition = the given boundaries + 1" in out
    assert "shards P = ceil(total tokens × 2 bytes (uint16) / shard_bytes 4,000)" in out
    assert "job 1: tokenize, 16 documents a batch (batch_rows" in out
    assert "then: every job runs in this process: a small job" in out and "executor inprocess" in out


def test_explain_tokenize_says_where_the_jobs_run(
    corpus: Path, bpe_tokenizer: Path, capsys, monkeypatch
) -> None:
    from zephyr import physical

    monkeypatch.setattr(physical, "SPLIT_MIN_BYTES", 1)  # split the one file by row groups: 6 tasks
    monkeypatch.setattr(physical, "TASK_MIN_BYTES", 1)
    argv = ["tokenize", str(corpus), "--tokenizer", str(bpe_tokenizer), "--executor", "local"]
    two = explain([*argv, "--workers", "2", "--small-job-bytes", "1"], capsys)
    assert "with 2 local workers (at most 2) the encoder's own threads on every core do more" in two
    assert "DRIVER_MAX_WORKERS" not in two and "ReadPlan.small" not in two and "hash space" not in two
    forced = explain([*argv, "--workers", "3", "--small-job-bytes", "0"], capsys)
    assert (
        "then: the jobs run on 3 local workers, no more than the tokenize tasks that run at once (3 of the read plan's 6)"
        in forced
    )
    assert "executor local, 3 workers" in forced and "tasks 6 · reads parquet" in forced
    # the pack job: in the driver one task packs as many shards at once as the workers it stands in for
    assert "job 3: pack, one task packing 2 shards at a time on threads (pack_threads)" in two
    assert "job 3: pack, one task a shard," in forced


def test_explain_tokenize_plans_what_the_writer_runs(
    tmp_path: Path, corpus: Path, bpe_tokenizer: Path, capsys
) -> None:
    argv = ["tokenize", str(corpus), "--tokenizer", str(bpe_tokenizer), "--shard-bytes", "2KB", "--seed", "3"]
    jobs = planned_jobs(explain(argv, capsys))
    out = tmp_path / "out"
    ran = ran_jobs([*argv, "--output", str(out)], capsys)
    # job 2's first stage is job 1 (the sort reads job 1's files): the run's jobs are the planned stages
    assert ran == [jobs["job 1"], jobs["job 2"][1:], jobs["job 3"]]
    manifest = json.loads((out / "manifest.json").read_text())
    itemsize = 2 if manifest["dtype"] == "uint16" else 4
    assert len(manifest["shards"]) == -(-manifest["num_tokens"] * itemsize // 2000)  # the printed rule
