"""The report's example rows: what a filter kept and dropped, and what a dedup step removed beside what it
kept, rendered from the steps' ``_examples.json`` sidecars (``zephyr.pipelines.examples``).

A dedup pair is shown side by side with the words that differ highlighted: ``difflib`` on word tokens of
the two excerpts; the kept text's own words (missing from the removed one) in green, the removed text's in
red. Every text is HTML-escaped word by word, so a document holding ``<script>`` shows it as text.
"""

from __future__ import annotations

import difflib
import html
from typing import Any

from zephyr.pipelines.markdown import md_code, md_text

__all__ = ["DEDUP", "FILTER", "EXAMPLE_CSS", "diff_spans", "examples_html", "examples_markdown"]

DEDUP, FILTER = "dedup_examples", "filter_examples"
"""Report block kinds: ``(kind, step name, sidecar payload)``."""

EXAMPLE_CSS = (
    ".pair{display:grid;grid-template-columns:1fr 1fr;gap:10px;margin:0.4em 0 1em}"
    ".cards{display:grid;grid-template-columns:repeat(3,1fr);gap:10px;margin:0.4em 0 1em}"
    ".doc{border:1px solid #ccc;border-radius:4px;background:#fafafa;font-size:12px;min-width:0}"
    ".doc .head{background:#eef;padding:3px 6px;font-size:12px;border-bottom:1px solid #ccc}"
    ".doc .body{padding:4px 6px;white-space:pre-wrap;overflow-wrap:anywhere;max-height:14em;overflow:auto}"
    "mark.kept{background:#b9ecb9}mark.removed{background:#f6b8b8}.muted{color:#777}"
)
_SNIPPET_CHARS = 240
"""Characters of a text in the Markdown report (the HTML shows the whole excerpt)."""


def diff_spans(kept: str, removed: str) -> tuple[list[tuple[str, bool]], list[tuple[str, bool]]]:
    """Both texts as runs of words, each flagged True where it differs from the other text."""
    a, b = kept.split(), removed.split()
    left: list[tuple[str, bool]] = []
    right: list[tuple[str, bool]] = []
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes():
        if i2 > i1:
            left.append((" ".join(a[i1:i2]), tag != "equal"))
        if j2 > j1:
            right.append((" ".join(b[j1:j2]), tag != "equal"))
    return left, right


def _marked(runs: list[tuple[str, bool]], css: str) -> str:
    return " ".join(
        f'<mark class="{css}">{html.escape(t)}</mark>' if diff else html.escape(t) for t, diff in runs
    )


def _details(row: dict[str, Any]) -> list[str]:
    fields = row.get("fields", {})
    out = [f"{k} {v:.2f}" if isinstance(v, float) else f"{k} {v}" for k, v in sorted(fields.items())]
    where = [f"from word {row['start_word']:,}"] if row.get("start_word") else []
    return [*out, f"{row.get('chars', 0):,} chars", *where]


def _head(title: str, row: dict[str, Any]) -> str:
    details = " · ".join(html.escape(d) for d in _details(row))
    return (
        f'<div class="head"><b>{html.escape(title)}</b> <code>{html.escape(row["id"])}</code> {details}</div>'
    )


def _card(title: str, row: dict[str, Any], body: str | None = None) -> str:
    """A document box: a head line (id, fields, length) and the text, '…' where text was left out."""
    before = "… " if row.get("cut_before") else ""
    after = " …" if row.get("cut_after") else ""
    body = html.escape(row["text"]) if body is None else body
    return f'<div class="doc">{_head(title, row)}<div class="body">{before}{body}{after}</div></div>'


def _dedup_html(step: str, payload: dict[str, Any]) -> list[str]:
    clusters = payload.get("clusters", [])
    if not clusters:
        return [f"<p>Examples from <code>{html.escape(step)}</code>: no clusters, nothing was removed.</p>"]
    out = [
        f"<p>Examples from <code>{html.escape(step)}</code> ({len(clusters)} clusters, picked by a fixed hash "
        f"of their ids). Jaccard on {html.escape(payload.get('shingles', ''))} after "
        f"<code>{html.escape(payload.get('normalize', ''))}</code> normalization, as the step measures it; "
        '<mark class="kept">kept-only</mark> and <mark class="removed">removed-only</mark> words highlighted.</p>'
    ]
    for c in clusters:
        kept, removed = c.get("kept"), c["removed"]
        jaccard = "–" if c.get("jaccard") is None else f"{c['jaccard']:.3f}"
        out.append(
            f"<p><b>Cluster <code>{html.escape(str(c['cluster']))}</code></b>: {c.get('size') or '?'} documents; "
            f"Jaccard(kept, removed) = <b>{jaccard}</b></p>"
        )
        if kept is None:
            out.append(
                f'<div class="pair"><div class="doc"><div class="body muted">The kept document is in the '
                f"signature index of an earlier run.</div></div>{_card('removed', removed)}</div>"
            )
            continue
        left, right = diff_spans(kept["text"], removed["text"])
        if not any(differs for _, differs in left + right):
            out.append(
                '<p class="muted">The excerpts are identical (the texts may differ in case or spacing, '
                "which normalization removes).</p>"
            )
        out.append(
            f'<div class="pair">{_card("kept", kept, _marked(left, "kept"))}'
            f"{_card('removed', removed, _marked(right, 'removed'))}</div>"
        )
    return out


