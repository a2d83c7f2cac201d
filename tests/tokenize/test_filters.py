"""The repetition instance filter: the rule on single rows, and a planted document dropped by the loader."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from zephyr.tokenize import TokenLoader
from zephyr.tokenize._samples import RepetitionFilter

from zephyr.errors import ConfigError

from .conftest import write_synthetic_set


def _row(pattern: list[int], repeats: int, width: int = 800, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    row = rng.integers(1000, 50_000, width)
    body = np.tile(pattern, repeats)
    row[100 : 100 + len(body)] = body
    return row


def test_rule_counts_repeats_per_period() -> None:
    rule = RepetitionFilter()  # periods 1..13, more than 32 repeats
    rows = np.stack(
        [
            _row([7], 33),  # period 1, 33 copies: flagged
            _row([7], 32),  # 32 copies: not more than 32
            _row([1, 2, 3], 40),  # period 3
            _row(list(range(13)), 33),  # period 13, the longest
            _row(list(range(14)), 40),  # period 14: outside the range
            _row([5, 6], 32, seed=1),
            np.random.default_rng(9).integers(0, 50_000, 800),  # random tokens
        ]
    )
    assert rule.flags(rows).tolist() == [True, False, True, True, False, False, False]
    assert RepetitionFilter(max_period=2).flags(rows[2:4]).tolist() == [False, False]
    assert RepetitionFilter(max_count=10).flags(rows[5:6]).tolist() == [True]


def test_padding_is_not_a_pattern() -> None:
    row = np.random.default_rng(0).integers(1000, 50_000, (1, 300))
    row[0, 100:] = 0  # 200 pad tokens
    assert RepetitionFilter().flags(row).tolist() == [True]
    assert RepetitionFilter().flags(row, np.array([100])).tolist() == [False]


def test_bad_parameters_are_named() -> None:
    with pytest.raises(ConfigError, match="min_period"):
        RepetitionFilter(min_period=5, max_period=2)
    with pytest.raises(ConfigError, match="max_count"):
        RepetitionFilter(max_count=0)


@pytest.mark.parametrize("packing", ["best-fit", "documents"])
def test_planted_repetitive_document_is_dropped_and_nothing_else(tmp_path: Path, packing: str) -> None:
    rng = np.random.default_rng(3)
    lengths = rng.integers(20, 120, 200)
    planted = 77  # this document becomes "ab" x 45
    lengths[planted] = 90
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    stream = rng.integers(1000, 50_000, offsets[-1])
    stream[offsets[planted] : offsets[planted + 1]] = np.tile([11, 12], 45)
    path = write_synthetic_set(tmp_path / "s", lengths, num_shards=2, stream=stream, vocab_size=60_000)
    kw = dict(seq_len=128, seed=1, num_epochs=1, packing=packing)
    plain = list(TokenLoader(str(path), **kw).iter_batches(4))
    loader = TokenLoader(str(path), instance_filter=RepetitionFilter(), **kw)
    filtered = list(loader.iter_batches(4))
    dropped = []
    for a, b in zip(plain, filtered):
        assert (a["input_ids"] == b["input_ids"]).all() and (a["positions"] == b["positions"]).all()
        for ids, la, lb in zip(a["input_ids"], a["labels"], b["labels"]):
            if (la != lb).any():
                assert (lb == -100).all()
                dropped.append(ids)
    assert len(dropped) == 1 == loader.filtered
    assert np.isin([11, 12], dropped[0].numpy()).all()
    workers = TokenLoader(str(path), instance_filter=RepetitionFilter(), batch_size=4, **kw)
    assert len(list(workers.data_loader(num_workers=2))) == len(filtered) and workers.filtered == 1
