"""Every command's output folder reads as exactly its kept rows in the readers people use: pyarrow
``read_table(DIR)``, polars ``scan_parquet(DIR)`` (the folder itself), duckdb ``read_parquet('DIR/**/*.parquet')``
and HF ``datasets`` (``load_dataset('parquet', data_dir=DIR)`` and ``load_dataset(DIR)``). The folder holds its
part files and nothing else; stats, dropped and quarantined rows live in the sidecar ``DIR.zephyr``
(``zephyr.io.layout``), and the summary's ``stats``, ``dropped_output`` and ``quarantine_output`` name them.

The fixture has rows each command keeps, drops (duplicates, short or off-language texts, an eval overlap, a
repeated URL) and quarantines (a null text, an invalid JSON line read with ``--on-error quarantine``), so a
reader that took a sidecar's rows for data would count too many."""

from __future__ import annotations

import json
import os
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # HF datasets reads local files only; never the Hub
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")

import duckdb  # noqa: E402
import polars as pl  # noqa: E402
import pyarrow as pa  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402
import pytest  # noqa: E402
import yaml  # noqa: E402

import zephyr  # noqa: E402
from zephyr.cli import main  # noqa: E402

from ..bpe import train_tiny_bpe  # noqa: E402

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
            "url": f"https://example.com/page/{i}",
            "text": f"{GOOD}\n\nDocument {i}, mail a{i}@b.org.",
        }
        for i in range(12)
    ]
    rows += [{**rows[i], "id": f"dup{i}"} for i in range(3)]  # exact duplicates, same URL
    rows += [
        {"id": f"s{i}", "source": "web", "url": f"https://example.com/s{i}", "text": f"too short {i}"}
        for i in range(3)
    ]  # heuristics drop them
    rows += [
        {"id": "de", "source": "web", "url": "https://example.de/", "text": GERMAN},
        {"id": "null", "source": "mail", "url": None, "text": None},
    ]
    lines = [json.dumps(r) for r in rows]
    lines.insert(7, '{"id": "broken", "text": "no end')  # quarantined with --on-error quarantine
    (d / "in.jsonl").write_text("\n".join(lines) + "\n")
    return d / "in.jsonl"


def _hf_rows(directory: Path) -> tuple[int, int]:
    """Rows HF ``datasets`` reads from the folder the two ways its users load a local folder (offline, cache
    in a temporary folder): the parquet builder with ``data_dir``, and the builder inferred from the path."""
    import datasets

    with tempfile.TemporaryDirectory() as cache:
        by_dir = datasets.load_dataset("parquet", data_dir=str(directory), split="train", cache_dir=cache)
        by_path = datasets.load_dataset(str(directory), split="train", cache_dir=cache)
        return by_dir.num_rows, by_path.num_rows


def check_reads_as(directory: Path, kept: int) -> None:
    """The folder holds dense part files only, and each reader sees ``kept`` rows."""
    names = sorted(p.name for p in directory.iterdir())
    assert names == [f"part-{i:05d}.parquet" for i in range(len(names))], names
    assert names, f"{directory} holds no part file"
    assert pq.read_table(directory).num_rows == kept
    assert pl.scan_parquet(directory).collect().height == kept
    counted = duckdb.connect().sql(f"select count(*) as n from read_parquet('{directory}/**/*.parquet')")
    assert counted.to_arrow_table()["n"][0].as_py() == kept
    assert _hf_rows(directory) == (kept, kept)


def _run(capsys, *argv: str) -> dict:
    """Run a command with ``--json``; its summary."""
    capsys.readouterr()
    assert main([*argv, *FAST, "--json"]) == 0, capsys.readouterr().err
    return json.loads(capsys.readouterr().out)


def _sidecar_paths_exist(summary: dict, out: Path) -> None:
    """The summary's sidecar paths name real places in ``OUT.zephyr``, never inside the data folder."""
    side = Path(f"{out}.zephyr")
    assert summary["stats"] == str(side / "stats.json") and Path(summary["stats"]).is_file(), summary
    for key in ("dropped_output", "quarantine_output"):
        if summary[key] is not None:
            assert Path(summary[key]).exists() and not Path(summary[key]).is_relative_to(out), summary
    assert (side / "manifest.json").is_file()


# -- one case per command: (corpus, tmp dir, capsys) -> the --json summary; the output is tmp/out ------------
def _quarantined_line(folder: Path) -> list[tuple[int, str]]:
    """(line, reason head) of the input lines set aside under ``folder`` (``stage-*/task-*.parquet``)."""
    table = pq.read_table(folder)
    return sorted(
        {(r["line"], r["reason"].split(":")[0]) for r in table.select(["line", "reason"]).to_pylist()}
    )


