"""The physical plan (``zephyr.physical``): the printed plan's structure, and that it is the plan that runs."""

from __future__ import annotations

import ast
import re
import types
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import zephyr
from zephyr import job_stats
from zephyr.budget import Budget
from zephyr.cli import main
from zephyr.config import parse_bytes
from zephyr.ops import WIDE_OPS
from zephyr.physical import ACTION_OUTPUT as OUT
from zephyr.physical import EXCHANGES, PlannedJob, planned_bytes

STAGE = re.compile(r"^stage (\d+) (\w+): (.+)$")


def _structure(text: str) -> list[tuple[str, str, str, str]]:
    """(role, name, tasks, writes) per stage block of a printed plan."""
    stages: list[list[str]] = []
    for line in text.splitlines():
        match = STAGE.match(line)
        if match:
            assert int(match.group(1)) == len(stages) + 1, text
            stages.append([match.group(2), match.group(3), "", ""])
        elif line.startswith("  tasks ") and stages:
            stages[-1][2] = line.split(" · ")[0].removeprefix("  tasks ")
        elif line.startswith("  writes ") and stages:
            stages[-1][3] = line.removeprefix("  writes ")
    return [tuple(s) for s in stages]


def _table(rows: int = 400) -> pa.Table:
    return pa.table({"k": [i % 37 for i in range(rows)], "v": [f"value {i}" for i in range(rows)]})


def _runs(ds: zephyr.Dataset, **execution) -> list[tuple[str, str]]:
    """(stage name, task count) of each stage an actual run records, in order."""
    with job_stats.recording() as jobs:
        ds.to_arrow(executor="inprocess", **execution)
    return [(s["stage"], str(s["tasks"])) for s in jobs[0]["stages"]]


def test_every_wide_op_has_an_exchange():
    assert set(EXCHANGES) == set(WIDE_OPS)


def test_sort_plan_samples_then_range_shuffles():
    ds = zephyr.from_arrow(_table(), num_shards=2).sort("k", descending=True, num_partitions=3)
    text = ds.explain()
    assert _structure(text) == [
        ("sample", "FromTable", "2", "a key sample → 2 range boundaries on k"),
        ("map", "FromTable", "2", "shuffle #1: range(k desc) into 3 partitions"),
        ("reduce", "Sort", "3", OUT),
    ]
    assert "each task merges its sorted runs; 3 partitions = num_partitions" in text
    assert text.splitlines()[0].startswith("physical plan: 3 stages, 1 shuffle;")


def test_sort_of_computed_rows_materializes_them_first():
    ds = zephyr.from_arrow(_table()).map_batches(lambda t: t, name="keep").sort("k", num_partitions=2)
    assert _structure(ds.explain()) == [
        (
            "map",
            "FromTable → map_batches(keep)",
            "1",
            "Parquet files in the work directory (materialized: read twice)",
        ),
        ("sample", "ReadFiles", "≤ 1", "a key sample → 1 range boundaries on k"),
        ("map", "ReadFiles", "≤ 1", "shuffle #1: range(k) into 2 partitions"),
        ("reduce", "Sort", "2", OUT),
    ]


def test_group_by_plan_combines_on_the_map_side_and_reads_only_needed_columns(tmp_path):
    path = tmp_path / "in.parquet"
    pq.write_table(_table().append_column("unused", pa.array(["x" * 50] * 400)), path)
    ds = zephyr.read_parquet(str(path)).group_by("k").agg(total=("v", "count"))
    text = ds.explain(memory_budget="8MB")
    assert _structure(text) == [
        (
            "map",
            "ReadFiles",
            "1",
            "shuffle #1: hash(k) into 1 partition, map-side combine: partial aggregates",
        ),
        ("reduce", "GroupAggregate", "1", OUT),
    ]
    assert "columns k, v" in text  # pushdown: the map side never decodes ``unused``


def test_join_plan_shuffles_both_sides_into_one_reducer():
    left = zephyr.from_arrow(_table(), num_shards=2)
    right = zephyr.from_arrow(_table(50)).select("k")
    text = left.join(right, on="k", num_partitions=4).explain()
    assert _structure(text) == [
        ("map", "FromTable", "2", "shuffle #1: hash(k) into 4 partitions"),
        ("map", "FromTable → select(k)", "1", "shuffle #2: hash(k) into 4 partitions"),
        ("reduce", "Join", "4", OUT),
    ]
    assert "reads shuffle #1 + #2, one partition per task" in text
    assert "each task joins the two sides' rows of each key" in text


