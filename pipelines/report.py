"""The job report: ``report.md`` and ``report.html`` from a job's ``stats.json`` and the steps' sidecars.

Every number comes from the job's ``stats.json`` (``zephyr.pipelines.runner``) and every example row from
the ``examples.json`` the steps saved while they ran (``zephyr.pipelines.examples``); nothing is recomputed
or re-run, so the report and the stats always agree. Sections:

1. Steps: rows in / kept / dropped / quarantined, bytes in and out, seconds, tasks resumed, and whether
   the rows balance (``in = kept + dropped + quarantined``) — plots ``rows.png`` and ``time.png``.
2. Why rows were dropped: per step and reason; per filter, kept rows and dropped rows of its top reasons.
3. Retention per source and per language (rows read → rows in the final data step) — ``sources.png``.
4. Then each step type's own section (``Step.section``, in the order of ``SECTIONS``): dedup (kept
   documents by duplicate-cluster size — ``clusters_*.png`` — and example clusters, the kept text beside a
   removed one with their Jaccard and the differences marked), web (extracted text, removed spans), tokens,
   training (``training.png``). A step type's blocks and plots are its class's (``Step.report``,
   ``Step.plots``): the report iterates the registry.

``report.html`` is one self-contained file: its plots are inline PNGs (data: URIs), its style inline, no
script, font or link to anything outside it. ``report.md`` links the same PNGs in ``plots/``. Plots are made
to be read at a glance: linear axes (a log axis turns a bar of 54 into a sliver beside one of 1,400), the
count written on every bar, legends outside the data, one idea per plot; matplotlib's Agg backend (no display
needed). Without matplotlib (the ``report`` extra) the report is written without plots and says so.

Every value from data or config (the pipeline's and steps' names, sources, languages, rules, paths, example
texts) enters a block through ``zephyr.pipelines.markdown`` (``md_text``, ``md_code``), so neither report
holds live HTML or a value that breaks a table; both are rendered from the same inline Markdown. A dedup
pair is shown side by side with the words that differ highlighted (``difflib`` on word tokens of the two
excerpts; the kept text's own words in green, the removed text's in red), every text HTML-escaped word by
word, so a document holding ``<script>`` shows it as text.
"""

from __future__ import annotations

import difflib
import html
import json
import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import quote

from zephyr.pipelines.config import STEPS
from zephyr.pipelines.examples import filter_example_blocks, read_examples
from zephyr.pipelines.markdown import inline_html, md_code, md_count, md_excerpt, md_row, md_text
from zephyr.pipelines.step import rows_rewritten

from zephyr.config import format_bytes
from zephyr.errors import InputError

log = logging.getLogger(__name__)

SECTIONS = (("dedup", "Dedup clusters"), ("web", None), ("tokens", None), ("training", None))
"""The step types' sections (``Step.section``) in report order, each with its heading (None: the steps write
their own)."""
KEPT, DROPPED, QUARANTINED = "#4c72b0", "#dd8452", "#c44e52"
_DPI = 100


# A report is a list of blocks: ("h", level, text) | ("p", text) | ("table", header, rows) | ("img", path, alt)
# | ("cards", title, example rows) | ("pair", kept row, removed row); a step's examples payload becomes those
# (examples.filter_example_blocks, examples.dedup_example_blocks). Texts, headers and cells are inline
# Markdown (values from data or config through md_text/md_code); an image's path and alt are plain strings.
Block = tuple


def _pct(part: int, whole: int) -> str:
    return f"{100.0 * part / whole:.1f}%" if whole else "–"


