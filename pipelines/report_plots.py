"""The report's PNG plots, drawn from a job's ``stats.json`` and the trainer's
JSONL log, with matplotlib.

Made to be read at a glance: linear axes (a log axis turns a bar of 54 into a sliver beside one of 1,400),
the count written on every bar, legends outside the data, one idea per plot. Plots:

- ``rows.png``: rows kept, dropped and quarantined per step (horizontal bars, so step names read flat);
- ``time.png``: seconds per step;
- ``sources.png``: rows per source after each data step;
- ``clusters_<step>.png``: duplicate clusters by size, sizes ≥ 2 only (the singletons are counted in the
  title: they would dwarf the bars that matter);
- ``training.png``: loss and tokens/s per step, side by side.

matplotlib's Agg backend: no display needed.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from zephyr.pipelines.config import DATA_STEPS

__all__ = ["make_plots"]

KEPT, DROPPED, QUARANTINED, ACCENT = "#4c72b0", "#dd8452", "#c44e52", "#8172b3"
_DPI = 100


def _data_steps(steps: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [s for s in steps if s["type"] in DATA_STEPS]


def retention_start(data: list[dict[str, Any]], key: str) -> dict[str, int]:
    """Rows per value (source, language) entering the first data step that counted them."""
    for s in data:
        start = s.get(key, {}).get("in")
        if start:
            return start
    return {}


def _label_bars(ax: Any, bars: Any, values: list[int]) -> None:
    """The count at the end of each nonzero bar: a reader never has to estimate a length."""
    ax.bar_label(bars, labels=[f"{v:,}" if v else "" for v in values], padding=2, fontsize=8)


def _rows_plot(plt: Any, steps: list[dict[str, Any]], save: Callable[[Any, str], None]) -> None:
    """One stacked bar per step (kept, dropped, quarantined), its counts written at its end."""
    data = [s for s in steps if s["type"] in DATA_STEPS or s["type"] == "tokenize"][::-1]
    if not data:
        return
    names = [s["step"] for s in data]
    fig, ax = plt.subplots(figsize=(9, 0.38 * len(data) + 1.1))
    left = [0] * len(data)
    for label, color, key in (
        ("kept", KEPT, "rows_kept"),
        ("dropped", DROPPED, "rows_dropped"),
        ("quarantined", QUARANTINED, "rows_quarantined"),
    ):
        values = [s[key] for s in data]
        if label == "kept" or any(values):
            ax.barh(names, values, left=left, label=label, color=color)
            left = [a + b for a, b in zip(left, values)]
    labels = []
    for s in data:
        parts = [f"{s['rows_kept']:,}"]
        parts += [
            f"{s[k]:,} {w}"
            for k, w in (("rows_dropped", "dropped"), ("rows_quarantined", "quarantined"))
            if s[k]
        ]
        labels.append(" + ".join(parts))
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
    sources = retention_start(data, "per_source")
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


def _cluster_plot(plt: Any, step: dict[str, Any], save: Callable[[Any, str], None]) -> None:
    sizes = sorted((int(k), v) for k, v in step.get("cluster_sizes", {}).items())
    multi = [(k, v) for k, v in sizes if k > 1]
    if not multi:
        return
    singles = sum(v for k, v in sizes if k == 1)
    fig, ax = plt.subplots(figsize=(min(7.0, 3.2 + 0.45 * len(multi)), 2.8))
    bars = ax.bar([str(k) for k, _ in multi], [v for _, v in multi], color=ACCENT, width=0.6)
    _label_bars(ax, bars, [v for _, v in multi])
    ax.set_xlabel("cluster size (documents)")
    ax.set_ylabel("clusters")
    ax.margins(y=0.15)
    ax.set_title(
        f"{step['step']}: {sum(v for _, v in multi):,} clusters with duplicates\n"
        f"({singles:,} kept documents had none)",
        fontsize=10,
    )
    save(fig, f"clusters_{step['step']}")


def _training_plot(plt: Any, step: dict[str, Any], save: Callable[[Any, str], None]) -> None:
    from zephyr.pipelines.steps import read_train_log

    log_path = step.get("extra", {}).get("log")
    records = read_train_log(log_path) if log_path else []
    if not records:
        return
    steps = [r["step"] for r in records]
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.2))
    left.plot(steps, [r["loss"] for r in records], color=KEPT)
    left.set_title("training loss")
    speed = [(r["step"], r["tokens_per_s"]) for r in records if r.get("tokens_per_s") is not None]
    right.plot([s for s, _ in speed], [v for _, v in speed], color="#55a868")
    right.set_title("throughput (tokens/s)")
    right.set_ylim(bottom=0)
    for ax in (left, right):
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
    save(fig, "training")


def make_plots(stats: dict[str, Any], folder: Path) -> dict[str, str]:
    """Write the PNG plots into ``folder``; returns plot name → path relative to the report."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    folder.mkdir(parents=True, exist_ok=True)
    out: dict[str, str] = {}

    def save(fig: Any, name: str) -> None:
        fig.savefig(folder / f"{name}.png", dpi=_DPI, bbox_inches="tight")
        plt.close(fig)
        out[name] = f"{folder.name}/{name}.png"

    steps = stats["steps"]
    _rows_plot(plt, steps, save)
    _time_plot(plt, steps, save)
    _sources_plot(plt, steps, save)
    for step in steps:
        if step["type"] in ("exact_dedup", "fuzzy_dedup"):
            _cluster_plot(plt, step, save)
        if step["type"] == "train":
            _training_plot(plt, step, save)
    return out
