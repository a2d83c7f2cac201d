"""Engine stages and the CLI: same clusters as the plain functions, deterministic bytes, duckdb parity."""

from __future__ import annotations

import hashlib
import json
import random
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from zephyr.dedup import FuzzyDedupConfig, exact_dedup, exact_dedup_dataset, fuzzy_dedup, fuzzy_dedup_dataset
from zephyr.dedup.config import DedupColumns

import zephyr
from zephyr.cli import main
from zephyr.errors import InputError
from zephyr.io.layout import stats_path

DUP_COLUMNS = ["id", "dup_cluster", "dup_cluster_size", "dup_keep"]
# spawning local workers costs seconds per action: the local-executor runs of the multi-action fuzzy stage are
# slow tests; the default suite covers the local executor with the single-action exact stage.
EXECUTORS = [
    pytest.param("inprocess", id="inprocess"),
    pytest.param("local", id="local", marks=pytest.mark.slow),
]
WORDS = [f"w{i}" for i in range(300)]


def _corpus(n_clusters: int = 12) -> pa.Table:
    rng = random.Random(5)
    rows = []
    for c in range(n_clusters):
        base = [rng.choice(WORDS) for _ in range(80)]
        for v in range(1 + c % 3):
            words = list(base)
            if v:
                words[rng.randrange(len(words))] = "edited"
            rows.append({"id": f"d{c:02d}{v}", "text": " ".join(words), "source": "s" + str(c % 2)})
    rows.append({"id": "nulltext", "text": None, "source": "s0"})
    rows.append({"id": "exact1", "text": "Same  TEXT", "source": "s1"})
    rows.append({"id": "exact0", "text": "same text", "source": "s0"})
    rng.shuffle(rows)
    return pa.Table.from_pylist(rows)


def _norm(t: pa.Table) -> pa.Table:
    t = t.select(DUP_COLUMNS).sort_by([("id", "ascending"), ("dup_keep", "descending")])
    return t.cast(
        pa.schema(
            [
                pa.field("id", pa.large_string()),
                pa.field("dup_cluster", pa.large_string()),
                pa.field("dup_cluster_size", pa.int64()),
                pa.field("dup_keep", pa.bool_()),
            ]
        )
    )


@pytest.mark.parametrize("executor", EXECUTORS)
def test_exact_stage_equals_plain_function(executor):
    t = _corpus()
    out = exact_dedup_dataset(zephyr.from_arrow(t, num_shards=2), mode="annotate").to_arrow(
        executor=executor, workers=2
    )
    assert _norm(out).equals(_norm(exact_dedup(t, mode="annotate").table))
    assert set(out.column_names) >= set(t.column_names)


@pytest.mark.parametrize("executor", EXECUTORS)
def test_fuzzy_stage_equals_plain_function(executor):
    t = _corpus()
    cfg = FuzzyDedupConfig(threshold=0.8)
    ex = {"executor": executor, "workers": 2}
    out = fuzzy_dedup_dataset(
        zephyr.from_arrow(t, num_shards=2), cfg, execution=ex, mode="annotate"
    ).to_arrow(**ex)
    ref = fuzzy_dedup(t, cfg, mode="annotate").table
    assert _norm(out).equals(_norm(ref))
    removed = fuzzy_dedup_dataset(zephyr.from_arrow(t), cfg, mode="remove", execution=ex).to_arrow(**ex)
    assert removed.num_rows == fuzzy_dedup(t, cfg, mode="remove").table.num_rows
    assert "nulltext" in removed["id"].to_pylist()  # null text passes through


def test_fuzzy_stage_external_components_equal_in_memory():
    t = _corpus()
    cfg = FuzzyDedupConfig(threshold=0.8)
    ex = {"executor": "inprocess"}
    out = fuzzy_dedup_dataset(
        zephyr.from_arrow(t, num_shards=2), cfg, execution=ex, driver_rows=0, mode="annotate"
    )
    assert _norm(out.to_arrow(**ex)).equals(_norm(fuzzy_dedup(t, cfg, mode="annotate").table))


def _corpus_in_two_files(tmp_path) -> tuple:
    """(folder, table): ``_corpus()`` written as two Parquet files (rows 0-14 and the rest) under ``in``."""
    src = tmp_path / "in"
    src.mkdir()
    t = _corpus()
    pq.write_table(t.slice(0, 15), src / "a.parquet")
    pq.write_table(t.slice(15), src / "b.parquet")
    return src, t


