"""Input files whose schemas disagree: one rule, decided before any task, for every command that reads input.

Default: a column missing from some files is read as nulls; any type difference fails in one line naming both
files, the column, both types and the fixes. ``--unify-schemas`` promotes (int → wider int → double);
``--schema FILE`` casts every file to a schema. Whatever the rule, every output part of a job has one schema.
"""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest
import yaml

import zephyr
from zephyr.errors import SchemaError
from zephyr.io.layout import dropped_dir
from zephyr.io.schema import load_schema_file, merge_schemas

from .conftest import FAST, GOOD, zephyr_cli

TEXTS = [GOOD + f" Paragraph {i} tells of the harbour and the ships that came in spring." for i in range(6)]


def _parquet(path: Path, **columns) -> Path:
    pq.write_table(pa.table(columns), path)
    return path


def _jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.fixture
def id_conflict(tmp_path) -> tuple[Path, Path, Path]:
    """``id`` is a string in one file and an int64 in the other."""
    folder = tmp_path / "in"
    folder.mkdir()
    a = _parquet(folder / "a.parquet", id=["x1", "x2", "x3"], text=TEXTS[:3])
    b = _parquet(folder / "b.parquet", id=pa.array([4, 5, 6], pa.int64()), text=TEXTS[3:])
    return folder, a, b


@pytest.fixture
def url_extra(tmp_path) -> Path:
    """Three files: one with ``url``, one with ``extra``, one with neither."""
    folder = tmp_path / "in"
    folder.mkdir()
    _parquet(folder / "a.parquet", id=["1", "2"], text=TEXTS[:2], url=["http://a", "http://b"])
    _parquet(folder / "b.parquet", id=["3", "4"], text=TEXTS[2:4], extra=pa.array([7, 8], pa.int64()))
    _parquet(folder / "c.parquet", id=["5", "6"], text=TEXTS[4:])
    return folder


@pytest.fixture
def int_double(tmp_path) -> tuple[Path, Path, Path]:
    folder = tmp_path / "in"
    folder.mkdir()
    a = _parquet(
        folder / "a.parquet", id=["1", "2", "3"], text=TEXTS[:3], score=pa.array([1, 2, 3], pa.int64())
    )
    b = _parquet(folder / "b.parquet", id=["4", "5", "6"], text=TEXTS[3:], score=pa.array([0.5, 1.5, 2.5]))
    return folder, a, b


def _assert_one_schema(folder: Path) -> pa.Schema:
    """Every part in ``folder`` has the same schema, and the folder reads as one table with pyarrow and polars."""
    parts = sorted(folder.glob("part-*.parquet"))
    assert parts, f"no parts in {folder}"
    schemas = [pq.read_schema(p) for p in parts]
    for part, schema in zip(parts, schemas):
        assert schema.equals(schemas[0]), f"{part.name}: {schema} != {schemas[0]}"
    table = ds.dataset([str(p) for p in parts], format="parquet").to_table()  # the folder holds sidecars too
    assert table.schema.equals(schemas[0])
    frame = pl.read_parquet([str(p) for p in parts])
    assert frame.height == table.num_rows
    return schemas[0]


def _assert_conflict_line(run, left: Path, right: Path, field: str, *types: str) -> None:
    assert run.returncode == 1, run.stdout + run.stderr
    line = next((s for s in run.stderr.splitlines() if "disagree on column" in s), None)
    assert line is not None, run.stderr
    for text in (str(left), str(right), repr(field), *types):
        assert text in line, (text, line)
    assert "--schema" in line


# -- Python API -------------------------------------------------------------------------------------------------
def test_type_conflict_fails_before_any_task(id_conflict, tmp_path):
    folder, a, b = id_conflict
    out = tmp_path / "out"
    with pytest.raises(SchemaError) as info:
        zephyr.read_parquet(str(folder)).write_parquet(str(out), executor="inprocess")
    message = str(info.value)
    assert "\n" not in message
    for text in (str(a), str(b), "'id'", "string", "int64", "--unify-schemas", "--schema"):
        assert text in message
    assert not out.exists() or not list(out.glob("part-*"))


def test_unify_does_not_turn_numbers_into_strings_but_a_schema_does(id_conflict, tmp_path):
    folder, a, b = id_conflict
    with pytest.raises(SchemaError, match="even with --unify-schemas"):
        zephyr.read_parquet(str(folder), unify_schemas=True).count(executor="inprocess")
    schema_file = tmp_path / "schema.yaml"
    schema_file.write_text("id: string\ntext: string\n")
    table = zephyr.read_parquet(str(folder), schema=str(schema_file)).to_arrow(executor="inprocess")
    assert table.schema == pa.schema([("id", pa.string()), ("text", pa.string())])
    assert table.column("id").to_pylist() == ["x1", "x2", "x3", "4", "5", "6"]


