"""What the dedup commands that rewrite rows say they changed (issue 33 item 3): paragraph dedup (exact and
Bloom) and substring dedup report the rows changed and the bytes removed (paragraph dedup also the
paragraphs) in the human summary and in ``--json``; Bloom's filter stats are right without ``--save-filter``
and exceeding ``--expected`` warns on stderr and in the stats; one drop reason per rule (``url_duplicate``)."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from zephyr.dedup.bloom import BloomFilter
from zephyr.dedup.exact import paragraph_dedup

from zephyr.cli import main
from zephyr.io.layout import stats_path

FOOTER = "the same closing paragraph of every page of this site, repeated"
TEXTS = [f"page {i} says something of its own\n{FOOTER}\nand one more line {i}" for i in range(6)]


def _input(tmp_path: Path, **columns) -> str:
    path = tmp_path / "in.parquet"
    pq.write_table(pa.table({"id": list(range(6)), "text": TEXTS, **columns}), path)
    return str(path)


def _run(argv: list[str], tmp_path: Path, capsys, name: str = "out") -> tuple[dict, str, dict]:
    """(the --json record, the human summary of a second run, the stats file's dedup section)."""
    common = ["--executor", "inprocess"]
    assert main([*argv, "--output", str(tmp_path / f"{name}-json"), *common, "--json"]) == 0
    record = json.loads(capsys.readouterr().out)
    assert main([*argv, "--output", str(tmp_path / name), *common]) == 0
    human = capsys.readouterr().err
    return record, human, json.loads(Path(stats_path(tmp_path / name)).read_text())["dedup"]


@pytest.mark.parametrize("method", ["exact", "bloom"])
def test_paragraph_dedup_says_what_it_changed(tmp_path, capsys, method):
    source = _input(tmp_path)
    expected = paragraph_dedup(pq.read_table(source)).stats
    flags = ["--method", method] + (["--expected", "1000"] if method == "bloom" else [])
    record, human, stats = _run(["dedup", "paragraph", source, *flags], tmp_path, capsys)
    assert (record["rows_in"], record["rows_kept"], record["rows_dropped"]) == (6, 6, 0)
    details = record["details"]
    assert details["rows_changed"] == expected["docs_changed"] == 5
    assert details["paragraphs_removed"] == expected["paragraphs_removed"] == 5
    assert details["bytes_removed"] == expected["bytes_removed"] == 5 * len(FOOTER)
    assert "rows changed 5" in " ".join(human.split())
    assert f"bytes removed {expected['bytes_removed']:,}" in " ".join(human.split())
    assert "paragraphs removed 5" in " ".join(human.split())
    assert stats["rows_changed"] == 5 and stats["bytes_removed"] == expected["bytes_removed"]


def test_bloom_stats_are_right_without_save_filter_and_a_full_filter_warns(tmp_path, capsys, caplog):
    source = _input(tmp_path)
    argv = ["dedup", "paragraph", source, "--method", "bloom", "--expected", "4"]
    record, human, stats = _run(argv, tmp_path, capsys)
    inserted = 6 * 2 + 1  # two paragraphs of each page's own, and the footer once
    assert stats["inserted"] == inserted
    bloom = BloomFilter.for_capacity(4, 1e-4)
    bloom.inserted = inserted
    assert stats["false_positive_rate_now"] == pytest.approx(bloom.false_positive_rate())
    assert stats["false_positive_rate_now"] > 1e-4
    assert "sized for 4" in stats["warnings"][0] and record["details"]["warnings"] == stats["warnings"]
    assert "rerun with a larger --expected" in caplog.text
    saved = tmp_path / "seen.bloom"
    _, _, with_save = _run([*argv, "--save-filter", str(saved)], tmp_path, capsys, name="saved")
    assert (with_save["inserted"], with_save["warnings"]) == (inserted, stats["warnings"])
    assert BloomFilter.load(str(saved)).inserted == inserted


def test_substring_dedup_says_what_it_changed(tmp_path, capsys):
    source = _input(tmp_path)
    record, human, stats = _run(["dedup", "substring", source, "--min-bytes", "30"], tmp_path, capsys)
    kept = pq.read_table(tmp_path / "out").sort_by("id")["text"].to_pylist()
    removed = sum(len(t.encode()) for t in TEXTS) - sum(len(t.encode()) for t in kept)
    assert (record["rows_kept"], record["details"]["rows_changed"]) == (6, 5)
    assert record["details"]["bytes_removed"] == stats["bytes_removed"] == removed > 0
    assert "rows changed 5" in " ".join(human.split())
    assert f"bytes removed {removed:,}" in " ".join(human.split())


@pytest.mark.parametrize("kind, reason", [("url", "url_duplicate"), ("exact", "duplicate")])
def test_one_drop_reason_per_rule_on_the_command_line(tmp_path, capsys, kind, reason):
    """``dedup url`` drops with ``url_duplicate``, as the pipelines' ``url_dedup`` step does."""
    source = _input(tmp_path, url=[f"http://Example.com/{i % 2}#top" for i in range(6)])
    if kind == "exact":
        source = _input(tmp_path, url=["u"] * 6)
        pq.write_table(pa.table({"id": list(range(6)), "text": ["a", "b"] * 3}), source)
    dropped = tmp_path / "dropped"
    record, _, _ = _run(["dedup", kind, source], tmp_path, capsys)
    assert record["dropped_by_reason"] == {reason: 4}
    argv = ["dedup", kind, source, "--output", str(tmp_path / "routed"), "--dropped-output", str(dropped)]
    assert main([*argv, "--executor", "inprocess"]) == 0
    assert set(pq.read_table(dropped)["drop_reason"].to_pylist()) == {reason}
