"""``zephyr extract``: WARC/ARC files → Parquet documents (registered by ``zephyr.cli``).

::

    zephyr extract WARC... --output DIR [--extractor resiliparse|trafilatura] [--min-text-chars N]
                   [--on-error quarantine|raise]

``DIR`` receives ``part-*.parquet`` (``id``, ``url``, ``fetch_time``, ``content_type``, ``text``,
``html_bytes``) and nothing else; its sidecar ``DIR.zephyr/`` (``zephyr.io.layout``) receives ``quarantine/``
(bad records: ``source`` = the WARC file, ``line`` = the record's byte offset, ``reason``, ``raw`` = the start
of its header) and ``stats.json``: records in, kept, dropped by reason,
quarantined (they balance), HTML and text bytes, skipped non-document records (``warc/skipped_<type>``) and
the engine's job statistics. Bad records are quarantined by default: a crawl always holds some, and one
must not cost the rest of its file; ``--on-error raise`` fails on the first, naming file and offset.
"""

from __future__ import annotations

import argparse
import json
from typing import Any


def _extract(args: argparse.Namespace) -> int:
    from zephyr.pipelines.web.extract import check_extractor, read_warc

    from zephyr.cli import execution_options
    from zephyr.io.layout import stats_path
    from zephyr.io.paths import input_files, write_bytes_atomic

    check_extractor(args.extractor)  # before any work
    files, _ = input_files(list(args.inputs), "warc")
    ds = read_warc(
        files, extractor=args.extractor, min_text_chars=args.min_text_chars, on_error=args.on_error
    )
    result = ds.write_parquet(args.output, **execution_options(args).as_kwargs())
    summary = summarize(result.stats)
    # the engine set bad records aside under OUTPUT.zephyr/quarantine/ (zephyr.cli.quarantine_dir)
    summary["quarantine_files"] = [
        f for st in result.stats.get("stages", []) for f in st.get("quarantine_files", [])
    ]
    stats = {"version": 1, "extractor": args.extractor, **summary, "engine": result.stats}
    write_bytes_atomic(
        stats_path(args.output), json.dumps(stats, indent=2, sort_keys=True, default=str).encode()
    )
    from zephyr.summary import Summary

    return Summary(
        rows_in=summary["records_in"],
        rows_kept=summary["rows_kept"],
        rows_dropped=summary["rows_dropped"],
        rows_quarantined=summary["rows_quarantined"],
        dropped_by_reason=summary["dropped_by_reason"],
        output=args.output,
        stats=stats_path(args.output),
        next=f"zephyr filter {args.output} --output OUT",
        details={"html_bytes": summary["html_bytes"], "text_bytes": summary["text_bytes"]},
    )


def summarize(stats: dict[str, Any]) -> dict[str, Any]:
    """Records in = kept + dropped + quarantined, from the engine stats of an extract job."""
    stages = stats.get("stages", [])
    counters: dict[str, int] = {}
    dropped: dict[str, int] = {}
    for stage in stages:
        for key, value in (stage.get("counters") or {}).items():
            counters[key] = counters.get(key, 0) + value
        for op in stage.get("ops", []):
            for reason, n in op.get("dropped_by_reason", {}).items():
                dropped[reason] = dropped.get(reason, 0) + n
    first = stages[0] if stages else {}
    kept = stages[-1]["rows_out"] if stages else 0
    quarantined = int(stats.get("rows_quarantined", 0))
    return {
        "records_in": int(first.get("rows_in", 0)),
        "rows_kept": int(kept),
        "rows_dropped": sum(dropped.values()),
        "dropped_by_reason": dropped,
        "rows_quarantined": quarantined,
        "html_bytes": counters.get("extract/html_bytes", 0),
        "text_bytes": counters.get("extract/text_bytes", 0),
        "counters": dict(sorted(counters.items())),
    }


def register(subparsers: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    from zephyr.pipelines.web.extract import EXTRACTORS

    from zephyr.cli import add_output_dir

    p = subparsers.add_parser(
        "extract", parents=[common], help="WARC/ARC crawl files → Parquet documents (HTML text extraction)"
    )
    p.add_argument(
        "inputs", nargs="+", metavar="WARC", help=".warc/.warc.gz/.arc/.arc.gz files, folders or globs"
    )
    add_output_dir(p, "output directory (Parquet parts; quarantine/ and stats.json in OUTPUT.zephyr/)")
    p.add_argument(
        "--extractor", choices=EXTRACTORS, default="resiliparse", help="HTML → text (default resiliparse)"
    )
    p.add_argument("--min-text-chars", type=int, default=1, help="drop pages with less extracted text")
    p.add_argument(
        "--on-error",
        choices=("raise", "quarantine"),
        default="quarantine",
        help="bad records (truncated gzip member, wrong Content-Length, non-HTML, undecodable charset): set "
        "aside in OUTPUT.zephyr/quarantine/ with their byte offset and go on (quarantine, the default), or fail (raise)",
    )
    p.set_defaults(func=_extract)
