"""Empty inputs through the CLI: a 0-byte JSONL file, a 0-row Parquet file, a folder where one file is empty.

Each command exits 0 with empty outputs and counts of 0 that balance; in a folder, every row of the other files
arrives.
"""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from zephyr.tokenize import read_documents, read_manifest

from zephyr.io.layout import side_path, stats_path

from .conftest import FAST, GOOD, zephyr_cli

EMPTY_PARQUET_SCHEMA = pa.schema([("id", pa.string()), ("text", pa.string())])


def _write(path: Path, rows: list[dict]) -> Path:
    if path.suffix == ".jsonl":
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    else:
        pq.write_table(pa.Table.from_pylist(rows, schema=EMPTY_PARQUET_SCHEMA), path)
    return path


@pytest.fixture(
    params=[pytest.param(".jsonl", id="0-byte-jsonl"), pytest.param(".parquet", id="0-row-parquet")]
)
def empty_input(request, tmp_path) -> Path:
    path = _write(tmp_path / f"empty{request.param}", [])
    assert path.stat().st_size == 0 or pq.read_metadata(path).num_rows == 0
    return path


def _parts(directory: Path) -> list[Path]:
    return sorted(directory.glob("part-*"))


def test_filter(empty_input, tmp_path):
    out = tmp_path / "out"
    run = zephyr_cli("filter", str(empty_input), "--output", str(out), *FAST, "--json")
    assert run.returncode == 0, run.stderr
    summary = json.loads(run.stdout)
    assert [summary[k] for k in ("rows_in", "rows_kept", "rows_dropped", "rows_quarantined")] == [0, 0, 0, 0]
    stats = json.loads(Path(stats_path(out)).read_text())
    rows = stats["filter"]
    assert rows["rows_in"] == rows["rows_kept"] + rows["rows_dropped"] + rows["rows_quarantined"] == 0
    assert rows["balanced"] and all(stage["task_retries"] == 0 for stage in stats["stages"])
    assert json.loads(Path(side_path(out, "report.json")).read_text())["totals"]["rows_in"] == 0
    assert _parts(out) == []


def test_tokenize(empty_input, tmp_path, tokenizer_json):
    out = tmp_path / "tokens"
    run = zephyr_cli(
        "tokenize",
        str(empty_input),
        "--tokenizer",
        str(tokenizer_json),
        "--output",
        str(out),
        "--megatron",
        *FAST,
        "--json",
    )
    assert run.returncode == 0, run.stderr
    summary = json.loads(run.stdout)["details"]
    assert (summary["documents"], summary["tokens"], summary["shards"]) == (0, 0, 1)
    manifest = read_manifest(str(out))
    assert manifest.num_documents == 0 and manifest.num_tokens == 0
    assert list(read_documents(str(out))) == []
    assert not Path(f"{out}.zephyr/work").exists() and not Path(f"{out}.zephyr/staging").exists()


def test_count_and_convert(empty_input, tmp_path):
    run = zephyr_cli("count", str(empty_input), *FAST)
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "0"
    out = tmp_path / "converted"
    run = zephyr_cli("convert", str(empty_input), "--output", str(out), *FAST, "--json")
    assert run.returncode == 0, run.stderr
    summary = json.loads(run.stdout)
    assert (summary["details"]["files"], summary["rows_in"], summary["rows_kept"], summary["balanced"]) == (
        0,
        0,
        0,
        True,
    )
    assert out.is_dir() and _parts(out) == []


@pytest.mark.parametrize(
    "suffix", [pytest.param(".jsonl", id="jsonl"), pytest.param(".parquet", id="parquet")]
)
def test_folder_with_one_empty_file(tmp_path, tokenizer_json, suffix):
    folder = tmp_path / "in"
    folder.mkdir()
    rows = [{"id": f"d{i}", "text": f"{GOOD} Number {i}."} for i in range(10)]
    _write(folder / f"a{suffix}", rows[:6])
    _write(folder / f"b{suffix}", [])
    _write(folder / f"c{suffix}", rows[6:])
    # The commands pick a folder's format by name (a bare folder reads as Parquet): JSONL folders are named by
    # --format where there is one, by a glob elsewhere.
    fmt = ("--format", "jsonl") if suffix == ".jsonl" else ()
    files = [str(folder / f"*{suffix}")] if suffix == ".jsonl" else [str(folder)]

    run = zephyr_cli("count", str(folder), *fmt, *FAST)
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "10"

    run = zephyr_cli("convert", str(folder), *fmt, "--output", str(tmp_path / "converted"), *FAST)
    assert run.returncode == 0, run.stderr
    converted = pa.concat_tables(pq.read_table(p) for p in _parts(tmp_path / "converted"))
    assert sorted(converted.column("id").to_pylist()) == sorted(r["id"] for r in rows)

    run = zephyr_cli("filter", *files, "--output", str(tmp_path / "filtered"), *FAST, "--json")
    assert run.returncode == 0, run.stderr
    counts = json.loads(run.stdout)
    assert counts["rows_in"] == 10
    assert counts["rows_kept"] + counts["rows_dropped"] + counts["rows_quarantined"] == 10

    run = zephyr_cli(
        "tokenize",
        *files,
        "--tokenizer",
        str(tokenizer_json),
        "--output",
        str(tmp_path / "tok"),
        *FAST,
        "--json",
    )
    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout)["details"]["documents"] == 10
    assert len(list(read_documents(str(tmp_path / "tok")))) == 10