def test_missing_columns_are_nulls(url_extra, tmp_path):
    out = tmp_path / "out"
    result = zephyr.read_parquet(str(url_extra)).write_parquet(str(out), executor="inprocess")
    assert len(result.files) == 3
    schema = _assert_one_schema(out)
    assert schema.names == ["id", "text", "url", "extra"]
    table = pq.read_table(out)
    assert table.column("url").to_pylist() == ["http://a", "http://b", None, None, None, None]
    assert table.column("extra").to_pylist() == [None, None, 7, 8, None, None]


def test_int_and_double(int_double, tmp_path):
    folder, a, b = int_double
    with pytest.raises(SchemaError) as info:
        zephyr.read_parquet(str(folder)).count(executor="inprocess")
    for text in (str(a), str(b), "'score'", "int64", "double"):
        assert text in str(info.value)
    out = tmp_path / "out"
    result = zephyr.read_parquet(str(folder), unify_schemas=True).write_parquet(
        str(out), executor="inprocess"
    )
    assert sum(pq.read_metadata(f).num_rows for f in result.files) == 6
    assert _assert_one_schema(out).field("score").type == pa.float64()


def test_int_above_2_53_names_file_row_and_column(tmp_path):
    big = _parquet(tmp_path / "a.parquet", n=pa.array([1, 2**53 + 1], pa.int64()))
    _parquet(tmp_path / "b.parquet", n=pa.array([0.5]))
    with pytest.raises(zephyr.ZephyrError) as info:
        zephyr.read_parquet(str(tmp_path), unify_schemas=True).to_arrow(executor="inprocess")
    assert str(big) in str(info.value) and "row 1" in str(info.value) and "'n'" in str(info.value)


def test_nested_struct_conflict_names_the_field(tmp_path):
    a = _parquet(tmp_path / "a.parquet", meta=pa.array([{"lang": "en", "score": 1}]))
    b = _parquet(tmp_path / "b.parquet", meta=pa.array([{"lang": "de", "score": "high"}]))
    with pytest.raises(SchemaError) as info:
        zephyr.read_parquet(str(tmp_path), unify_schemas=True).count(executor="inprocess")
    for text in (str(a), str(b), "'meta.score'", "int64", "string"):
        assert text in str(info.value)


def test_nested_missing_field_is_null(tmp_path):
    _parquet(tmp_path / "a.parquet", meta=pa.array([{"lang": "en"}]))
    _parquet(tmp_path / "b.parquet", meta=pa.array([{"lang": "de", "year": 2001}]))
    table = zephyr.read_parquet(str(tmp_path)).to_arrow(executor="inprocess")
    assert table.column("meta").to_pylist() == [{"lang": "en", "year": None}, {"lang": "de", "year": 2001}]


def test_string_and_large_string_agree(tmp_path):
    (tmp_path / "in").mkdir()
    _parquet(tmp_path / "in" / "a.parquet", text=pa.array(["a"], pa.string()))
    _parquet(tmp_path / "in" / "b.parquet", text=pa.array(["b"], pa.large_string()))
    out = tmp_path / "out"  # beside the input folder: an output inside it is refused
    zephyr.read_parquet(str(tmp_path / "in")).write_parquet(str(out), executor="inprocess")
    assert _assert_one_schema(out).field("text").type == pa.large_string()


def test_jsonl_files_inferring_different_types(tmp_path):
    a = _jsonl(tmp_path / "a.jsonl", [{"text": TEXTS[0], "score": 1}, {"text": TEXTS[1], "score": 2}])
    b = _jsonl(tmp_path / "b.jsonl", [{"text": TEXTS[2], "score": 0.5}])
    _jsonl(tmp_path / "c.jsonl", [{"text": TEXTS[3], "score": None, "url": "http://c"}])
    with pytest.raises(SchemaError) as info:
        zephyr.read_jsonl(str(tmp_path)).count(executor="inprocess")
    for text in (str(a), str(b), "'score'", "int64", "double"):
        assert text in str(info.value)
    out = tmp_path.parent / f"{tmp_path.name}-out"  # beside the input folder: inside it is refused
    zephyr.read_jsonl(str(tmp_path), unify_schemas=True).write_parquet(str(out), executor="inprocess")
    schema = _assert_one_schema(out)
    assert schema.field("score").type == pa.float64() and schema.field("url").type == pa.string()
    assert pq.read_table(out).num_rows == 4