def _digests(directory) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(directory.glob("*.parquet"))}


@pytest.mark.slow
def test_cli_fuzzy_same_bytes_for_1_and_2_workers_and_reruns(tmp_path):
    src, t = _corpus_in_two_files(tmp_path)
    runs = []
    for i, workers in enumerate((1, 2, 2)):
        out = tmp_path / f"out{i}"
        args = [
            "dedup",
            "fuzzy",
            str(src),
            "--output",
            str(out),
            "--workers",
            str(workers),
            "--mode",
            "annotate",
        ]
        rc = main(args)
        assert rc == 0
        runs.append(_digests(out))
    assert runs[0] == runs[1] == runs[2] and runs[0]
    stats = json.loads(Path(stats_path(tmp_path / "out0")).read_text())
    hist = stats["dedup"]["cluster_size_histogram"]
    assert sum(int(k) * v for k, v in hist.items()) == t.num_rows - 1  # every non-null row in one cluster
    result = pq.read_table(tmp_path / "out0")
    assert set(t.column_names) <= set(result.column_names) and result.num_rows == t.num_rows


def test_cli_exact_same_bytes_for_1_and_2_workers(tmp_path):
    src, _ = _corpus_in_two_files(tmp_path)
    runs = []
    for i, workers in enumerate((1, 2)):
        out = tmp_path / f"out{i}"
        assert main(["dedup", "exact", str(src), "--output", str(out), "--workers", str(workers)]) == 0
        runs.append(_digests(out))
    assert runs[0] == runs[1] and runs[0]  # reruns: test_cli_fuzzy_inprocess_reruns_same_bytes


@pytest.mark.parametrize("kind", ["exact", "fuzzy"])
def test_cli_dedup_runs_on_threads_by_default_with_the_bytes_of_every_executor(tmp_path, kind):
    src, _ = _corpus_in_two_files(tmp_path)
    runs = {}
    for name, flags in {
        "default": [],
        "inprocess": ["--executor", "inprocess"],
        "local": ["--executor", "local"],
    }.items():
        out = tmp_path / name
        assert main(["dedup", kind, str(src), "--output", str(out), "--workers", "2", *flags]) == 0
        runs[name] = _digests(out)
    assert runs["default"] == runs["inprocess"] == runs["local"] and runs["default"]
    assert json.loads(Path(stats_path(tmp_path / "default")).read_text())["executor"] == "ThreadExecutor"


def test_cli_fuzzy_inprocess_reruns_same_bytes(tmp_path):
    pq.write_table(_corpus(), tmp_path / "in.parquet")
    runs = []
    for i in range(2):
        out = tmp_path / f"out{i}"
        assert (
            main(
                [
                    "dedup",
                    "fuzzy",
                    str(tmp_path / "in.parquet"),
                    "--output",
                    str(out),
                    "--executor",
                    "inprocess",
                ]
            )
            == 0
        )
        runs.append(_digests(out))
    assert runs[0] == runs[1] and runs[0]
    graph = json.loads(Path(stats_path(tmp_path / "out0")).read_text())["dedup"]
    plain = fuzzy_dedup(_corpus(), FuzzyDedupConfig(), mode="annotate").stats
    assert graph["in_memory"] is True
    assert (graph["candidate_pairs"], graph["verified_pairs"]) == (
        plain["candidate_pairs"],
        plain["verified_pairs"],
    )
    assert graph["rejected_pairs"] == graph["candidate_pairs"] - graph["verified_pairs"]


def test_fuzzy_stage_stats_on_external_path():
    t = _corpus()
    stats: dict = {}
    ex = {"executor": "inprocess"}
    fuzzy_dedup_dataset(
        zephyr.from_arrow(t),
        FuzzyDedupConfig(),
        execution=ex,
        driver_rows=0,
        stats=stats,
        mode="annotate",
    )
    plain = fuzzy_dedup(t, FuzzyDedupConfig(), mode="annotate").stats
    assert stats["in_memory"] is False
    assert (stats["candidate_pairs"], stats["verified_pairs"]) == (
        plain["candidate_pairs"],
        plain["verified_pairs"],
    )


