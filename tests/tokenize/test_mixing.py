"""Mixing controls: weights from token counts, per-source epoch caps, schedules, and explicit reweighting."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import pytest
from zephyr.tokenize import TokenLoader
from zephyr.tokenize.mixing import mix_weights

from zephyr.errors import ConfigError, ResumeError

from .conftest import global_sequence, write_synthetic_set

SEQ = 64
B_BASE = 1_000_000  # token ids of set b start here: a sample's source is visible in its first id


def _sets(tmp_path: Path, a_docs: int = 20, b_docs: int = 60) -> tuple[str, str]:
    a = write_synthetic_set(tmp_path / "a", [100] * a_docs, num_shards=2)
    b = write_synthetic_set(tmp_path / "b", [100] * b_docs, num_shards=2, base=B_BASE)
    return str(a), str(b)


def _from_b(rows: list[list[int]]) -> np.ndarray:
    return np.array([row[0] >= B_BASE for row in rows])


def test_weights_from_temperature_and_unimax() -> None:
    np.testing.assert_allclose(mix_weights("temperature:1", [100, 400])[0], [0.2, 0.8])
    np.testing.assert_allclose(mix_weights("temperature:2", [100, 400])[0], [1 / 3, 2 / 3])
    np.testing.assert_allclose(mix_weights("temperature:0.5", [100, 400])[0], [1 / 17, 16 / 17])
    # UniMax, budget 600, at most 2 epochs: 10 -> min(200, 20) = 20; 100 -> min(290, 200) = 200; 1000 -> 380
    weights, cap = mix_weights("unimax:epochs=2", [1000, 10, 100], budget_tokens=600)
    np.testing.assert_allclose(weights, np.array([380, 20, 200]) / 600)
    assert cap == 2
    np.testing.assert_allclose(mix_weights("unimax:epochs=2,budget=600", [1000, 10, 100])[0], weights)


@pytest.mark.parametrize("spec", ["temperature:-1", "temperature:x", "unimax:epoch=4", "unimax:", "zipf:2"])
def test_bad_mix_specs_say_how_to_write_them(spec: str) -> None:
    with pytest.raises(ConfigError, match="temperature:T"):
        mix_weights(spec, [1, 2], budget_tokens=10)


def test_unimax_needs_a_budget() -> None:
    with pytest.raises(ConfigError, match="budget"):
        mix_weights("unimax:epochs=4", [1, 2])


def test_loader_takes_weights_from_a_mix_spec(tmp_path: Path) -> None:
    a, b = _sets(tmp_path)
    loader = TokenLoader([a, b], seq_len=SEQ, mix="temperature:1")
    assert loader.weights == pytest.approx({a: 0.25, b: 0.75})  # 2,000 vs 6,000 tokens


def test_capped_source_stops_and_the_others_take_its_share(tmp_path: Path, caplog) -> None:
    a, b = _sets(tmp_path)
    loader = TokenLoader({a: 0.5, b: 0.5}, seq_len=SEQ, seed=3, max_epochs={a: 1})
    cap = loader.num_samples(a)
    with caplog.at_level(logging.INFO, logger="zephyr.tokenize.mixing"):
        rows = global_sequence([loader], 40, 8)  # 320 samples: a's 30 run out early
    from_a = ~_from_b(rows)
    assert int(from_a.sum()) == cap == loader.mix_counts()[a]
    last_a = int(np.flatnonzero(from_a)[-1])
    assert from_a[: last_a + 1].mean() > 0.3 and not from_a[last_a + 1 :].any()
    # every sample of a exactly once: its epoch completed, nothing repeated
    assert len({tuple(r) for r, x in zip(rows, from_a) if x}) == cap
    messages = [r.getMessage() for r in caplog.records if "max_epochs" in r.getMessage()]
    assert len(messages) == 1 and a in messages[0] and f"global sample {last_a + 1}" in messages[0]


def test_all_sources_capped_ends_the_data(tmp_path: Path) -> None:
    a, b = _sets(tmp_path)
    loader = TokenLoader({a: 0.5, b: 0.5}, seq_len=SEQ, seed=3, max_epochs=2)
    samples = list(loader)
    assert len(samples) == 2 * (loader.num_samples(a) + loader.num_samples(b))


def test_schedule_switches_at_its_sample_index(tmp_path: Path) -> None:
    a, b = _sets(tmp_path)
    schedule = [(0, {a: 1.0, b: 0.0}), (40, {a: 0.0, b: 1.0}), (72, {a: 0.5, b: 0.5})]
    loader = TokenLoader({a: 0.5, b: 0.5}, seq_len=SEQ, seed=1, schedule=schedule)
    from_b = _from_b(global_sequence([loader], 20, 8))
    assert not from_b[:40].any() and from_b[40:72].all() and 0.2 < from_b[72:].mean() < 0.8


@pytest.mark.parametrize("packing", ["tokens", "best-fit"])
def test_schedule_and_cap_resume_exactly_on_another_world_size(tmp_path: Path, packing: str) -> None:
    """Stop before the schedule's switch and the cap, resume on 3 ranks: the 2-rank sequence continues."""
    a, b = _sets(tmp_path)
    kw = dict(
        seq_len=SEQ,
        seed=5,
        packing=packing,
        max_epochs={a: 1},
        schedule=[(60, {a: 0.8, b: 0.2}), (150, {a: 0.1, b: 0.9})],
    )
    weights = {a: 0.3, b: 0.7}
    full = global_sequence([TokenLoader(weights, rank=r, world_size=2, **kw) for r in range(2)], 20, 6)
    first = [TokenLoader(weights, rank=r, world_size=2, **kw) for r in range(2)]
    head = global_sequence(first, 4, 6)
    state = first[1].state_dict()
    resumed = [TokenLoader(weights, rank=r, world_size=3, **kw) for r in range(3)]
    for loader in resumed:
        loader.load_state_dict(state)
    tail = global_sequence(resumed, 8, 8)
    assert head + tail == full[: len(head) + len(tail)]
    assert int((~_from_b(full)).sum()) == first[0].num_samples(a)  # the cap held across the switches


