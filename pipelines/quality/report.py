"""Retention report per source: rows/bytes kept and dropped per rule, with deterministic samples.

Works on *annotated* batches (the filter's annotation before routing: every row plus a
``drop_reason`` column, null = kept, ``null_text`` = quarantined). ``summarize_batch`` reduces a batch to a
small table — per (source, outcome) row and byte counts plus the ``sample_size`` rows with the smallest
text hash — and ``merge_summaries`` folds any number of them into the report. Because "the k smallest
hashes of a union" equals "the k smallest of the per-part k smallest", the samples do not depend on how
the data was split into batches, shards or workers.

Report JSON (``version`` 1)::

    {"version": 1, "sources": {source: {"rows_in", "bytes_in", "kept": {"rows", "bytes", "samples": [...]},
     "dropped": {reason: {"rows", "bytes", "samples": [...]}}, "quarantined": {...}}}, "totals": {...}}

Samples hold ``id`` (when the table has one) and the first ``preview_chars`` characters of the text.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

import polars as pl
import pyarrow as pa

__all__ = ["summarize_batch", "merge_summaries", "retention_report", "report_markdown", "KEPT"]

KEPT = "kept"
_QUARANTINE = "null_text"


def summarize_batch(
    table: pa.Table,
    *,
    text_column: str = "text",
    reason_column: str = "drop_reason",
    source_column: str | None = "source",
    id_column: str | None = "id",
    sample_size: int = 5,
    preview_chars: int = 300,
) -> pa.Table:
    """Per-(source, outcome) counts and sample candidates of one annotated batch (a small table)."""
    cols = {
        "source": (
            pl.Series(table.column(source_column)).cast(pl.String).fill_null("(none)")
            if source_column and source_column in table.schema.names
            else pl.Series(["(all)"] * table.num_rows, dtype=pl.String)
        ),
        "outcome": pl.Series(table.column(reason_column)).cast(pl.String).fill_null(KEPT),
        "text": pl.Series(table.column(text_column)).cast(pl.String),
    }
    if id_column and id_column in table.schema.names:
        cols["id"] = pl.Series(table.column(id_column)).cast(pl.String)
    else:
        cols["id"] = pl.Series([None] * table.num_rows, dtype=pl.String)
    df = pl.DataFrame(cols).with_columns(
        bytes=pl.col("text").str.len_bytes().fill_null(0).cast(pl.Int64),
        key=pl.col("text").fill_null("").hash(seed=17),
    )
    counts = df.group_by("source", "outcome").agg(rows=pl.len().cast(pl.Int64), bytes=pl.col("bytes").sum())
    samples = (
        df.sort("key")
        .group_by("source", "outcome", maintain_order=True)
        .head(sample_size)
        .select("source", "outcome", "key", "id", preview=pl.col("text").str.slice(0, preview_chars))
    )
    out = pl.concat(
        [counts.with_columns(kind=pl.lit("count")), samples.with_columns(kind=pl.lit("sample"))],
        how="diagonal_relaxed",
    )
    return out.to_arrow()


def merge_summaries(parts: Iterable[pa.Table], *, sample_size: int = 5) -> dict[str, Any]:
    """Fold ``summarize_batch`` outputs into the report dict (see the module docstring)."""
    frames = [pl.from_arrow(p) for p in parts if p.num_rows]
    report: dict[str, Any] = {"version": 1, "sources": {}, "totals": {}}
    if not frames:
        return report
    df = pl.concat(frames, how="diagonal_relaxed")
    counts = (
        df.filter(pl.col("kind") == "count")
        .group_by("source", "outcome")
        .agg(pl.col("rows").sum(), pl.col("bytes").sum())
        .sort("source", "outcome")
    )
    samples = (
        df.filter(pl.col("kind") == "sample")
        .sort("key", "id", "preview")
        .group_by("source", "outcome", maintain_order=True)
        .head(sample_size)
    )
    sample_map: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for row in samples.select("source", "outcome", "id", "preview").iter_rows(named=True):
        sample_map.setdefault((row["source"], row["outcome"]), []).append(
            {"id": row["id"], "text": row["preview"]}
        )
    totals = {
        "rows_in": 0,
        "bytes_in": 0,
        "rows_kept": 0,
        "bytes_kept": 0,
        "rows_quarantined": 0,
        "dropped_rows_by_reason": {},
        "dropped_bytes_by_reason": {},
    }
    for row in counts.iter_rows(named=True):
        src = report["sources"].setdefault(
            row["source"],
            {
                "rows_in": 0,
                "bytes_in": 0,
                "kept": {"rows": 0, "bytes": 0, "samples": []},
                "dropped": {},
                "quarantined": {"rows": 0, "bytes": 0, "samples": []},
            },
        )
        entry = {
            "rows": int(row["rows"]),
            "bytes": int(row["bytes"]),
            "samples": sample_map.get((row["source"], row["outcome"]), []),
        }
        src["rows_in"] += entry["rows"]
        src["bytes_in"] += entry["bytes"]
        totals["rows_in"] += entry["rows"]
        totals["bytes_in"] += entry["bytes"]
        if row["outcome"] == KEPT:
            src["kept"] = entry
            totals["rows_kept"] += entry["rows"]
            totals["bytes_kept"] += entry["bytes"]
        elif row["outcome"] == _QUARANTINE:
            src["quarantined"] = entry
            totals["rows_quarantined"] += entry["rows"]
        else:
            src["dropped"][row["outcome"]] = entry
            for key, val in (
                ("dropped_rows_by_reason", entry["rows"]),
                ("dropped_bytes_by_reason", entry["bytes"]),
            ):
                totals[key][row["outcome"]] = totals[key].get(row["outcome"], 0) + val
    totals["rows_dropped"] = sum(totals["dropped_rows_by_reason"].values())
    totals["balanced"] = (
        totals["rows_in"] == totals["rows_kept"] + totals["rows_dropped"] + totals["rows_quarantined"]
    )
    report["totals"] = totals
    return report


def retention_report(annotated: pa.Table, **kwargs: Any) -> dict[str, Any]:
    """The report of one annotated table (plain-function form)."""
    sample_size = kwargs.get("sample_size", 5)
    return merge_summaries([summarize_batch(annotated, **kwargs)], sample_size=sample_size)


def report_markdown(report: dict[str, Any]) -> str:
    """A human-readable Markdown rendering: one table per source, then the samples. Source names, reasons,
    ids and texts come from the data: they go in as plain text or code (``zephyr.pipelines.markdown``), never
    as markup, HTML or a ``|`` that would break a table."""
    from zephyr.pipelines.markdown import md_code, md_row, md_text

    lines = ["# Retention report", ""]
    t = report.get("totals", {})
    if t:
        lines += [
            f"Total: {t['rows_in']} rows in, {t['rows_kept']} kept, {t['rows_dropped']} dropped, "
            f"{t['rows_quarantined']} quarantined; {t['bytes_kept']} of {t['bytes_in']} text bytes kept.",
            "",
        ]
    for name, src in report.get("sources", {}).items():
        lines += [
            f"## {md_text(name)}",
            "",
            "| outcome | rows | % rows | bytes | % bytes |",
            "|---|---:|---:|---:|---:|",
        ]
        outcomes = [
            ("kept", src["kept"]),
            *sorted(src["dropped"].items()),
            ("quarantined", src["quarantined"]),
        ]
        for label, e in outcomes:
            if not e["rows"] and label == "quarantined":
                continue
            pr = 100 * e["rows"] / max(src["rows_in"], 1)
            pb = 100 * e["bytes"] / max(src["bytes_in"], 1)
            lines.append(md_row([md_text(label), e["rows"], f"{pr:.1f}", e["bytes"], f"{pb:.1f}"]))
        lines.append("")
        for label, e in outcomes:
            for s in e["samples"]:
                preview = json.dumps(s["text"], ensure_ascii=False)[:200]
                lines.append(f"- {md_text(label)} {md_code(s['id'])}: {md_text(preview)}")
        lines.append("")
    return "\n".join(lines)
