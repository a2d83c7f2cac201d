"""Every command's output directory reads as exactly its kept rows in pyarrow, polars, duckdb and HF
``datasets``: part files numbered densely from ``part-00000``, every other entry a sidecar
whose name starts with ``_``, and the ``.huggingface.yaml`` that keeps HF off ``_quarantine/`` (``zephyr.io.publish``).

The fixture has rows each command keeps, drops (duplicates, short or off-language texts, an eval overlap) and
quarantines (a null text, an invalid JSON line read with ``--on-error quarantine``)."""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable
from pathlib import Path

import duckdb
import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

import zephyr
from zephyr.cli import main

from ..bpe import train_tiny_bpe

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # HF datasets reads local files only; never the Hub

FAST = ["--executor", "inprocess"]
GOOD = (
    "The history of the city is long and it is closely tied to the river that runs through it. "
    "Merchants came to trade with the people of the valley, and they brought new ideas with them. "
    "Over the centuries the town grew into a busy market, and many of the old buildings still stand today."
)
GERMAN = (
    "Die Geschichte der Stadt ist lang und eng mit dem Fluss verbunden, der durch sie fliesst. Händler kamen, "
    "um mit den Menschen des Tals zu handeln, und sie brachten neue Ideen mit. Viele alte Gebäude stehen noch."
)
INPUT_LINES = 21
"""Lines of the fixture: 20 JSON rows and one invalid line."""


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("corpus")
    rows = [
        {
            "id": f"d{i}",
            "source": "web" if i % 2 else "mail",
            "text": f"{GOOD} Document {i}, mail a{i}@b.org.",
        }
        for i in range(12)
    ]
    rows += [{**rows[i], "id": f"dup{i}"} for i in range(3)]  # exact duplicates
    rows += [
        {"id": f"s{i}", "source": "web", "text": f"too short {i}"} for i in range(3)
    ]  # heuristics drop them
    rows += [{"id": "de", "source": "web", "text": GERMAN}, {"id": "null", "source": "mail", "text": None}]
    lines = [json.dumps(r) for r in rows]
    lines.insert(7, '{"id": "broken", "text": "no end')  # quarantined with --on-error quarantine
    (d / "in.jsonl").write_text("\n".join(lines) + "\n")
    return d / "in.jsonl"


def _datasets_rows(directory: Path) -> int:
    """Rows HF ``datasets`` reads from the directory the way its users load a local folder: by path, the builder
    inferred from the files, which must skip the ``_`` sidecars (offline, cache in a temp dir)."""
    import datasets

    with tempfile.TemporaryDirectory() as cache:
        return datasets.load_dataset(str(directory), split="train", cache_dir=cache).num_rows


def check_reads_as(directory: Path, kept: int) -> None:
    """The directory's readers all see ``kept`` rows; parts are dense; everything else starts with ``_``."""
    names = sorted(p.name for p in directory.iterdir())
    parts = [n for n in names if not n.startswith(("_", "."))]
    assert parts == [f"part-{i:05d}.parquet" for i in range(len(parts))], names
    assert parts, f"{directory} holds no part file"
    assert pq.read_table(directory).num_rows == kept
    assert pl.read_parquet(f"{directory}/*.parquet").height == kept
    counted = duckdb.connect().sql(f"select count(*) as n from read_parquet('{directory}/*.parquet')")
    assert counted.to_arrow_table()["n"][0].as_py() == kept
    assert _datasets_rows(directory) == kept


def _run(*argv: str) -> None:
    assert main([*argv, *FAST]) == 0


def _job_rows(out: Path) -> int:
    """Rows the last stage of a single-job command wrote, from its ``_stats.json``."""
    return json.loads((out / "_stats.json").read_text())["job"]["stages"][-1]["rows_out"]


# -- one case per command: (corpus, tmp dir) -> (output dir, kept rows) ------------------------------------
def _unreadable(folder: Path) -> list[tuple[int, str]]:
    """(line, reason head) of the input lines set aside under ``folder`` (``stage-*/task-*.parquet``)."""
    table = pq.read_table(folder)
    return [(r["line"], r["reason"].split(":")[0]) for r in table.select(["line", "reason"]).to_pylist()]