def test_resume_with_other_weights_is_an_error_unless_reweight(tmp_path: Path) -> None:
    a, b = _sets(tmp_path)
    old = TokenLoader({a: 0.5, b: 0.5}, seq_len=SEQ, seed=2)
    global_sequence([old], 5, 8)
    state = old.state_dict()
    new = TokenLoader({a: 0.9, b: 0.1}, seq_len=SEQ, seed=2)
    with pytest.raises(ResumeError) as err:
        new.load_state_dict(state)
    assert "0.5" in str(err.value) and "0.9" in str(err.value) and "--reweight" in str(err.value)
    new.load_state_dict(state, reweight=True)
    assert new.state_dict()["counts"] == state["counts"]
    from_b = _from_b(global_sequence([new], 50, 8))
    assert from_b.mean() < 0.2  # 0.1 of the draws from the resume on
    assert new.state_dict()["weights"] == pytest.approx([0.9, 0.1])
    assert new.mix_counts()[b] == state["counts"][1] + int(from_b.sum())
    same = TokenLoader({a: 0.5, b: 0.5}, seq_len=SEQ, seed=2)
    same.load_state_dict(state)  # the same weights resume without the flag


def test_max_epochs_names_unknown_sources(tmp_path: Path) -> None:
    a, b = _sets(tmp_path)
    with pytest.raises(ConfigError, match="not sources"):
        TokenLoader({a: 0.5, b: 0.5}, seq_len=SEQ, max_epochs={"c/": 1})
    with pytest.raises(ConfigError, match="max_epochs must be > 0"):
        TokenLoader({a: 0.5, b: 0.5}, seq_len=SEQ, max_epochs=0)
