"""Reports written in Markdown hold values from data and config (source names, the pipeline's name, ids,
example texts, rule names) as text: no live HTML in a Markdown viewer, and no ``|`` or newline that breaks a
table. The HTML report shows the same values, escaped.

The checks read the Markdown the way GitHub's renderer (cmark-gfm) does where it matters: a table row splits
at each ``|`` that no backslash precedes; a code span (a run of backticks to the next run of as many) shows
its content as text, and everything outside code spans is Markdown in which a ``<`` starts HTML.
"""

from __future__ import annotations

import io
import json
import re
from html.parser import HTMLParser
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from zephyr.pipelines.config import parse_config
from zephyr.pipelines.quality.filters import merge_summaries, summarize_batch
from zephyr.pipelines.report import retention_markdown
from zephyr.pipelines.runner import ProgressReporter, run_pipeline

REPO = Path(__file__).resolve().parents[2]
SAMPLE = REPO / "data" / "sample" / "sample.parquet"
SOURCES = ["<script>x</script>|a", "two\nlines | `tick` *star* [link](http://x)", "plain"]
PIPELINE = "evil|name `with` backticks <b>"
EVIL_ID = "<img src=x onerror=alert(1)>|id"


def _outside_code(line: str) -> str:
    """The parts of a Markdown line outside its code spans."""
    return re.sub(r"(`+)(.+?)(?<!`)\1(?!`)", " ", line)


def _cells(row: str) -> int:
    """Cells of a GFM table row: split at every ``|`` not preceded by a backslash, edges trimmed."""
    return len(re.split(r"(?<!\\)\|", row.strip().strip("|")))


def _assert_safe_markdown(text: str) -> None:
    lines = text.splitlines()
    for line in lines:
        assert "<" not in _outside_code(line), line  # every < of a value is &lt; or inside a code span
    tables: list[list[str]] = []
    for line, before in zip(lines, [""] + lines):
        if line.startswith("|"):
            if not before.startswith("|"):
                tables.append([])
            tables[-1].append(line)
    assert tables
    for table in tables:
        assert re.fullmatch(r"\|(:?-+:?\|)+", table[1]), table[:2]
        assert {_cells(row) for row in table} == {_cells(table[0])}, table


class _Page(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[str] = []
        self.text: list[str] = []

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)

    def handle_data(self, data):
        self.text.append(data)


def test_pipeline_report_escapes_names_sources_ids_and_texts(tmp_path):
    rows = pq.read_table(SAMPLE).slice(0, 24).to_pylist()
    for i, row in enumerate(rows):
        row["source"] = SOURCES[i % len(SOURCES)]
    rows.append({**rows[3], "id": EVIL_ID})  # an exact copy: a dedup example under this id
    rows.append({**rows[4], "id": "junk", "text": "<script>alert(1)</script> buy **now**"})  # filtered out
    data = tmp_path / "in.parquet"
    pq.write_table(pa.Table.from_pylist(rows, schema=pq.read_schema(SAMPLE)), data)
    config = parse_config(
        {
            "name": PIPELINE,
            "steps": [
                {"step": "read", "paths": [str(data)]},
                {"step": "heuristic_filter"},
                {"step": "exact_dedup"},
            ],
        }
    )
    job = tmp_path / "job"
    run_pipeline(config, job, execution={"executor": "inprocess"}, reporter=ProgressReporter(io.StringIO()))
    markdown = (job / "report.md").read_text()
    _assert_safe_markdown(markdown)
    assert markdown.startswith("# Pipeline report: evil|name \\`with\\` backticks &lt;b&gt;\n")
    assert "| &lt;script&gt;x&lt;/script&gt;\\|a |" in markdown  # a row of the retention table
    assert "two lines \\| \\`tick\\` \\*star\\* \\[link\\](http://x)" in markdown  # one line, no markup
    assert "<img" not in markdown.replace(f"`{EVIL_ID}`", "")

    page = (job / "report.html").read_text()
    parsed = _Page()
    parsed.feed(page)
    assert all(tag != "script" for tag in parsed.tags)
    assert [t for t in parsed.tags if t == "img"] == ["img"] * page.count('<img src="data:image/png;base64,')
    text = "".join(parsed.text)
    assert f"Pipeline report: {PIPELINE}" in text
    assert SOURCES[0] in text and "two lines | `tick` *star* [link](http://x)" in text and EVIL_ID in text


def test_filter_report_escapes_sources_reasons_ids_and_texts():
    table = pa.table(
        {
            "id": [EVIL_ID, "b", "c"],
            "text": ["<script>alert(1)</script> | x", "kept text", "dropped\ntext"],
            "source": [SOURCES[0], SOURCES[1], SOURCES[0]],
            "drop_reason": [None, None, "rule|<i>name</i>"],
        }
    )
    row = {"id": EVIL_ID, "text": table["text"][0].as_py(), "chars": 30, "fields": {"source": SOURCES[0]}}
    examples = {"kept": [row], "dropped": {"rule|<i>name</i>": {"rows": 1, "examples": [{**row, "id": "c"}]}}}
    markdown = retention_markdown(merge_summaries([summarize_batch(table)]), examples)
    _assert_safe_markdown(markdown)
    assert "## &lt;script&gt;x&lt;/script&gt;|a\n" in markdown
    assert "## two lines | \\`tick\\` \\*star\\* \\[link\\](http://x)\n" in markdown  # one heading line
    assert "| rule\\|&lt;i&gt;name&lt;/i&gt; | 1 |" in markdown
    assert json.dumps("<script>") not in markdown and "<img" not in markdown.replace(f"`{EVIL_ID}`", "")
