"""A missing extra is refused in one line naming it, before any work; the report is written without plots when
matplotlib is missing, and says so."""

from __future__ import annotations

import json
import sys

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from zephyr.cli import main
from zephyr.errors import MissingExtra


@pytest.fixture
def corpus(tmp_path):
    path = tmp_path / "in.parquet"
    pq.write_table(pa.table({"id": ["a", "b"], "text": ["one text here", "another text there"]}), path)
    return path


def test_langid_without_fasttext_names_the_extra(corpus, tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "fasttext", None)  # ``import fasttext`` fails: the extra is missing
    assert main(["langid", str(corpus), "--output", str(tmp_path / "out"), "--executor", "inprocess"]) != 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "zephyr langid needs fasttext: pip install 'zephyr-data[quality]'" in err[0]
    assert not list((tmp_path / "out").glob("*.parquet"))  # nothing ran


@pytest.mark.parametrize(
    ("module", "step", "extra"),
    [
        pytest.param("fasttext", {"step": "langid"}, "quality", id="langid-fasttext"),
        pytest.param("ftfy", {"step": "normalize", "fix_mojibake": True}, "quality", id="normalize-ftfy"),
        pytest.param("tldextract", {"step": "url_filter"}, "web", id="url-filter-tldextract"),
        pytest.param(
            "tldextract", {"step": "heuristic_filter", "rules": ["url"]}, "web", id="url-rules-tldextract"
        ),
    ],
)
def test_a_pipeline_step_without_its_extra_is_refused_before_any_step_runs(
    corpus, tmp_path, monkeypatch, module, step, extra
):
    from zephyr.pipelines.config import parse_config
    from zephyr.pipelines.runner import run_pipeline

    monkeypatch.setitem(sys.modules, module, None)
    config = parse_config({"name": "x", "steps": [{"step": "read", "paths": [str(corpus)]}, step]})
    with pytest.raises(MissingExtra, match=rf"needs {module}: pip install 'zephyr-data\[{extra}\]'"):
        run_pipeline(config, tmp_path / "job", execution={"executor": "inprocess"})
    assert not (tmp_path / "job" / "00-read").exists()


def test_the_report_without_matplotlib_has_no_plots_and_says_so(tmp_path, monkeypatch):
    from zephyr.pipelines.report import write_report

    monkeypatch.setitem(sys.modules, "matplotlib", None)
    record = {"step": "read", "type": "read", "index": 0, "rows_in": 2, "rows_kept": 2, "rows_dropped": 0}
    record.update(rows_quarantined=0, seconds=0.1, balanced=True, status="ran")
    stats = {"pipeline": "p", "job_dir": str(tmp_path), "steps": [record]}
    (tmp_path / "stats.json").write_text(json.dumps(stats))
    markdown, page = write_report(tmp_path)
    text = markdown.read_text()
    assert not (tmp_path / "plots").exists() and "![" not in text and "<img" not in page.read_text()
    assert "No plots: matplotlib is not installed (pip install 'zephyr-data\\[report\\]')." in text
