"""The job report: ``report.md`` and ``report.html`` (PNG plots in ``plots/``) from a job's ``stats.json``.

Every number comes from the job's ``stats.json`` (``zephyr.pipelines.runner``), nothing is recomputed, so
the report and the stats always agree. Sections:

1. Stages: rows in / kept / dropped / quarantined, bytes in and out, seconds, tasks resumed, and whether
   the rows balance (``in = kept + dropped + quarantined``) — plot ``rows.png`` and ``time.png``.
2. Why rows were dropped: per stage and reason.
3. Retention per source and per language (rows read → rows in the final data stage) — ``sources.png``.
4. Dedup: kept documents by duplicate-cluster size (a cluster of n had n - 1 removed) — ``clusters_*.png``.
5. Tokens: documents, tokens, shards, per source.
6. Training: loss curve (``loss.png``), steps, throughput.

Plots use matplotlib's Agg backend (no display needed).
"""

from __future__ import annotations

import html
import json
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from zephyr.pipelines.config import DATA_STAGES

from zephyr.errors import InputError

__all__ = ["ReportPaths", "write_report", "build_blocks", "render_markdown", "render_html"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ReportPaths:
    markdown: Path
    html: Path
    plots: list[Path]


# A report is a list of blocks: ("h", level, text) | ("p", text) | ("table", header, rows) | ("img", path, alt)
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


def _data_stages(stages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [s for s in stages if s["type"] in DATA_STAGES]


def build_blocks(stats: dict[str, Any], plots: dict[str, str]) -> list[Block]:
    """The report's content, format-free; ``plots`` maps plot names to relative PNG paths."""
    stages = stats["stages"]
    blocks: list[Block] = [("h", 1, f"Pipeline report: {stats['pipeline']}")]
    ran = sum(1 for s in stages if s.get("status") == "ran")
    blocks.append(
        (
            "p",
            f"Job folder `{stats['job_dir']}`; config `{stats.get('config')}`; {len(stages)} stages "
            f"({ran} ran in this invocation, {len(stages) - ran} skipped as complete); executor "
            f"`{stats.get('execution', {}).get('executor')}`.",
        )
    )
    # 1. stages
    blocks.append(("h", 2, "Stages"))
    header = ["#", "stage", "type", "rows in", "kept", "dropped", "quarantined", "bytes in", "bytes out",
              "seconds", "tasks (resumed)", "status", "balanced"]
    rows = []
    for s in stages:
        is_rows = s["type"] in DATA_STAGES or s["type"] == "tokenize"
        rows.append(
            [
                str(s["index"]), s["stage"], s["type"],
                _n(s["rows_in"]) if is_rows else "–",
                _n(s["rows_kept"]) if is_rows else "–",
                _n(s["rows_dropped"]) if is_rows else "–",
                _n(s["rows_quarantined"]) if is_rows else "–",
                _bytes(s.get("bytes_in", 0)) if is_rows else "–",
                _bytes(s.get("bytes_out", 0)) if is_rows else "–",
                f"{s['seconds']:.1f}",
                f"{s.get('tasks', 0)} ({s.get('tasks_resumed', 0)})",
                s.get("status", ""),
                "yes" if s.get("balanced") else "NO",
            ]
        )
    blocks.append(("table", header, rows))
    balanced = all(s.get("balanced") for s in stages)
    blocks.append(
        (
            "p",
            "Row accounting: every stage balances exactly (rows in = kept + dropped + quarantined), checked "
            "against the row counts of the Parquet files."
            if balanced
            else "Row accounting: SOME STAGES DO NOT BALANCE — see the table above.",
        )
    )
    total_seconds = sum(s["seconds"] for s in stages)
    blocks.append(("p", f"Total stage time: {total_seconds:.1f} s (stages skipped in this run show their original time)."))
    for name in ("rows", "time"):
        if name in plots:
            blocks.append(("img", plots[name], name))
    # 2. drop reasons
    reasons = [(s["stage"], r, n) for s in stages for r, n in s.get("dropped_by_reason", {}).items()]
    if reasons:
        blocks.append(("h", 2, "Why rows were dropped"))
        blocks.append(("table", ["stage", "reason", "rows"], [[st, r, _n(n)] for st, r, n in reasons]))
    quarantine = [(s["stage"], f) for s in stages for f in s.get("quarantine_files", [])]
    if quarantine:
        blocks.append(("h", 3, "Quarantined rows"))
        blocks.append(("table", ["stage", "file"], [[st, f"`{f}`"] for st, f in quarantine]))
    # 3. retention
    data = _data_stages(stages)
    if data:
        first, last = data[0], data[-1]
        for key, title in (("per_source", "source"), ("per_lang", "language")):
            start = _retention_start(data, key)
            end = last.get(key, {}).get("out", {})
            if not start:
                continue
            blocks.append(("h", 2, f"Retention per {title}"))
            where = first["stage"] if key == "per_source" else next(
                (s["stage"] for s in data if s.get(key, {}).get("in")), first["stage"]
            )
            blocks.append(("p", f"Rows entering `{where}` → rows written by `{last['stage']}`."))
            table_rows = [[v, _n(start[v]), _n(end.get(v, 0)), _pct(end.get(v, 0), start[v])]
                          for v in sorted(start, key=lambda v: -start[v])]
            total_in, total_out = sum(start.values()), sum(end.values())
            table_rows.append(["**total**", _n(total_in), _n(total_out), _pct(total_out, total_in)])
            blocks.append(("table", [title, "rows in", "rows kept", "retention"], table_rows))
            if key == "per_source":
                stage_rows = []
                for s in data:
                    out = s.get(key, {}).get("out", {})
                    stage_rows.append([s["stage"], *[_n(out.get(v, 0)) for v in sorted(start)]])
                blocks.append(("p", "Rows per source after each stage:"))
                blocks.append(("table", ["after stage", *sorted(start)], stage_rows))
                if "sources" in plots:
                    blocks.append(("img", plots["sources"], "rows per source after each stage"))
    # 4. dedup
    dedup = [s for s in stages if s["type"] in ("exact_dedup", "fuzzy_dedup")]
    if dedup:
        blocks.append(("h", 2, "Dedup clusters"))
        for s in dedup:
            sizes = {int(k): v for k, v in s.get("cluster_sizes", {}).items()}
            multi = {k: v for k, v in sizes.items() if k > 1}
            lsh = s.get("extra", {}).get("lsh")
            note = (f" LSH: {lsh['bands']} bands × {lsh['rows']} rows (S-curve midpoint ≈ {lsh['lsh_threshold']}), "
                    f"verified Jaccard ≥ {lsh['threshold']}.") if lsh else ""
            blocks.append(
                (
                    "p",
                    f"`{s['stage']}`: {_n(sum(multi.values()))} cluster(s) with duplicates, "
                    f"{_n(s['rows_dropped'])} document(s) removed.{note}",
                )
            )
            if sizes:
                blocks.append(("table", ["cluster size", "clusters (kept documents)", "documents removed"],
                               [[str(k), _n(v), _n(v * (k - 1))] for k, v in sorted(sizes.items())]))
            if f"clusters_{s['stage']}" in plots:
                blocks.append(("img", plots[f"clusters_{s['stage']}"], f"cluster sizes of {s['stage']}"))
    # 5. tokens
    for s in (s for s in stages if s["type"] == "tokenize"):
        extra = s.get("extra", {})
        blocks.append(("h", 2, "Tokens"))
        trained = extra.get("tokenizer_trained_on")
        tok_note = (f" (a {extra.get('vocab_size')}-entry BPE trained here on {_n(trained['documents'])} documents)"
                    if trained else "")
        blocks.append(
            (
                "p",
                f"{_n(extra.get('num_documents', 0))} documents, {_n(extra.get('num_tokens', 0))} tokens "
                f"({extra.get('dtype')}) in {extra.get('num_shards')} shards at `{extra.get('shards_dir')}`; "
                f"tokenizer `{extra.get('tokenizer')}`{tok_note}.",
            )
        )
        per = extra.get("per_source", {})
        if per:
            blocks.append(("table", ["source", "documents", "tokens", "tokens per document"],
                           [[k, _n(v["documents"]), _n(v["tokens"]),
                             f"{v['tokens'] / v['documents']:.0f}" if v["documents"] else "–"]
                            for k, v in per.items()]))
    # 6. training
    for s in (s for s in stages if s["type"] == "train"):
        extra = s.get("extra", {})
        blocks.append(("h", 2, "Training"))
        loss0, loss1 = extra.get("first_loss"), extra.get("final_loss")
        tps = extra.get("mean_tokens_per_s")
        text = f"{extra.get('steps')} steps, {_n(extra.get('tokens_trained', 0))} tokens"
        if loss0 is not None and loss1 is not None:
            text += f"; loss {loss0:.4f} → {loss1:.4f}"
        if tps:
            text += f"; {tps:,.0f} tokens/s"
        if extra.get("resumed_from"):
            text += f"; resumed from step {extra['resumed_from']}"
        if extra.get("packing"):
            text += f"; packing {extra['packing']}"
        if extra.get("instances_filtered") is not None:
            text += f"; {_n(extra['instances_filtered'])} samples masked by the instance filter"
        blocks.append(("p", text + f". Metrics: `{extra.get('log')}`; checkpoints: `{extra.get('checkpoints')}`."))
        if extra.get("mix_tokens"):
            share = extra.get("mix_share") or {}
            blocks.append(("table", ["source", "tokens drawn", "share over the last window"],
                           [[k, _n(v), f"{share.get(k, 0):.3f}"] for k, v in extra["mix_tokens"].items()]))
        if "loss" in plots:
            blocks.append(("img", plots["loss"], "training loss"))
    return blocks


def _retention_start(data: list[dict[str, Any]], key: str) -> dict[str, int]:
    for s in data:
        start = s.get(key, {}).get("in")
        if start:
            return start
    return {}


# -- plots -----------------------------------------------------------------------------------------------
def make_plots(stats: dict[str, Any], folder: Path) -> dict[str, str]:
    """Write the PNG plots; returns name → path relative to the report."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from zephyr.pipelines.stages import read_train_log

    folder.mkdir(parents=True, exist_ok=True)
    out: dict[str, str] = {}
    stages = stats["stages"]

    def save(fig: Any, name: str) -> None:
        fig.tight_layout()
        fig.savefig(folder / f"{name}.png", dpi=100)
        plt.close(fig)
        out[name] = f"{folder.name}/{name}.png"

    data = [s for s in stages if s["type"] in DATA_STAGES or s["type"] == "tokenize"]
    if data:
        fig, ax = plt.subplots(figsize=(8, 3.5))
        names = [s["stage"] for s in data]
        kept = [s["rows_kept"] for s in data]
        dropped = [s["rows_dropped"] for s in data]
        quarantined = [s["rows_quarantined"] for s in data]
        ax.bar(names, kept, label="kept", color="#4c72b0")
        ax.bar(names, dropped, bottom=kept, label="dropped", color="#dd8452")
        ax.bar(names, quarantined, bottom=[k + d for k, d in zip(kept, dropped)], label="quarantined", color="#c44e52")
        ax.set_ylabel("rows")
        ax.set_title("rows per stage")
        ax.legend()
        ax.tick_params(axis="x", rotation=30)
        save(fig, "rows")
    fig, ax = plt.subplots(figsize=(8, 0.4 * len(stages) + 1.2))
    ax.barh([s["stage"] for s in stages][::-1], [s["seconds"] for s in stages][::-1], color="#55a868")
    ax.set_xlabel("seconds")
    ax.set_title("time per stage")
    save(fig, "time")
    sources = _retention_start(_data_stages(stages), "per_source")
    if sources:
        fig, ax = plt.subplots(figsize=(8, 3.5))
        for value in sorted(sources):
            series = [sources[value]] + [s.get("per_source", {}).get("out", {}).get(value, 0) for s in _data_stages(stages)]
            ax.plot(["input"] + [s["stage"] for s in _data_stages(stages)], series, marker="o", label=value)
        ax.set_ylabel("rows")
        ax.set_title("rows per source")
        ax.legend()
        ax.tick_params(axis="x", rotation=30)
        save(fig, "sources")
    for s in stages:
        if s["type"] in ("exact_dedup", "fuzzy_dedup") and s.get("cluster_sizes"):
            sizes = sorted((int(k), v) for k, v in s["cluster_sizes"].items())
            fig, ax = plt.subplots(figsize=(6, 3))
            ax.bar([str(k) for k, _ in sizes], [v for _, v in sizes], color="#8172b3")
            ax.set_yscale("log")
            ax.set_xlabel("cluster size (documents)")
            ax.set_ylabel("clusters")
            ax.set_title(f"{s['stage']}: duplicate cluster sizes")
            save(fig, f"clusters_{s['stage']}")
        if s["type"] == "train" and s.get("extra", {}).get("log"):
            records = read_train_log(s["extra"]["log"])
            if records:
                fig, ax = plt.subplots(figsize=(7, 3.5))
                ax.plot([r["step"] for r in records], [r["loss"] for r in records], color="#4c72b0")
                ax.set_xlabel("step")
                ax.set_ylabel("loss")
                ax.set_title("training loss")
                ax.grid(alpha=0.3)
                save(fig, "loss")
    return out


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
            lines.append("| " + " | ".join(header) + " |")
            lines.append("|" + "|".join("---" for _ in header) + "|")
            lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
            lines.append("")
        elif kind == "img":
            lines += [f"![{block[2]}]({block[1]})", ""]
    return "\n".join(lines)


def _inline(text: str) -> str:
    """Markdown's `code` and **bold** in HTML, everything else escaped."""
    import re

    escaped = html.escape(text)
    escaped = re.sub(r"`([^`]*)`", r"<code>\1</code>", escaped)
    return re.sub(r"\*\*([^*]*)\*\*", r"<b>\1</b>", escaped)


def render_html(blocks: list[Block], title: str) -> str:
    body: list[str] = []
    for block in blocks:
        kind = block[0]
        if kind == "h":
            body.append(f"<h{block[1]}>{_inline(block[2])}</h{block[1]}>")
        elif kind == "p":
            body.append(f"<p>{_inline(block[1])}</p>")
        elif kind == "table":
            head = "".join(f"<th>{_inline(h)}</th>" for h in block[1])
            rows = "".join("<tr>" + "".join(f"<td>{_inline(str(c))}</td>" for c in row) + "</tr>" for row in block[2])
            body.append(f"<table><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table>")
        elif kind == "img":
            body.append(f'<p><img src="{html.escape(block[1])}" alt="{html.escape(block[2])}"></p>')
    style = (
        "body{font-family:sans-serif;max-width:1100px;margin:2em auto;color:#222}"
        "table{border-collapse:collapse;margin:0.5em 0}td,th{border:1px solid #ccc;padding:3px 8px;text-align:right}"
        "td:first-child,th:first-child,td:nth-child(2){text-align:left}code{background:#f4f4f4}"
    )
    return (f"<!DOCTYPE html>\n<html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
            f"<style>{style}</style></head><body>\n" + "\n".join(body) + "\n</body></html>\n")


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
    for path, text in ((markdown, render_markdown(blocks)), (page, render_html(blocks, f"zephyr: {stats['pipeline']}"))):
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, path)
    log.info("report: %s (%d plots)", markdown, len(plots))
    return ReportPaths(markdown, page, [job / p for p in plots.values()])
