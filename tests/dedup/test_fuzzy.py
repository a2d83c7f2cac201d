"""Fuzzy dedup (plain functions): clusters, verification, incremental index, edge inputs."""

from __future__ import annotations

import dataclasses
import random
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from zephyr.dedup import FuzzyDedupConfig, fuzzy_dedup, write_generation

import zephyr
from zephyr.errors import ConfigError, InputError
from zephyr.io.layout import stats_path

WORDS = [f"w{i}" for i in range(400)]


def _doc(rng: random.Random, n: int = 120) -> list[str]:
    return [rng.choice(WORDS) for _ in range(n)]


def _edit(words: list[str], rng: random.Random, share: float) -> list[str]:
    out = list(words)
    for i in rng.sample(range(len(out)), int(share * len(out))):
        out[i] = rng.choice(WORDS)
    return out


def _corpus():
    rng = random.Random(0)
    rows = []
    for c in range(20):
        base = _doc(rng)
        rows.append((f"c{c:02d}-0", " ".join(base)))
        for v in range(1, 1 + c % 4):
            rows.append((f"c{c:02d}-{v}", " ".join(_edit(base, rng, 0.01))))
    rows.append(("null", None))
    rows.append(("empty", ""))
    rng.shuffle(rows)
    return pa.table({"id": [r[0] for r in rows], "text": [r[1] for r in rows]})


def test_clusters_match_planted_groups():
    t = _corpus()
    r = fuzzy_dedup(t, FuzzyDedupConfig(threshold=0.8), mode="annotate")
    got = {row["id"]: row for row in r.table.to_pylist()}
    for rid, row in got.items():
        if rid in ("null", "empty"):
            continue
        assert row["dup_cluster"] == rid.split("-")[0] + "-0"
        assert row["dup_keep"] == rid.endswith("-0")
    assert got["null"]["dup_cluster"] is None and got["null"]["dup_keep"]
    assert got["empty"]["dup_cluster"] == "empty" and got["empty"]["dup_cluster_size"] == 1
    hist = r.stats["cluster_size_histogram"]
    assert hist == {"1": 5 + 1, "2": 5, "3": 5, "4": 5}  # the null row takes no part
    removed = fuzzy_dedup(t, FuzzyDedupConfig(threshold=0.8), mode="remove")
    assert removed.table.num_rows == 22
    assert removed.stats["rows_in"] == removed.stats["rows_out"] + removed.stats["rows_dropped"]


def test_verification_rejects_chained_false_candidates():
    # A and C share half of their text with B: LSH with a low threshold makes A-B, B-C candidates;
    # without verification they chain into one cluster, with it none of them are duplicates at 0.8.
    rng = random.Random(1)
    left, right, other = _doc(rng, 100), _doc(rng, 100), _doc(rng, 100)
    t = pa.table(
        {"id": ["a", "b", "c"], "text": [" ".join(left), " ".join(left + right), " ".join(right + other)]}
    )
    loose = FuzzyDedupConfig(threshold=0.8, bands=60, rows_per_band=1, verify=False, clusters="components")
    assert fuzzy_dedup(t, loose, mode="annotate").table["dup_cluster_size"].to_pylist() == [3, 3, 3]
    # unverified but anchored: c is a candidate of b only, and b is not kept, so c is not removed
    anchored = FuzzyDedupConfig(threshold=0.8, bands=60, rows_per_band=1, verify=False)
    assert fuzzy_dedup(t, anchored, mode="annotate").table["dup_keep"].to_pylist() == [True, False, True]
    strict = FuzzyDedupConfig(threshold=0.8, bands=60, rows_per_band=1, verify=True)
    r = fuzzy_dedup(t, strict, mode="annotate")
    assert r.table["dup_cluster_size"].to_pylist() == [1, 1, 1]
    assert r.stats["rejected_pairs"] >= 2