def test_cli_exact_none_keeps_count_distinct_like_duckdb(tmp_path):
    texts = [f"row {i % 23}" + ("  " if i % 4 == 0 else "") for i in range(300)] + [None, ""]
    t = pa.table({"id": [f"i{k:04d}" for k in range(len(texts))], "text": texts})
    pq.write_table(t, tmp_path / "in.parquet")
    out = tmp_path / "out"
    rc = main(
        [
            "dedup",
            "exact",
            str(tmp_path / "in.parquet"),
            "--output",
            str(out),
            "--normalize",
            "none",
            "--mode",
            "remove",
            "--executor",
            "inprocess",
        ]
    )
    assert rc == 0
    kept = pq.read_table(out)
    path = str(tmp_path / "in.parquet")
    distinct = duckdb.sql(f"select count(distinct text) from '{path}'").fetchall()[0][0]
    assert kept.num_rows == distinct + 1  # + the null-text row, passed through
    assert (
        kept.filter(pa.compute.is_valid(kept["text"]))["text"].to_pylist()
        == sorted(set(x for x in texts if x is not None), key=lambda s: texts.index(s))
        or len(set(kept["text"].to_pylist())) == kept.num_rows
    )


def test_cli_paragraph_level_jsonl(tmp_path):
    lines = [{"id": "b", "text": "shared\nb only"}, {"id": "a", "text": "shared\na only"}]
    (tmp_path / "in.jsonl").write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    out = tmp_path / "out"
    rc = main(
        [
            "dedup",
            "paragraph",
            str(tmp_path / "in.jsonl"),
            "--output",
            str(out),
            "--mode",
            "remove",
            "--executor",
            "inprocess",
        ]
    )
    assert rc == 0
    got = dict(zip(*pq.read_table(out).select(["id", "text"]).to_pydict().values()))
    assert got == {"a": "shared\na only", "b": "b only"}


def test_cli_missing_column_is_a_clear_error(tmp_path, capsys):
    pq.write_table(pa.table({"id": [1], "body": ["x"]}), tmp_path / "in.parquet")
    rc = main(
        [
            "dedup",
            "exact",
            str(tmp_path / "in.parquet"),
            "--output",
            str(tmp_path / "o"),
            "--executor",
            "inprocess",
        ]
    )
    assert rc != 0
    assert "text column 'text' not found" in capsys.readouterr().err


@pytest.mark.parametrize("preset", ["datatrove", "nemo", "redpajama"])
def test_cli_presets_run(tmp_path, preset):
    pq.write_table(_corpus(4), tmp_path / "in.parquet")
    rc = main(
        [
            "dedup",
            "fuzzy",
            str(tmp_path / "in.parquet"),
            "--output",
            str(tmp_path / "o"),
            "--preset",
            preset,
            "--executor",
            "inprocess",
            "--mode",
            "remove",
        ]
    )
    assert rc == 0


def test_fuzzy_stage_refuses_an_input_that_changed_between_passes(monkeypatch):
    import zephyr.dedup._graph as graph

    real = graph.node_sets

    def drop_first(*args):
        return real(*args).slice(1)  # as if a row vanished from the input on the second read

    monkeypatch.setattr(graph, "node_sets", drop_first)
    with pytest.raises(InputError, match="must not change"):
        fuzzy_dedup_dataset(
            zephyr.from_arrow(_corpus()),
            FuzzyDedupConfig(),
            execution={"executor": "inprocess"},
            mode="annotate",
        )


@pytest.mark.parametrize("executor", EXECUTORS)
@pytest.mark.parametrize("priority", [None, "prio"])
def test_exact_stage_in_memory_path_equals_plain_function(executor, priority):
    t = _corpus()
    t = t.append_column("prio", pa.array([i % 3 for i in range(t.num_rows)], pa.int64()))
    ex = {"executor": executor, "workers": 2}
    stats: dict = {}
    out = exact_dedup_dataset(
        zephyr.from_arrow(t, num_shards=2),
        DedupColumns(priority_column=priority),
        execution=ex,
        stats=stats,
        mode="annotate",
    ).to_arrow(**ex)
    assert stats["in_memory"] is True and stats["duplicate_rows"] >= 2
    assert _norm(out).equals(
        _norm(exact_dedup(t, DedupColumns(priority_column=priority), mode="annotate").table)
    )
    removed = exact_dedup_dataset(zephyr.from_arrow(t), mode="remove", execution=ex).to_arrow(**ex)
    assert removed.num_rows == exact_dedup(t, mode="remove").table.num_rows


