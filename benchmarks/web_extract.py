"""WARC text extraction: zephyr extract (resiliparse, trafilatura) vs datatrove's WarcReader + Trafilatura.

All three read the same per-record-gzip WARCs written here from Debian's python3.11-doc HTML (the corpus
builder's download cache, else /usr/share/doc), each page once per copy under its own URL, and write one
document per HTML page. MB/s is HTML bytes (the records' HTTP payloads) per wall second of the whole command.

    .venv/bin/python benchmarks/web_extract.py --html-mb 50 --workers 2
    # the datatrove peer needs its venv first: bash benchmarks/venvs/datatrove_web.sh

Appends a Markdown table to the month's notebook, benchmarks/history/<YYYY-MM>.md (with --no-append it only prints).
"""

from __future__ import annotations

import argparse
import datetime
import glob
import json
import os
import shutil
import sys
from pathlib import Path

import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _measure import machine, publish, run_measured  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
PY = str(ROOT / ".venv" / "bin" / "python")
ZEPHYR = str(ROOT / ".venv" / "bin" / "zephyr")
DATATROVE = ROOT / "benchmarks" / ".venvs" / "datatrove_web" / "bin" / "python"
HTML_SOURCES = (
    os.path.expanduser("~/.cache/zephyr/corpus/raw/unpacked/python3.11-doc/usr/share/doc/python3.11/html"),
    "/usr/share/doc",
)


def _html_files() -> list[str]:
    for root in HTML_SOURCES:
        files = sorted(glob.glob(f"{root}/**/*.html", recursive=True))
        if len(files) >= 50:
            return files
    raise SystemExit("no HTML documentation found (build the corpus cache or install python3.11-doc)")


def build_warcs(out: Path, html_mb: float, files_out: int) -> tuple[int, int]:
    """Write ``files_out`` WARCs holding about ``html_mb`` MB of HTML; returns (pages, HTML bytes)."""
    sys.path.insert(0, str(ROOT))
    from warc_pages import Page, write_warc

    sources = _html_files()
    pages: list[Page] = []
    total = 0
    copy = 0
    while total < html_mb * 1e6:
        for path in sources:
            html = Path(path).read_text(encoding="utf-8", errors="replace")
            pages.append(Page(f"https://docs{copy}.example.org/{os.path.relpath(path, '/')}", html))
            total += len(html.encode())
            if total >= html_mb * 1e6:
                break
        copy += 1
    out.mkdir(parents=True, exist_ok=True)
    for i in range(files_out):
        write_warc(str(out / f"crawl-{i:03d}.warc.gz"), pages[i::files_out])
    return len(pages), total


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--html-mb", type=float, default=50)
    ap.add_argument("--files", type=int, default=4)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / ".out" / "web_extract"))
    ap.add_argument("--no-append", action="store_true")
    args = ap.parse_args()
    out = Path(args.out)
    shutil.rmtree(out, ignore_errors=True)
    pages, html_bytes = build_warcs(out / "warcs", args.html_mb, args.files)
    warc_mb = sum(p.stat().st_size for p in (out / "warcs").glob("*.warc.gz")) / 1e6
    runs = []
    for extractor in ("resiliparse", "trafilatura"):
        cmd = [
            ZEPHYR,
            "extract",
            str(out / "warcs"),
            "--output",
            str(out / f"zephyr-{extractor}"),
            "--extractor",
            extractor,
            "--workers",
            str(args.workers),
            "--executor",
            "local",
        ]
        m = run_measured(cmd, log_path=str(out / f"zephyr-{extractor}.log"))
        docs = (
            sum(pq.read_metadata(f).num_rows for f in glob.glob(str(out / f"zephyr-{extractor}" / "part-*")))
            if m["rc"] == 0
            else "–"
        )
        runs.append((f"zephyr extract --extractor {extractor}", m, docs))
    if DATATROVE.exists():
        cmd = [
            str(DATATROVE),
            str(ROOT / "benchmarks" / "peers" / "datatrove_warc.py"),
            str(out / "warcs"),
            str(out / "datatrove"),
            "--workers",
            str(args.workers),
        ]
        log = out / "datatrove.log"
        m = run_measured(cmd, log_path=str(log))
        lines = [ln for ln in log.read_text().splitlines() if ln.startswith('{"documents"')]
        runs.append(
            (
                "datatrove 0.10.1 WarcReader + Trafilatura",
                m,
                json.loads(lines[-1])["documents"] if lines else "–",
            )
        )
    else:
        print(f"datatrove venv missing ({DATATROVE}); run benchmarks/venvs/datatrove_web.sh", file=sys.stderr)
    mb = html_bytes / 1e6
    text = (
        f"\n### WARC extraction, {pages} HTML pages ({mb:.1f} MB HTML, {warc_mb:.1f} MB .warc.gz in {args.files} files) "
        f"— {datetime.date.today()}, {machine()}\n\n"
        f"Command: `.venv/bin/python benchmarks/web_extract.py --html-mb {args.html_mb:g} --workers {args.workers}`"
        f" (HTML: Debian python3.11-doc; {args.workers} worker processes each)\n\n"
        "| system | wall s | MB/s of HTML | peak RSS MB | documents |\n|---|---|---|---|---|\n"
    )
    for name, m, docs in runs:
        ok = m["rc"] == 0
        text += (
            f"| {name} | {m['wall_s']:.1f} | {mb / m['wall_s']:.2f} | {m['peak_rss_mb']:.0f} | {docs} |\n"
            if ok
            else f"| {name} | failed (rc {m['rc']}) | – | – | – |\n"
        )
    publish(text, append=not args.no_append)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