def test_incremental_against_saved_index(tmp_path):
    """The table function dedups against an on-disk index (the one format ``write_generation`` writes and
    ``fuzzy_dedup_dataset`` reads): rows near an indexed document are removed and named by its id."""
    t = _corpus().filter(pa.array([i is not None for i in _corpus()["text"].to_pylist()]))
    ids = t["id"].to_pylist()
    in_a = pa.array([i.endswith("-0") and int(i[1:3]) < 10 for i in ids])
    corpus_a = t.filter(in_a)
    corpus_b = t.filter(pa.compute.invert(in_a))
    cfg = FuzzyDedupConfig(threshold=0.8)
    index = str(tmp_path / "index")
    entry = write_generation(
        index, zephyr.from_arrow(corpus_a), cfg, create=True, execution={"executor": "inprocess"}
    )
    assert entry["docs"] == corpus_a.num_rows
    r = fuzzy_dedup(corpus_b, cfg, index=index, mode="remove")
    kept = set(r.table["id"].to_pylist())
    # B docs of clusters 00-09 match A and are dropped; clusters 10-19 are deduped within B
    assert kept == {f"c{c:02d}-0" for c in range(10, 20)} | {"empty"}
    assert r.stats["matched_index"] == sum(c % 4 for c in range(10))
    ann = fuzzy_dedup(corpus_b, cfg, index=index, mode="annotate").table.to_pylist()
    row = next(x for x in ann if x["id"] == "c03-1")
    assert row["dup_cluster"] == "c03-0" and not row["dup_keep"] and row["dup_cluster_size"] == 4
    with pytest.raises(ConfigError, match="other MinHash settings: ngram 5"):
        fuzzy_dedup(corpus_b, FuzzyDedupConfig(threshold=0.8, ngram=3), index=index, mode="annotate")
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "_index.json").write_text('{"format": "x"}')
    with pytest.raises(InputError, match="not a zephyr signature index"):
        fuzzy_dedup(corpus_b, cfg, index=str(tmp_path / "bad"))


def test_config_validation_and_presets():
    with pytest.raises(ConfigError, match="both bands and rows"):
        FuzzyDedupConfig(bands=4)
    with pytest.raises(ConfigError, match="exceeds num_perm"):
        FuzzyDedupConfig(bands=20, rows_per_band=10, num_perm=100)
    with pytest.raises(ConfigError, match="unknown preset"):
        FuzzyDedupConfig.from_preset("minhashlsh")
    nemo = FuzzyDedupConfig.from_preset("nemo")
    assert (nemo.shingle, nemo.ngram, nemo.bands_rows()) == ("char", 24, (20, 13))
    rp = FuzzyDedupConfig.from_preset("redpajama", threshold=0.7)
    assert (rp.ngram, rp.num_perm_resolved, rp.bands_rows()) == (13, 128, (14, 9))
    assert FuzzyDedupConfig.from_preset("redpajama", threshold=0.9).bands_rows() == (5, 25)


def test_output_is_deterministic_across_input_order():
    t = _corpus()
    a = fuzzy_dedup(t, mode="annotate").table.sort_by("id")
    b = fuzzy_dedup(t.take(list(range(t.num_rows))[::-1]), mode="annotate").table.sort_by("id")
    assert a.equals(b)


def test_cli_flags_build_the_one_config(tmp_path):
    """`zephyr dedup fuzzy` builds FuzzyDedupConfig from its flags (its defaults where none is given)."""
    import json

    from zephyr.cli import main

    src = tmp_path / "in.parquet"
    pq.write_table(pa.table({"id": [1, 2, 3], "text": ["a b c d e f g", "a b c d e f g", "x y z"]}), src)
    base = ["dedup", "fuzzy", str(src), "--executor", "inprocess", "--no-progress"]
    assert main([*base, "--output", str(tmp_path / "new"), "--bands", "14", "--rows-per-band", "8"]) == 0
    config = json.loads(Path(stats_path(tmp_path / "new")).read_text())["dedup"]["config"]
    assert config == dataclasses.asdict(FuzzyDedupConfig(bands=14, rows_per_band=8))
