"""``zephyr explain dedup exact|fuzzy``: the plans of the commands' engine jobs (stages, shuffles, partition
counts, the budget shares that choose between paths), with no job run and nothing written."""

from __future__ import annotations

import json
import os

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from zephyr import job_stats
from zephyr.cli import main

from ..explain_plans import explain, planned_jobs, ran_jobs, runs_in_order


@pytest.fixture
def corpus(tmp_path):
    path = tmp_path / "in" / "docs.parquet"
    path.parent.mkdir()
    texts = [f"document number {i} says the same thing again and again" for i in range(50)]
    pq.write_table(pa.table({"id": list(range(50)), "text": texts}), path)
    return path


def _explain(argv: list[str], capsys) -> tuple[str, list[dict]]:
    with job_stats.recording() as jobs:
        assert main(["explain", "dedup", *argv]) == 0
    return capsys.readouterr().out, jobs


def _listing(root) -> list[str]:
    return sorted(os.path.relpath(os.path.join(d, f), root) for d, _, fs in os.walk(root) for f in fs)


def test_exact_prints_both_paths_and_runs_nothing(tmp_path, corpus, capsys):
    before = _listing(tmp_path)
    work = tmp_path / "work"
    argv = ["exact", str(corpus), "--memory-budget", "16MB", "--work-dir", str(work), "--executor", "local"]
    out, jobs = _explain(argv, capsys)
    assert jobs == [] and not work.exists() and _listing(tmp_path) == before
    assert out.index("job 1: member hashes") < out.index("then: member rows ≤ driver_rows 62,500")
    assert "job 2a:" in out and "map_batches(dedup.exact.attach)" in out
    shuffle_path = out[out.index("job 2b:") : out.index("budget shares (")]
    assert "shuffle #1: hash(__dedup_h0, __dedup_h1) into" in shuffle_path
    assert "= ceil(est." in shuffle_path and "reduce: Join" in shuffle_path
    assert out.count("budget shares (") == 1 and "  driver_rows" in out
    assert "in this process (small job" in out  # local, and under small_job_bytes: the engine's rule


def test_exact_paragraph_level_is_one_job(corpus, capsys):
    out, jobs = _explain(["paragraph", str(corpus)], capsys)
    assert jobs == [] and "job 1: the output" in out and "job 2" not in out
    assert "range(id)" in out and "1 partition" in out  # the sort by id into one partition


def test_fuzzy_names_the_bucket_shuffle_and_the_driver_limits(tmp_path, corpus, capsys):
    before = _listing(tmp_path)
    out, jobs = _explain(["fuzzy", str(corpus), "--memory-budget", "16MB", "--mode", "remove"], capsys)
    assert jobs == [] and _listing(tmp_path) == before
    pairs = out[out.index("job 1: candidate pairs") : out.index("job 2:")]
    assert "hash(band, bhash)" in pairs and "map-side combine" in pairs and "hash(u, v)" in pairs
    assert "driver_set_bytes 1,000,000" in out and "driver_graph_edges 333,333" in out
    assert "job 3: the output" in out and "dedup.fuzzy.finish" in out
    assert "verification on the engine" in out
    no_verify, _ = _explain(["fuzzy", str(corpus), "--no-verify"], capsys)
    assert "verification on the engine" not in no_verify


def test_json_puts_the_plan_in_the_details(corpus, capsys):
    assert main(["explain", "dedup", "fuzzy", str(corpus), "--json"]) == 0
    record = json.loads(capsys.readouterr().out)
    assert record["command"] == "zephyr explain dedup fuzzy" and record["rows_in"] == 0
    assert record["details"]["ran"] is False and "job 1: candidate pairs" in record["details"]["plan"]


def test_fuzzy_writing_an_index_prints_the_stages_its_run_has(tmp_path, corpus, capsys):
    """The plans are the run's code: with an index to write, the output is annotated with row numbers and
    then stripped (``dedup.fuzzy.output``), in the plan as in the run."""
    argv = ["dedup", "fuzzy", str(corpus), "--write-index", str(tmp_path / "index")]
    plans = planned_jobs(explain(argv, capsys))
    assert any("dedup.fuzzy.output" in stage for stage in plans["job 3"])
    ran = ran_jobs([*argv, "--output", str(tmp_path / "out")], capsys)
    assert runs_in_order([plans["job 1"], plans["job 3"]], ran)
