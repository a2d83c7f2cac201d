"""The job report: ``report.md`` and ``report.html`` from a job's ``stats.json`` and the steps' sidecars.

Every number comes from the job's ``stats.json`` (``zephyr.pipelines.runner``) and every example row from
the ``_examples.json`` the steps saved while they ran (``zephyr.pipelines.examples``); nothing is
recomputed or re-run, so the report and the stats always agree. Sections:

1. Steps: rows in / kept / dropped / quarantined, bytes in and out, seconds, tasks resumed, and whether
   the rows balance (``in = kept + dropped + quarantined``) — plots ``rows.png`` and ``time.png``.
2. Why rows were dropped: per step and reason; per filter, kept rows and dropped rows of its top reasons.
3. Retention per source and per language (rows read → rows in the final data step) — ``sources.png``.
4. Dedup: kept documents by duplicate-cluster size (a cluster of n had n - 1 removed) — ``clusters_*.png``;
   per step a few clusters, the kept text beside a removed one with their Jaccard and the differences marked.
5. Tokens: documents, tokens, shards, per source.
6. Training: steps, loss, throughput — ``training.png`` (loss and tokens/s per step).

``report.html`` is one self-contained file: its plots are inline PNGs (data: URIs), its style inline, no
script, font or link to anything outside it. ``report.md`` links the same PNGs in ``plots/``. Plots:
``zephyr.pipelines.report_plots``; example rendering: ``zephyr.pipelines.report_examples``.

Every value from data or config (the pipeline's and steps' names, sources, languages, rules, paths, example
texts) enters a block through ``zephyr.pipelines.markdown`` (``md_text``, ``md_code``), so neither report
holds live HTML or a value that breaks a table; both are rendered from the same inline Markdown.
"""

from __future__ import annotations

import html
import json
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

from zephyr.pipelines.config import DATA_STEPS
from zephyr.pipelines.examples import read_examples
from zephyr.pipelines.markdown import inline_html, md_code, md_row, md_text
from zephyr.pipelines.records import rows_rewritten
from zephyr.pipelines.report_examples import DEDUP, EXAMPLE_CSS, FILTER, examples_html, examples_markdown
from zephyr.pipelines.report_plots import make_plots, retention_start

from zephyr.errors import InputError

