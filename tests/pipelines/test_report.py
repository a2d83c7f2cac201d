"""The report: example rows saved by the stages (dedup pairs, filter kept/dropped), a self-contained HTML page
that escapes every text, and plots read at a glance (linear axes, counts on bars, legends outside)."""

from __future__ import annotations

import base64
import io
import json
import sys
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from zephyr.pipelines.config import parse_config
from zephyr.pipelines.examples import (
    EXAMPLES_FILE,
    PARTS_DIR,
    ClusterGroups,
    CollectExamples,
    ReasonGroups,
    merge_dedup_examples,
    merge_filter_examples,
)
from zephyr.pipelines.report import build_blocks, diff_spans, render_html, render_markdown, write_report
from zephyr.pipelines.runner import ProgressReporter, run_pipeline

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))  # the scoring rule
from dedup_evaluate import reference_jaccard  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
SAMPLE = REPO / "data" / "sample" / "sample.parquet"
SCRIPT = "<script>alert(1)</script>"


def _sample(source: str, n: int) -> list[dict]:
    table = pq.read_table(SAMPLE)
    return table.filter(pc.equal(table["source"], source)).slice(0, n).to_pylist()


@pytest.fixture(scope="module")
def job(tmp_path_factory) -> Path:
    """read → heuristic_filter → exact_dedup → fuzzy_dedup on 30 sample documents plus planted rows: an exact
    copy, a near copy whose edited word is a <script> tag, and two short junk rows the heuristics drop."""
    root = tmp_path_factory.mktemp("report")
    rows = _sample("kjv", 20) + _sample("milton", 10)
    by_id = {r["id"]: r for r in rows}
    words = by_id["kjv/5"]["text"].split(" ")
    plain = [i for i, w in enumerate(words) if w.isalpha()][-3]  # inside the last verse: C4 keeps the line
    words[plain] = SCRIPT
    rows += [
        {**by_id["kjv/3"], "id": "x/exact"},
        {**by_id["kjv/5"], "id": "x/near", "text": " ".join(words)},
        {**by_id["kjv/3"], "id": "x/junk1", "text": f"{SCRIPT} buy now"},
        {**by_id["kjv/3"], "id": "x/junk2", "text": "click here"},
    ]
    data = root / "in.parquet"
    pq.write_table(pa.Table.from_pylist(rows, schema=pq.read_schema(SAMPLE)), data)
    config = parse_config(
        {
            "name": "report-test",
            "steps": [
                {"step": "read", "paths": [str(data)], "num_shards": 3},
                {"step": "heuristic_filter"},
                {"step": "exact_dedup"},
                {"step": "fuzzy_dedup", "threshold": 0.8},
            ],
        }
    )
    run_pipeline(
        config, root / "job", execution={"executor": "inprocess"}, reporter=ProgressReporter(io.StringIO())
    )
    return root / "job"


def _stats(job: Path) -> dict[str, dict]:
    return {s["step"]: s for s in json.loads((job / "stats.json").read_text())["steps"]}


def _sidecar(step: dict) -> dict:
    path = Path(step["extra"]["examples"])
    side = Path(f"{step['dir']}.zephyr")  # the step's sidecar
    assert path == side / EXAMPLES_FILE and not (side / PARTS_DIR).exists()
    return json.loads(path.read_text())


def test_fuzzy_stage_saves_the_planted_pair_with_its_true_jaccard(job):
    payload = _sidecar(_stats(job)["fuzzy_dedup"])
    (cluster,) = payload["clusters"]
    assert cluster["cluster"] == "kjv/5" and cluster["size"] == 2
    assert cluster["kept"]["id"] == "kjv/5" and cluster["removed"]["id"] == "x/near"
    steps = _stats(job)
    inputs = pa.concat_tables([pq.read_table(f) for f in steps["exact_dedup"]["files"]])
    text = dict(zip(inputs["id"].to_pylist(), inputs["text"].to_pylist()))
    assert cluster["jaccard"] == pytest.approx(reference_jaccard(text["kjv/5"], text["x/near"]), abs=1e-4)
    assert 0.8 <= cluster["jaccard"] < 1
    # the excerpt starts a little before the edit, so the difference is on screen
    assert cluster["removed"]["cut_before"] and SCRIPT in cluster["removed"]["text"]
    assert SCRIPT not in cluster["kept"]["text"]
    assert payload["shingles"] == "word 5-grams"


