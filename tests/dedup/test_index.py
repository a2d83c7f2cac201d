"""The on-disk signature index: corpora deduped one after another against it keep the rows that one dedup
of their union keeps, on the engine's in-memory and shuffle paths, from Python, the CLI and ``zephyr run``;
an index built with other MinHash settings is refused by name.

The corpora: unrelated documents, a third of them with a near-copy (0–2 words replaced, so J ≈ 0.93–1.0)
and some copies edited once more (a short chain), shuffled and cut into consecutive parts, so duplicates
fall within a part and across parts. Ids grow with position: earlier parts come first in keep order, as
they do when an index holds what was ingested before.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
import yaml
from zephyr.dedup import FuzzyDedupConfig
from zephyr.dedup._rows import StripRowNumbers
from zephyr.dedup.config import COLUMNS, DedupColumns
from zephyr.dedup.fuzzy import fuzzy_dedup_dataset
from zephyr.dedup.index import open_index, write_generation

import zephyr
from zephyr.cli import main
from zephyr.errors import ConfigError, InputError
from zephyr.io.layout import stats_path

INPROCESS = {"executor": "inprocess"}
CONFIG = FuzzyDedupConfig(threshold=0.8)


def texts(seed: int, bases: int = 240) -> list[str]:
    rng = random.Random(seed)
    vocab = [f"w{i}" for i in range(4000)]

    def edit(words: list[str], k: int) -> list[str]:
        out = list(words)
        for _ in range(k):
            out[rng.randrange(len(out))] = rng.choice(vocab)
        return out

    docs = []
    for i in range(bases):
        base = [rng.choice(vocab) for _ in range(rng.randrange(80, 160))]
        docs.append(base)
        if i % 3 == 0:
            docs.append(edit(base, rng.randint(0, 2)))
            if i % 9 == 0:
                docs.append(edit(docs[-1], 1))
    rng.shuffle(docs)
    return [" ".join(d) for d in docs]


def parts(seed: int, n: int, *, ids: bool = True) -> tuple[pa.Table, list[pa.Table]]:
    """The union and its ``n`` consecutive parts."""
    all_texts = texts(seed)
    union = pa.table({"id": pa.array(range(len(all_texts)), pa.int64()), "text": all_texts})
    if not ids:
        union = union.drop_columns(["id"])
    cut = [len(all_texts) * k // n for k in range(n + 1)]
    return union, [union.slice(cut[k], cut[k + 1] - cut[k]) for k in range(n)]


def kept_texts(table: pa.Table) -> set[str]:
    return set(table["text"].to_pylist())


def dedup(table: pa.Table, columns: DedupColumns = COLUMNS, **kw) -> pa.Table:
    kw.setdefault("execution", INPROCESS)
    out = fuzzy_dedup_dataset(zephyr.from_arrow(table), CONFIG, columns, mode="remove", **kw)
    return out.to_arrow(**INPROCESS)


@pytest.mark.parametrize(
    ("seed", "n", "ids", "driver_rows"),
    [(1, 2, True, None), (2, 3, True, None), (3, 2, False, None), (4, 3, True, 0), (5, 2, False, 0)],
)
def test_incremental_keeps_what_the_union_keeps(tmp_path, seed, n, ids, driver_rows):
    union, pieces = parts(seed, n, ids=ids)
    id_column = "id" if ids else None
    expected = dedup(union, DedupColumns(id_column=id_column))
    assert expected.num_rows < union.num_rows  # there is something to remove

    index = str(tmp_path / "index")
    kept: set[str] = set()
    matched = 0
    for k, piece in enumerate(pieces):
        stats: dict = {}
        annotated = fuzzy_dedup_dataset(
            zephyr.from_arrow(piece),
            CONFIG,
            DedupColumns(id_column=id_column),
            mode="annotate",
            execution=INPROCESS,
            driver_rows=driver_rows,
            stats=stats,
            index=index if k else None,
            row_numbers=True,
        )
        out = annotated.map_batches(StripRowNumbers("remove")).to_arrow(**INPROCESS)
        kept |= kept_texts(out)
        matched += stats.get("matched_index", 0)
        entry = write_generation(
            index, annotated, CONFIG, DedupColumns(id_column=id_column), create=k == 0, execution=INPROCESS
        )
        assert (entry["docs"], entry["kept"]) == (piece.num_rows, out.num_rows)
    assert kept == kept_texts(expected)
    assert matched > 0  # rows were removed for indexed documents, not only within a part
    info = open_index(index, CONFIG)
    assert [g["name"] for g in info.generations] == [f"gen-{k:05d}" for k in range(n)]
    assert info.docs == union.num_rows


def _triple(seed: int) -> tuple[pa.Table, pa.Table]:
    """a; a2 = a with 2 of 200 words replaced; b = a2 with 2 more replaced elsewhere (word 5-grams: J(b, a2) ≈ 0.9,
    J(b, a) ≈ 0.82)."""
    rng = random.Random(seed)
    a = [f"v{rng.randrange(100_000)}" for _ in range(200)]
    a2 = [f"x{rng.randrange(100_000)}" if i % 100 == 10 else w for i, w in enumerate(a)]
    b = [f"y{rng.randrange(100_000)}" if i % 100 == 60 else w for i, w in enumerate(a2)]
    return (
        pa.table({"id": [0, 1], "text": [" ".join(a), " ".join(a2)]}),
        pa.table({"id": [2], "text": [" ".join(b)]}),
    )


def test_a_later_corpus_links_through_rows_an_earlier_run_removed(tmp_path):
    """A kept, A' removed for it, then B near A' and near enough to A, but LSH did not pair B with A: one
    dedup of the union still removes B (refinement checks B against the row kept for its earlier neighbour
    A'), and so must the run against the index, which holds A' as a removed row tied to A."""
    cfg = FuzzyDedupConfig(threshold=0.8, bands=2, rows_per_band=8)  # few bands: LSH often misses J ≈ 0.82
    for seed in range(200):  # the first triple where only refinement finds (b, a): deterministic
        first, later = _triple(seed)
        stats: dict = {}
        union = fuzzy_dedup_dataset(
            zephyr.from_arrow(pa.concat_tables([first, later])),
            cfg,
            mode="remove",
            execution=INPROCESS,
            stats=stats,
        )
        if stats.get("refine_verified") == 1 and union.to_arrow(**INPROCESS)["id"].to_pylist() == [0]:
            break
    else:
        pytest.fail("no triple needed refinement")
    index = str(tmp_path / "index")
    annotated = fuzzy_dedup_dataset(
        zephyr.from_arrow(first), cfg, execution=INPROCESS, row_numbers=True, mode="annotate"
    )
    assert annotated.to_arrow(**INPROCESS)["dup_keep"].to_pylist() == [True, False]
    write_generation(index, annotated, cfg, create=True, execution=INPROCESS)
    stats = {}
    out = fuzzy_dedup_dataset(
        zephyr.from_arrow(later), cfg, mode="annotate", execution=INPROCESS, index=index, stats=stats
    ).to_arrow(**INPROCESS)
    assert out.select(["id", "dup_cluster", "dup_keep"]).to_pylist() == [
        {"id": 2, "dup_cluster": 0, "dup_keep": False}
    ]
    assert stats["matched_index"] == 1 and stats["refine_verified"] == 1
    # an index of what was kept only (a plain dataset is recorded as all kept) cannot see it
    kept_only = str(tmp_path / "kept-only")
    write_generation(kept_only, zephyr.from_arrow(first.slice(0, 1)), cfg, create=True, execution=INPROCESS)
    alone = fuzzy_dedup_dataset(
        zephyr.from_arrow(later), cfg, mode="remove", execution=INPROCESS, index=kept_only
    )
    assert alone.to_arrow(**INPROCESS).num_rows == 1


def test_a_row_near_an_indexed_document_names_it(tmp_path):
    _, (a, b) = parts(6, 2)
    lone = " ".join(f"z{i}" for i in range(100))  # near nothing else in either part
    a = pa.concat_tables([a, pa.table({"id": pa.array([777], pa.int64()), "text": [lone]})])
    index = str(tmp_path / "index")
    write_generation(index, zephyr.from_arrow(a), CONFIG, create=True, execution=INPROCESS)
    new = pa.concat_tables([b, pa.table({"id": pa.array([10_000], pa.int64()), "text": [lone + " z100"]})])
    out = fuzzy_dedup_dataset(
        zephyr.from_arrow(new), CONFIG, mode="annotate", execution=INPROCESS, index=index
    ).to_arrow(**INPROCESS)
    row = out.filter(pc.equal(out["id"], 10_000)).to_pylist()[0]
    assert (row["dup_cluster"], row["dup_keep"], row["dup_cluster_size"]) == (777, False, 2)
    assert set(out["id"].to_pylist()) == set(new["id"].to_pylist())  # indexed documents are never output


def test_ids_of_another_type_are_cast_or_refused(tmp_path):
    _, (a, b) = parts(7, 2)
    index = str(tmp_path / "index")
    write_generation(index, zephyr.from_arrow(a), CONFIG, create=True, execution=INPROCESS)
    as_text = pa.concat_tables([b, a.slice(0, 1)]).set_column(
        0, "id", pa.array([f"n{i}" for i in range(b.num_rows)] + ["copy"])
    )
    out = dedup(as_text, index=index)  # int64 index ids become strings in dup_cluster
    assert "copy" not in out["id"].to_pylist()

    text_index = str(tmp_path / "text-index")
    write_generation(text_index, zephyr.from_arrow(as_text), CONFIG, create=True, execution=INPROCESS)
    with pytest.raises(ConfigError, match="index's ids are string.*'id' is int64"):
        dedup(
            pa.concat_tables([a, as_text.slice(0, 1).set_column(0, "id", pa.array([-5]))]), index=text_index
        )


def test_other_minhash_settings_are_refused_by_name(tmp_path):
    _, (a, b) = parts(8, 2)
    index = str(tmp_path / "index")
    write_generation(index, zephyr.from_arrow(a), CONFIG, create=True, execution=INPROCESS)
    other = FuzzyDedupConfig(threshold=0.8, ngram=3)
    with pytest.raises(ConfigError, match=r"ngram 5 \(this run: 3\)"):
        fuzzy_dedup_dataset(zephyr.from_arrow(b), other, execution=INPROCESS, index=index, mode="annotate")
    with pytest.raises(ConfigError, match=r"seed 1 \(this run: 2\)"):
        open_index(index, FuzzyDedupConfig(threshold=0.8, seed=2))
    assert (
        open_index(index, FuzzyDedupConfig(threshold=0.7, bands=14, rows_per_band=8)) is not None
    )  # same signatures
    with pytest.raises(InputError, match="no signature index"):
        open_index(str(tmp_path / "nothing"), CONFIG)
    (tmp_path / "junk").mkdir()
    (tmp_path / "junk" / "_index.json").write_text("[1, 2]")
    with pytest.raises(InputError, match="not a zephyr signature index"):
        open_index(str(tmp_path / "junk"), CONFIG)
    with pytest.raises(ConfigError, match="already exists"):
        write_generation(index, zephyr.from_arrow(b), CONFIG, create=True, execution=INPROCESS)


def test_empty_generations_and_a_run_that_resumes(tmp_path):
    _, (a, b) = parts(9, 2)
    index = str(tmp_path / "index")
    empty = write_generation(index, zephyr.from_arrow(pa.table({})), CONFIG, create=True, execution=INPROCESS)
    assert empty["docs"] == 0
    assert dedup(a, index=index).num_rows == dedup(a).num_rows  # an empty index changes nothing
    write_generation(index, zephyr.from_arrow(a), CONFIG, create=False, run="run-a", execution=INPROCESS)
    # the same run, resumed after it wrote its generation: it ignores that generation, then replaces it
    assert open_index(index, CONFIG, run="run-a").docs == 0
    assert dedup(a, index=open_index(index, CONFIG, run="run-a")).num_rows == dedup(a).num_rows
    write_generation(index, zephyr.from_arrow(a), CONFIG, create=False, run="run-a", execution=INPROCESS)
    info = open_index(index, CONFIG)
    assert [g.get("run") for g in info.generations] == [None, "run-a"]
    assert info.docs == a.num_rows
    assert dedup(a, index=index).num_rows == 0  # every row of A is in the index now


def test_cli(tmp_path):
    union, pieces = parts(10, 3)
    paths = []
    for k, piece in enumerate(pieces):
        paths.append(str(tmp_path / f"part{k}.parquet"))
        pq.write_table(piece, paths[-1])
    pq.write_table(union, tmp_path / "union.parquet")
    common = ["--mode", "remove", "--workers", "2"]
    index = str(tmp_path / "index")
    assert (
        main(["dedup", "fuzzy", str(tmp_path / "union.parquet"), "--output", str(tmp_path / "u"), *common])
        == 0
    )
    assert (
        main(["dedup", "fuzzy", paths[0], "--output", str(tmp_path / "o0"), "--write-index", index, *common])
        == 0
    )
    for k in (1, 2):
        args = [
            "dedup",
            "fuzzy",
            paths[k],
            "--output",
            str(tmp_path / f"o{k}"),
            "--index",
            index,
            "--update-index",
        ]
        assert main([*args, *common]) == 0
    kept = set().union(*(kept_texts(pq.read_table(tmp_path / f"o{k}")) for k in range(3)))
    assert kept == kept_texts(pq.read_table(tmp_path / "u"))
    stats = json.loads(Path(stats_path(tmp_path / "o2")).read_text())["dedup"]
    assert stats["index"]["generations"] == 2 and stats["matched_index"] > 0
    assert stats["index_written"]["name"] == "gen-00002"

    bad = ["dedup", "fuzzy", paths[1], "--output", str(tmp_path / "x"), "--index", index, "--ngram", "4"]
    assert main(bad) == 1  # other MinHash settings: refused before any work
    assert main(["dedup", "fuzzy", paths[1], "--output", str(tmp_path / "y"), "--write-index", index]) == 1
    assert main(["dedup", "fuzzy", paths[1], "--output", str(tmp_path / "z"), "--update-index"]) == 1
    assert (
        json.loads((tmp_path / "index" / "_index.json").read_text())["generations"][-1]["name"] == "gen-00002"
    )


def test_zephyr_run_stage_option(tmp_path):
    union, (a, b) = parts(11, 2)
    index = str(tmp_path / "index")
    kept: set[str] = set()
    for k, piece in enumerate((a, b)):
        path = tmp_path / f"in{k}.parquet"
        pq.write_table(piece, path)
        config = {
            "name": f"incremental-{k}",
            "steps": [
                {"step": "read", "paths": [str(path)]},
                {"step": "fuzzy_dedup", "index": index, "update_index": True},
            ],
        }
        pipeline = tmp_path / f"p{k}.yaml"
        pipeline.write_text(yaml.safe_dump(config))
        job = tmp_path / f"job{k}"
        assert (
            main(["run", str(pipeline), "--job-dir", str(job), "--executor", "inprocess", "--no-report"]) == 0
        )
        kept |= kept_texts(pq.read_table(sorted(job.glob("01-*/part-*.parquet"))))
    assert kept == kept_texts(dedup(union))
    kept_a = len(kept_texts(dedup(a)))
    assert [(g["docs"], g["kept"]) for g in open_index(index, CONFIG).generations] == [
        (a.num_rows, kept_a),
        (b.num_rows, len(kept) - kept_a),
    ]
