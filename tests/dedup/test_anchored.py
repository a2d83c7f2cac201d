"""Anchored clusters: no chaining, exact on the chain example, bounded and collapse-free on a templated source."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
from dupes_synthetic import chain, templated_source
from dupes_synthetic import score as removal_score
from hypothesis import given, settings
from hypothesis import strategies as st
from zephyr.dedup import FuzzyDedupConfig, fuzzy_dedup, fuzzy_dedup_dataset
from zephyr.dedup._graph import anchored_clusters, anchors

import zephyr
from zephyr.cli import main
from zephyr.io.layout import stats_path

INPROCESS = {"executor": "inprocess"}


@pytest.mark.parametrize("neighbour", [0.88, 0.9])
def test_chain_is_not_one_cluster(neighbour):
    """30 documents, each J≈neighbour to the next, J<0.2 first to last: components join all 30; anchored
    removes a document only if it is near the kept one, exactly as the truth says."""
    table, truth = chain(30, neighbour)
    anchored = fuzzy_dedup(table, FuzzyDedupConfig(threshold=0.8), mode="annotate").table
    assert anchored["dup_cluster"].to_pylist() == truth["cluster"].to_pylist()
    components = fuzzy_dedup(
        table, FuzzyDedupConfig(threshold=0.8, clusters="components"), mode="annotate"
    ).table
    assert set(components["dup_cluster_size"].to_pylist()) == {30}
    engine = fuzzy_dedup_dataset(
        zephyr.from_arrow(table, num_shards=3),
        FuzzyDedupConfig(threshold=0.8),
        execution=INPROCESS,
        mode="annotate",
    )
    assert engine.to_arrow(**INPROCESS)["dup_cluster"].to_pylist() == truth["cluster"].to_pylist()


def test_chain_stats_report_rows_split_from_components(tmp_path):
    table, truth = chain(30, 0.88)
    pq.write_table(table, tmp_path / "in.parquet")
    out = tmp_path / "out"
    assert (
        main(
            ["dedup", "fuzzy", str(tmp_path / "in.parquet"), "--output", str(out), "--executor", "inprocess"]
        )
        == 0
    )
    stats = json.loads(Path(stats_path(out)).read_text())["dedup"]
    kept = sum(1 for i, c in zip(truth["id"].to_pylist(), truth["cluster"].to_pylist()) if i == c)
    assert stats["cluster_rule"] == "anchored"
    assert stats["verified_pairs"] >= 29 and stats["rejected_pairs"] >= 0
    assert (
        stats["split_rows"] == 30 - 2
    )  # all but the first kept row and its one duplicate leave its component
    assert kept == 15


@pytest.mark.parametrize("seed", [0, 5])
def test_templated_source_does_not_collapse(seed):
    """One templated source (unrelated pages at J 0.4-0.7, one giant LSH bucket per band) with planted
    near-duplicates: only the planted ones are removed, and candidate pairs stay linear in the documents."""
    table, truth = templated_source(3000, seed=seed)
    config = FuzzyDedupConfig(threshold=0.8)
    result = fuzzy_dedup(table, config, mode="remove")
    s = removal_score(result.table, truth)
    assert not s["collapsed"]
    assert s["precision"] == 1.0 and s["recall"] >= 0.97, s
    bands, _ = config.bands_rows()
    assert result.stats["candidate_pairs"] <= table.num_rows * bands * config.bucket_links
    components = fuzzy_dedup(table, FuzzyDedupConfig(threshold=0.8, clusters="components"), mode="remove")
    assert (
        removal_score(components.table, truth)["precision"] >= s["precision"]
    )  # both verified: no chain here
    engine = fuzzy_dedup_dataset(
        zephyr.from_arrow(table, num_shards=4), config, mode="remove", execution=INPROCESS
    )
    assert sorted(engine.to_arrow(**INPROCESS)["id"].to_pylist()) == sorted(result.table["id"].to_pylist())


@settings(max_examples=200, deadline=None)
@given(
    st.integers(1, 40).flatmap(
        lambda n: st.tuples(
            st.just(n), st.lists(st.tuples(st.integers(0, n - 1), st.integers(0, n - 1)), max_size=120)
        )
    )
)
def test_anchor_invariants(graph):
    """Kept nodes have no edge to an earlier kept node; every removed node has an edge to its kept node,
    which is earlier; the compiled sweep equals a Python sweep in keep order."""
    n, pairs = graph
    edges = np.array([p for p in pairs if p[0] != p[1]], dtype=np.int64).reshape(-1, 2)
    sims = np.linspace(0.8, 1.0, len(edges)) if len(edges) else None
    label, canon, _ = anchored_clusters(n, edges, sims)
    kept = label == np.arange(n)
    adjacent = {(int(max(u, v)), int(min(u, v))) for u, v in edges.tolist()}
    for u in range(n):
        if kept[u]:
            assert not any((u, v) in adjacent and kept[v] for v in range(u))
        else:
            assert label[u] < u and kept[label[u]] and (u, int(label[u])) in adjacent
    if len(edges):
        assert anchors(n, edges).tolist() == _python_anchors(n, edges)


def _python_anchors(n: int, edges: np.ndarray) -> list[int]:
    """The sweep by its definition: a node is kept unless it has an edge to an earlier kept node; a removed
    node's anchor is the earliest such node."""
    earlier = {u: set() for u in range(n)}
    for u, v in edges.tolist():
        if u != v:
            earlier[max(u, v)].add(min(u, v))
    anchor = list(range(n))
    for u in range(n):
        kept_before = [v for v in earlier[u] if anchor[v] == v]
        if kept_before:
            anchor[u] = min(kept_before)
    return anchor