def test_exact_stage_saves_its_cluster(job):
    payload = _sidecar(_stats(job)["exact_dedup"])
    (cluster,) = payload["clusters"]
    assert (cluster["kept"]["id"], cluster["removed"]["id"], cluster["jaccard"]) == ("kjv/3", "x/exact", 1.0)
    assert cluster["kept"]["text"] == cluster["removed"]["text"]


def test_filter_stage_saves_kept_and_dropped_examples_per_top_reason(job):
    step = _stats(job)["heuristic_filter"]
    payload = _sidecar(step)
    assert len(payload["kept"]) == 3
    kept_ids = set(
        pa.concat_tables([pq.read_table(f, columns=["id"]) for f in step["files"]])["id"].to_pylist()
    )
    assert {r["id"] for r in payload["kept"]} <= kept_ids
    top = sorted(step["dropped_by_reason"].items(), key=lambda kv: (-kv[1], kv[0]))[:3]
    assert {reason: entry["rows"] for reason, entry in payload["dropped"].items()} == dict(top)
    dropped = {r["id"] for entry in payload["dropped"].values() for r in entry["examples"]}
    assert {"x/junk1", "x/junk2"} <= dropped and not dropped & kept_ids
    assert all(1 <= len(entry["examples"]) <= 3 for entry in payload["dropped"].values())
    assert all(r["fields"]["source"] for r in payload["kept"])


class _Tags(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))


def test_report_is_self_contained_and_escapes_texts(job):
    page = (job / "report.html").read_text()
    parser = _Tags()
    parser.feed(page)
    tags = [t for t, _ in parser.tags]
    assert "script" not in tags and "link" not in tags and "iframe" not in tags
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page and SCRIPT not in page
    for tag, attrs in parser.tags:
        assert all(not (v or "").startswith(("http:", "https:", "//", "file:")) for v in attrs.values()), tag
        if "href" in attrs:
            assert attrs["href"].startswith("#"), attrs
        if "src" in attrs:
            assert attrs["src"].startswith("data:image/png;base64,"), attrs["src"][:60]
    images = [a["src"] for t, a in parser.tags if t == "img"]
    assert len(images) >= 4  # rows, time, sources, a cluster plot per dedup stage
    for src in images:
        assert base64.b64decode(src.split(",", 1)[1])[:8] == b"\x89PNG\r\n\x1a\n"
    assert "url(" not in page and "@import" not in page


def test_report_renders_from_the_stats_json_alone(job, tmp_path):
    """The report is a function of the job's ``stats.json``: copied elsewhere it renders the same report,
    worded in steps."""
    stats = json.loads((job / "stats.json").read_text())
    assert stats["version"] == 2 and all(s["step"] and s["version"] == 2 for s in stats["steps"])
    (tmp_path / "copy").mkdir()
    (tmp_path / "copy" / "stats.json").write_text(json.dumps(stats, indent=1) + "\n")
    write_report(tmp_path / "copy")
    text = (tmp_path / "copy" / "report.md").read_text()
    assert text == (job / "report.md").read_text()
    assert "## Steps" in text and "| # | step | type |" in text and "every step balances exactly" in text
    assert "4 steps (" in text and "| step | reason | rows |" in text and "Total step time" in text
    assert "Stages" not in text and "every stage" not in text
    for step in stats["steps"]:
        assert f"| {step['index']} | {step['step']} | {step['type']} |" in text
    plots = sorted(p.name for p in (tmp_path / "copy" / "plots").iterdir())
    assert {"rows.png", "time.png", "clusters_fuzzy_dedup.png"} <= set(plots)


def test_report_shows_examples_per_dedup_stage_and_filter(job):
    page = (job / "report.html").read_text()
    markdown = (job / "report.md").read_text()
    for step in ("exact_dedup", "fuzzy_dedup"):
        assert f"Examples from <code>{step}</code>" in page and f"Examples from `{step}`" in markdown
    assert (
        "Examples: <code>heuristic_filter</code>" in page and "### Examples: `heuristic_filter`" in markdown
    )
    assert '<mark class="removed">&lt;script&gt;alert(1)&lt;/script&gt;</mark>' in page
    assert "Jaccard(kept, removed) = <b>0.9" in page
    assert "x/junk1" in page and "x/junk2" in markdown
    assert SCRIPT not in markdown and "&lt;script&gt;alert(1)&lt;/script&gt; buy now" in markdown