def convert(corpus: Path, d: Path, capsys) -> dict:
    summary = _run(capsys, "convert", str(corpus), "--output", str(d / "out"), "--on-error", "quarantine")
    assert _quarantined_line(Path(summary["quarantine_output"])) == [(8, "invalid JSON")]
    return summary


def sort(corpus: Path, d: Path, capsys) -> dict:
    args = ("sort", str(corpus), "--by", "source", "--output", str(d / "out"), "--on-error", "quarantine")
    return _run(capsys, *args)


def _dedup(kind: str, *extra: str) -> Callable:
    def case(corpus: Path, d: Path, capsys) -> dict:
        out = str(d / "out")
        summary = _run(
            capsys, "dedup", *kind.split(), str(corpus), "--output", out, "--on-error", "quarantine", *extra
        )
        assert summary["rows_quarantined"] >= 1
        return summary

    case.__name__ = "dedup_" + kind.split()[0]
    return case


dedup_exact = _dedup("exact", "--mode", "remove")
dedup_fuzzy = _dedup("fuzzy", "--mode", "remove")
dedup_url = _dedup("url", "--mode", "remove")
dedup_paragraph = _dedup("paragraph")
dedup_substring = _dedup("substring", "--min-bytes", "40")


def normalize(corpus: Path, d: Path, capsys) -> dict:
    return _run(capsys, "normalize", str(corpus), "--output", str(d / "out"), "--on-error", "quarantine")


def filter_(corpus: Path, d: Path, capsys) -> dict:
    out = d / "out"
    summary = _run(capsys, "filter", str(corpus), "--output", str(out), "--on-error", "quarantine")
    side = Path(f"{out}.zephyr")
    assert summary["dropped_output"] == str(side / "dropped")
    assert summary["quarantine_output"] == str(side / "quarantine")
    check_reads_as(side / "dropped", summary["rows_dropped"])  # the set-aside rows read as themselves too
    check_reads_as(side / "quarantine", 1)  # the null text, with quarantine_reason
    assert summary["rows_in"] == INPUT_LINES and summary["rows_dropped"] >= 3
    assert _quarantined_line(side / "unreadable") == [(8, "invalid JSON")]
    assert {"report.json", "report.md"} <= {p.name for p in side.iterdir()}
    return summary


def pii(corpus: Path, d: Path, capsys) -> dict:
    summary = _run(capsys, "pii", str(corpus), "--output", str(d / "out"), "--on-error", "quarantine")
    assert "<EMAIL>" in pq.read_table(d / "out")["text"][0].as_py()
    return summary


def decontaminate(corpus: Path, d: Path, capsys) -> dict:
    (d / "eval.jsonl").write_text(json.dumps({"text": GERMAN}) + "\n")
    argv = ("decontaminate", str(corpus), "--eval", str(d / "eval.jsonl"), "--output", str(d / "out"))
    summary = _run(capsys, *argv, "--on-error", "quarantine")
    assert summary["rows_kept"] == 19 and summary["rows_dropped"] == 1  # the German row is the eval set
    return summary


def langid(corpus: Path, d: Path, capsys) -> dict:
    from zephyr.pipelines.quality.langid import ensure_lid_model

    from zephyr.errors import ConfigError

    try:
        ensure_lid_model()
    except ConfigError as exc:
        pytest.skip(str(exc))
    argv = ("langid", str(corpus), "--output", str(d / "out"), "--languages", "en", "--replace-columns")
    summary = _run(capsys, *argv, "--on-error", "quarantine")
    assert summary["rows_dropped"] >= 1  # the German row
    return summary


def quality_score(corpus: Path, d: Path, capsys) -> dict:
    labelled = d / "labelled.parquet"
    texts = [t for i in range(20) for t in (f"{GOOD} {i}", f"buy cheap pills now click here {i}")]
    pq.write_table(pa.table({"text": texts, "label": ["hq", "lq"] * 20}), labelled)
    _run(capsys, "quality", "train", str(labelled), "--output", str(d / "m.bin"), "--epoch", "2")
    argv = ("quality", "score", str(corpus), "--model", str(d / "m.bin"), "--output", str(d / "out"))
    return _run(capsys, *argv, "--on-error", "quarantine")


def extract(corpus: Path, d: Path, capsys) -> dict:
    pytest.importorskip("warcio")
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))  # warc_pages: test WARCs
    from warc_pages import BROKEN_KINDS, sample_pages, write_warc

    path = d / "crawl.warc.gz"
    write_warc(str(path), sample_pages(8), broken=BROKEN_KINDS)
    summary = _run(capsys, "extract", str(path), "--output", str(d / "out"))
    assert summary["rows_quarantined"] == len(BROKEN_KINDS)
    return summary


