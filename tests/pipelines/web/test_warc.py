"""WARC/ARC input: every bad record kind is quarantined with its byte offset and the rest of the file kept;
charsets; ARC; extraction with both extractors; ``zephyr extract`` end to end."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys

import pyarrow.parquet as pq
import pytest

pytest.importorskip("warcio")

from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "benchmarks"))  # warc_pages: test WARCs
from warc_pages import BROKEN_KINDS, Page, sample_pages, write_warc  # noqa: E402

import zephyr  # noqa: E402
from zephyr.errors import InputError  # noqa: E402
from zephyr.io.layout import quarantine_dir, stats_path
from zephyr.io.sources import list_shards, read_shard  # noqa: E402
from zephyr.io.warc import decode_html  # noqa: E402


def _read(path):
    quarantined = []
    batches = list(
        read_shard(list_shards([str(path)], "warc")[0], on_error="quarantine", quarantine=quarantined.append)
    )
    rows = [r for b in batches for r in b.to_pylist()]
    bad = [r for t in quarantined for r in t.to_pylist()]
    return rows, bad


@pytest.mark.parametrize("kind", BROKEN_KINDS)
@pytest.mark.parametrize("gzip_members", [True, False], ids=["warc.gz", "warc"])
def test_bad_record_is_quarantined_with_its_offset_and_the_rest_kept(tmp_path, kind, gzip_members):
    if kind == "truncated_gzip" and not gzip_members:
        pytest.skip("an uncompressed file has no gzip members")
    path = tmp_path / ("crawl.warc.gz" if gzip_members else "crawl.warc")
    pages = sample_pages(9)
    offsets = write_warc(str(path), pages, broken=[kind], gzip_members=gzip_members)
    rows, bad = _read(path)
    assert [r["url"] for r in rows] == [p.url for p in pages]  # every good record, in file order
    assert len(bad) == 1 and bad[0]["line"] == offsets[kind]
    assert bad[0]["source"] == str(path) and f"byte {offsets[kind]}" in bad[0]["reason"]


def test_every_kind_at_once_and_a_cut_at_the_end(tmp_path):
    path = tmp_path / "crawl.warc.gz"
    pages = sample_pages(20)
    offsets = write_warc(str(path), pages, broken=BROKEN_KINDS)
    data = path.read_bytes()
    last = sample_pages(1, seed=99)[0]
    write_warc(str(tmp_path / "one.warc.gz"), [last])
    tail = (tmp_path / "one.warc.gz").read_bytes()
    path.write_bytes(data + tail[: len(tail) - 40])  # the file's last member is cut short
    rows, bad = _read(path)
    assert len(rows) == 20 + 0  # the cut page is lost, its request record too; everything else is kept
    reasons = {r["line"]: r["reason"] for r in bad}
    assert set(offsets.values()) <= set(reasons)
    assert any("truncated gzip member" in r for r in reasons.values())
    assert "wrong Content-Length" in reasons[offsets["content_length_short"]]
    assert "wrong Content-Length" in reasons[offsets["content_length_long"]]
    assert "not HTML" in reasons[offsets["non_html"]]
    assert "unknown charset" in reasons[offsets["unknown_charset"]]
    assert "invalid" in reasons[offsets["invalid_bytes"]]


def test_on_error_raise_names_file_and_offset(tmp_path):
    path = tmp_path / "crawl.warc.gz"
    offsets = write_warc(str(path), sample_pages(4), broken=["non_html"])
    with pytest.raises(InputError, match=rf"crawl.warc.gz: record at byte {offsets['non_html']}: not HTML"):
        list(read_shard(list_shards([str(path)], "warc")[0]))


def test_non_documents_are_counted_not_rows(tmp_path):
    path = tmp_path / "crawl.warc.gz"
    write_warc(str(path), sample_pages(3))
    result = zephyr.read(str(path)).write_parquet(str(tmp_path / "out"), executor="inprocess")
    counters = result.stats["stages"][0]["counters"]
    assert counters["warc/skipped_warcinfo"] == 1 and counters["warc/skipped_request"] == 3
    assert result.stats["stages"][0]["rows_out"] == 3


def test_a_record_that_is_not_an_http_response_has_its_own_skip_reason(tmp_path):
    """A dns: lookup is a ``response`` record without HTTP: not a page with a bad status. Each record that is
    no document is counted under its own reason (``warc/skipped_not_http``, ``..._http_status``, its type)."""
    import io

    from warcio.statusandheaders import StatusAndHeaders
    from warcio.warcwriter import WARCWriter

    path = tmp_path / "crawl.warc.gz"
    html = b"<html><body><p>" + b"a page of text " * 20 + b"</p></body></html>"
    with open(path, "wb") as f:
        w = WARCWriter(f, gzip=True)

        def record(uri, kind, payload, status=None, **kw):
            http = StatusAndHeaders(status, [("Content-Type", "text/html")], protocol="HTTP/1.1")
            body = io.BytesIO(payload)
            w.write_record(w.create_warc_record(uri, kind, payload=body, http_headers=status and http, **kw))

        record("http://a.org/", "response", html, "200 OK")
        record("http://a.org/gone", "response", html, "404 Not Found")
        record("dns:a.org", "response", b"20260101 a.org. 300 IN A 10.0.0.1", warc_content_type="text/dns")
        record("http://a.org/x.txt", "resource", b"plain text", warc_content_type="text/plain")
    result = zephyr.read(str(path)).write_parquet(str(tmp_path / "out"), executor="inprocess")
    counters = result.stats["stages"][0]["counters"]
    assert counters["warc/skipped_not_http"] == 1 and counters["warc/skipped_http_status"] == 1
    assert counters["warc/skipped_resource"] == 1 and result.stats["stages"][0]["rows_out"] == 1


def test_charsets():
    assert decode_html("naïve".encode("latin-1"), "iso-8859-1")[:2] == ("naïve", "cp1252")
    meta = '<html><head><meta charset="koi8-r"></head><body>привет</body></html>'
    assert decode_html(meta.encode("koi8-r"), None)[0] == meta
    assert decode_html("日本".encode(), None)[:2] == ("日本", "utf-8")
    text, name, replaced = decode_html(b"<p>" + "é".encode() * 500 + b"\xff</p>", "utf-8")
    assert replaced == 1 and text.endswith("\ufffd</p>")  # one stray byte: kept, replaced
    with pytest.raises(LookupError):
        decode_html(b"x", "no-such")
    with pytest.raises(UnicodeDecodeError):
        decode_html(b"\xff\xfe\xfa" * 100, "utf-8")


def test_declared_charsets_end_to_end(tmp_path):
    path = tmp_path / "crawl.warc.gz"
    html = "<html><body><p>Grüße aus Köln, schöne Stadt am Rhein.</p></body></html>"
    write_warc(
        str(path),
        [Page("http://de.example/", html, "iso-8859-1"), Page("http://ru.example/", html, "utf-16")],
    )
    rows, bad = _read(path)
    assert not bad and [r["html"] for r in rows] == [html, html]


def _arc(records: list[tuple[str, bytes]]) -> bytes:
    version = b"1 0 zephyr\nURL IP-address Archive-date Content-type Archive-length\n"
    out = b"filedesc://t.arc 0.0.0.0 20240101000000 text/plain %d\n" % len(version) + version + b"\n"
    for url, html in records:
        resp = b"HTTP/1.0 200 OK\r\nContent-Type: text/html\r\n\r\n" + html
        out += f"{url} 1.2.3.4 20240102030405 text/html {len(resp)}\n".encode() + resp + b"\n"
    return out


@pytest.mark.parametrize("name", ["old.arc", "old.arc.gz"])
def test_arc_files(tmp_path, name):
    data = _arc(
        [("http://a.example/", b"<html><body>one</body></html>"), ("http://b.example/", b"<p>two</p>")]
    )
    (tmp_path / name).write_bytes(gzip.compress(data) if name.endswith(".gz") else data)
    rows, bad = _read(tmp_path / name)
    assert not bad
    assert [r["url"] for r in rows] == ["http://a.example/", "http://b.example/"]
    assert rows[0]["id"].endswith(f"{name}@{rows[0]['warc_offset']}") and rows[0]["fetch_time"].year == 2024


def test_empty_warc_is_no_rows(tmp_path):
    (tmp_path / "empty.warc.gz").write_bytes(b"")
    assert _read(tmp_path / "empty.warc.gz") == ([], [])
    assert zephyr.read_warc(str(tmp_path / "empty.warc.gz")).count(executor="inprocess") == 0


@pytest.mark.parametrize("extractor", ["resiliparse", "trafilatura"])
def test_read_warc_extracts_main_text(tmp_path, extractor):
    pytest.importorskip(extractor)
    path = tmp_path / "crawl.warc.gz"
    pages = sample_pages(4) + [Page("http://empty.example/", "<html><body><nav>Home</nav></body></html>")]
    write_warc(str(path), pages)
    table = zephyr.read_warc(str(path), extractor=extractor, min_text_chars=20).to_arrow(executor="inprocess")
    assert table.column_names == ["id", "url", "fetch_time", "content_type", "text", "html_bytes"]
    assert table.num_rows == 4  # the page without main text is dropped (extract_no_text)
    for text in table.column("text").to_pylist():
        assert "All rights reserved" not in text and len(text) > 200  # boilerplate gone, paragraphs kept
    assert all(i.startswith("urn:uuid:") for i in table.column("id").to_pylist())


def test_extract_command(tmp_path):
    path = tmp_path / "crawl.warc.gz"
    offsets = write_warc(str(path), sample_pages(8), broken=BROKEN_KINDS)
    out = tmp_path / "docs"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "zephyr.cli",
            "extract",
            str(path),
            "--output",
            str(out),
            "--executor",
            "inprocess",
            "--json",
        ],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(proc.stdout)
    assert {k: summary[k] for k in ("rows_in", "rows_kept", "rows_dropped", "rows_quarantined")} == {
        "rows_in": 8 + len(BROKEN_KINDS),
        "rows_kept": 8,
        "rows_dropped": 0,
        "rows_quarantined": len(BROKEN_KINDS),
    }
    stats = json.loads(Path(stats_path(out)).read_text())["extract"]
    assert stats["html_bytes"] > stats["text_bytes"] > 0
    quarantine = pq.read_table(quarantine_dir(out)).to_pylist()
    assert sorted(r["line"] for r in quarantine) == sorted(offsets.values())
    assert pq.read_table(out, columns=["url"]).num_rows == 8  # the output folder reads back (sidecars hidden)


def test_extract_command_unknown_input_is_one_line(tmp_path):
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "zephyr.cli",
            "extract",
            str(tmp_path / "nothing*.warc.gz"),
            "--output",
            str(tmp_path / "o"),
        ],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 1
    assert proc.stderr.splitlines()[0].startswith(
        "zephyr extract: error: InputError: no files match the pattern"
    )


def test_warc_is_a_format():
    from zephyr.io.paths import infer_compression, infer_format

    assert [infer_format(n) for n in ("a.warc.gz", "a.warc", "b.arc.gz", "c.warc.zst")] == ["warc"] * 3 + [
        None
    ]
    assert infer_compression("a.warc.gz") == "gzip"


def test_text_commands_on_a_warc_say_to_extract_first(tmp_path, capsys):
    from zephyr.cli import main

    path = tmp_path / "crawl.warc.gz"
    write_warc(str(path), sample_pages(2))
    assert main(["filter", str(path), "--output", str(tmp_path / "o")]) == 1
    err = capsys.readouterr().err
    assert "is a WARC file" in err and "zephyr extract WARC... --output DIR" in err