def convert(corpus: Path, d: Path):
    _run("convert", str(corpus), "--output", str(d / "out"), "--on-error", "quarantine")
    assert _unreadable(d / "out" / "_quarantine") == [(8, "invalid JSON")]
    return d / "out", 20


def sort(corpus: Path, d: Path):
    _run("sort", str(corpus), "--by", "source", "--output", str(d / "out"), "--on-error", "quarantine")
    return d / "out", 20


def _dedup_removing(kind: str, corpus: Path, out: Path) -> dict:
    """``zephyr dedup KIND --mode remove --on-error quarantine`` into ``out``: its row counts."""
    _run("dedup", kind, str(corpus), "--output", str(out), "--mode", "remove", "--on-error", "quarantine")
    return json.loads((out / "_dedup_stats.json").read_text())["dedup"]["rows"]


def dedup_exact(corpus: Path, d: Path):
    rows = _dedup_removing("exact", corpus, d / "out")
    assert rows["dropped"] == 3 and rows["quarantined"] == 1
    # each of its two passes over the input sets the bad line aside: one copy per pass
    assert set(_unreadable(d / "out" / "_quarantine")) == {(8, "invalid JSON")}
    return d / "out", rows["kept"]


def dedup_fuzzy(corpus: Path, d: Path):
    rows = _dedup_removing("fuzzy", corpus, d / "out")
    assert rows["dropped"] >= 3
    return d / "out", rows["kept"]


def normalize(corpus: Path, d: Path):
    _run("normalize", str(corpus), "--output", str(d / "out"), "--on-error", "quarantine")
    return d / "out", 20


def filter_(corpus: Path, d: Path):
    out = d / "out"
    _run("filter", str(corpus), "--output", str(out), "--on-error", "quarantine")
    stats = json.loads((out / "_stats.json").read_text())
    dropped, quarantined = pq.read_table(out / "_dropped"), pq.read_table(out / "_quarantine")
    assert stats["rows_dropped"] == dropped.num_rows >= 3 and quarantined["reject_reason"].to_pylist() == [
        "null_text"
    ]
    assert (
        stats["rows_in"]
        == INPUT_LINES
        == stats["rows_kept"] + dropped.num_rows + 1 + stats["rows_unreadable"]
    )
    assert {"_stats.json", "_report.json", "_report.md"} <= {p.name for p in out.iterdir()}
    assert _unreadable(out / "_quarantine" / "_unreadable") == [(8, "invalid JSON")]
    assert stats["unreadable_quarantine_dir"] == str(out / "_quarantine" / "_unreadable")
    return out, stats["rows_kept"]


def pii(corpus: Path, d: Path):
    _run("pii", str(corpus), "--output", str(d / "out"), "--on-error", "quarantine")
    assert "<EMAIL>" in pq.read_table(d / "out")["text"][0].as_py()
    return d / "out", 20


def decontaminate(corpus: Path, d: Path):
    (d / "eval.jsonl").write_text(json.dumps({"text": GERMAN}) + "\n")
    _run(
        "decontaminate",
        str(corpus),
        "--eval",
        str(d / "eval.jsonl"),
        "--output",
        str(d / "out"),
        "--on-error",
        "quarantine",
    )
    kept = _job_rows(d / "out")
    assert kept == 19  # the German row is the eval set
    return d / "out", kept


def langid(corpus: Path, d: Path):
    from zephyr.pipelines.quality.lid_model import ensure_lid_model

    from zephyr.errors import ConfigError

    try:
        ensure_lid_model()
    except ConfigError as exc:
        pytest.skip(str(exc))
    _run("langid", str(corpus), "--output", str(d / "out"), "--languages", "en", "--on-error", "quarantine")
    kept = _job_rows(d / "out")
    assert kept < 20  # the German row and the null text go
    return d / "out", kept


def quality_score(corpus: Path, d: Path):
    labelled = d / "labelled.parquet"
    texts = [t for i in range(20) for t in (f"{GOOD} {i}", f"buy cheap pills now click here {i}")]
    pq.write_table(pa.table({"text": texts, "label": ["hq", "lq"] * 20}), labelled)
    _run("quality", "train", str(labelled), "--output", str(d / "m.bin"), "--epoch", "2")
    _run(
        "quality",
        "score",
        str(corpus),
        "--model",
        str(d / "m.bin"),
        "--output",
        str(d / "out"),
        "--on-error",
        "quarantine",
    )
    return d / "out", 20