def _data_steps(steps: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [s for s in steps if STEPS[s["type"]].output == "rows"]


def _retention_start(data: list[dict[str, Any]], key: str) -> tuple[str, dict[str, int]]:
    """The first data step that counted rows per value (source, language) coming in, and those counts."""
    return next(((s["step"], s[key]["in"]) for s in data if s.get(key, {}).get("in")), ("", {}))


def build_blocks(stats: dict[str, Any], plots: dict[str, str]) -> list[Block]:
    """The report's content, format-free; ``plots`` maps plot names to relative PNG paths."""
    steps = stats["steps"]
    ran = sum(1 for s in steps if s.get("status") == "ran")
    intro = (
        f"Job folder {md_code(stats['job_dir'])}; config {md_code(stats.get('config'))}; {len(steps)} "
        f"steps ({ran} ran in this invocation, {len(steps) - ran} skipped as complete); executor "
        f"{md_code(stats.get('execution', {}).get('executor'))}."
    )
    blocks: list[Block] = [("h", 1, f"Pipeline report: {md_text(stats['pipeline'])}"), ("p", intro)]
    for section in (_step_blocks, _drop_blocks, _retention_blocks):
        blocks += section(steps, plots)
    for section, title in SECTIONS:
        records = [s for s in steps if STEPS[s["type"]].section == section]
        if records and title:
            blocks.append(("h", 2, title))
        for s in records:
            blocks += STEPS[s["type"]].report(s, plots)
    return blocks


def _step_blocks(steps: list[dict[str, Any]], plots: dict[str, str]) -> list[Block]:
    """1. Steps: rows, bytes, time, resumed tasks, balance."""
    blocks: list[Block] = [("h", 2, "Steps")]
    counts = ("rows in", "kept", "dropped", "quarantined", "bytes in", "bytes out")
    header = ["#", "step", "type", *counts, "seconds", "tasks (resumed)", "status", "balanced"]
    rows = []
    for s in steps:
        cells = ["–"] * len(counts)
        if STEPS[s["type"]].output != "model":
            cells = [md_count(s[k]) for k in ("rows_in", "rows_kept", "rows_dropped", "rows_quarantined")]
            cells += [format_bytes(s.get(k, 0), decimal=True) for k in ("bytes_in", "bytes_out")]
        rows.append(
            [
                str(s["index"]),
                md_text(s["step"]),
                md_text(s["type"]),
                *cells,
                f"{s['seconds']:.1f}",
                f"{s.get('tasks', 0)} ({s.get('tasks_resumed', 0)})",
                md_text(s.get("status", "")),
                "yes" if s.get("balanced") else "NO",
            ]
        )
    blocks.append(("table", header, rows))
    balanced = all(s.get("balanced") for s in steps)
    blocks.append(
        (
            "p",
            "Row accounting: every step balances exactly (rows in = kept + dropped + quarantined), checked "
            "against the row counts of the Parquet files."
            if balanced
            else "Row accounting: SOME STEPS DO NOT BALANCE — see the table above.",
        )
    )
    rewritten = [(s, rows_rewritten(s)) for s in steps if rows_rewritten(s)]
    if rewritten:
        parts = []
        for s, n in rewritten:
            removed = sum(int(v) for k, v in s.get("counters", {}).items() if k.endswith("/bytes_removed"))
            parts.append(
                f"{md_code(s['step'])} rewrote {md_count(n)} of {md_count(s['rows_in'])} documents"
                + (f" ({md_count(removed)} bytes removed)" if removed else "")
            )
        blocks.append(("p", "Texts changed in place: " + "; ".join(parts) + "."))
    total_seconds = sum(s["seconds"] for s in steps)
    blocks.append(
        ("p", f"Total step time: {total_seconds:.1f} s (steps skipped in this run show their original time).")
    )
    for name in ("rows", "time"):
        if name in plots:
            blocks.append(("img", plots[name], name))
    return blocks


def _drop_blocks(steps: list[dict[str, Any]], plots: dict[str, str]) -> list[Block]:
    """2. Why rows were dropped, quarantined rows, and each filter's kept and dropped examples."""
    blocks: list[Block] = []
    reasons = [(s["step"], r, n) for s in steps for r, n in s.get("dropped_by_reason", {}).items()]
    if reasons:
        blocks.append(("h", 2, "Why rows were dropped"))
        rows = [[md_text(st), md_text(r), md_count(n)] for st, r, n in reasons]
        blocks.append(("table", ["step", "reason", "rows"], rows))
    quarantine = [(s["step"], f) for s in steps for f in s.get("quarantine_files", [])]
    if quarantine:
        blocks.append(("h", 3, "Quarantined rows"))
        blocks.append(("table", ["step", "file"], [[md_text(st), md_code(f)] for st, f in quarantine]))
    examples = [(s["step"], read_examples(s.get("extra", {}).get("examples"))) for s in steps]
    examples = [(step, payload) for step, payload in examples if payload and payload["kind"] == "filter"]
    if examples:
        blocks.append(("h", 2, "What the filters kept and dropped"))
        blocks += [b for step, payload in examples for b in filter_example_blocks(step, payload)]
    return blocks


def _retention_blocks(steps: list[dict[str, Any]], plots: dict[str, str]) -> list[Block]:
    """3. Retention per source and per language (rows read → rows in the final data step)."""
    blocks: list[Block] = []
    data = _data_steps(steps)
    if not data:
        return blocks
    last = data[-1]
    for key, title in (("per_source", "source"), ("per_lang", "language")):
        where, start = _retention_start(data, key)
        end = last.get(key, {}).get("out", {})
        if not start:
            continue
        blocks.append(("h", 2, f"Retention per {title}"))
        blocks.append(("p", f"Rows entering {md_code(where)} → rows written by {md_code(last['step'])}."))
        table_rows = [
            [md_text(v), md_count(start[v]), md_count(end.get(v, 0)), _pct(end.get(v, 0), start[v])]
            for v in sorted(start, key=lambda v: -start[v])
        ]
        total_in, total_out = sum(start.values()), sum(end.values())
        table_rows.append(["**total**", md_count(total_in), md_count(total_out), _pct(total_out, total_in)])
        blocks.append(("table", [title, "rows in", "rows kept", "retention"], table_rows))
        if key == "per_source":
            step_rows = []
            for s in data:
                out = s.get(key, {}).get("out", {})
                step_rows.append([md_text(s["step"]), *[md_count(out.get(v, 0)) for v in sorted(start)]])
            blocks.append(("p", "Rows per source after each step:"))
            blocks.append(("table", ["after step", *(md_text(v) for v in sorted(start))], step_rows))
            if "sources" in plots:
                blocks.append(("img", plots["sources"], "rows per source after each step"))
    return blocks


# -- plots ----------------------------------------------------------------------------------------------
def _rows_plot(plt: Any, steps: list[dict[str, Any]], save: Callable[[Any, str], None]) -> None:
    """One stacked bar per step (kept, dropped, quarantined), its counts written at its end."""
    data = [s for s in steps if STEPS[s["type"]].output != "model"][::-1]
    if not data:
        return
    names = [s["step"] for s in data]
    fig, ax = plt.subplots(figsize=(9, 0.38 * len(data) + 1.1))
    left = [0] * len(data)
    for label, color in (("kept", KEPT), ("dropped", DROPPED), ("quarantined", QUARANTINED)):
        values = [s[f"rows_{label}"] for s in data]
        if label == "kept" or any(values):
            ax.barh(names, values, left=left, label=label, color=color)
            left = [a + b for a, b in zip(left, values)]
    shown = ("rows_dropped", "rows_quarantined")  # beside the kept rows, when there are any
    labels = [
        " + ".join([f"{s['rows_kept']:,}"] + [f"{s[k]:,} {k[5:]}" for k in shown if s[k]]) for s in data
    ]
    for y, (end, text) in enumerate(zip(left, labels)):
        ax.annotate(text, (end, y), xytext=(3, 0), textcoords="offset points", va="center", fontsize=8)
    ax.set_xlabel("rows")
    ax.set_title("rows per step")
    ax.set_xlim(0, max(max(left), 1) * 1.3)  # room for the labels inside the frame, clear of the legend
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1), frameon=False)
    save(fig, "rows")


