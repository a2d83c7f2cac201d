import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from zephyr.pipelines.quality.filters import merge_summaries, summarize_batch

from zephyr.cli import main
from zephyr.io.layout import dropped_dir, quarantine_dir, side_path, stats_path

GOOD = (
    "The history of the city is long and it is closely tied to the river that runs through it. "
    "Merchants came to trade with the people of the valley, and they brought new ideas with them. "
    "Over the centuries the town grew into a busy market, and many of the old buildings still stand today. "
    "Visitors who walk along the water can see the bridges, the churches and the houses of the traders."
)


def train_quality_model(directory):
    """``zephyr quality train`` on 60 labelled rows (``hq``: GOOD prose, ``lq``: spam) written to
    ``directory/lab.parquet``; the model is ``directory/m.bin``. Returns the labelled file."""
    labelled = directory / "lab.parquet"
    pq.write_table(
        pa.table(
            {
                "text": [
                    t for i in range(30) for t in (f"{GOOD} {i}", f"buy cheap pills now click here {i}")
                ],
                "label": ["hq", "lq"] * 30,
            }
        ),
        labelled,
    )
    assert (
        main(["quality", "train", str(labelled), "--output", str(directory / "m.bin"), "--epoch", "5"]) == 0
    )
    return labelled


def _parts(directory):
    """The part files of one output directory (it also holds JSON reports and sub-directories)."""
    return pa.concat_tables([pq.read_table(f) for f in sorted(directory.glob("part-*.parquet"))])


def _input(tmp_path):
    rows = {
        "id": [f"d{i}" for i in range(8)],
        "text": [GOOD, GOOD + " Again.", "", None, "short", "{ code }", GOOD.upper(), "x " * 100],
        "source": ["web", "web", "web", "mail", "mail", "code", "web", "mail"],
    }
    path = tmp_path / "in.parquet"
    pq.write_table(pa.table(rows), path)
    return path


def test_filter_command_balances_and_reports(tmp_path, capsys):
    src = _input(tmp_path)
    out = tmp_path / "out"
    assert (
        main(
            [
                "filter",
                str(src),
                "--output",
                str(out),
                "--executor",
                "inprocess",
                "--rules",
                "gopher,c4,fineweb",
            ]
        )
        == 0
    )
    stats = json.loads(Path(stats_path(out)).read_text())["filter"]
    assert stats["balanced"] and stats["rows"]["in"] == 8
    kept = _parts(out).num_rows
    dropped = _parts(Path(dropped_dir(out)))
    quarantine = _parts(Path(quarantine_dir(out)))
    assert (kept, dropped.num_rows, quarantine.num_rows) == (stats["rows_kept"], stats["rows_dropped"], 1)
    assert stats["rows_in"] == 8 == kept + dropped.num_rows + quarantine.num_rows
    assert sum(stats["dropped_rows_by_reason"].values()) == dropped.num_rows
    assert quarantine["quarantine_reason"].to_pylist() == ["null_text"]
    report = json.loads(Path(side_path(out, "report.json")).read_text())
    assert set(report["sources"]) == {"web", "mail", "code"}
    assert "drop_reason" not in _parts(out).schema.names
    markdown = Path(side_path(out, "report.md")).read_text()
    assert "# Retention report" in markdown and "Examples: `filter`" in markdown
    examples = json.loads(Path(side_path(out, "examples.json")).read_text())
    assert {r["id"] for r in examples["kept"]} <= set(_parts(out)["id"].to_pylist())
    assert not Path(side_path(out, "work")).exists()  # the examples' parts are merged and gone


def test_report_counts_do_not_depend_on_batching():
    t = pa.table(
        {
            "text": [f"doc {i}" for i in range(40)],
            "drop_reason": [None, "r1", "r2", None] * 10,
            "source": ["a", "b"] * 20,
            "id": [str(i) for i in range(40)],
        }
    )
    whole = merge_summaries([summarize_batch(t)])
    parts = merge_summaries([summarize_batch(t.slice(i, 7)) for i in range(0, 40, 7)])
    assert whole == parts and whole["totals"]["balanced"]
    assert whole["sources"]["a"]["kept"] == {
        "rows": 10,
        "bytes": sum(len(f"doc {i}") for i in range(0, 40, 4)),
    }


