"""Best-fit packing: the bin packer against a naive reference, and the loader's bins over whole epochs."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from zephyr.tokenize import TokenLoader
from zephyr.tokenize._samples import best_fit_decreasing, cut_pieces
from zephyr.tokenize.shards import read_manifest

from zephyr.errors import ConfigError

from .conftest import global_sequence, write_synthetic_set

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from loader_throughput import packing_stats  # noqa: E402 - a benchmark's analysis, checked against the loader

SEQ = 64


def _naive_bfd_fills(sizes: list[int], capacity: int) -> list[int]:
    """Best-fit decreasing by scanning every bin per item: the reference for the fills (bin ids may differ
    only among bins of equal room, which leaves the fills the same)."""
    rooms: list[int] = []
    for s in sorted(sizes, reverse=True):
        fitting = [i for i, r in enumerate(rooms) if r >= s]
        if fitting:
            best = min(fitting, key=lambda i: rooms[i])
            rooms[best] -= s
        else:
            rooms.append(capacity - s)
    return sorted(capacity - r for r in rooms)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_best_fit_decreasing_matches_a_naive_reference(seed: int) -> None:
    rng = np.random.default_rng(seed)
    sizes = np.concatenate([rng.integers(1, 100, 300), np.full(5, 100), rng.integers(40, 61, 50)])
    bins, count = best_fit_decreasing(sizes, 100)
    fills = np.bincount(bins, weights=sizes, minlength=count)
    assert fills.max() <= 100 and sorted(fills.astype(int).tolist()) == _naive_bfd_fills(sizes.tolist(), 100)
    again, _ = best_fit_decreasing(sizes, 100)
    assert np.array_equal(bins, again)  # deterministic


def test_best_fit_decreasing_edges() -> None:
    bins, count = best_fit_decreasing(np.zeros(0, np.int64), 8)
    assert count == 0 and len(bins) == 0
    with pytest.raises(ValueError, match=r"\[1, 8\]"):
        best_fit_decreasing(np.array([3, 9]), 8)


def test_cut_pieces_cover_each_document_once() -> None:
    lengths = np.array([5, 64, 65, 200, 1, 0, 128])
    doc, offset, length = cut_pieces(lengths, 64)
    assert length.max() <= 64 and length.min() >= 1
    for d, n in enumerate(lengths.tolist()):
        mine = doc == d
        assert offset[mine].tolist() == list(range(0, n, 64)) and int(length[mine].sum()) == n


def _set(tmp_path: Path, name: str = "bf", *, num_shards: int = 3, base: int = 0, seed: int = 0) -> Path:
    rng = np.random.default_rng(seed)
    lengths = np.concatenate([rng.integers(1, 50, 150), rng.integers(50, 200, 30), [64, 128, 130]])
    rng.shuffle(lengths)
    return write_synthetic_set(tmp_path / name, lengths, num_shards=num_shards, base=base)


def _documents(path: Path) -> list[tuple[int, int]]:
    """(start, end) of every document in stream coordinates (= token values of the synthetic set)."""
    manifest = read_manifest(str(path))
    out, base = [], 0
    for shard in manifest.shards:
        offsets = np.load(path / shard.files["offsets"].path)
        out += [(base + int(a), base + int(b)) for a, b in zip(offsets[:-1], offsets[1:])]
        base += shard.num_tokens
    return out


def test_best_fit_epoch_covers_every_token_once_within_documents(tmp_path: Path) -> None:
    path = _set(tmp_path)
    manifest = read_manifest(str(path))
    shard_ends = set(np.cumsum([s.num_tokens for s in manifest.shards]).tolist())
    docs = _documents(path)
    doc_of = np.empty(docs[-1][1], dtype=np.int64)
    for i, (a, b) in enumerate(docs):
        doc_of[a:b] = i
    loader = TokenLoader(str(path), seq_len=SEQ, seed=4, num_epochs=1, packing="best-fit", pad_id=999_999)
    seen: list[int] = []
    for batch in loader.iter_batches(5):
        for ids, labels, pos in zip(batch["input_ids"], batch["labels"], batch["positions"]):
            real = ids != 999_999
            fill = int(real.sum())
            assert bool(real[:fill].all()) and (labels[fill:] == -100).all()  # padding is a suffix
            assert fill == SEQ or int(pos[fill]) == 0  # the padding is a segment of its own
            ids, labels, pos = ids[:fill].tolist(), labels[:fill].tolist(), pos[:fill].tolist()
            seen += ids
            for j, token in enumerate(ids):
                if pos[j] == 0:  # a piece starts: a document start, or a multiple of seq_len into one
                    assert (token - docs[doc_of[token]][0]) % SEQ == 0
                else:  # inside a piece: the stream continues within one document
                    assert token == ids[j - 1] + 1 and doc_of[token] == doc_of[ids[j - 1]]
                assert labels[j] == (-100 if token + 1 in shard_ends else token + 1)
    assert sorted(seen) == list(range(docs[-1][1]))  # no token lost or repeated across the epoch
    stats = packing_stats(
        [np.diff(np.load(path / s.files["offsets"].path)) for s in manifest.shards], SEQ, "best-fit"
    )
    assert stats["fit_split_fraction"] == 0.0 and stats["unused_fraction"] == 0.0
    assert stats["samples"] == loader.num_samples()


def test_best_fit_short_documents_stay_whole_and_padding_is_small(tmp_path: Path) -> None:
    path = _set(tmp_path)
    docs = _documents(path)
    loader = TokenLoader(str(path), seq_len=SEQ, seed=1, num_epochs=1, packing="best-fit", pad_id=999_999)
    where: dict[int, int] = {}
    for i, sample in enumerate(loader):
        for token in sample["input_ids"][sample["input_ids"] != 999_999].tolist():
            where[token] = i
    for a, b in docs:
        if b - a <= SEQ:
            assert len({where[t] for t in range(a, b)}) == 1
    manifest = read_manifest(str(path))
    lengths = [np.diff(np.load(path / s.files["offsets"].path)) for s in manifest.shards]
    bf, tokens = packing_stats(lengths, SEQ, "best-fit"), packing_stats(lengths, SEQ, "tokens")
    assert bf["padding_fraction"] < 0.05 and bf["split_fraction"] < tokens["split_fraction"]
    assert tokens["fit_split_fraction"] > 0
    docs = packing_stats(lengths, SEQ, "documents")
    assert docs["fit_split_fraction"] == 0 and docs["padding_fraction"] > bf["padding_fraction"]
    assert docs["samples"] == TokenLoader(str(path), seq_len=SEQ, packing="documents").num_samples()


def test_best_fit_is_deterministic_in_seed_and_epoch(tmp_path: Path) -> None:
    path = _set(tmp_path)

    def firsts(seed: int, epochs: int = 1) -> list[tuple[int, ...]]:
        loader = TokenLoader(str(path), seq_len=SEQ, seed=seed, num_epochs=epochs, packing="best-fit")
        return [tuple(s["input_ids"][:3].tolist()) for s in loader]

    a, b, c = firsts(3), firsts(3), firsts(4)
    assert a == b and a != c and sorted(a) == sorted(c)  # same bins, another order
    two = firsts(3, 2)
    assert two[: len(a)] == a and two[len(a) :] != a and sorted(two[len(a) :]) == sorted(a)


MIXES = {  # mixing modes: extra TokenLoader arguments (None: one set)
    "one-set": None,
    "weights": {},
    "temperature": {"mix": "temperature:2"},
    "unimax-capped": {"mix": "unimax:epochs=1", "mix_budget_tokens": 30_000},
}


@pytest.mark.parametrize("packing", ["tokens", "documents", "best-fit"])
@pytest.mark.parametrize("mixing", list(MIXES))
def test_exact_and_elastic_resume(tmp_path: Path, packing: str, mixing: str) -> None:
    """2 ranks run 6 batches of 4, stop, and resume on 3 ranks (and on 2): the global sequence of an
    uninterrupted 2-rank run continues exactly (past 2 epochs of the small set; past the caps for UniMax)."""
    a = _set(tmp_path, "a")
    extra = MIXES[mixing]
    sources = (
        str(a) if extra is None else {str(a): 0.6, str(_set(tmp_path, "b", base=1_000_000, seed=1)): 0.4}
    )
    kw = dict(seq_len=SEQ, seed=9, packing=packing, **(extra or {}))
    full = global_sequence([TokenLoader(sources, rank=r, world_size=2, **kw) for r in range(2)], 30, 4)
    first = [TokenLoader(sources, rank=r, world_size=2, **kw) for r in range(2)]
    head = global_sequence(first, 6, 4)
    state = first[0].state_dict()
    assert state == first[1].state_dict() and state["consumed"] == 48
    for width in (3, 2):
        resumed = [TokenLoader(sources, rank=r, world_size=width, **kw) for r in range(width)]
        for loader in resumed:
            loader.load_state_dict(state)
        tail = global_sequence(resumed, 4, 3 if width == 3 else 4)
        assert head + tail == full[: len(head) + len(tail)]


def test_best_fit_through_dataloader_workers_equals_one_process(tmp_path: Path) -> None:
    path = _set(tmp_path)
    kw = dict(seq_len=SEQ, seed=2, packing="best-fit", batch_size=4, num_epochs=1)
    single = list(TokenLoader(str(path), **kw))
    loader = TokenLoader(str(path), **kw)
    via = list(loader.data_loader(num_workers=2))
    assert len(via) == len(single)
    for x, y in zip(single, via):
        for k in x:
            assert torch.equal(x[k], y[k])
    assert loader.state_dict()["consumed"] == loader.num_samples()


def test_fingerprint_covers_packing_and_window(tmp_path: Path) -> None:
    from zephyr.errors import ResumeError

    path = _set(tmp_path)
    state = TokenLoader(str(path), seq_len=SEQ, packing="best-fit").state_dict()
    with pytest.raises(ResumeError, match="packing"):
        TokenLoader(str(path), seq_len=SEQ, packing="tokens").load_state_dict(state)
    with pytest.raises(ResumeError, match="packing"):
        TokenLoader(str(path), seq_len=SEQ, packing="best-fit", packing_window=7).load_state_dict(state)
    with pytest.raises(ConfigError, match="best-fit"):
        TokenLoader(str(path), seq_len=SEQ, packing="bestfit")