CASES: list[Callable] = [
    convert,
    sort,
    dedup_exact,
    dedup_fuzzy,
    dedup_url,
    dedup_paragraph,
    dedup_substring,
    normalize,
    filter_,
    pii,
    decontaminate,
    langid,
    quality_score,
    extract,
]


@pytest.mark.parametrize("case", CASES, ids=[c.__name__.rstrip("_") for c in CASES])
def test_command_output_reads_as_its_kept_rows(case, corpus, tmp_path, capsys):
    summary = case(corpus, tmp_path, capsys)
    out = tmp_path / "out"
    assert summary["output"] == str(out) and summary["balanced"], summary
    assert summary["rows_dropped"] + summary["rows_quarantined"] > 0, summary  # something to leave out
    check_reads_as(out, summary["rows_kept"])
    _sidecar_paths_exist(summary, out)


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
    assert main(["run", str(path), "--job-dir", str(job), "--no-report", *FAST]) == 0
    records = json.loads((job / "stats.json").read_text())["steps"]
    assert [r["rows_kept"] for r in records][0] == 19  # the null text is quarantined by the read stage
    for record in records:
        check_reads_as(Path(record["dir"]), record["rows_kept"])
    filtered = Path(records[1]["dir"])
    check_reads_as(Path(f"{filtered}.zephyr") / "dropped", records[1]["rows_dropped"])
    assert records[1]["rows_dropped"] > 0
    assert sorted(p.name for p in job.iterdir()) == sorted(
        ["pipeline.yaml", "stats.json"]
        + [f"{Path(r['dir']).name}{s}" for r in records for s in ("", ".zephyr")]
    )


def test_tokenize_output_has_no_data_readers_would_glob(corpus, tmp_path, capsys):
    train_tiny_bpe(tmp_path / "tokenizer.json", [GOOD] * 5, vocab_size=300)
    out = tmp_path / "shards"
    argv = ("tokenize", str(corpus), "--tokenizer", str(tmp_path / "tokenizer.json"), "--output", str(out))
    summary = _run(capsys, *argv, "--on-error", "quarantine")
    names = {p.name for p in out.iterdir()}
    assert "manifest.json" in names and all(n.startswith("shard-") or n == "manifest.json" for n in names), (
        names
    )
    assert Path(summary["quarantine_output"]).is_relative_to(f"{out}.zephyr")
    claimed = json.loads(Path(f"{out}.zephyr/manifest.json").read_text())
    assert sorted(claimed["files"]) == sorted(names)


def test_sort_with_few_keys_writes_dense_parts(tmp_path):
    table = pa.table({"key": ["b", "a"] * 50, "n": list(range(100))})
    result = (
        zephyr.from_arrow(table, num_shards=4)
        .sort("key", num_partitions=8)
        .write_parquet(str(tmp_path / "out"), executor="inprocess")
    )
    names = sorted(p.name for p in (tmp_path / "out").iterdir())
    assert (
        names == ["part-00000.parquet", "part-00001.parquet"] == [f.rsplit("/", 1)[-1] for f in result.files]
    )
    assert pq.read_table(tmp_path / "out")["key"].to_pylist() == ["a"] * 50 + ["b"] * 50
    check_reads_as(tmp_path / "out", 100)


def test_filter_dropped_output_goes_where_asked_and_not_inside_the_output(corpus, tmp_path, capsys):
    out, elsewhere = tmp_path / "out", tmp_path / "rejects"
    argv = ("filter", str(corpus), "--output", str(out), "--dropped-output", str(elsewhere))
    summary = _run(capsys, *argv, "--on-error", "quarantine")
    assert not Path(f"{out}.zephyr/dropped").exists() and summary["dropped_output"] == str(elsewhere)
    check_reads_as(elsewhere, summary["rows_dropped"])
    check_reads_as(out, summary["rows_kept"])
    for bad in (out, out / "dropped", tmp_path):
        assert main(["filter", str(corpus), "--output", str(out), "--dropped-output", str(bad), *FAST]) == 1
        assert "--dropped-output" in capsys.readouterr().err


def test_rerun_of_another_plan_leaves_only_its_own_quarantine(corpus, tmp_path, capsys):
    out = tmp_path / "out"
    _run(capsys, "convert", str(corpus), "--output", str(out), "--on-error", "quarantine")
    other = tmp_path / "other.jsonl"
    other.write_text('{"id": "a", "text": "x"}\nnot json\nnot json either\n')
    summary = _run(capsys, "convert", str(other), "--output", str(out), "--on-error", "quarantine")
    lines = [line for line, _ in _quarantined_line(Path(summary["quarantine_output"]))]
    assert lines == [2, 3]  # the first run's line 8 is gone
    check_reads_as(out, 1)