def test_jsonl_late_type_change_names_lines(tmp_path):
    """Types come from each file's first block: a later, wider type fails naming the lines, not silently."""
    first = [{"text": "t", "n": i} for i in range(60_000)]  # > 1 MiB of integers before the first double
    late = _jsonl(tmp_path / "a.jsonl", [*first, {"text": "t", "n": 0.5}])
    _jsonl(tmp_path / "b.jsonl", [{"text": "u", "n": 1}])
    with pytest.raises(zephyr.ZephyrError) as info:
        zephyr.read_jsonl(str(tmp_path)).count(executor="inprocess")
    message = str(info.value)
    assert str(late) in message and "'n'" in message and "double" in message and "--schema" in message


def test_schema_file_cast_failure_names_file_row_and_field(id_conflict, tmp_path):
    folder, a, b = id_conflict
    schema_file = tmp_path / "schema.json"
    schema_file.write_text(json.dumps({"id": "int64", "text": "string"}))
    with pytest.raises(zephyr.ZephyrError) as info:
        zephyr.read_parquet(str(folder), schema=str(schema_file)).count(executor="inprocess")
    message = str(info.value)
    assert str(a) in message and "row 0" in message and "'id'" in message and "'x1'" in message


def test_schema_file_formats(tmp_path):
    yaml_file = tmp_path / "s.yaml"
    yaml_file.write_text("id: string\nmeta: {lang: string, year: int32}\ntags: [string]\nat: timestamp[ms]\n")
    assert load_schema_file(str(yaml_file)) == pa.schema(
        [
            ("id", pa.string()),
            ("meta", pa.struct([("lang", pa.string()), ("year", pa.int32())])),
            ("tags", pa.list_(pa.string())),
            ("at", pa.timestamp("ms")),
        ]
    )
    parquet_file = _parquet(tmp_path / "s.parquet", id=pa.array([], pa.string()))
    assert load_schema_file(str(parquet_file)) == pa.schema([("id", pa.string())])
    bad = tmp_path / "bad.yaml"
    bad.write_text("id: strang\n")
    with pytest.raises(zephyr.ZephyrError, match="strang"):
        load_schema_file(str(bad))


def test_rule_table():
    """The default rule allows only changes that alter no value; unify promotes numbers, never to strings."""
    s = pa.schema
    cases = [
        (pa.null(), pa.string(), pa.string(), pa.string()),
        (pa.string(), pa.large_string(), pa.large_string(), pa.large_string()),
        (pa.dictionary(pa.int32(), pa.string()), pa.string(), pa.string(), pa.string()),
        (
            pa.list_(pa.string()),
            pa.large_list(pa.string()),
            pa.large_list(pa.string()),
            pa.large_list(pa.string()),
        ),
        (pa.int32(), pa.int64(), None, pa.int64()),
        (pa.int64(), pa.float64(), None, pa.float64()),
        (pa.int64(), pa.string(), None, None),
        (pa.timestamp("ms"), pa.timestamp("us"), None, None),
    ]
    for left, right, strict, unified in cases:
        for unify, want in ((False, strict), (True, unified)):
            peeks = [("a", s([("c", left)])), ("b", s([("c", right)]))]
            if want is None:
                with pytest.raises(SchemaError):
                    merge_schemas(peeks, unify=unify)
            else:
                assert merge_schemas(peeks, unify=unify).field("c").type == want, (left, right, unify)


# -- the command line -------------------------------------------------------------------------------------------
def _commands(tmp_path: Path, tokenizer: Path) -> dict[str, list[str]]:
    out = str(tmp_path / "out")
    return {
        "count": ["count"],
        "dedup exact": ["dedup", "exact", "--output", out],
        "dedup fuzzy": ["dedup", "fuzzy", "--output", out],
        "filter": ["filter", "--output", out],
        "tokenize": ["tokenize", "--tokenizer", str(tokenizer), "--output", out],
    }


COMMANDS = ["count", "dedup exact", "dedup fuzzy", "filter", "tokenize"]


@pytest.mark.parametrize("name", COMMANDS)
def test_cli_type_conflict_is_one_line(name, id_conflict, tmp_path, tokenizer_json):
    folder, a, b = id_conflict
    words = _commands(tmp_path, tokenizer_json)[name]
    run = zephyr_cli(*words, str(folder), *FAST)
    _assert_conflict_line(run, a, b, "id", "string", "int64")
    assert "Traceback" not in run.stderr
    assert not list((tmp_path / "out").glob("part-*")) and not list((tmp_path / "out").glob("shards/*"))