CASES: list[Callable] = [
    convert,
    sort,
    dedup_exact,
    dedup_fuzzy,
    normalize,
    filter_,
    pii,
    decontaminate,
    langid,
    quality_score,
]


@pytest.mark.parametrize("case", CASES, ids=[c.__name__.rstrip("_") for c in CASES])
def test_command_output_reads_as_its_kept_rows(case, corpus, tmp_path):
    out, kept = case(corpus, tmp_path)
    check_reads_as(out, kept)


def test_zephyr_run_step_folders_read_as_their_kept_rows(corpus, tmp_path):
    config = {
        "name": "readers",
        "steps": [
            {"step": "read", "paths": [str(corpus)], "on_error": "quarantine"},
            {"step": "heuristic_filter"},
            {"step": "exact_dedup"},
        ],
    }
    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump(config))
    job = tmp_path / "job"
    _run("run", str(path), "--job-dir", str(job), "--no-report")
    records = json.loads((job / "stats.json").read_text())["steps"]
    assert [r["rows_kept"] for r in records][0] == 19  # the null text is quarantined by the read stage
    for record in records:
        check_reads_as(Path(record["dir"]), record["rows_kept"])
    filtered = Path(records[1]["dir"])
    assert pq.read_table(filtered / "_dropped").num_rows == records[1]["rows_dropped"] > 0


def test_tokenize_output_has_no_data_readers_would_glob(corpus, tmp_path):
    train_tiny_bpe(tmp_path / "tokenizer.json", [GOOD] * 5, vocab_size=300)
    out = tmp_path / "shards"
    _run(
        "tokenize",
        str(corpus),
        "--tokenizer",
        str(tmp_path / "tokenizer.json"),
        "--output",
        str(out),
        "--on-error",
        "quarantine",
    )
    names = {p.name for p in out.iterdir()}
    assert "manifest.json" in names and not any(n.endswith(".parquet") for n in names)
    assert all(n.startswith(("shard-", "_")) or n == "manifest.json" for n in names), names


def test_sort_with_few_keys_writes_dense_parts(tmp_path):
    table = pa.table({"key": ["b", "a"] * 50, "n": list(range(100))})
    result = (
        zephyr.from_arrow(table, num_shards=4)
        .sort("key", num_partitions=8)
        .write_parquet(str(tmp_path / "out"), executor="inprocess")
    )
    names = sorted(p.name for p in (tmp_path / "out").iterdir())
    assert names[0] == ".huggingface.yaml"
    assert (
        names[1:]
        == ["part-00000.parquet", "part-00001.parquet"]
        == [f.rsplit("/", 1)[-1] for f in result.files]
    )
    assert pq.read_table(tmp_path / "out")["key"].to_pylist() == ["a"] * 50 + ["b"] * 50
    check_reads_as(tmp_path / "out", 100)


def test_filter_dropped_output_goes_where_asked_and_not_inside_the_output(corpus, tmp_path):
    out, elsewhere = tmp_path / "out", tmp_path / "rejects"
    _run(
        "filter",
        str(corpus),
        "--output",
        str(out),
        "--dropped-output",
        str(elsewhere),
        "--on-error",
        "quarantine",
    )
    stats = json.loads((out / "_stats.json").read_text())
    assert not (out / "_dropped").exists() and pq.read_table(elsewhere).num_rows == stats["rows_dropped"] > 0
    assert stats["dropped_output"] == str(elsewhere)
    check_reads_as(out, stats["rows_kept"])
    for bad in (out, out / "dropped"):
        assert main(["filter", str(corpus), "--output", str(out), "--dropped-output", str(bad), *FAST]) == 1


def test_rerun_of_another_plan_leaves_only_its_own_quarantine(corpus, tmp_path):
    out = tmp_path / "out"
    _run("convert", str(corpus), "--output", str(out), "--on-error", "quarantine")
    other = tmp_path / "other.jsonl"
    other.write_text('{"id": "a", "text": "x"}\nnot json\nnot json either\n')
    _run("convert", str(other), "--output", str(out), "--on-error", "quarantine")
    assert [line for line, _ in _unreadable(out / "_quarantine")] == [2, 3]  # the first run's line 8 is gone
    check_reads_as(out, 1)