def test_pii_decontaminate_and_quality_commands(tmp_path):
    src = tmp_path / "in.parquet"
    pq.write_table(pa.table({"text": ["mail me at a@b.com " + GOOD, "clean " + GOOD[:80], None]}), src)
    assert main(["pii", str(src), "--output", str(tmp_path / "pii"), "--executor", "inprocess"]) == 0
    out = _parts(tmp_path / "pii")
    assert out["pii_email"].to_pylist() == [1, 0, 0] and "<EMAIL>" in out["text"][0].as_py()

    (tmp_path / "eval.jsonl").write_text(json.dumps({"text": GOOD[:200]}) + "\n")
    assert (
        main(
            [
                "decontaminate",
                str(src),
                "--eval",
                str(tmp_path / "eval.jsonl"),
                "--output",
                str(tmp_path / "dc"),
                "--executor",
                "inprocess",
            ]
        )
        == 0
    )
    assert _parts(tmp_path / "dc")["text"].to_pylist() == [None]

    labelled = train_quality_model(tmp_path)
    assert json.loads((tmp_path / "m.bin.report.json").read_text())["rows"] > 0
    assert (
        main(
            [
                "quality",
                "score",
                str(labelled),
                "--model",
                str(tmp_path / "m.bin"),
                "--output",
                str(tmp_path / "scored"),
                "--buckets",
                "2",
                "--executor",
                "inprocess",
            ]
        )
        == 0
    )
    scored = _parts(tmp_path / "scored")
    assert set(scored["quality_bucket"].to_pylist()) == {0, 1}


def test_every_pipelines_command_has_its_explain_twin(tmp_path, capsys):
    """``zephyr explain langid`` (and normalize, pii, decontaminate, quality score, extract, run) prints the
    plan the command runs and writes nothing."""
    from zephyr.cli import build_parser

    path = tmp_path / "in.parquet"
    pq.write_table(pa.table({"id": [1, 2], "text": ["the cat sat on the mat", "das ist ein Haus"]}), path)
    explain = build_parser(["explain"])._subparsers._group_actions[0].choices["explain"]
    twins = set(explain._subparsers._group_actions[0].choices)
    assert {"run", "normalize", "langid", "filter", "quality", "pii", "decontaminate", "extract"} <= twins
    argv = ["explain", "langid", str(path), "--languages", "en,de", "--executor", "inprocess"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "map_batches(langid) → map_batches(language_filter)" in out
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.parquet"]


def test_normalize_says_what_it_changed(tmp_path, capsys):
    """No row is dropped by normalize: its summary, --json and stats.json say how many texts it rewrote and
    how many bytes it took out (issue 33's "summaries that say what changed")."""
    path = tmp_path / "in.parquet"
    texts = ["Hello   world\u0000 again", "already fine", None, "tabs\t\tand  spaces  "]
    pq.write_table(pa.table({"id": [1, 2, 3, 4], "text": texts}), path)
    out = tmp_path / "out"
    assert main(["normalize", str(path), "--output", str(out), "--executor", "inprocess", "--json"]) == 0
    record = json.loads(capsys.readouterr().out)
    written = pq.read_table(out)["text"].to_pylist()
    changed = sum(a != b for a, b in zip(texts, written, strict=True))
    removed = sum(
        len((a or "").encode()) - len((b or "").encode()) for a, b in zip(texts, written, strict=True)
    )
    assert changed == 2 and removed > 0
    assert record["details"] == {"rows_changed": changed, "bytes_removed": removed}
    stats = json.loads(Path(stats_path(str(out))).read_text())["normalize"]
    assert stats == {**record["details"], "rows": {"in": 4, "kept": 4, "dropped": 0, "quarantined": 0}}
    assert main(["normalize", str(path), "--output", str(tmp_path / "again"), "--executor", "inprocess"]) == 0
    err = capsys.readouterr().err
    assert f"rows changed {changed}" in err and f"bytes removed {removed}" in err
