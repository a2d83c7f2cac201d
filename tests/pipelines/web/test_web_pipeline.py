"""``zephyr run web`` (pipelines/configs/web.yaml) on a WARC fixture: extract → URL filter → URL dedup →
normalize → langid → heuristics → exact / substring / fuzzy dedup → quality → tokenize, every stage balanced,
the report showing extracted text and removed spans."""

from __future__ import annotations

import glob
import json
import sys
from pathlib import Path

import pytest

pytest.importorskip("warcio")
pytest.importorskip("resiliparse")
pytest.importorskip("tldextract")

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "benchmarks"))  # warc_pages: test WARCs
from warc_pages import BROKEN_KINDS, Page, pages_from_html_files, sample_pages, write_warc  # noqa: E402

from zephyr.cli import main  # noqa: E402

from ..conftest import lid_available  # noqa: E402

FOOTER = (
    "<p>This documentation is distributed in the hope that it will be useful, but without any warranty; see the "
    "licence that came with your system for the details of copying and redistribution.</p>"
)


def test_web_config_runs_the_whole_chain_on_a_warc(tmp_path, capsys, monkeypatch):
    files = sorted(glob.glob("/usr/share/doc/*/html/*.html"))[:40]
    real = len(files) >= 20  # Debian documentation: real English prose with real boilerplate
    pages = pages_from_html_files(files) if real else sample_pages(40)
    pages = [Page(p.url, p.html.replace("</body>", FOOTER + "</body>")) for p in pages]
    pages += [Page(p.url.split("?")[0] + "?utm_source=feed", p.html) for p in pages[:3]]  # the same URLs
    pages += [Page(p.url.replace("://", "://mirror."), p.html) for p in pages[3:6]]  # the same texts
    warc = tmp_path / "crawl.warc.gz"
    write_warc(str(warc), pages, broken=BROKEN_KINDS)
    job = tmp_path / "job"
    monkeypatch.setenv("ZEPHYR_WARC", str(warc))
    argv = [
        "run",
        "web",
        "--job-dir",
        str(job),
        "--executor",
        "inprocess",
        "--set",
        f"steps.extract.paths=[{warc}]",
        "--set",
        "steps.tokenize.vocab_size=512",
        "--set",
        "steps.tokenize.shard_bytes=1MB",
        "--set",
        "steps.quality.min_score=0.0",
    ]
    if not real or not lid_available():
        argv += [
            "--set",
            "steps.langid.enabled=false",
            "--set",
            "steps.heuristic_filter.enabled=false",
            "--set",
            "steps.quality.enabled=false",
        ]
    assert main(argv) == 0, capsys.readouterr().err
    stats = json.loads((job / "stats.json").read_text())
    by_name = {s["step"]: s for s in stats["steps"]}
    assert all(s["balanced"] for s in stats["steps"] if "balanced" in s)
    assert by_name["extract"]["rows_in"] == len(pages) + len(BROKEN_KINDS)
    assert by_name["extract"]["rows_quarantined"] == len(BROKEN_KINDS)
    assert by_name["url_dedup"]["dropped_by_reason"] == {"url_duplicate": 3}
    assert by_name["exact_dedup"]["rows_dropped"] >= 3
    spans = by_name["substring_dedup"]["extra"]["substring"]["top_spans"]
    assert any("This documentation is distributed in the hope" in s["text"] for s in spans)
    assert by_name["tokenize"]["extra"]["num_tokens"] > 0
    report = (job / "report.md").read_text()
    assert "## Extracted text (`extract`)" in report and "## Removed spans (`substring_dedup`)" in report