def _time_plot(plt: Any, steps: list[dict[str, Any]], save: Callable[[Any, str], None]) -> None:
    if not steps:
        return
    fig, ax = plt.subplots(figsize=(9, 0.35 * len(steps) + 1.2))
    bars = ax.barh([s["step"] for s in steps][::-1], [s["seconds"] for s in steps][::-1], color="#55a868")
    ax.bar_label(bars, labels=[f"{s['seconds']:.1f} s" for s in steps][::-1], padding=2, fontsize=8)
    ax.set_xlabel("seconds")
    ax.set_title("time per step")
    ax.set_xlim(0, max(max(s["seconds"] for s in steps), 0.1) * 1.15)
    save(fig, "time")


def _sources_plot(plt: Any, steps: list[dict[str, Any]], save: Callable[[Any, str], None]) -> None:
    data = _data_steps(steps)
    sources = _retention_start(data, "per_source")[1]
    if not sources:
        return
    fig, ax = plt.subplots(figsize=(9, 3.5))
    labels = ["input"] + [s["step"] for s in data]
    for value in sorted(sources):
        series = [sources[value]] + [s.get("per_source", {}).get("out", {}).get(value, 0) for s in data]
        ax.plot(labels, series, marker="o", label=f"{value} ({series[-1]:,})")
    ax.set_ylabel("rows")
    ax.set_ylim(bottom=0)
    ax.set_title("rows per source after each step")
    ax.tick_params(axis="x", rotation=30)
    ax.grid(alpha=0.3)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1), frameon=False, title="source (rows at the end)")
    save(fig, "sources")


