"""Bloom-filter paragraph dedup: within the false-positive bound of the exact paragraph dedup, never a false
negative, no double insert, ``keep_first_in_doc``, save/load for incremental runs, the command line."""

from __future__ import annotations

import json
import math
import random
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from zephyr.dedup.bloom import BloomFilter, bloom_paragraph_dedup, bloom_paragraph_dedup_dataset
from zephyr.dedup.config import ParagraphDedupConfig
from zephyr.dedup.exact import paragraph_dedup

from zephyr.cli import main
from zephyr.errors import ConfigError, InputError
from zephyr.io.layout import stats_path


def _corpus(docs: int, seed: int = 0) -> pa.Table:
    """Documents of 8 paragraphs; about a third of the paragraphs repeat one from a shared pool."""
    rng = random.Random(seed)
    pool = [f"boilerplate line {i} of the site footer" for i in range(300)]
    texts = []
    for d in range(docs):
        paras = [
            rng.choice(pool) if rng.random() < 0.35 else f"unique paragraph {d}-{p} {rng.random()}"
            for p in range(8)
        ]
        texts.append("\n".join(paras))
    return pa.table({"id": list(range(docs)), "text": texts})


def _removed_set(original: pa.Table, deduped: pa.Table) -> set[tuple[int, int]]:
    """(doc, paragraph position) pairs that are gone, found by aligning each doc's kept paragraphs."""
    gone = set()
    for d, (before, after) in enumerate(zip(original["text"].to_pylist(), deduped["text"].to_pylist())):
        kept = after.split("\n") if after else []
        j = 0
        for p, para in enumerate(before.split("\n")):
            if j < len(kept) and kept[j] == para:
                j += 1
            else:
                gone.add((d, p))
    return gone


def test_agrees_with_exact_dedup_within_the_false_positive_bound():
    table = _corpus(3000)
    fp_rate = 0.01  # large enough that false positives happen and the bound is tested
    paragraphs = 3000 * 8
    exact = _removed_set(table, paragraph_dedup(table, mode="remove").table)
    bloom = BloomFilter.for_capacity(paragraphs, fp_rate)
    out = pa.concat_tables(
        bloom_paragraph_dedup(table.slice(i, 500), bloom).table for i in range(0, table.num_rows, 500)
    )
    approx = _removed_set(table, out)
    assert exact <= approx  # a Bloom filter never misses a paragraph it holds
    new_paragraphs = paragraphs - len(exact)
    mean = fp_rate * new_paragraphs
    assert len(approx - exact) <= mean + 5 * math.sqrt(mean)
    assert bloom.false_positive_rate() <= fp_rate


def test_unique_paragraphs_are_all_kept_no_double_insert():
    texts = [f"paragraph {d}-{p}" for d in range(2000) for p in range(5)]
    table = pa.table({"text": ["\n".join(texts[i : i + 5]) for i in range(0, len(texts), 5)]})
    bloom = BloomFilter.for_capacity(len(texts), 1e-4)
    result = bloom_paragraph_dedup(table, bloom)
    assert (
        result.stats["paragraphs_removed"] <= 5
    )  # ~1e-4 x 10,000 expected; a double insert would remove all
    assert bloom.inserted == len(texts)


def test_keep_first_in_doc():
    table = pa.table({"text": ["intro\nrepeat me\nrepeat me\nend", "repeat me\nother"]})
    kept = bloom_paragraph_dedup(table, BloomFilter.for_capacity(100, 1e-6), keep_first_in_doc=True).table
    assert kept["text"].to_pylist() == ["intro\nrepeat me\nrepeat me\nend", "other"]
    plain = bloom_paragraph_dedup(table, BloomFilter.for_capacity(100, 1e-6)).table
    assert plain["text"].to_pylist() == ["intro\nrepeat me\nend", "other"]
    # across batches too: the second batch's document lost it, the first kept both copies
    bloom = BloomFilter.for_capacity(100, 1e-6)
    first = bloom_paragraph_dedup(table.slice(0, 1), bloom, keep_first_in_doc=True).table
    second = bloom_paragraph_dedup(table.slice(1, 1), bloom, keep_first_in_doc=True).table
    assert first["text"].to_pylist() + second["text"].to_pylist() == kept["text"].to_pylist()


def test_blank_and_null_texts():
    table = pa.table({"text": ["a\n\n\na", None, "", "\n"]})
    out = bloom_paragraph_dedup(table, BloomFilter.for_capacity(10, 1e-3)).table
    assert out["text"].to_pylist() == ["a\n\n", None, "", "\n"]


