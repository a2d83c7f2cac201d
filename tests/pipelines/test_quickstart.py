"""The quickstart pipeline end to end on a small slice of the sample, through the ``zephyr run`` command."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from zephyr.pipelines.runner import AccountingError, account
from zephyr.pipelines.stages import StageOutcome

from zephyr.cli import main

REPO = Path(__file__).resolve().parents[2]
SAMPLE = REPO / "data" / "sample" / "sample.parquet"


def make_slice(path: Path) -> Path:
    """60 sample documents plus two planted duplicates of a Bible chapter: one exact, one near (a word of
    the last verse changed: C4's line cleaning keeps verses, which end in a full stop)."""
    table = pq.read_table(SAMPLE)
    by = lambda source, n: table.filter(pc.equal(table["source"], source)).slice(0, n).to_pylist()  # noqa: E731
    rows = by("kjv", 30) + by("milton", 15) + by("shakespeare", 15)
    seed = next(r for r in rows if r["id"] == "kjv/5")
    exact = {**seed, "id": "x-planted/exact"}  # ids sort after the seed's: the seed is the one kept
    words = seed["text"].split(" ")
    plain = [i for i, w in enumerate(words) if w.isalpha()][-3]
    words[plain] = "changed"
    near = {**seed, "id": "x-planted/near", "text": " ".join(words)}
    pq.write_table(pa.Table.from_pylist(rows + [exact, near], schema=table.schema), path)
    return path


def _lid_available() -> bool:
    from zephyr.pipelines.quality.lid_model import ensure_lid_model

    from zephyr.errors import ConfigError

    try:
        ensure_lid_model()
    except ConfigError:
        return False
    return True


TINY = [
    "--set", "stages.read.num_shards=2",
    "--set", "stages.quality.min_score=0.2",
    "--set", "stages.tokenize.vocab_size=512",
    "--set", "stages.train.steps=3",
    "--set", "stages.train.batch_size=2",
    "--set", "stages.train.seq_len=64",
    "--set", "stages.train.checkpoint_every=2",
]


@pytest.fixture(scope="module")
def quickstart_job(tmp_path_factory):
    root = tmp_path_factory.mktemp("quickstart")
    data = make_slice(root / "slice.parquet")
    job = root / "job"
    argv = ["run", "quickstart", "--job-dir", str(job), "--executor", "inprocess",
            "--set", f"stages.read.paths={data}", *TINY]
    if not _lid_available():
        argv += ["--set", "stages.langid.enabled=false"]
    return job, argv


@pytest.fixture(scope="module")
def finished(quickstart_job):
    job, argv = quickstart_job
    import contextlib
    import io

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(argv)
    assert code == 0
    return job, json.loads((job / "stats.json").read_text()), out.getvalue()


def _ids(files: list[str]) -> set[str]:
    return set(pa.concat_tables([pq.read_table(f, columns=["id"]) for f in files])["id"].to_pylist())


def test_quickstart_end_to_end(finished):
    job, stats, stdout = finished
    assert f"report: {job / 'report.md'}" in stdout
    stages = {s["stage"]: s for s in stats["stages"]}
    assert stats["balanced"] and all(s["status"] == "ran" for s in stats["stages"])
    data = [s for s in stats["stages"] if s["type"] not in ("tokenize", "train")]
    assert data[0]["rows_in"] == 62 and data[0]["per_source"]["in"] == {"kjv": 32, "milton": 15, "shakespeare": 15}
    for before, after in zip(data, data[1:]):
        assert after["rows_in"] == before["rows_kept"]
    for s in data:
        assert s["rows_in"] == s["rows_kept"] + s["rows_dropped"] + s["rows_quarantined"]
        assert sum(pq.ParquetFile(f).metadata.num_rows for f in s["files"]) == s["rows_kept"]
        assert Path(s["dir"], "_SUCCESS.json").is_file() and Path(s["dir"], "_stats.json").is_file()
        assert not list(Path(s["dir"], "_work").glob("*/stage-*"))  # engine scratch removed when done
    # the planted copies: the exact one goes in exact dedup, the edited one in fuzzy dedup
    exact, fuzzy = stages["exact_dedup"], stages["fuzzy_dedup"]
    assert {"x-planted/exact", "x-planted/near", "kjv/5"} <= _ids(stages["heuristic_filter"]["files"])
    assert "x-planted/exact" not in _ids(exact["files"]) and "kjv/5" in _ids(exact["files"])
    assert "x-planted/near" in _ids(exact["files"]) and "x-planted/near" not in _ids(fuzzy["files"])
    assert "kjv/5" in _ids(fuzzy["files"])
    assert exact["dropped_by_reason"].get("exact_duplicate", 0) >= 1
    assert fuzzy["dropped_by_reason"].get("fuzzy_duplicate", 0) >= 1
    assert int(exact["cluster_sizes"].get("2", 0)) >= 1
    # heuristics keep their dropped rows, the classifier was trained from them
    heuristics = stages["heuristic_filter"]
    assert heuristics["extra"]["dropped_rows"] == heuristics["rows_dropped"]
    assert Path(stages["quality"]["extra"]["classifier"]).is_file()
    assert all(s >= 0.2 for f in stages["quality"]["files"] for s in pq.read_table(f)["quality_score"].to_pylist())
    # tokens and training
    tok = stages["tokenize"]
    assert tok["rows_kept"] == stages["quality"]["rows_kept"] == tok["extra"]["num_documents"]
    assert tok["extra"]["num_tokens"] > 10_000 and Path(tok["dir"], "tokenizer.json").is_file()
    manifest = json.loads(Path(tok["extra"]["shards_dir"], "manifest.json").read_text())
    assert manifest["vocab_size"] == 512 and manifest["num_documents"] == tok["rows_kept"]
    train = stages["train"]
    records = [json.loads(line) for line in Path(train["extra"]["log"]).read_text().splitlines()]
    assert [r["step"] for r in records] == [0, 1, 2] and train["extra"]["final_loss"] == records[-1]["loss"]
    for name in ("rows", "time", "sources", "loss", "clusters_exact_dedup"):
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
    assert set(rows) == {s["stage"] for s in stats["stages"]}
    for s in stats["stages"]:
        cells = rows[s["stage"]]
        if s["type"] != "train":
            assert [int(c.replace(",", "")) for c in cells[3:7]] == [
                s["rows_in"], s["rows_kept"], s["rows_dropped"], s["rows_quarantined"]]
        assert cells[9] == f"{s['seconds']:.1f}" and cells[12] == "yes"
        for reason, n in s["dropped_by_reason"].items():
            assert f"| {s['stage']} | {reason} | {n:,} |" in markdown
    assert "every stage balances exactly" in markdown
    tok = next(s for s in stats["stages"] if s["type"] == "tokenize")
    assert f"{tok['extra']['num_tokens']:,} tokens" in markdown
    train = next(s for s in stats["stages"] if s["type"] == "train")
    assert f"→ {train['extra']['final_loss']:.4f}" in markdown
    final = [s for s in stats["stages"] if s["type"] not in ("tokenize", "train")][-1]
    for source, n in final["per_source"]["out"].items():
        assert re.search(rf"\| {source} \| [\d,]+ \| {n:,} \|", markdown)
    assert page.startswith("<!DOCTYPE html>") and 'src="plots/loss.png"' in page and "<table>" in page


def test_rerun_skips_every_stage(finished, quickstart_job, capsys):
    job, stats, _ = finished
    _, argv = quickstart_job
    before = {f: Path(f).stat().st_mtime_ns for s in stats["stages"] for f in s["files"]}
    assert main(argv) == 0
    err = capsys.readouterr().err
    again = json.loads((job / "stats.json").read_text())
    assert all(s["status"] == "skipped" for s in again["stages"])
    assert err.count("skipped, complete with the same config") == len(stats["stages"])
    assert before == {f: Path(f).stat().st_mtime_ns for f in before}
    assert (job / "report.md").is_file()


def test_accounting_refuses_rows_that_do_not_balance(tmp_path):
    from zephyr.pipelines.config import NormalizeStage, StageEntry

    part = tmp_path / "part-00000.parquet"
    pq.write_table(pa.table({"id": ["a", "b", "c"]}), part)
    op = {"op": "map_batches(x)", "rows_in": 5, "rows_out": 4, "rows_dropped": 1, "rows_rejected": 0,
          "dropped_by_reason": {"short": 1}}
    outcome = StageOutcome(files=[str(part)], engine_stats={"stages": [{"ops": [op]}]},
                           accounting_ops=("map_batches(x)",))
    entry = StageEntry("normalize", "normalize", NormalizeStage())
    with pytest.raises(AccountingError, match=r"rows do not balance: in 5 != kept 3 .* \+ dropped 1"):
        account(entry, outcome, 5, [])
    with pytest.raises(AccountingError, match="the previous stage wrote 6 rows but map_batches"):
        account(entry, outcome, 6, [])
    op.update(rows_dropped=2, dropped_by_reason={"short": 2})
    assert account(entry, outcome, 5, [])["balanced"] is True