def make_plots(stats: dict[str, Any], folder: Path) -> dict[str, str]:
    """Write the PNG plots into ``folder``; returns plot name → path relative to the report. Without
    matplotlib: no plots, and ``{"missing": why}`` (the report says so in one line)."""
    try:
        import matplotlib
    except ImportError:
        return {"missing": "matplotlib is not installed (pip install 'zephyr-data[report]')"}
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    folder.mkdir(parents=True, exist_ok=True)
    out: dict[str, str] = {}

    def save(fig: Any, name: str) -> None:
        fig.savefig(folder / f"{name}.png", dpi=_DPI, bbox_inches="tight")
        plt.close(fig)
        out[name] = f"{folder.name}/{name}.png"

    steps = stats["steps"]
    for plot in (_rows_plot, _time_plot, _sources_plot):
        plot(plt, steps, save)
    for step in steps:
        STEPS[step["type"]].plots(step, plt, save)
    return out


# -- examples --------------------------------------------------------------------------------------------
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


def _pair_html(kept: dict[str, Any] | None, removed: dict[str, Any]) -> str:
    if kept is None:
        return (
            '<div class="pair"><div class="doc"><div class="body muted">The kept document is in the signature '
            f"index of an earlier run.</div></div>{_card('removed', removed)}</div>"
        )
    left, right = diff_spans(kept["text"], removed["text"])
    same = not any(differs for _, differs in left + right)
    note = '<p class="muted">The excerpts are identical (the texts may differ in case or spacing, which '
    note = note + "normalization removes).</p>" if same else ""
    pair = (
        f"{_card('kept', kept, _marked(left, 'kept'))}{_card('removed', removed, _marked(right, 'removed'))}"
    )
    return f'{note}<div class="pair">{pair}</div>'


def _pair_markdown(kept: dict[str, Any] | None, removed: dict[str, Any]) -> list[str]:
    lines = [f"- kept {md_code(kept['id']) if kept else 'an earlier run'}, removed {md_code(removed['id'])}"]
    if kept is not None:
        left, right = diff_spans(kept["text"], removed["text"])
        changes = [
            f"{_snippet(a, 80)} → {_snippet(b, 80)}" for (a, da), (b, db) in zip(left, right) if da or db
        ]
        lines += [f"  - {c}" for c in changes[:3]] or ["  - identical excerpts (after normalization)"]
    return [*lines, ""]


def _snippet(text: str, limit: int = 240) -> str:
    """A text on one line, cut to ``limit`` characters (the HTML shows the whole excerpt), as plain text
    (``md_excerpt``): Markdown renderers pass raw HTML through, and a document's ``<script>``, ``**`` or
    ``[link](…)`` must stay text there too."""
    return f"«{md_excerpt(text, limit)}»"


def _row_md(title: str, row: dict[str, Any]) -> str:
    return f"- {title} {md_code(row['id'])} ({md_text(', '.join(_details(row)))}): {_snippet(row['text'])}"


def retention_markdown(report: dict[str, Any], examples: dict[str, Any] | None) -> str:
    """``zephyr filter``'s ``report.md``: its retention report (``filters.merge_summaries``) as one table per
    source, then its examples (``examples.merge_filter_examples``) as a filter step's are shown."""
    t = report["totals"]
    total = (
        f"Total: {t['rows_in']} rows in, {t['rows_kept']} kept, {t['rows_dropped']} dropped, "
        f"{t['rows_quarantined']} quarantined; {t['bytes_kept']} of {t['bytes_in']} text bytes kept."
    )
    blocks: list[Block] = [("h", 1, "Retention report"), ("p", total)]
    for name, outcomes in report["sources"].items():
        rows_in, bytes_in = (sum(e[k] for e in outcomes.values()) for k in ("rows", "bytes"))
        rows = [
            [md_text(label), e["rows"], _pct(e["rows"], rows_in), e["bytes"], _pct(e["bytes"], bytes_in)]
            for label, e in sorted(outcomes.items(), key=lambda kv: (kv[0] != "kept", kv[0]))
        ]
        blocks += [
            ("h", 2, md_text(name)),
            ("table", ["outcome", "rows", "% rows", "bytes", "% bytes"], rows),
        ]
    if examples:
        blocks += filter_example_blocks("filter", examples)
    return render_markdown(blocks)


# -- rendering -------------------------------------------------------------------------------------------
_MARKDOWN: dict[str, Callable[..., list[str]]] = {
    "h": lambda level, text: ["#" * level + " " + text, ""],
    "p": lambda text: [text, ""],
    "table": lambda header, rows: [md_row(header), "|" + "---|" * len(header), *map(md_row, rows), ""],
    "img": lambda path, alt: [f"![{md_text(alt)}]({quote(path)})", ""],
    "cards": lambda title, rows: [*(_row_md(title, row) for row in rows), ""] if rows else [],
    "pair": _pair_markdown,
}
"""The Markdown lines of each block kind (``Block``)."""


