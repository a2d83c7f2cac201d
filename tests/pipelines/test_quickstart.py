"""The quickstart pipeline end to end on a small slice of the sample, through the ``zephyr run`` command."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from zephyr.pipelines.step import AccountingError, StepOutcome

from zephyr.cli import main

from .conftest import lid_available

REPO = Path(__file__).resolve().parents[2]
SAMPLE = REPO / "data" / "sample" / "sample.parquet"


PLANTED = "~"  # data/sample/plant_duplicates.py: ids <seed id>~<edit>


def make_slice(path: Path) -> Path:
    """A small slice of the sample that still gives every stage something to do: the first documents of each
    source, every planted copy (data/sample/plant_duplicates.py) with its seed, a Latin Milton poem (language
    ID drops it) and chapters with repeated lines (kjv/100-125, mostly Numbers: the heuristics drop most,
    so the quality classifier has negatives to learn from)."""
    table = pq.read_table(SAMPLE)
    ids = table["id"].to_pylist()
    planted = {i for i in ids if PLANTED in i}
    wanted = (
        planted
        | {i.split(PLANTED)[0] for i in planted}
        | {"milton/81"}
        | {f"kjv/{n}" for n in range(100, 126)}
    )
    for source, n in (("kjv", 20), ("milton", 10), ("shakespeare", 10)):
        wanted |= {i for i in ids if i.startswith(f"{source}/") and PLANTED not in i}.intersection(
            [i for i in ids if i.startswith(f"{source}/")][:n]
        )
    pq.write_table(table.filter(pc.is_in(table["id"], pa.array(sorted(wanted)))), path)
    return path


def _planted(kind: str) -> set[str]:
    """Planted ids of one kind: ``web`` (exact after normalization) or ``near`` (every other edit)."""
    ids = pq.read_table(SAMPLE, columns=["id"])["id"].to_pylist()
    return {i for i in ids if PLANTED in i and (i.endswith("~web") == (kind == "web"))}


TINY = [
    "--set",
    "steps.read.num_shards=2",
    "--set",
    "steps.quality.min_score=0.2",  # a classifier trained on ~100 rows scores near 0.5: it only marks
    "--set",
    "steps.tokenize.vocab_size=512",
    "--set",
    "steps.train.steps=3",
    "--set",
    "steps.train.batch_size=2",
    "--set",
    "steps.train.seq_len=64",
    "--set",
    "steps.train.checkpoint_every=2",
]


@pytest.fixture(scope="module")
def quickstart_job(tmp_path_factory):
    root = tmp_path_factory.mktemp("quickstart")
    data = make_slice(root / "slice.parquet")
    job = root / "job"
    argv = [
        "run",
        "quickstart",
        "--job-dir",
        str(job),
        "--executor",
        "inprocess",
        "--set",
        f"steps.read.paths={data}",
        *TINY,
    ]
    if not lid_available():
        argv += ["--set", "steps.langid.enabled=false"]
    return job, argv


@pytest.fixture(scope="module")
def finished(quickstart_job):
    job, argv = quickstart_job
    import contextlib
    import io

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main([*argv, "--json"])
    assert code == 0
    return job, json.loads((job / "stats.json").read_text()), out.getvalue()


def _ids(files: list[str]) -> set[str]:
    return set(pa.concat_tables([pq.read_table(f, columns=["id"]) for f in files])["id"].to_pylist())


def test_quickstart_end_to_end(finished):
    job, stats, stdout = finished
    summary = json.loads(stdout)  # --json: the one object on stdout
    assert summary["next"] == f"open {job / 'report.html'}" and summary["details"]["report"] == str(
        job / "report.md"
    )
    assert summary["balanced"] and summary["rows_in"] == stats["steps"][0]["rows_in"]
    steps = {s["step"]: s for s in stats["steps"]}
    assert stats["balanced"] and all(s["status"] == "ran" for s in stats["steps"])
    data = [s for s in stats["steps"] if s["type"] not in ("tokenize", "train")]
    sliced = pq.read_table(job.parent / "slice.parquet")
    per_source = {
        k: v for k, v in zip(*np.unique(sliced["source"].to_numpy(zero_copy_only=False), return_counts=True))
    }
    assert data[0]["rows_in"] == sliced.num_rows and data[0]["per_source"]["in"] == per_source
    for before, after in zip(data, data[1:]):
        assert after["rows_in"] == before["rows_kept"]
    for s in data:
        assert s["rows_in"] == s["rows_kept"] + s["rows_dropped"] + s["rows_quarantined"]
        assert sum(pq.ParquetFile(f).metadata.num_rows for f in s["files"]) == s["rows_kept"]
        side = Path(f"{s['dir']}.zephyr")  # the step's sidecar: its bookkeeping, never among its data
        assert (side / "_SUCCESS.json").is_file() and (side / "stats.json").is_file()
        assert not list((side / "work").glob("*/stage-*"))  # engine scratch removed when done
        assert all(p.name.startswith("part-") for p in Path(s["dir"]).iterdir())
    # the planted copies: web copies are rewritten by normalize and go in exact dedup, edited ones in fuzzy dedup,
    # and every seed stays
    web, near = _planted("web"), _planted("near")
    seeds = {i.split(PLANTED)[0] for i in web | near}
    exact, fuzzy = steps["exact_dedup"], steps["fuzzy_dedup"]
    assert web | near | seeds <= _ids(steps["heuristic_filter"]["files"])
    assert not web & _ids(exact["files"]) and near | seeds <= _ids(exact["files"])
    assert not near & _ids(fuzzy["files"]) and seeds <= _ids(fuzzy["files"])
    assert exact["dropped_by_reason"]["exact_duplicate"] == len(web)
    assert fuzzy["dropped_by_reason"] == {"fuzzy_duplicate": len(near)}
    assert int(exact["cluster_sizes"]["2"]) >= len(web) and int(fuzzy["cluster_sizes"]["2"]) == len(near)
    # every stage visibly removes or changes something (quality marks rows with a score; on the whole sample,
    # with min_score 0.7, it drops ~2%)
    assert steps["normalize"]["counters"]["normalize/rows_rewritten"] >= len(web)
    for name in ("langid", "heuristic_filter", "exact_dedup", "fuzzy_dedup"):
        assert name not in steps or steps[name]["rows_dropped"] > 0, name  # langid is off without its model
    assert all(pq.read_schema(f).field("quality_score") for f in steps["quality"]["files"])
    # heuristics keep their dropped rows, the classifier was trained from them
    heuristics = steps["heuristic_filter"]
    dropped_files = heuristics["extra"]["dropped_files"]
    assert sum(pq.read_metadata(f).num_rows for f in dropped_files) == heuristics["rows_dropped"]
    assert Path(steps["quality"]["extra"]["classifier"]).is_file()
    assert all(
        s >= 0.2 for f in steps["quality"]["files"] for s in pq.read_table(f)["quality_score"].to_pylist()
    )
    # tokens and training
    tok = steps["tokenize"]
    assert tok["rows_kept"] == steps["quality"]["rows_kept"] == tok["extra"]["num_documents"]
    assert tok["extra"]["num_tokens"] > 10_000 and Path(tok["dir"], "tokenizer.json").is_file()
    trained = tok["extra"]["tokenizer_trained_on"]  # by zephyr.tokenize.train_tokenizer, on the stage input
    assert trained["output"] == str(Path(tok["dir"], "tokenizer.json")) and trained["vocab_size"] == 512
    assert 0 < trained["sample_bytes"] <= trained["bound_bytes"] and trained["files"] == len(
        steps["quality"]["files"]
    )
    manifest = json.loads(Path(tok["extra"]["shards_dir"], "manifest.json").read_text())
    assert manifest["vocab_size"] == 512 and manifest["num_documents"] == tok["rows_kept"]
    train = steps["train"]
    records = [json.loads(line) for line in Path(train["extra"]["log"]).read_text().splitlines()]
    assert [r["step"] for r in records] == [1, 2, 3] and train["extra"]["final_loss"] == records[-1]["loss"]
    for name in ("rows", "time", "sources", "training", "clusters_exact_dedup", "clusters_fuzzy_dedup"):
        assert (job / "plots" / f"{name}.png").read_bytes()[:4] == b"\x89PNG"


def _md_rows(markdown: str) -> dict[str, list[str]]:
    rows = {}
    for line in markdown.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 13 and cells[0].isdigit():
            rows[cells[1]] = cells
    return rows


def test_report_numbers_match_the_stats(finished):
    job, stats, _ = finished
    markdown = (job / "report.md").read_text()
    page = (job / "report.html").read_text()
    rows = _md_rows(markdown)
    assert set(rows) == {s["step"] for s in stats["steps"]}
    for s in stats["steps"]:
        cells = rows[s["step"]]
        if s["type"] != "train":
            assert [int(c.replace(",", "")) for c in cells[3:7]] == [
                s["rows_in"],
                s["rows_kept"],
                s["rows_dropped"],
                s["rows_quarantined"],
            ]
        assert cells[9] == f"{s['seconds']:.1f}" and cells[12] == "yes"
        for reason, n in s["dropped_by_reason"].items():
            assert f"| {s['step']} | {reason} | {n:,} |" in markdown
    assert "every step balances exactly" in markdown
    normalize = next(s for s in stats["steps"] if s["type"] == "normalize")
    rewritten = normalize["counters"]["normalize/rows_rewritten"]
    assert f"`normalize` rewrote {rewritten:,} of {normalize['rows_in']:,} documents" in markdown
    tok = next(s for s in stats["steps"] if s["type"] == "tokenize")
    assert f"{tok['extra']['num_tokens']:,} tokens" in markdown
    train = next(s for s in stats["steps"] if s["type"] == "train")
    assert f"→ {train['extra']['final_loss']:.4f}" in markdown
    final = [s for s in stats["steps"] if s["type"] not in ("tokenize", "train")][-1]
    for source, n in final["per_source"]["out"].items():
        assert re.search(rf"\| {source} \| [\d,]+ \| {n:,} \|", markdown)
    assert page.startswith("<!DOCTYPE html>") and "<table>" in page
    assert page.count('<img src="data:image/png;base64,') == 6 and 'src="plots/' not in page  # one file


def test_report_shows_dedup_and_filter_examples(finished):
    """The acceptance check of the report: each dedup stage shows example clusters (kept text beside a
    removed one, with their Jaccard), each filter its kept and dropped rows; all saved by the stages."""
    job, stats, _ = finished
    page = (job / "report.html").read_text()
    markdown = (job / "report.md").read_text()
    steps = {s["step"]: s for s in stats["steps"]}
    for name in ("exact_dedup", "fuzzy_dedup"):
        payload = json.loads(Path(steps[name]["extra"]["examples"]).read_text())
        assert payload["clusters"], name
        for cluster in payload["clusters"]:
            assert cluster["kept"]["id"] == cluster["cluster"] != cluster["removed"]["id"]
            assert cluster["jaccard"] >= 0.8 and f"<code>{cluster['removed']['id']}</code>" in page
        assert f"Examples from <code>{name}</code>" in page and f"Examples from `{name}`" in markdown
    fuzzy = json.loads(Path(steps["fuzzy_dedup"]["extra"]["examples"]).read_text())["clusters"]
    assert len(fuzzy) == 3  # the sample's planted near duplicates (data/sample/README.md): 3 examples shown
    for cluster in fuzzy:  # each removed row is a planted copy ``<seed id>~<edit>`` of the kept one
        assert cluster["removed"]["id"].split("~")[0] == cluster["kept"]["id"]
        assert 0.8 <= cluster["jaccard"] < 1
    assert '<mark class="removed">' in page
    exact = json.loads(Path(steps["exact_dedup"]["extra"]["examples"]).read_text())["clusters"]
    assert all(c["jaccard"] == 1.0 for c in exact)
    for name in [s["step"] for s in stats["steps"] if s["type"] in ("langid", "heuristic_filter", "quality")]:
        payload = json.loads(Path(steps[name]["extra"]["examples"]).read_text())
        assert len(payload["kept"]) == 3 and f"Examples: <code>{name}</code>" in page
        assert set(payload["dropped"]) <= set(steps[name]["dropped_by_reason"])
    heuristics = json.loads(Path(steps["heuristic_filter"]["extra"]["examples"]).read_text())
    assert heuristics["dropped"] and all(e["examples"] for e in heuristics["dropped"].values())


def test_rerun_skips_every_stage(finished, quickstart_job, capsys):
    job, stats, _ = finished
    _, argv = quickstart_job
    before = {f: Path(f).stat().st_mtime_ns for s in stats["steps"] for f in s["files"]}
    assert main(argv) == 0
    err = capsys.readouterr().err
    again = json.loads((job / "stats.json").read_text())
    assert all(s["status"] == "skipped" for s in again["steps"])
    assert err.count("skipped, complete with the same config") == len(stats["steps"])
    assert before == {f: Path(f).stat().st_mtime_ns for f in before}
    assert (job / "report.md").is_file()


def test_accounting_refuses_rows_that_do_not_balance(tmp_path):
    from zephyr.pipelines.steps import NormalizeStep

    part = tmp_path / "part-00000.parquet"
    pq.write_table(pa.table({"id": ["a", "b", "c"]}), part)
    op = {
        "op": "map_batches(x)",
        "rows_in": 5,
        "rows_out": 4,
        "rows_dropped": 1,
        "rows_quarantined": 0,
        "dropped_by_reason": {"short": 1},
    }
    outcome = StepOutcome(
        files=[str(part)], engine_stats={"stages": [{"ops": [op]}]}, accounting_ops=("map_batches(x)",)
    )
    step = NormalizeStep()
    with pytest.raises(AccountingError, match=r"rows do not balance: in 5 != kept 3 .* \+ dropped 1"):
        step.account("normalize", outcome, 5)
    with pytest.raises(AccountingError, match="the previous step wrote 6 rows but map_batches"):
        step.account("normalize", outcome, 6)
    op.update(rows_dropped=2, dropped_by_reason={"short": 2})
    assert step.account("normalize", outcome, 5)["balanced"] is True