def test_collected_examples_do_not_depend_on_the_task_split(tmp_path):
    rng = np.random.default_rng(0)
    n = 400
    ids = [f"doc-{i:04d}" for i in range(n)]
    cluster = rng.integers(0, 60, n)
    keeper = {c: min(i for i in range(n) if cluster[i] == c) for c in set(cluster.tolist())}
    sizes = np.bincount(cluster, minlength=60)
    table = pa.table(
        {
            "id": ids,
            "text": [f"text of {i} <b>" for i in ids],
            "dup_cluster": [ids[keeper[c]] for c in cluster.tolist()],
            "dup_cluster_size": sizes[cluster],
            "dup_keep": [keeper[c] == i for i, c in enumerate(cluster.tolist())],
            "reason": pa.array(rng.choice(["a", "b", "c", "d", ""], n)).cast(pa.string()),
        }
    )
    table = table.set_column(5, "reason", pc.if_else(pc.equal(table["reason"], ""), None, table["reason"]))

    def run(splits: list[int], tasks: int, name: str) -> tuple[dict, dict]:
        """Feed the rows in batches cut at ``splits`` to ``tasks`` op instances (round robin), then merge."""
        dedup_dir, filter_dir = tmp_path / f"{name}-dedup", tmp_path / f"{name}-filter"
        ops = [
            (
                CollectExamples(
                    str(dedup_dir / PARTS_DIR),
                    ClusterGroups(),
                    id_column="id",
                    text_column="text",
                    per_group=2,
                    max_groups=3,
                ),
                CollectExamples(
                    str(filter_dir / PARTS_DIR),
                    ReasonGroups("reason"),
                    id_column="id",
                    text_column="text",
                ),
            )
            for _ in range(tasks)
        ]
        bounds = [0, *splits, n]
        for k, (lo, hi) in enumerate(zip(bounds, bounds[1:])):
            for op in ops[k % tasks]:
                assert op(table.slice(lo, hi - lo)).num_rows == hi - lo  # a pass-through op
        dedup = merge_dedup_examples(dedup_dir, shingle="word", ngram=5, normalize="default")
        filtered = merge_filter_examples(filter_dir, {"a": 9, "b": 7, "c": 5, "d": 1})
        return json.loads(dedup.read_text()), json.loads(filtered.read_text())

    one = run([], 1, "one")
    many = run([37, 90, 91, 250, 333], 3, "many")
    assert one == many
    dedup, filtered = one
    assert len(dedup["clusters"]) == 3 and all(c["kept"]["id"] == c["cluster"] for c in dedup["clusters"])
    assert sorted(filtered["dropped"]) == ["a", "b", "c"] and len(filtered["kept"]) == 3
    assert all(len(e["examples"]) == 3 for e in filtered["dropped"].values())


def test_collector_starts_again_when_its_folder_is_cleared(tmp_path):
    folder = tmp_path / "stage" / PARTS_DIR
    op = CollectExamples(str(folder), ReasonGroups("reason"), id_column="id", text_column="text")
    batch = pa.table({"id": ["a", "b"], "text": ["x", "y"], "reason": [None, "short"]})
    op(batch)
    assert len(list(folder.glob("part-*.parquet"))) == 1
    op(batch)  # nothing new: no second part
    assert len(list(folder.glob("part-*.parquet"))) == 1
    import shutil

    shutil.rmtree(tmp_path / "stage")  # a --from rerun clears the stage folder; the op instance is cached
    op(batch)
    payload = json.loads(merge_filter_examples(tmp_path / "stage", {"short": 1}).read_text())
    assert [r["id"] for r in payload["kept"]] == ["a"]
    assert [r["id"] for r in payload["dropped"]["short"]["examples"]] == ["b"]


