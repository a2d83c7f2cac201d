"""``zephyr explain dedup url|paragraph|substring``: the plans of the text dedup commands' engine jobs, with no
job run and nothing written, and the same stages as a run of the command records."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from zephyr.dedup.cli import DedupRemoval
from zephyr.dedup.exact import url_dedup_dataset

from zephyr.cli import Inputs, main

from ..explain_plans import explain, listing, plan_stages, planned_jobs, ran_jobs, runs_in_order


@pytest.fixture
def corpus(tmp_path):
    path = tmp_path / "in" / "docs.parquet"
    path.parent.mkdir()
    texts = [f"document {i % 5}\nthe same closing paragraph of every document here" for i in range(40)]
    urls = [f"http://Example.com/{i % 7}#top" for i in range(40)]
    pq.write_table(pa.table({"id": list(range(40)), "url": urls, "text": texts}), path)
    return path


def test_url_prints_exact_dedup_on_the_url_key_and_runs_nothing(tmp_path, corpus, capsys):
    before = listing(tmp_path)
    out = explain(["dedup", "url", str(corpus), "--mode", "remove", "--memory-budget", "16MB"], capsys)
    assert listing(tmp_path) == before
    assert out.startswith("zephyr dedup url: nothing ran")
    assert "map_batches(dedup.url.key)" in out and "then: member rows ≤ driver_rows 62,500" in out
    shuffle_path = out[out.index("job 2b:") : out.index("budget shares (")]
    assert "shuffle #1: hash(__dedup_h0, __dedup_h1) into 1 partition" in shuffle_path
    assert "map_batches(dedup.url.finish)" in shuffle_path


def test_url_plan_is_the_plan_the_command_runs(tmp_path, corpus, capsys):
    argv = ["dedup", "url", str(corpus), "--mode", "remove"]
    plans = planned_jobs(explain(argv, capsys))
    ran = ran_jobs([*argv, "--output", str(tmp_path / "out")], capsys)
    assert runs_in_order([plans["job 1"], plans["job 2a"]], ran)  # small: groups formed in the driver
    # without execution options url_dedup_dataset is the shuffle path: job 2b's plan
    removal = DedupRemoval(mode="remove")
    rows = removal.rows(Inputs([str(corpus)]), "document")
    lazy = url_dedup_dataset(rows, url_column="url", mode=removal.internal_mode)
    assert plan_stages(removal.finished(lazy, "document").explain()) == plans["job 2b"]


def test_paragraph_exact_is_one_sort_into_one_partition(tmp_path, corpus, capsys):
    argv = ["dedup", "paragraph", str(corpus)]
    out = explain(argv, capsys)
    assert "range(id) into 1 partition" in out and "map_batches(dedup.paragraph)" in out
    ran = ran_jobs([*argv, "--output", str(tmp_path / "out")], capsys)
    assert runs_in_order([planned_jobs(out)["job 1"]], ran)


def test_paragraph_bloom_names_the_filter_and_its_one_task(tmp_path, corpus, capsys):
    argv = ["dedup", "paragraph", str(corpus), "--method", "bloom", "--expected", "1000"]
    out = explain(argv, capsys)
    assert "round-robin into 1 partition" in out and "map_batches(dedup.paragraph.bloom)" in out
    assert "then: the filter (2,397 bytes, 13 probes a paragraph, sized for --expected 1,000" in out
    ran = ran_jobs([*argv, "--output", str(tmp_path / "out")], capsys)
    assert runs_in_order([planned_jobs(out)["job 1"]], ran)
    assert (
        main(["explain", "dedup", "paragraph", str(corpus), "--method", "bloom"]) != 0
    )  # the command's check
    assert "--method bloom needs --expected N" in capsys.readouterr().err


def test_substring_prints_every_pass_and_the_window_share(tmp_path, corpus, capsys):
    before = listing(tmp_path)
    argv = ["dedup", "substring", str(corpus), "--min-bytes", "20"]
    out = explain([*argv, "--memory-budget", "16MB"], capsys)
    assert listing(tmp_path) == before
    jobs = planned_jobs(out)
    assert list(jobs) == ["job 1", "job 2", "job 3", "job 4", "job 5", "job 6"]
    assert "map_batches(dedup.substring.anchors)" in jobs["job 1"][0] and jobs["job 1"][1].startswith(
        "GroupAggregate"
    )
    assert "then: shared windows ≤ shared_window_rows 83,333 (48 bytes a window in B/4)" in out
    assert "reduce: Sort" in out[out.index("job 4:") : out.index("job 5:")]
    # the run here finds shared windows and holds them (broadcast): jobs 1, 2, 3, 5 and 6, no join
    ran = ran_jobs([*argv, "--output", str(tmp_path / "out")], capsys)
    assert runs_in_order([jobs["job 1"], jobs["job 2"], jobs["job 5"], jobs["job 6"]], ran)
    assert jobs["job 3"][-1] in [stage for job in ran for stage in job]
    assert not any("dedup.substring.repeats" in stage for job in ran for stage in job)
