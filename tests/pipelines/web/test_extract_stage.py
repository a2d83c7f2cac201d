"""``extract`` as the first stage of ``zephyr run``: WARC in, balanced accounting, bad records quarantined."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

pytest.importorskip("warcio")
pytest.importorskip("resiliparse")

from zephyr.pipelines.config import parse_config  # noqa: E402
from zephyr.pipelines.runner import run_pipeline  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "benchmarks"))  # warc_pages: test WARCs
from warc_pages import BROKEN_KINDS, sample_pages, write_warc  # noqa: E402

from zephyr.errors import ConfigError  # noqa: E402


def test_pipeline_starts_from_warc(tmp_path):
    warc = tmp_path / "crawl.warc.gz"
    write_warc(str(warc), sample_pages(9) + sample_pages(3), broken=BROKEN_KINDS)  # 3 pages twice
    config = parse_config(
        {
            "name": "web-test",
            "steps": [
                {"step": "extract", "paths": [str(warc)], "source": "crawl"},
                {"step": "url_filter"},
                {"step": "url_dedup"},
                {"step": "normalize"},
                {"step": "exact_dedup"},
            ],
        }
    )
    run_pipeline(config, tmp_path / "job", execution={"executor": "inprocess"})
    stats = json.loads((tmp_path / "job" / "stats.json").read_text())
    extract = stats["steps"][0]
    assert (extract["rows_in"], extract["rows_kept"], extract["rows_quarantined"]) == (18, 12, 6)
    # sample_pages(3) repeats the first 3 pages' URLs: url_dedup removes them
    assert stats["steps"][2]["dropped_by_reason"] == {"url_duplicate": 3}
    assert stats["steps"][4]["rows_kept"] == 9
    out = pq.read_table(sorted((tmp_path / "job" / "04-exact_dedup").glob("part-*.parquet")))
    assert not any("utm_source" in u for u in out.column("url").to_pylist())  # normalized by url_filter
    assert set(out.column("domain").to_pylist()) == {
        "example.com",
        "example.org",
        "example.co.uk",
        "example.net",
    }
    assert set(out.column("source").to_pylist()) == {"crawl"}
    assert {"id", "url", "fetch_time", "text"} <= set(out.column_names)


def test_extract_must_come_first(tmp_path):
    with pytest.raises(ConfigError, match=r"only the first step may be 'extract'"):
        parse_config(
            {"name": "t", "steps": [{"step": "read", "paths": ["x"]}, {"step": "extract", "paths": ["y"]}]}
        )