def test_deduplicate_plan_keeps_first_occurrences_on_the_map_side():
    text = zephyr.from_arrow(_table()).deduplicate("k", num_partitions=2).reshard(3).explain()
    assert _structure(text) == [
        (
            "map",
            "FromTable",
            "1",
            "shuffle #1: hash(k) into 2 partitions, map-side combine: the first row of each key",
        ),
        ("reduce", "Deduplicate", "2", "shuffle #2: round-robin into 3 partitions"),
        ("reduce", "Reshard", "3", OUT),
    ]


@pytest.mark.parametrize(
    "build",
    [
        pytest.param(lambda ds, other: ds.sort("k"), id="sort"),
        pytest.param(lambda ds, other: ds.group_by("k").agg(n=("v", "count")), id="group_by"),
        pytest.param(lambda ds, other: ds.join(other, on="k"), id="join"),
        pytest.param(lambda ds, other: ds.deduplicate("k"), id="deduplicate"),
    ],
)
def test_the_printed_plan_is_the_plan_that_runs(tmp_path, build):
    """Stage names and task counts, partition counts sized from the budget included, match a real run."""
    rows = 20_000  # per file: ~1 MiB of Arrow bytes, so a 1 MiB budget gives several partitions
    table = pa.table({"k": [i % 997 for i in range(3 * rows)], "v": [f"{i:040d}" for i in range(3 * rows)]})
    for i in range(3):
        pq.write_table(table.slice(i * rows, rows), tmp_path / f"part-{i}.parquet")
    ds = zephyr.read_parquet(str(tmp_path))
    plan = build(ds, ds.select("k", "v"))
    planned = [(name, tasks) for _, name, tasks, _ in _structure(plan.explain(memory_budget="1MiB"))]
    ran = _runs(plan, memory_budget="1MiB")
    assert planned == ran
    assert any(
        int(tasks) > 1 for name, tasks in ran if name in ("Sort", "GroupAggregate", "Join", "Deduplicate")
    )


def test_lazy_exact_dedup_plan_is_printed_as_it_runs():
    """Exact dedup without ``execution`` is one lazy plan of shuffles: hash, keepers by aggregation, joins."""
    from zephyr.dedup import exact_dedup_dataset

    texts = [f"document {i % 40}" for i in range(200)]
    ds = zephyr.from_items([{"id": f"d{i:03d}", "text": t} for i, t in enumerate(texts)], num_shards=2)
    plan = exact_dedup_dataset(ds, mode="remove")
    structure = _structure(plan.explain())
    assert structure[0][:2] == (
        "map",
        "FromTable → with_row_index(__dedup_row) → map_batches(dedup.exact.hash)",
    )
    assert structure[0][3].startswith("shuffle #1: hash(__dedup_h0, __dedup_h1)")
    assert structure[-1][:2] == (
        "reduce",
        "Join → map_batches(dedup.exact.finish)",
    )
    assert {role for role, *_ in structure} == {"map", "reduce"}
    assert sum(writes.startswith("shuffle #") for *_, writes in structure) == len(structure) - 1
    assert [(name, tasks) for _, name, tasks, _ in structure] == _runs(plan)
    assert plan.count(executor="inprocess") == 40


def test_budget_shares_are_printed_in_bytes():
    text = zephyr.from_items([{"k": 1}]).explain(memory_budget="64MiB")
    assert "budget shares (bytes per task, of 67,108,864):" in text
    for name, value, _ in Budget(64 << 20).table():
        assert re.search(rf"^  {name} +{value:,}  ", text, re.M), name


def test_explain_of_empty_input():
    empty = zephyr.from_arrow(pa.table({"k": pa.array([], pa.int64())}))
    assert [s[0] for s in _structure(empty.sort("k").explain())] == ["sample", "map", "reduce"]
    assert "1 partition = ceil(est. 0 B" in empty.group_by("k").count().explain()


def test_cli_explain_prints_the_plan_and_runs_nothing(tmp_path, capsys):
    source = tmp_path / "in.parquet"
    pq.write_table(_table(), source)
    work = tmp_path / "work"
    argv = ["explain", "sort", str(source), "--by", "k", "--memory-budget", "16MB", "--work-dir", str(work)]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert [s[:2] for s in _structure(out)] == [
        ("sample", "ReadFiles"),
        ("map", "ReadFiles"),
        ("reduce", "Sort"),
    ]
    assert "shuffle_buffer_bytes" in out
    assert not work.exists()
    assert main(["explain", "count", str(source)]) == 0
    assert [s[:2] for s in _structure(capsys.readouterr().out)] == [("map", "ReadFiles")]


