"""``zephyr explain filter``: the annotating job, the three routes and the report, with no job run and
nothing written, and the stages a run of ``zephyr filter`` records."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from ...explain_plans import explain, listing, planned_jobs, ran_jobs


@pytest.fixture
def corpus(tmp_path):
    path = tmp_path / "in" / "docs.parquet"
    path.parent.mkdir()
    texts = ["the cat sat on the mat and then it went to sleep in the warm sun " * 8, "short", None]
    urls = ["http://example.com/a", "not a url", "http://example.com/b"]
    pq.write_table(pa.table({"id": [1, 2, 3], "url": urls, "text": texts}), path)
    return path


def test_explain_filter_prints_the_annotate_route_and_report_jobs(tmp_path, corpus, capsys):
    before = listing(tmp_path)
    argv = ["filter", str(corpus), "--rules", "gopher,url", "--dropped-output", str(tmp_path / "gone")]
    out = explain(argv, capsys)
    assert listing(tmp_path) == before and not (tmp_path / "gone").exists()
    jobs = planned_jobs(out)
    assert list(jobs) == ["job 1", "job 2", "job 3", "job 4", "job 5"]
    assert jobs["job 1"] == ["ReadFiles → map_batches(normalize_urls) → map_batches(filter)"]
    assert f"job 3: the dropped rows → {tmp_path / 'gone'}" in out and "job 4: the quarantined rows" in out
    assert "0 shuffles" in out and "shuffle #" not in out  # every job is one map stage


def test_explain_filter_plans_what_the_command_runs(tmp_path, corpus, capsys):
    argv = ["filter", str(corpus), "--rules", "gopher,url"]
    jobs = planned_jobs(explain(argv, capsys))
    ran = ran_jobs([*argv, "--output", str(tmp_path / "out")], capsys)
    assert len(ran) == 5 and ran[0] == jobs["job 1"]
    # the routes and the report read job 1's files: the run's stages are the planned ones after job 1's ops
    for planned, stages in zip([jobs[f"job {n}"] for n in (2, 3, 4, 5)], ran[1:]):
        assert planned == [jobs["job 1"][0] + stages[0].removeprefix("ReadFiles")]


def test_explain_filter_refuses_what_the_command_refuses(corpus, capsys):
    from zephyr.cli import main

    assert main(["explain", "filter", str(corpus), "--rules", "gopher,nope"]) != 0
    assert "--rules" in capsys.readouterr().err