def test_empty_stage_says_so(tmp_path):
    dedup = json.loads(
        merge_dedup_examples(tmp_path, shingle="word", ngram=5, normalize="default").read_text()
    )
    filtered = json.loads(merge_filter_examples(tmp_path, {}).read_text())
    assert dedup["clusters"] == [] and filtered["kept"] == [] and filtered["dropped"] == {}
    steps = [
        {
            "step": "f",
            "type": "heuristic_filter",
            "index": 0,
            "rows_in": 0,
            "rows_kept": 0,
            "rows_dropped": 0,
            "rows_quarantined": 0,
            "seconds": 0.0,
            "balanced": True,
            "extra": {"examples": str(tmp_path / EXAMPLES_FILE)},
        },
    ]
    (tmp_path / "d").mkdir()
    merge_dedup_examples(tmp_path / "d", shingle="word", ngram=5, normalize="default")
    steps.append(
        {
            **steps[0],
            "step": "d",
            "type": "fuzzy_dedup",
            "extra": {"examples": str(tmp_path / "d" / EXAMPLES_FILE)},
        }
    )
    blocks = build_blocks({"pipeline": "p", "job_dir": str(tmp_path), "steps": steps}, {})
    page = render_html(blocks, "p", base=tmp_path)
    assert "no clusters, nothing was removed" in page and "Nothing dropped." in page
    assert "no clusters, nothing was removed" in render_markdown(blocks)


def test_diff_spans_mark_only_the_changed_words():
    left, right = diff_spans("a b c d e", "a b X d e f")
    assert left == [("a b", False), ("c", True), ("d e", False)]
    assert right == [("a b", False), ("X", True), ("d e", False), ("f", True)]


def test_plots_use_linear_axes_counts_on_bars_and_legends_outside(tmp_path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from zephyr.pipelines import report

    figures: dict[str, object] = {}
    log = tmp_path / "train.jsonl"
    log.write_text(
        "".join(json.dumps({"step": i, "loss": 5 - i, "tokens_per_s": 100.0 + i}) + "\n" for i in range(4))
    )
    base = {"rows_in": 1500, "rows_quarantined": 0, "seconds": 1.0, "index": 0, "balanced": True}
    steps = [
        {**base, "step": "read", "type": "read", "rows_kept": 1500, "rows_dropped": 0},
        {
            **base,
            "step": "fuzzy",
            "type": "fuzzy_dedup",
            "rows_kept": 1440,
            "rows_dropped": 60,
            "cluster_sizes": {"1": 1386, "2": 54, "3": 2},
        },
        {
            **base,
            "step": "train",
            "type": "train",
            "rows_kept": 0,
            "rows_dropped": 0,
            "extra": {"log": str(log)},
        },
    ]
    original = plt.close
    plt.close = lambda fig=None: figures.__setitem__(
        fig.axes[0].get_title() or str(len(figures)), fig
    )  # keep them
    try:
        made = report.make_plots({"steps": steps}, tmp_path / "plots")
    finally:
        plt.close = original
    assert set(made) == {"rows", "time", "clusters_fuzzy", "training"}
    clusters = next(f for name, f in figures.items() if name.startswith("fuzzy:"))
    ax = clusters.axes[0]
    assert ax.get_yscale() == "linear" and [t.get_text() for t in ax.texts] == ["54", "2"]
    assert "1,386 kept documents had none" in ax.get_title()
    rows = figures["rows per step"]
    rows.canvas.draw()
    axes_box = rows.axes[0].get_window_extent()
    legend_box = rows.axes[0].get_legend().get_window_extent()
    assert legend_box.x0 >= axes_box.x1  # beside the bars, never over them
    assert "1,440 + 60 dropped" in [t.get_text() for t in rows.axes[0].texts]
    training = figures["training loss"]
    assert [a.get_title() for a in training.axes] == ["training loss", "throughput (tokens/s)"]
    assert list(training.axes[1].lines[0].get_ydata()) == [100.0, 101.0, 102.0, 103.0]
    for fig in figures.values():
        plt.close(fig)


def test_report_screenshot_script(tmp_path):
    import shutil
    import subprocess

    script = REPO / "scripts" / "report-screenshot"
    missing = subprocess.run(
        [script, tmp_path / "nope.html", tmp_path / "x.png"], capture_output=True, text=True
    )
    assert missing.returncode == 1 and "nope.html: no such file" in missing.stderr
    if not (shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")):
        pytest.skip("no Chromium here (apt-get install -y chromium)")
    page = tmp_path / "report.html"
    page.write_text("<!DOCTYPE html><html><body><h1>report</h1></body></html>")
    done = subprocess.run(
        [script, page, tmp_path / "out" / "shot.png", "400", "300"], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "out" / "shot.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