def _filter_html(step: str, payload: dict[str, Any]) -> list[str]:
    out = [f"<h3>Examples: <code>{html.escape(step)}</code></h3>"]
    kept = payload.get("kept", [])
    out.append(f"<p>Kept ({len(kept)} shown, picked by a fixed hash of their ids):</p>")
    out.append(
        '<div class="cards">' + "".join(_card("kept", r) for r in kept) + "</div>" if kept else "<p>none.</p>"
    )
    dropped = sorted(payload.get("dropped", {}).items(), key=lambda kv: (-kv[1]["rows"], kv[0]))
    if not dropped:
        out.append("<p>Nothing dropped.</p>")
    for reason, entry in dropped:
        rows = entry.get("examples", [])
        out.append(f"<p>Dropped by <code>{html.escape(reason)}</code> ({entry['rows']:,} rows):</p>")
        out.append('<div class="cards">' + "".join(_card("dropped", r) for r in rows) + "</div>")
    return out


def examples_html(block: tuple) -> str:
    """One example block (``(kind, step, payload)``) as HTML."""
    kind, step, payload = block
    return "\n".join(_dedup_html(step, payload) if kind == DEDUP else _filter_html(step, payload))


def _snippet(text: str, limit: int = _SNIPPET_CHARS) -> str:
    """A text on one line, cut to ``limit``, as plain text (``md_text``): Markdown renderers pass raw HTML
    through, and a document's ``<script>``, ``**`` or ``[link](…)`` must stay text there too."""
    flat = " ".join(text.split())
    return "«" + md_text(flat if len(flat) <= limit else flat[:limit] + " …") + "»"


def _row_md(title: str, row: dict[str, Any]) -> str:
    return f"- {title} {md_code(row['id'])} ({md_text(', '.join(_details(row)))}): {_snippet(row['text'])}"


def examples_markdown(block: tuple) -> list[str]:
    """One example block as Markdown lines (differences listed as text: Markdown has no highlighting)."""
    kind, step, payload = block
    if kind == DEDUP:
        clusters = payload.get("clusters", [])
        if not clusters:
            return [f"Examples from {md_code(step)}: no clusters, nothing was removed.", ""]
        lines = [f"Examples from {md_code(step)} (Jaccard on {md_text(payload.get('shingles'))}):", ""]
        for c in clusters:
            kept, removed = c.get("kept"), c["removed"]
            jaccard = "–" if c.get("jaccard") is None else f"{c['jaccard']:.3f}"
            lines.append(
                f"- cluster {md_code(c['cluster'])} ({md_text(c.get('size') or '?')} documents), Jaccard "
                f"{jaccard}: kept {md_code(kept['id']) if kept else 'an earlier run'}, removed "
                f"{md_code(removed['id'])}"
            )
            if kept is not None:
                left, right = diff_spans(kept["text"], removed["text"])
                changes = [
                    f"{_snippet(a, 80)} → {_snippet(b, 80)}"
                    for (a, da), (b, db) in zip(left, right)
                    if da or db
                ][:3]
                lines += [f"  - {c}" for c in changes] or ["  - identical excerpts (after normalization)"]
        return [*lines, ""]
    lines = [f"### Examples: {md_code(step)}", ""]
    lines += [_row_md("kept", r) for r in payload.get("kept", [])]
    for reason, entry in sorted(payload.get("dropped", {}).items(), key=lambda kv: (-kv[1]["rows"], kv[0])):
        lines += ["", f"Dropped by {md_code(reason)} ({entry['rows']:,} rows):", ""]
        lines += [_row_md("dropped", r) for r in entry.get("examples", [])]
    return [*lines, ""]
