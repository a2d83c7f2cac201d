"""The fuzzy driver within its budget: a verified graph whose endpoint sets exceed the driver's share is
clustered from its keys, the refinement rounds' pairs measured on the engine (issue 34's driver contract)."""

from __future__ import annotations

from functools import partial

import numpy as np
import pyarrow as pa
import pytest
from zephyr.dedup import FuzzyDedupConfig, fuzzy_dedup_dataset
from zephyr.dedup._graph import FuzzyRun, PairSimilarity, RowsIn, graph_in_driver, node_sets
from zephyr.dedup._rows import ROW
from zephyr.dedup.config import DedupColumns

import zephyr

WORDS = [f"w{i}" for i in range(60)]


def _texts() -> list[str]:
    """A, B, C: B a few words from A, C a few from B (and from A); D unrelated."""
    a = " ".join(WORDS)
    b = a.replace("w10 ", "x10 ")
    c = b.replace("w50 ", "x50 ")
    d = " ".join(reversed([f"z{i}" for i in range(60)]))
    return [a, b, c, d]


@pytest.mark.parametrize("clusters", ["anchored", "components"])
def test_graph_from_keys_equals_graph_from_sets(tmp_path, clusters):
    """The candidate pairs B–A and C–B only (C–A never proposed by LSH): anchoring's refinement round
    proposes C–A and measures it. From the sets in the driver or from keys with the engine measuring, the
    node info and figures are the same, and C joins A's cluster."""
    config = FuzzyDedupConfig(threshold=0.8, ngram=3, clusters=clusters)
    kw = {"executor": "inprocess"}
    rows = zephyr.from_arrow(pa.table({"id": ["a", "b", "c", "d"], "text": _texts()})).with_row_index(ROW)
    written = rows.map_batches(partial(node_sets, None, config, DedupColumns())).write_parquet(
        str(tmp_path / "sets"), **kw
    )
    sets = zephyr.read_parquet(written.files)
    row = sets.to_arrow(**kw).sort_by(ROW)[ROW].to_pylist()

    def collect_sets(keys: pa.Array) -> pa.Table:
        return sets.map_batches(RowsIn(ROW, keys)).to_arrow(**kw)

    def collect_keys(keys: pa.Array) -> pa.Table:
        return (
            zephyr.read_parquet(written.files, columns=[ROW, "id"])
            .map_batches(RowsIn(ROW, keys))
            .to_arrow(**kw)
        )

    measured: list[int] = []
    engine = PairSimilarity(sets.select(ROW, "shingles"), kw)
    verified = np.array([[row[1], row[0]], [row[2], row[1]]])  # as the engine's verification leaves them
    pairs = pa.table({"u": verified[:, 0], "v": verified[:, 1], "sim": engine(verified)})
    assert pa.compute.min(pairs["sim"]).as_py() >= config.threshold

    def measure_rows(row_pairs: np.ndarray) -> np.ndarray:
        measured.append(len(row_pairs))
        return engine(row_pairs)

    info_sets: dict = {}
    info_keys: dict = {}
    from_sets = graph_in_driver(collect_sets, pairs, FuzzyRun(config, kw=kw, info=info_sets))
    from_keys = graph_in_driver(collect_keys, pairs, FuzzyRun(config, kw=kw, info=info_keys), measure_rows)
    assert from_keys.equals(from_sets)
    assert info_keys == info_sets
    from zephyr.dedup._rows import CLUSTER

    assert sorted(from_keys[ROW].to_pylist()) == row[:3]  # D is in no cluster
    assert set(from_keys[CLUSTER].to_pylist()) == {"a"}  # C too: its kept row is A
    if clusters == "anchored":
        assert info_keys["refine_candidates"] == 1 and info_keys["refine_verified"] == 1
        assert measured == [1]  # the proposed C–A pair, measured on the engine
    else:
        assert measured == []


@pytest.mark.parametrize("limit", [0, 1 << 20], ids=["joined-on-the-engine", "one-pass-to-the-driver"])
def test_pair_similarity_is_the_true_jaccard(tmp_path, limit):
    """Every pair's figure comes back in the order asked, below the threshold too (ties need it), whether
    the pairs join their sets on the engine or the few sets they need come to the driver."""
    config = FuzzyDedupConfig(ngram=3)
    kw = {"executor": "inprocess"}
    rows = zephyr.from_arrow(pa.table({"id": ["a", "b", "c", "d"], "text": _texts()})).with_row_index(ROW)
    written = rows.map_batches(partial(node_sets, None, config, DedupColumns())).write_parquet(
        str(tmp_path / "sets"), **kw
    )
    sets = zephyr.read_parquet(written.files)
    table = sets.to_arrow(**kw).sort_by(ROW)
    row = table[ROW].to_pylist()
    asked = np.array([[row[3], row[0]], [row[1], row[0]], [row[2], row[0]], [row[2], row[1]]])
    got = PairSimilarity(sets.select(ROW, "shingles"), kw, per_set=1, limit=limit)(asked)
    hashes = [set(s) for s in table["shingles"].to_pylist()]

    def jaccard(i: int, j: int) -> float:
        return len(hashes[i] & hashes[j]) / len(hashes[i] | hashes[j])

    expected = [jaccard(3, 0), jaccard(1, 0), jaccard(2, 0), jaccard(2, 1)]
    assert got.tolist() == pytest.approx(expected)
    assert got[0] == 0.0 and 0 < got[2] < got[1] < 1