def test_memory_is_fixed_by_expected_and_rate():
    small = BloomFilter.for_capacity(1_000_000, 1e-4)
    assert small.num_hashes == 13 and small.bits.nbytes == math.ceil(19_170_117 / 8)  # 19.17 bits per item
    assert BloomFilter.for_capacity(1_000_000, 1e-2).bits.nbytes < small.bits.nbytes
    with pytest.raises(ConfigError, match="fp_rate"):
        BloomFilter.for_capacity(10, 1.5)


def test_save_load_roundtrip_and_refusals(tmp_path):
    bloom = BloomFilter.for_capacity(1000, 1e-4)
    bloom_paragraph_dedup(pa.table({"text": ["x\ny"]}), bloom)
    path = str(tmp_path / "f.bloom")
    bloom.save(path)
    again = BloomFilter.load(path)
    assert np.array_equal(again.bits, bloom.bits) and again.inserted == 2
    out = bloom_paragraph_dedup(pa.table({"text": ["y\nz"]}), again).table
    assert out["text"].to_pylist() == ["z"]  # incremental: the earlier run's paragraphs are known
    with pytest.raises(ConfigError, match="normalize='default'"):
        BloomFilter.of(ParagraphDedupConfig(normalize="none", load_filter=path))
    data = (tmp_path / "f.bloom").read_bytes()
    (tmp_path / "cut.bloom").write_bytes(data[:-10])
    with pytest.raises(InputError, match="cut.bloom: corrupt Bloom filter"):
        BloomFilter.load(str(tmp_path / "cut.bloom"))
    (tmp_path / "other.bloom").write_bytes(b"hello")
    with pytest.raises(InputError, match="not a zephyr Bloom filter"):
        BloomFilter.load(str(tmp_path / "other.bloom"))


def test_command_line_incremental(tmp_path):
    pq.write_table(pa.table({"id": [1, 2], "text": ["a\nb\na", "b\nc"]}), tmp_path / "one.parquet")
    pq.write_table(pa.table({"id": [3], "text": ["c\nd"]}), tmp_path / "two.parquet")
    flt = str(tmp_path / "seen.bloom")
    common = ["--method", "bloom", "--executor", "inprocess", "--save-filter", flt]
    assert (
        main(
            [
                "dedup",
                "paragraph",
                str(tmp_path / "one.parquet"),
                "--output",
                str(tmp_path / "o1"),
                "--expected",
                "1000",
                *common,
            ]
        )
        == 0
    )
    assert pq.read_table(tmp_path / "o1")["text"].to_pylist() == ["a\nb", "c"]
    assert (
        main(
            [
                "dedup",
                "paragraph",
                str(tmp_path / "two.parquet"),
                "--output",
                str(tmp_path / "o2"),
                "--load-filter",
                flt,
                *common,
            ]
        )
        == 0
    )
    assert pq.read_table(tmp_path / "o2")["text"].to_pylist() == ["d"]
    stats = json.loads(Path(stats_path(tmp_path / "o2")).read_text())["dedup"]
    assert stats["inserted"] == 4 and stats["counters"]["dedup/paragraphs_removed"] == 1
    assert not list(tmp_path.glob("seen.bloom.tmp-*"))  # the run's partial filter was moved into place


def test_command_line_needs_a_size(tmp_path, capsys):
    pq.write_table(pa.table({"id": [1], "text": ["a"]}), tmp_path / "in.parquet")
    assert (
        main(
            [
                "dedup",
                "paragraph",
                str(tmp_path / "in.parquet"),
                "--output",
                str(tmp_path / "o"),
                "--method",
                "bloom",
            ]
        )
        == 1
    )
    assert "--expected N" in capsys.readouterr().err


def test_command_line_exact_method_matches_the_plain_function(tmp_path):
    table = _corpus(50)
    pq.write_table(table, tmp_path / "in.parquet")
    assert (
        main(
            [
                "dedup",
                "paragraph",
                str(tmp_path / "in.parquet"),
                "--output",
                str(tmp_path / "o"),
                "--executor",
                "inprocess",
            ]
        )
        == 0
    )
    got = pq.read_table(tmp_path / "o").sort_by("id")["text"].to_pylist()
    assert got == paragraph_dedup(table, mode="remove").table["text"].to_pylist()


def test_dataset_function_refuses_a_filter_it_can_neither_size_nor_load(tmp_path):
    """Checked when the plan is made (what ``zephyr explain`` and the command rely on), not at the first batch."""
    import zephyr

    ds = zephyr.from_items([{"text": "a\nb"}])
    with pytest.raises(ConfigError, match="--method bloom needs --expected N"):
        bloom_paragraph_dedup_dataset(ds, ParagraphDedupConfig(method="bloom"))
    with pytest.raises(InputError, match="cannot read the Bloom filter"):
        bloom_paragraph_dedup_dataset(
            ds, ParagraphDedupConfig(method="bloom", load_filter=str(tmp_path / "x"))
        )
