"""Every command that reads a text column refuses one that does not hold strings, in one line naming the file and
the column, before any task runs; string, large_string, string_view and null-typed (all-null) columns are text."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from zephyr.tokenize import read_documents, write_token_shards

import zephyr
from zephyr.errors import SchemaError, ZephyrError
from zephyr.io.quarantine import require_text_column
from zephyr.io.sources import check_text_inputs

from .conftest import FAST, GOOD, error_lines, zephyr_cli


def _command(name: str, tmp_path: Path, tokenizer: Path) -> tuple[list[str], list[str]]:
    """(the command's words, its options besides inputs and --output); models load lazily: never here."""
    if name == "tokenize":
        return ["tokenize"], ["--tokenizer", str(tokenizer)]
    if name == "langid":
        return ["langid"], ["--model", str(tmp_path / "never-loaded.ftz")]
    if name == "quality score":
        return ["quality", "score"], ["--model", str(tmp_path / "never-loaded.bin")]
    if name == "decontaminate":
        (tmp_path / "eval.jsonl").write_text(json.dumps({"text": GOOD}) + "\n")
        return ["decontaminate"], ["--eval", str(tmp_path / "eval.jsonl")]
    return [name], []


TEXT_COMMANDS = ["tokenize", "filter", "normalize", "langid", "pii", "decontaminate", "quality score"]


@pytest.mark.parametrize("name", TEXT_COMMANDS)
def test_int_text_column_is_one_line_error(tmp_path, tokenizer_json, name):
    good = tmp_path / "a.parquet"
    bad = tmp_path / "b.parquet"
    pq.write_table(pa.table({"text": [GOOD, GOOD]}), good)
    pq.write_table(pa.table({"text": pa.array([1, 2, 3], pa.int64())}), bad)
    out = tmp_path / "out"
    words, options = _command(name, tmp_path, tokenizer_json)
    run = zephyr_cli(*words, str(good), str(bad), *options, "--output", str(out), *FAST)
    assert run.returncode == 1
    lines = error_lines(run)
    assert len(lines) == 1, run.stderr
    assert str(bad) in lines[0] and "'text'" in lines[0] and "int64" in lines[0]
    assert not list(out.glob("part-*")) and not list(out.glob("shard-*"))


def test_jsonl_numbers_are_refused_by_tokenize(tmp_path, tokenizer_json):
    path = tmp_path / "numbers.jsonl"
    path.write_text("".join(json.dumps({"text": i}) + "\n" for i in range(5)))
    run = zephyr_cli(
        "tokenize", str(path), "--tokenizer", str(tokenizer_json), "--output", str(tmp_path / "t"), *FAST
    )
    assert run.returncode == 1
    assert f"{path}: text column 'text' has type int64" in run.stderr
    assert len(error_lines(run)) == 1


def test_other_text_column_name(tmp_path, tokenizer_json):
    """--text-column is the column checked: a numeric ``text`` beside a string ``body`` is fine."""
    path = tmp_path / "in.parquet"
    pq.write_table(pa.table({"text": [1, 2], "body": [GOOD, GOOD + " Two."]}), path)
    run = zephyr_cli(
        "tokenize",
        str(path),
        "--tokenizer",
        str(tokenizer_json),
        "--text-column",
        "body",
        "--output",
        str(tmp_path / "t"),
        *FAST,
        "--json",
    )
    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout)["details"]["documents"] == 2


@pytest.mark.parametrize(
    "text",
    [
        pytest.param(pa.array([GOOD, None, "short"], pa.string()), id="string"),
        pytest.param(pa.array([GOOD, None, "short"], pa.large_string()), id="large_string"),
        pytest.param(pa.array([GOOD, None, "short"], pa.string_view()), id="string_view"),
        pytest.param(pa.nulls(3), id="null-typed"),
    ],
)
def test_text_types_that_are_text(tmp_path, tokenizer_json, text):
    path = tmp_path / "in.parquet"
    pq.write_table(pa.table({"id": ["a", "b", "c"], "text": text}), path)
    texts = text.to_pylist()
    run = zephyr_cli(
        "tokenize",
        str(path),
        "--tokenizer",
        str(tokenizer_json),
        "--output",
        str(tmp_path / "t"),
        *FAST,
        "--json",
    )
    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout)["details"]["documents"] == sum(t is not None for t in texts)
    assert len(list(read_documents(str(tmp_path / "t")))) == sum(t is not None for t in texts)
    run = zephyr_cli("filter", str(path), "--output", str(tmp_path / "f"), *FAST, "--json")
    assert run.returncode == 0, run.stderr
    counts = json.loads(run.stdout)
    assert counts["rows_in"] == 3 and counts["rows_quarantined"] == sum(t is None for t in texts)
    assert counts["rows_kept"] + counts["rows_dropped"] + counts["rows_quarantined"] == 3


def test_tokenize_step_checks_dataset_batches(tmp_path, tokenizer_json):
    """A Dataset input has no files to check first: the tokenize step refuses the batch itself."""
    data = zephyr.from_arrow(pa.table({"text": pa.array([1, 2, 3], pa.int64())}))
    with pytest.raises(ZephyrError, match=r"tokenize input: text column 'text' has type int64, not a string"):
        write_token_shards(
            data, tokenizer=str(tokenizer_json), output=str(tmp_path / "t"), executor="inprocess"
        )


@pytest.mark.parametrize(
    "t", [pa.string(), pa.large_string(), pa.string_view(), pa.null()], ids=lambda t: str(t)
)
def test_require_text_column_accepts(t):
    require_text_column(pa.schema([("text", t)]), "text", where="x.parquet")


@pytest.mark.parametrize(
    "t",
    [
        pa.int64(),
        pa.float64(),
        pa.bool_(),
        pa.binary(),
        pa.list_(pa.string()),
        pa.dictionary(pa.int32(), pa.string()),
    ],
    ids=lambda t: str(t),
)
def test_require_text_column_refuses(t):
    with pytest.raises(
        SchemaError, match=rf"^x\.parquet: text column 'text' has type {t}, not a string type"
    ):
        require_text_column(pa.schema([("text", t)]), "text", where="x.parquet")


def test_missing_column_names_the_columns_there(tmp_path):
    path = tmp_path / "in.parquet"
    pq.write_table(pa.table({"body": ["x"]}), path)
    with pytest.raises(
        SchemaError, match=r"in\.parquet: text column 'text' not found; the columns are \['body'\]"
    ):
        check_text_inputs(str(path), "text")


def test_files_without_rows(tmp_path):
    """An empty JSONL file has no types and passes; a 0-row Parquet file still has typed columns."""
    (tmp_path / "a.jsonl").write_bytes(b"")
    check_text_inputs(str(tmp_path / "a.jsonl"), "text")
    pq.write_table(pa.table({"text": pa.array([], pa.int64())}), tmp_path / "b.parquet")
    with pytest.raises(SchemaError, match=r"b\.parquet: text column 'text' has type int64"):
        check_text_inputs(str(tmp_path / "b.parquet"), "text")