def test_sets_beyond_the_driver_share_stay_on_the_engine(monkeypatch):
    """A 1 MiB budget (the sets' share 64 KiB) with pairs verified on the engine: the driver clusters from
    keys, never collecting a shingle set, and the output equals the in-memory run's."""
    import zephyr.dedup._graph as graph

    collected: list[list[str]] = []
    real = graph.graph_in_driver

    def spy(collect, *args, **kwargs):
        def recording(keys):
            table = collect(keys)
            collected.append(table.column_names)
            return table

        return real(recording, *args, **kwargs)

    rng = np.random.default_rng(0)
    texts = [" ".join(f"t{w}" for w in rng.integers(0, 5000, 200)) for _ in range(150)]
    texts += [t.replace("t", "T", 2) for t in texts[:40]]
    table = pa.table({"id": [f"{i:04d}" for i in range(len(texts))], "text": texts})
    outs = []
    for budget, limit in (("1GiB", None), ("1MiB", 0)):
        monkeypatch.setattr(graph, "graph_in_driver", spy)
        ex = {"executor": "inprocess", "memory_budget": budget}
        info: dict = {}
        out = fuzzy_dedup_dataset(
            zephyr.from_arrow(table, num_shards=2),
            FuzzyDedupConfig(),
            execution=ex,
            driver_rows=limit,
            stats=info,
            mode="annotate",
        )
        outs.append(out.to_arrow(**ex).select(["id", "dup_cluster", "dup_keep"]).sort_by("id"))
        if limit == 0:
            assert info["sets_in_driver"] is False and info["verified_pairs"] >= 40
    assert outs[0].equals(outs[1])
    assert outs[0]["dup_keep"].to_pylist().count(False) == 40
    assert collected[0] and "shingles" in collected[0]
    assert collected[-1] and "shingles" not in collected[-1]


@pytest.mark.parametrize("per_set", [1, 1 << 19], ids=["components-whole", "components-split-by-u"])
def test_grouped_verification_measures_every_pair_once(per_set):
    """The grouped route (one scan, one shuffle) sends each set to the groups whose pairs need it, whether a
    component travels whole or, past a group's share of the budget, is split by u (the set of v copied): every
    pair is measured exactly once, with the true Jaccard, and a pair whose end has no set is dropped."""
    from zephyr.dedup._graph import _grouped

    from zephyr.budget import Budget

    rng = np.random.default_rng(7)
    rows = np.arange(0, 400, 2)  # row numbers with gaps, as a filtered input has them
    sets = [np.unique(rng.integers(0, 60, 30)).astype(np.uint64) for _ in rows]
    ends = rng.choice(rows, size=(600, 2))
    ends = ends[ends[:, 0] != ends[:, 1]]
    ends = np.concatenate([ends, [[rows[0], 401]]])  # row 401 has no set
    pairs = pa.table({"u": ends[:, 0], "v": ends[:, 1]})
    route, verify = _grouped(pairs, per_set, Budget(1 << 22), threshold=0.0)
    table = pa.table(
        {ROW: rows, "shingles": pa.array([s.tolist() for s in sets], pa.large_list(pa.uint64()))}
    )
    routed = route(table)
    found = []
    for group in np.unique(routed["group"].to_numpy()):
        mine = routed.filter(pa.compute.equal(routed["group"], group))
        assert len(set(mine[ROW].to_pylist())) == mine.num_rows  # a set once per group
        found.append(verify(mine))
    got = pa.concat_tables(found)
    assert got.num_rows == len(ends) - 1
    by_row = dict(zip(rows.tolist(), sets))
    for u, v, sim in zip(*(got[c].to_pylist() for c in ("u", "v", "sim"))):
        a, b = set(by_row[u].tolist()), set(by_row[v].tolist())
        assert sim == pytest.approx(len(a & b) / len(a | b))
    assert sorted(zip(got["u"].to_pylist(), got["v"].to_pylist())) == sorted(map(tuple, ends[:-1].tolist()))
    if per_set > 1:  # the share holds 2 sets: the one big component is split, v's sets copied
        assert routed.num_rows > len(np.unique(ends[:-1]))
    else:
        assert routed.num_rows == len(np.unique(ends[:-1]))