def test_the_driver_never_imports_the_facade():
    """``zephyr.job`` runs plans of ops; it never reaches back to ``Dataset`` (no import loop), lazily or not."""
    source = (Path(zephyr.__file__).parent / "job.py").read_text()
    imported = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.module:
            imported.update(f"{node.module}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Import):
            imported.update(alias.name for alias in node.names)
    facade = {"zephyr.dataset", "zephyr.Dataset", "zephyr.read", "zephyr.from_arrow", "zephyr.from_items"}
    assert not {name for name in imported if name in facade or name.startswith("zephyr.dataset.")}


@pytest.mark.parametrize(
    ("size", "shown"),
    [(["1.5", "GB"], "memory budget 1.4 GiB per task"), (["512", "MiB"], "memory budget 512.0 MiB per task")],
    ids=["decimal", "binary"],
)
def test_a_byte_size_may_be_written_with_a_space(tmp_path, capsys, size, shown):
    """``--memory-budget 1.5 GB`` (two words on the command line) is one size, as ``1.5GB`` and a config
    value ``"1.5 GB"`` are."""
    source = tmp_path / "in.parquet"
    pq.write_table(_table(), source)
    assert main(["explain", "sort", str(source), "--by", "k", "--memory-budget", *size]) == 0
    assert shown in capsys.readouterr().out
    assert main(["explain", "sort", str(source), "--memory-budget=" + size[0], size[1], "--by", "k"]) == 0
    assert shown in capsys.readouterr().out
    assert zephyr.ExecutionOptions(memory_budget=" ".join(size)).memory_budget_bytes == parse_bytes(
        "".join(size)
    )


def test_the_plan_names_no_internal_class_or_method():
    """The printed plan says what each stage does in words: no reducer or combiner class, no engine
    method (``write_*``, ``to_arrow``) and no settings attribute (``num_partitions``, ``num_shards``: the
    Dataset's own keywords, are named)."""
    left = zephyr.from_arrow(_table(), num_shards=2)
    plans = [
        left.sort("k").explain(),
        left.group_by("k").count().explain(),
        left.deduplicate("k").join(left, on="k").reshard(2).explain(),
        left.group_by("k").reduce(lambda rows: rows).explain(),
        left.explain(executor="local"),
    ]
    for text in plans:
        words = re.findall(r"[A-Za-z_*]+", text.split("\nbudget shares")[0])
        internal = [w for w in words if w.endswith(("Reducer", "Aggregate", "Occurrence")) or "_" in w]
        assert set(internal) <= {"GroupAggregate", "num_partitions", "num_shards"}, (internal, text)


def test_planned_bytes_count_one_of_each_alternative():
    """The progress bar's planned total: every job's stages, and of alternatives (job 2a / 2b) the first."""
    ds = zephyr.from_arrow(_table(), num_shards=2)
    one = planned_bytes(ds, {})
    assert one > 0 and one == planned_bytes([PlannedJob("job 1: all", ds)], {})
    jobs = [
        PlannedJob("job 1: a", ds),
        PlannedJob("a rule"),
        PlannedJob("job 2a: b", ds),
        PlannedJob("job 2b: c", ds.sort("k")),
    ]
    assert planned_bytes(jobs, {}) == 2 * one
    assert planned_bytes(types.SimpleNamespace(explain=lambda **kw: "text"), {}) == 0  # a plan as text only


def test_a_reduce_whose_tasks_take_adjacent_partitions_says_so():
    """A reduce feeding another shuffle may run adjacent partitions per task (``reduce_groups``): the plan
    says so, with at most P tasks, and a run has at most that many; a reduce that writes a part per
    partition (the last stage, as a write runs it) keeps one partition per task."""
    ds = zephyr.from_arrow(_table(), num_shards=2).group_by("k", num_partitions=16).count().deduplicate("k")
    text = ds.explain()
    structure = _structure(text)
    assert [(role, name, tasks) for role, name, tasks, _ in structure] == [
        ("map", "FromTable", "2"),
        ("reduce", "GroupAggregate", "≤ 16"),
        ("reduce", "Deduplicate", "1"),
    ]
    assert "tasks ≤ 16 · reads shuffle #1, adjacent partitions per task, sized from the map side's" in text
    assert "16 partitions = num_partitions" in text
    assert "reads shuffle #2, one partition per task" in text
    ran = dict(_runs(ds))
    assert ran["FromTable"] == "2" and int(ran["GroupAggregate"]) <= 16
