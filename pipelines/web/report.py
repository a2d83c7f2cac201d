"""The web steps' part of the job report: examples of extracted text and the spans substring dedup removed.

``web_blocks(steps)`` returns report blocks (``zephyr.pipelines.report``'s format) from the step records of
``stats.json``: nothing is recomputed.
"""

from __future__ import annotations

from typing import Any

from zephyr.pipelines.markdown import md_code, md_text

__all__ = ["web_blocks"]


def _excerpt(text: str, chars: int = 240) -> str:
    """The start of a text as one line of inline Markdown (``md_text``: no markup, no HTML)."""
    flat = " ".join(text.split())
    return md_text(flat if len(flat) <= chars else flat[: chars - 1] + "…")


def web_blocks(steps: list[dict[str, Any]]) -> list[tuple]:
    blocks: list[tuple] = []
    for s in steps:
        extra = s.get("extra", {})
        if s["type"] == "extract" and extra.get("extract_examples"):
            blocks.append(("h", 2, f"Extracted text ({md_code(s['step'])})"))
            blocks.append(("p", "The first documents the extractor produced:"))
            blocks.append(
                (
                    "table",
                    ["url", "text (start)"],
                    [[md_text(e["url"]), _excerpt(e["text"])] for e in extra["extract_examples"]],
                )
            )
        if s["type"] == "substring_dedup" and "substring" in extra:
            info = extra["substring"]
            blocks.append(("h", 2, f"Removed spans ({md_code(s['step'])})"))
            per = info.get("bytes_removed_per_source", {})
            blocks.append(
                (
                    "p",
                    f"{info.get('bytes_removed', 0):,} bytes removed in repeats of spans of at least "
                    f"{md_text(info.get('min_bytes'))} bytes"
                    + (
                        f"; per source: {', '.join(f'{md_text(k)} {v:,}' for k, v in sorted(per.items()))}"
                        if per
                        else ""
                    )
                    + ".",
                )
            )
            spans = info.get("top_spans", [])
            if spans:
                blocks.append(
                    (
                        "table",
                        ["documents", "bytes", "span (start)"],
                        [[f"{t['documents']:,}", f"{t['bytes']:,}", _excerpt(t["text"])] for t in spans],
                    )
                )
    return blocks