def test_exact_stage_falls_back_to_the_join_past_the_limit_and_both_agree_on_repeated_ids():
    t = _corpus()
    ex = {"executor": "inprocess"}
    want = _norm(exact_dedup(t, mode="annotate").table)
    stats: dict = {}
    out = exact_dedup_dataset(
        zephyr.from_arrow(t), execution=ex, driver_rows=3, stats=stats, mode="annotate"
    ).to_arrow(**ex)
    assert stats["in_memory"] is False and "limit" in stats["fallback"] and _norm(out).equals(want)
    dup_ids = pa.concat_tables(
        [t, t.slice(0, 1)]
    )  # a row repeated with its id: it is a duplicate, not "the same row"
    stats = {}
    out = exact_dedup_dataset(
        zephyr.from_arrow(dup_ids), execution=ex, stats=stats, mode="annotate"
    ).to_arrow(**ex)
    assert stats["in_memory"] is True
    lazy = exact_dedup_dataset(zephyr.from_arrow(dup_ids), mode="annotate").to_arrow(**ex)
    assert _norm(out).equals(_norm(lazy))
    assert pc.sum(pc.invert(out["dup_keep"])).as_py() == pc.sum(pc.invert(want["dup_keep"])).as_py() + 1


def test_exact_stage_orders_null_ids_last_and_quarantines_nothing(tmp_path):
    t = pa.table({"id": ["a", None, "b", "c"], "text": ["x y", "x y", "x  Y", None]})
    ex = {"executor": "inprocess"}
    result = exact_dedup_dataset(zephyr.from_arrow(t), execution=ex, mode="annotate").write_parquet(
        str(tmp_path / "out"), **ex
    )
    out = pq.read_table(tmp_path / "out")
    assert out["id"].to_pylist() == ["a", None, "b", "c"]
    assert out["dup_keep"].to_pylist() == [True, False, False, True]
    assert out["dup_cluster"].to_pylist() == ["a", "a", "a", None]
    assert out["dup_cluster_size"].to_pylist() == [3, 3, 3, None]
    assert result.stats["rows_quarantined"] == 0


def test_fuzzy_stage_giant_bucket_same_clusters_on_every_path(monkeypatch):
    """One templated source (every page in the same LSH buckets): the driver path, the engine path with the
    pairs in the driver (sets over the driver's share: grouped, one shuffle; at 1 MiB the route of every pair
    passes the broadcast share: hot rows broadcast, cold pairs grouped), the engine path without them
    (driver_rows=0: hot rows found by a group-by), one whose budget holds a single hot row's set and one
    whose hot pairs are joined to their sets rather than broadcast keep the same rows."""
    import zephyr.dedup._graph as verify_engine
    from dupes_synthetic import templated_source

    from zephyr import budget as budget_shares

    table, _ = templated_source(600, seed=3)
    cfg = FuzzyDedupConfig()
    outs, infos = [], []
    for budget, limit, hot_share, pair_bytes in (
        ("1GiB", None, 8, 16),
        ("2MiB", None, 8, 16),
        ("1MiB", None, 8, 16),
        ("1GiB", 0, 8, 16),
        ("1MiB", None, 1 << 20, 16),
        ("1GiB", 0, 8, 1 << 30),
    ):
        monkeypatch.setattr(budget_shares, "BROADCAST_SHARE", hot_share)  # inprocess: the tasks see it
        monkeypatch.setattr(verify_engine, "_PAIR_BYTES", pair_bytes)
        ex = {"executor": "inprocess", "memory_budget": budget}
        info: dict = {}
        out = fuzzy_dedup_dataset(
            zephyr.from_arrow(table, num_shards=3),
            cfg,
            execution=ex,
            driver_rows=limit,
            stats=info,
            mode="annotate",
        )
        outs.append(out.to_arrow(**ex).select(["id", "dup_cluster", "dup_keep"]).sort_by("id"))
        infos.append(info)
    assert [i["in_memory"] for i in infos] == [True, False, False, False, False, False]
    assert infos[1]["hot_rows"] == 0  # every pair in one scan and one shuffle: no hot path
    assert infos[2]["hot_rows"] == infos[3]["hot_rows"] == infos[5]["hot_rows"] > 1
    assert infos[4]["hot_rows"] == 1
    assert [i["grouped"] for i in infos[1:]] == [True, True, False, False, False]  # 1 MiB: the cold pairs
    broadcast = [i["hot_broadcast"] for i in infos[2:]]
    assert broadcast == [True, True, False, False]  # a 1-byte share or 1 GiB pairs: joined
    assert len({i["verified_pairs"] for i in infos}) == 1 and infos[0]["verified_pairs"] > 0
    assert all(out.equals(outs[0]) for out in outs)
    assert not all(outs[0]["dup_keep"].to_pylist())