@pytest.mark.parametrize("name", COMMANDS)
def test_cli_unify_schemas(name, int_double, tmp_path, tokenizer_json):
    folder, a, b = int_double
    column, types = "score", ("int64", "double")
    if name == "tokenize":  # reads only text, id and source: a conflict elsewhere does not matter to it
        _parquet(a, id=pa.array([1, 2, 3], pa.int32()), text=TEXTS[:3])
        _parquet(b, id=pa.array([4, 5, 6], pa.int64()), text=TEXTS[3:])
        column, types = "id", ("int32", "int64")
    words = _commands(tmp_path, tokenizer_json)[name]
    run = zephyr_cli(*words, str(folder), *FAST)
    _assert_conflict_line(run, a, b, column, *types)
    run = zephyr_cli(*words, str(folder), "--unify-schemas", *FAST, *(() if name == "count" else ("--json",)))
    assert run.returncode == 0, run.stderr
    out = tmp_path / "out"
    if name == "count":
        assert run.stdout.strip() == "6"
    elif name == "tokenize":
        assert json.loads(run.stdout)["details"]["documents"] == 6
    elif name == "filter":
        counts = json.loads(run.stdout)
        assert counts["rows_in"] == 6
        _assert_one_schema(out)
    else:
        assert pq.read_table(out).num_rows == 6  # annotate mode keeps every row
        assert _assert_one_schema(out).field("score").type == pa.float64()


def test_cli_schema_file(id_conflict, tmp_path):
    folder, a, b = id_conflict
    schema_file = tmp_path / "schema.yaml"
    schema_file.write_text("id: string\ntext: large_string\n")
    out = tmp_path / "out"
    run = zephyr_cli("dedup", "exact", str(folder), "--output", str(out), "--schema", str(schema_file), *FAST)
    assert run.returncode == 0, run.stderr
    assert pq.read_table(out).num_rows == 6
    assert _assert_one_schema(out).field("id").type == pa.string()


def test_cli_filter_parts_share_one_schema(url_extra, tmp_path):
    """Before: three parts with three schemas (url / extra / neither)."""
    out = tmp_path / "out"
    run = zephyr_cli("filter", str(url_extra), "--output", str(out), *FAST, "--json")
    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout)["rows_in"] == 6
    schema = _assert_one_schema(out)
    assert {"url", "extra"} <= set(schema.names)
    dropped = sorted(Path(dropped_dir(out)).glob("part-*.parquet")) if Path(dropped_dir(out)).exists() else []
    assert len({pq.read_schema(p).to_string() for p in dropped}) <= 1


def test_cli_count_nested_conflict(tmp_path):
    a = _parquet(tmp_path / "a.parquet", meta=pa.array([{"score": 1}]))
    b = _parquet(tmp_path / "b.parquet", meta=pa.array([{"score": "high"}]))
    run = zephyr_cli("count", str(a), str(b), *FAST)
    _assert_conflict_line(run, a, b, "meta.score", "int64", "string")


@pytest.mark.parametrize("unify", [False, True], ids=["default", "unify_schemas"])
def test_run_pipeline_read_stage(int_double, tmp_path, unify):
    folder, a, b = int_double
    read = {"step": "read", "paths": [str(folder)]}
    if unify:
        read["unify_schemas"] = True
    config = {"name": "mixed", "steps": [read, {"step": "normalize"}]}
    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump(config))
    job = tmp_path / "job"
    run = zephyr_cli("run", str(path), "--job-dir", str(job), "--no-report", *FAST)
    if not unify:
        _assert_conflict_line(run, a, b, "score", "int64", "double")
        return
    assert run.returncode == 0, run.stderr
    for stage_dir in sorted(job.glob("0*-*")):
        if list(stage_dir.glob("part-*.parquet")):
            _assert_one_schema(stage_dir)
    normalized = next(job.glob("*-normalize"))
    assert sum(pq.read_metadata(p).num_rows for p in normalized.glob("part-*.parquet")) == 6


def test_only_read_columns_take_part(id_conflict):
    """A projection that skips the conflicting column reads fine (tokenize reads text, id and source only)."""
    folder, _, _ = id_conflict
    assert zephyr.read_parquet(str(folder), columns=["text"]).count(executor="inprocess") == 6
