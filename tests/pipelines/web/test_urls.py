"""URL normalization cases, registered domains offline, the blocklist, ``zephyr filter --rules url`` with
per-rule counts, and ``zephyr dedup url`` (one row per normalized URL by exact dedup's keep rule)."""

from __future__ import annotations

import json
import socket

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

pytest.importorskip("tldextract")

from pathlib import Path

from zephyr.pipelines.quality.filters import FilterAnnotator  # noqa: E402
from zephyr.pipelines.web import urls  # noqa: E402
from zephyr.pipelines.web.urls import (  # noqa: E402
    load_blocklist,
    normalize_url,
    registered_domain,
)

from zephyr.cli import main  # noqa: E402
from zephyr.errors import InputError  # noqa: E402
from zephyr.io.layout import stats_path  # noqa: E402
from zephyr.removal import DROP_REASON, Route  # noqa: E402

EXAMPLE_BLOCKLIST = Path(urls.__file__).parent / "data" / "blocklist.example.txt"


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("HTTP://WWW.Example.COM/Path", "http://www.example.com/Path"),  # host lower-cased, path kept
        ("http://example.com:80/a", "http://example.com/a"),
        ("https://example.com:443/a", "https://example.com/a"),
        ("https://example.com:80/a", "https://example.com:80/a"),  # not the default port of https
        ("http://example.com:8080", "http://example.com:8080/"),  # empty path → /
        ("http://example.com/a#section-2", "http://example.com/a"),
        ("http://example.com/a?utm_source=x&utm_medium=y", "http://example.com/a"),
        ("http://example.com/a?id=3&UTM_Campaign=z&fbclid=1&gclid=2&b=", "http://example.com/a?id=3&b="),
        ("http://example.com/s?q=a%20b&p=1+2", "http://example.com/s?q=a%20b&p=1+2"),  # encoding kept
        ("http://example.com/s?b=2&a=1", "http://example.com/s?b=2&a=1"),  # order kept
        ("http://user:secret@example.com/", "http://example.com/"),
        ("http://example.com./x", "http://example.com/x"),
        ("http://[2001:DB8::1]:80/x", "http://[2001:db8::1]/x"),
        ("  http://example.com/x  ", "http://example.com/x"),
        ("", None),
        (None, None),
        ("example.com/x", None),  # no scheme
        ("mailto:someone@example.com", None),
        ("javascript:alert(1)", None),
        ("http://", None),
        ("http://example.com:99999/", None),  # port out of range
        ("http://[::1/", None),  # unbalanced bracket
    ],
)
def test_normalize_url(url, expected):
    assert normalize_url(url) == expected