__all__ = ["ReportPaths", "write_report", "build_blocks", "render_markdown", "render_html"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ReportPaths:
    markdown: Path
    html: Path
    plots: list[Path]


# A report is a list of blocks: ("h", level, text) | ("p", text) | ("table", header, rows) | ("img", path, alt).
# Texts, headers and cells are inline Markdown (values from data or config through md_text/md_code); an image's
# path and alt are plain strings.
Block = tuple


def _n(value: Any) -> str:
    return f"{value:,}" if isinstance(value, int) else str(value)


def _bytes(n: int) -> str:
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if n < 1000 or unit == "TB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return str(n)


def _pct(part: int, whole: int) -> str:
    return f"{100.0 * part / whole:.1f}%" if whole else "–"


def _data_steps(steps: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [s for s in steps if s["type"] in DATA_STEPS]


def build_blocks(stats: dict[str, Any], plots: dict[str, str]) -> list[Block]:
    """The report's content, format-free; ``plots`` maps plot names to relative PNG paths. ``stats``: a job's
    ``stats.json``."""
    steps = stats["steps"]
    blocks: list[Block] = [("h", 1, f"Pipeline report: {md_text(stats['pipeline'])}")]
    ran = sum(1 for s in steps if s.get("status") == "ran")
    blocks.append(
        (
            "p",
            f"Job folder {md_code(stats['job_dir'])}; config {md_code(stats.get('config'))}; {len(steps)} "
            f"steps ({ran} ran in this invocation, {len(steps) - ran} skipped as complete); executor "
            f"{md_code(stats.get('execution', {}).get('executor'))}.",
        )
    )
    from zephyr.pipelines.web.report import web_blocks  # extracted text, removed spans

    for section in (_step_blocks, _drop_blocks, _retention_blocks, _dedup_blocks):
        blocks += section(steps, plots)
    blocks += web_blocks(steps)
    for section in (_token_blocks, _train_blocks):
        blocks += section(steps, plots)
    return blocks


def _step_blocks(steps: list[dict[str, Any]], plots: dict[str, str]) -> list[Block]:
    """1. Steps: rows, bytes, time, resumed tasks, balance."""
    blocks: list[Block] = [("h", 2, "Steps")]
    header = [
        "#",
        "step",
        "type",
        "rows in",
        "kept",
        "dropped",
        "quarantined",
        "bytes in",
        "bytes out",
        "seconds",
        "tasks (resumed)",
        "status",
        "balanced",
    ]
    rows = []
    for s in steps:
        is_rows = s["type"] in DATA_STEPS or s["type"] == "tokenize"
        rows.append(
            [
                str(s["index"]),
                md_text(s["step"]),
                md_text(s["type"]),
                _n(s["rows_in"]) if is_rows else "–",
                _n(s["rows_kept"]) if is_rows else "–",
                _n(s["rows_dropped"]) if is_rows else "–",
                _n(s["rows_quarantined"]) if is_rows else "–",
                _bytes(s.get("bytes_in", 0)) if is_rows else "–",
                _bytes(s.get("bytes_out", 0)) if is_rows else "–",
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
                f"{md_code(s['step'])} rewrote {_n(n)} of {_n(s['rows_in'])} documents"
                + (f" ({_n(removed)} bytes removed)" if removed else "")
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
        rows = [[md_text(st), md_text(r), _n(n)] for st, r, n in reasons]
        blocks.append(("table", ["step", "reason", "rows"], rows))
    quarantine = [(s["step"], f) for s in steps for f in s.get("quarantine_files", [])]
    if quarantine:
        blocks.append(("h", 3, "Quarantined rows"))
        blocks.append(("table", ["step", "file"], [[md_text(st), md_code(f)] for st, f in quarantine]))
    examples = [(s["step"], _examples(s)) for s in steps]
    examples = [(step, payload) for step, payload in examples if payload and payload["kind"] == "filter"]
    if examples:
        blocks.append(("h", 2, "What the filters kept and dropped"))
        blocks += [(FILTER, step, payload) for step, payload in examples]
    return blocks


def _examples(step: dict[str, Any]) -> dict[str, Any] | None:
    return read_examples(step.get("extra", {}).get("examples"))


def _retention_blocks(steps: list[dict[str, Any]], plots: dict[str, str]) -> list[Block]:
    """3. Retention per source and per language (rows read → rows in the final data step)."""
    blocks: list[Block] = []
    data = _data_steps(steps)
    if not data:
        return blocks
    first, last = data[0], data[-1]
    for key, title in (("per_source", "source"), ("per_lang", "language")):
        start = retention_start(data, key)
        end = last.get(key, {}).get("out", {})
        if not start:
            continue
        blocks.append(("h", 2, f"Retention per {title}"))
        where = (
            first["step"]
            if key == "per_source"
            else next((s["step"] for s in data if s.get(key, {}).get("in")), first["step"])
        )
        blocks.append(("p", f"Rows entering {md_code(where)} → rows written by {md_code(last['step'])}."))
        table_rows = [
            [md_text(v), _n(start[v]), _n(end.get(v, 0)), _pct(end.get(v, 0), start[v])]
            for v in sorted(start, key=lambda v: -start[v])
        ]
        total_in, total_out = sum(start.values()), sum(end.values())
        table_rows.append(["**total**", _n(total_in), _n(total_out), _pct(total_out, total_in)])
        blocks.append(("table", [title, "rows in", "rows kept", "retention"], table_rows))
        if key == "per_source":
            step_rows = []
            for s in data:
                out = s.get(key, {}).get("out", {})
                step_rows.append([md_text(s["step"]), *[_n(out.get(v, 0)) for v in sorted(start)]])
            blocks.append(("p", "Rows per source after each step:"))
            blocks.append(("table", ["after step", *(md_text(v) for v in sorted(start))], step_rows))
            if "sources" in plots:
                blocks.append(("img", plots["sources"], "rows per source after each step"))
    return blocks


def _dedup_blocks(steps: list[dict[str, Any]], plots: dict[str, str]) -> list[Block]:
    """4. Dedup: clusters by size, and example clusters (kept beside removed, with their Jaccard)."""
    dedup = [s for s in steps if s["type"] in ("exact_dedup", "fuzzy_dedup")]
    blocks: list[Block] = [("h", 2, "Dedup clusters")] if dedup else []
    for s in dedup:
        sizes = {int(k): v for k, v in s.get("cluster_sizes", {}).items()}
        multi = {k: v for k, v in sizes.items() if k > 1}
        lsh = s.get("extra", {}).get("lsh")
        note = (
            (
                f" LSH: {md_text(lsh['bands'])} bands × {md_text(lsh['rows'])} rows (S-curve midpoint ≈ "
                f"{md_text(lsh['lsh_threshold'])}), verified Jaccard ≥ {md_text(lsh['threshold'])}."
            )
            if lsh
            else ""
        )
        blocks.append(
            (
                "p",
                f"{md_code(s['step'])}: {_n(sum(multi.values()))} cluster(s) with duplicates, "
                f"{_n(s['rows_dropped'])} document(s) removed.{note}",
            )
        )
        if sizes:
            blocks.append(
                (
                    "table",
                    ["cluster size", "clusters (kept documents)", "documents removed"],
                    [[str(k), _n(v), _n(v * (k - 1))] for k, v in sorted(sizes.items())],
                )
            )
        if f"clusters_{s['step']}" in plots:
            blocks.append(("img", plots[f"clusters_{s['step']}"], f"cluster sizes of {s['step']}"))
        payload = _examples(s)
        if payload and payload["kind"] == "dedup":
            blocks.append((DEDUP, s["step"], payload))
    return blocks


def _token_blocks(steps: list[dict[str, Any]], plots: dict[str, str]) -> list[Block]:
    """5. Tokens: documents, tokens, shards, per source."""
    blocks: list[Block] = []
    for s in (s for s in steps if s["type"] == "tokenize"):
        extra = s.get("extra", {})
        blocks.append(("h", 2, "Tokens"))
        trained = extra.get("tokenizer_trained_on")
        tok_note = (
            f" (a {md_text(extra.get('vocab_size'))}-entry byte-level BPE trained here, as `zephyr tokenizer train` does, on "
            f"{_n(trained['documents'])} documents: a {_bytes(trained['sample_bytes'])} sample of the step input)"
            if trained
            else ""
        )
        blocks.append(
            (
                "p",
                f"{_n(extra.get('num_documents', 0))} documents, {_n(extra.get('num_tokens', 0))} tokens "
                f"({md_text(extra.get('dtype'))}) in {md_text(extra.get('num_shards'))} shards at "
                f"{md_code(extra.get('shards_dir'))}; tokenizer {md_code(extra.get('tokenizer'))}{tok_note}.",
            )
        )
        per = extra.get("per_source", {})
        if per:
            blocks.append(
                (
                    "table",
                    ["source", "documents", "tokens", "tokens per document"],
                    [
                        [
                            md_text(k),
                            _n(v["documents"]),
                            _n(v["tokens"]),
                            f"{v['tokens'] / v['documents']:.0f}" if v["documents"] else "–",
                        ]
                        for k, v in per.items()
                    ],
                )
            )
    return blocks


def _train_blocks(steps: list[dict[str, Any]], plots: dict[str, str]) -> list[Block]:
    """6. Training: steps, tokens, loss, throughput, and their curves."""
    blocks: list[Block] = []
    for s in (s for s in steps if s["type"] == "train"):
        extra = s.get("extra", {})
        blocks.append(("h", 2, "Training"))
        loss0, loss1 = extra.get("first_loss"), extra.get("final_loss")
        tps = extra.get("mean_tokens_per_s")
        text = f"{md_text(extra.get('steps'))} steps, {_n(extra.get('tokens_trained', 0))} tokens"
        if loss0 is not None and loss1 is not None:
            text += f"; loss {loss0:.4f} → {loss1:.4f}"
        if tps:
            text += f"; {tps:,.0f} tokens/s"
        if extra.get("resumed_from"):
            text += f"; resumed from step {md_text(extra['resumed_from'])}"
        if extra.get("packing"):
            text += f"; packing {md_text(extra['packing'])}"
        if extra.get("instances_filtered") is not None:
            text += f"; {_n(extra['instances_filtered'])} samples masked by the instance filter"
        blocks.append(
            (
                "p",
                text
                + f". Metrics: {md_code(extra.get('log'))}; checkpoints: {md_code(extra.get('checkpoints'))}.",
            )
        )
        if extra.get("mix_tokens"):
            share = extra.get("mix_share") or {}
            blocks.append(
                (
                    "table",
                    ["source", "tokens drawn", "share over the last window"],
                    [[md_text(k), _n(v), f"{share.get(k, 0):.3f}"] for k, v in extra["mix_tokens"].items()],
                )
            )
        if "training" in plots:
            blocks.append(("img", plots["training"], "training loss and tokens/s per step"))
    return blocks


# -- rendering -------------------------------------------------------------------------------------------
def render_markdown(blocks: list[Block]) -> str:
    lines: list[str] = []
    for block in blocks:
        kind = block[0]
        if kind == "h":
            lines += ["#" * block[1] + " " + block[2], ""]
        elif kind == "p":
            lines += [block[1], ""]
        elif kind == "table":
            header, rows = block[1], block[2]
            lines.append(md_row(header))
            lines.append("|" + "|".join("---" for _ in header) + "|")
            lines += [md_row(row) for row in rows]
            lines.append("")
        elif kind == "img":
            lines += [f"![{md_text(block[2])}]({quote(block[1])})", ""]
        elif kind in (DEDUP, FILTER):
            lines += examples_markdown(block)
    return "\n".join(lines)


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
    + EXAMPLE_CSS
)


def render_html(blocks: list[Block], title: str, *, base: Path) -> str:
    """One self-contained page: plots inlined from ``base`` (the job folder), no external CSS, JS or fonts."""
    body: list[str] = []
    for block in blocks:
        kind = block[0]
        if kind == "h":
            body.append(f"<h{block[1]}>{inline_html(block[2])}</h{block[1]}>")
        elif kind == "p":
            body.append(f"<p>{inline_html(block[1])}</p>")
        elif kind == "table":
            head = "".join(f"<th>{inline_html(h)}</th>" for h in block[1])
            rows = "".join(
                "<tr>" + "".join(f"<td>{inline_html(str(c))}</td>" for c in row) + "</tr>" for row in block[2]
            )
            body.append(f"<table><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table>")
        elif kind == "img":
            body.append(_inline_image(base / block[1], block[2]))
        elif kind in (DEDUP, FILTER):
            body.append(examples_html(block))
    return (
        f"<!DOCTYPE html>\n<html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
        f"<style>{_STYLE}</style></head><body>\n" + "\n".join(body) + "\n</body></html>\n"
    )


def write_report(job_dir: str | os.PathLike[str]) -> ReportPaths:
    """Write ``report.md``, ``report.html`` and ``plots/*.png`` into ``job_dir`` from its ``stats.json``."""
    job = Path(job_dir)
    try:
        stats = json.loads((job / "stats.json").read_text())
    except (FileNotFoundError, json.JSONDecodeError) as exc:
        raise InputError(f"no readable stats.json in {job} ({exc}); run the pipeline first") from None
    plots = make_plots(stats, job / "plots")
    blocks = build_blocks(stats, plots)
    markdown = job / "report.md"
    page = job / "report.html"
    for path, text in (
        (markdown, render_markdown(blocks)),
        (page, render_html(blocks, f"zephyr: {stats['pipeline']}", base=job)),
    ):
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, path)
    log.info("report: %s (%d plots)", markdown, len(plots))
    return ReportPaths(markdown, page, [job / p for p in plots.values()])