def render_markdown(blocks: list[Block]) -> str:
    return "\n".join(line for kind, *args in blocks for line in _MARKDOWN[kind](*args))


def _inline_image(path: Path, alt: str) -> str:
    """An ``<img>`` whose PNG travels inside the page (a data: URI): the report is one file to send."""
    import base64

    try:
        data = base64.b64encode(path.read_bytes()).decode("ascii")
    except FileNotFoundError:
        return f"<p>[plot {html.escape(alt)}: {html.escape(str(path))} is missing]</p>"
    return f'<p><img src="data:image/png;base64,{data}" alt="{html.escape(alt)}" style="max-width:100%"></p>'


_STYLE = (
    "body{font-family:sans-serif;max-width:1100px;margin:2em auto;padding:0 1em;color:#222}"
    "table{border-collapse:collapse;margin:0.5em 0}td,th{border:1px solid #ccc;padding:3px 8px;text-align:right}"
    "td:first-child,th:first-child,td:nth-child(2){text-align:left}td{white-space:nowrap}code{background:#f4f4f4}"
    ".pair{display:grid;grid-template-columns:1fr 1fr;gap:10px;margin:0.4em 0 1em}"
    ".cards{display:grid;grid-template-columns:repeat(3,1fr);gap:10px;margin:0.4em 0 1em}"
    ".doc{border:1px solid #ccc;border-radius:4px;background:#fafafa;font-size:12px;min-width:0}"
    ".doc .head{background:#eef;padding:3px 6px;font-size:12px;border-bottom:1px solid #ccc}"
    ".doc .body{padding:4px 6px;white-space:pre-wrap;overflow-wrap:anywhere;max-height:14em;overflow:auto}"
    "mark.kept{background:#b9ecb9}mark.removed{background:#f6b8b8}.muted{color:#777}"
)


def render_html(blocks: list[Block], title: str, *, base: Path) -> str:
    """One self-contained page: plots inlined from ``base`` (the job folder), no external CSS, JS or fonts."""
    kinds: dict[str, Callable[..., str]] = {
        "h": lambda level, text: f"<h{level}>{inline_html(text)}</h{level}>",
        "p": lambda text: f"<p>{inline_html(text)}</p>",
        "table": _table_html,
        "img": lambda path, alt: _inline_image(base / path, alt),
        "cards": lambda title, rows: (
            rows and f'<div class="cards">{"".join(_card(title, r) for r in rows)}</div>'
        ),
        "pair": _pair_html,
    }
    body = [kinds[kind](*args) for kind, *args in blocks]
    return (
        f"<!DOCTYPE html>\n<html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
        f"<style>{_STYLE}</style></head><body>\n" + "\n".join(b for b in body if b) + "\n</body></html>\n"
    )


def _table_html(header: list[str], rows: list[list[Any]]) -> str:
    head = "".join(f"<th>{inline_html(h)}</th>" for h in header)
    cells = ("".join(f"<td>{inline_html(str(c))}</td>" for c in row) for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(f'<tr>{c}</tr>' for c in cells)}</tbody></table>"


def write_report(job_dir: str | os.PathLike[str]) -> tuple[Path, Path]:
    """Write ``report.md``, ``report.html`` and ``plots/*.png`` into ``job_dir`` from its ``stats.json``;
    returns the paths of the two reports."""
    from zephyr.io.paths import write_bytes_atomic

    job = Path(job_dir)
    try:
        stats = json.loads((job / "stats.json").read_text())
    except (FileNotFoundError, json.JSONDecodeError) as exc:
        raise InputError(f"no readable stats.json in {job} ({exc}); run the pipeline first") from None
    plots = make_plots(stats, job / "plots")
    missing = plots.pop("missing", None)
    blocks = build_blocks(stats, plots)
    if missing:
        blocks.insert(2, ("p", f"No plots: {md_text(missing)}."))
    markdown = job / "report.md"
    page = job / "report.html"
    write_bytes_atomic(str(markdown), render_markdown(blocks).encode())
    write_bytes_atomic(str(page), render_html(blocks, f"zephyr: {stats['pipeline']}", base=job).encode())
    log.info("report: %s (%d plots)", markdown, len(plots))
    return markdown, page