def test_registered_domain_is_offline(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("tldextract tried the network")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    urls._extractor.cache_clear()
    urls.registered_domain.cache_clear()
    assert registered_domain("forums.news.cnn.co.uk") == "cnn.co.uk"
    assert registered_domain("a.b.example.com") == "example.com"
    assert registered_domain("localhost") == "localhost"
    assert registered_domain("192.168.0.1") == "192.168.0.1"


def test_blocklist_file(tmp_path):
    assert {"example-ads.com", "tracker.example.org"} <= load_blocklist(EXAMPLE_BLOCKLIST)
    bad = tmp_path / "block.txt"
    bad.write_text("ok.com\nhttp://bad.com/x\n")
    with pytest.raises(InputError, match=r"block.txt:2: 'http://bad.com/x' is not a domain"):
        load_blocklist(bad)
    # a heuristic_filter step's config loads without reading it (a disabled or finished step needs no file);
    # its preflight, before any work, reads it
    from zephyr.pipelines.quality.config import HeuristicFilterConfig
    from zephyr.pipelines.steps import HeuristicFilterStep

    step = HeuristicFilterStep(HeuristicFilterConfig(["url"], {"url": {"blocklist": str(bad)}}))
    with pytest.raises(InputError, match=r"block.txt:2: 'http://bad.com/x' is not a domain"):
        step.preflight()
    HeuristicFilterStep(HeuristicFilterConfig(["url"], {"url": {"blocklist": str(tmp_path / "missing")}}))


def test_url_rules_count_each_reason():
    table = pa.table(
        {
            "text": ["t"] * 7,
            "url": [
                "http://www.example-ads.com/x",  # registered domain listed: blocked with every subdomain
                "http://tracker.example.org/p",  # listed host
                "http://a.tracker.example.org/p",  # below a listed host
                "http://www.example.org/",  # same registered domain, not below the listed host: kept
                "notaurl",
                None,
                "https://fine.example.net/",
            ],
        }
    )
    annotated = FilterAnnotator("url", {"url": {"blocklist": str(EXAMPLE_BLOCKLIST)}})(table)
    result = Route("kept", DROP_REASON)(annotated)  # the other rows, counted by reason
    assert result.dropped == {
        "url_blocked_domain": 1,
        "url_blocked_subdomain": 2,
        "url_invalid": 2,
    }
    assert result.kept["url"].to_pylist() == ["http://www.example.org/", "https://fine.example.net/"]


def _parquet(path, rows):
    pq.write_table(pa.Table.from_pylist(rows), path)
    return str(path)


def test_filter_command_with_url_rules(tmp_path):
    src = _parquet(
        tmp_path / "in.parquet",
        [
            {"id": "1", "text": "a", "url": "HTTP://Shop.Example-Ads.com:80/?utm_source=x"},
            {"id": "2", "text": "b", "url": "https://Docs.Example.net/a?ref=1&utm_term=t#x"},
            {"id": "3", "text": "c", "url": "nope"},
        ],
    )
    out = tmp_path / "out"
    args = ["filter", src, "--output", str(out), "--rules", "url", "--url-blocklist", str(EXAMPLE_BLOCKLIST)]
    assert main([*args, "--executor", "inprocess"]) == 0
    stats = json.loads(Path(stats_path(out)).read_text())["filter"]
    assert stats["dropped_rows_by_reason"] == {"url_blocked_domain": 1, "url_invalid": 1}
    kept = pq.read_table(sorted(out.glob("part-*.parquet"))).to_pylist()
    assert [(r["url"], r["domain"]) for r in kept] == [("https://docs.example.net/a?ref=1", "example.net")]


def test_heuristic_filter_step_normalizes_urls_as_the_filter_command(tmp_path):
    """The ``heuristic_filter`` step with the url rules runs ``zephyr filter``'s annotate path: URLs are
    normalized (and ``domain`` added) before the rules, so both keep the same rows with the same URLs."""
    import yaml
    from zephyr.pipelines.config import load_config
    from zephyr.pipelines.runner import run_pipeline

    rows = [
        {"id": "1", "text": "a", "url": "HTTP://Shop.Example-Ads.com:80/?utm_source=x"},
        {"id": "2", "text": "b", "url": "https://Docs.Example.net/a?ref=1&utm_term=t#x"},
        {"id": "3", "text": "c", "url": "nope"},
    ]
    _parquet(tmp_path / "in.parquet", rows)
    step = {
        "step": "heuristic_filter",
        "rules": ["url"],
        "overrides": {"url": {"blocklist": str(EXAMPLE_BLOCKLIST)}},
    }
    config = {"name": "t", "steps": [{"step": "read", "paths": ["in.parquet"]}, step]}
    (tmp_path / "p.yaml").write_text(yaml.safe_dump(config))
    result = run_pipeline(
        load_config(tmp_path / "p.yaml"), tmp_path / "job", execution={"executor": "inprocess"}, report=False
    )
    record = result.step("heuristic_filter")
    assert record["dropped_by_reason"] == {"url_blocked_domain": 1, "url_invalid": 1}
    kept = pq.read_table(record["files"]).to_pylist()
    assert [(r["url"], r["domain"]) for r in kept] == [("https://docs.example.net/a?ref=1", "example.net")]


def test_url_blocklist_without_url_rules_is_refused(tmp_path, capsys):
    src = _parquet(tmp_path / "in.parquet", [{"id": "1", "text": "a", "url": "http://a.com/"}])
    args = ["filter", src, "--output", str(tmp_path / "o"), "--rules", "c4", "--url-blocklist", "x.txt"]
    assert main(args) == 1
    assert "--url-blocklist needs the url rules" in capsys.readouterr().err


def test_dedup_url_command(tmp_path):
    rows = [
        {"id": 5, "url": "http://a.com/x?utm_source=1", "text": "first"},
        {"id": 2, "url": "HTTP://A.COM:80/x#frag", "text": "second"},  # same page: the smaller id stays
        {"id": 3, "url": "http://a.com/x?page=2", "text": "other page"},
        {"id": 4, "url": None, "text": "no url"},  # no key: passes through
        {"id": 1, "url": "not a url", "text": "bad url"},
    ]
    src = _parquet(tmp_path / "in.parquet", rows)
    out = tmp_path / "out"
    assert (
        main(["dedup", "url", src, "--output", str(out), "--mode", "remove", "--executor", "inprocess"]) == 0
    )
    kept = pq.read_table(sorted(out.glob("part-*.parquet")))
    assert sorted(kept["id"].to_pylist()) == [1, 2, 3, 4]
    assert "__dedup_url_key" not in kept.column_names
    stats = json.loads(Path(stats_path(out)).read_text())
    assert stats["dedup"]["rows"] == {"in": 5, "kept": 4, "dropped": 1, "quarantined": 0}
