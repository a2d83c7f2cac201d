"""TokenLoader: coverage per epoch, disjoint ranks/workers, exact resume, positions, mixtures, corruption."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from zephyr.tokenize import TokenLoader, read_documents
from zephyr.tokenize.shards import read_manifest

from zephyr.errors import ConfigError, InputError, ResumeError

from .conftest import write_synthetic_set

SEQ = 64


def _first_tokens(items) -> list[int]:
    return [
        int(s["input_ids"].reshape(-1, SEQ)[j, 0])
        for s in items
        for j in range(s["input_ids"].reshape(-1, SEQ).shape[0])
    ]


def _all_window_starts(path: Path) -> list[int]:
    """Every window's first token (= its stream position, by construction of the synthetic set)."""
    manifest = read_manifest(str(path))
    starts, base = [], 0
    for shard in manifest.shards:
        n = (shard.num_tokens - 1) // SEQ
        starts += [base + j * SEQ for j in range(n)]
        base += shard.num_tokens
    return starts


def test_one_epoch_sees_every_window_once(token_set: Path) -> None:
    loader = TokenLoader(str(token_set), seq_len=SEQ, seed=3, num_epochs=1)
    items = list(loader)
    firsts = _first_tokens(items)
    assert sorted(firsts) == _all_window_starts(token_set)
    assert len(items) == len(loader) == loader.num_samples()
    # shuffled, not in stream order
    assert firsts != sorted(firsts)
    sample = items[0]
    assert set(sample) == {"input_ids", "labels", "positions"}
    assert all(v.shape == (SEQ,) and v.dtype == torch.int64 for v in sample.values())
    assert torch.equal(sample["labels"][:-1], sample["input_ids"][1:])


def test_two_epochs_differ_in_order_and_cover_twice(token_set: Path) -> None:
    loader = TokenLoader(str(token_set), seq_len=SEQ, seed=3, num_epochs=2)
    firsts = _first_tokens(list(loader))
    n = loader.num_samples()
    assert sorted(firsts[:n]) == sorted(firsts[n:]) == _all_window_starts(token_set)
    assert firsts[:n] != firsts[n:]


def test_order_is_a_function_of_the_seed(token_set: Path) -> None:
    a = _first_tokens(TokenLoader(str(token_set), seq_len=SEQ, seed=1, num_epochs=1))
    b = _first_tokens(TokenLoader(str(token_set), seq_len=SEQ, seed=1, num_epochs=1))
    c = _first_tokens(TokenLoader(str(token_set), seq_len=SEQ, seed=2, num_epochs=1))
    assert a == b and a != c


@pytest.mark.parametrize("world_size", [2, 3])
def test_ranks_are_disjoint_and_complete(token_set: Path, world_size: int) -> None:
    single = _first_tokens(TokenLoader(str(token_set), seq_len=SEQ, seed=5, num_epochs=1))
    per_rank = [
        _first_tokens(
            TokenLoader(str(token_set), seq_len=SEQ, seed=5, rank=r, world_size=world_size, num_epochs=1)
        )
        for r in range(world_size)
    ]
    for r, got in enumerate(per_rank):
        assert got == single[r::world_size]
    assert sorted(sum(per_rank, [])) == sorted(single)


@pytest.mark.parametrize("batch_size", [None, 4], ids=["samples", "batches"])
def test_dataloader_workers_reproduce_single_process_order(token_set: Path, batch_size) -> None:
    kwargs = dict(seq_len=SEQ, seed=7, rank=1, world_size=2, num_epochs=1, batch_size=batch_size)
    single = _first_tokens(TokenLoader(str(token_set), **kwargs))
    loader = TokenLoader(str(token_set), **kwargs)
    got = _first_tokens(loader.data_loader(num_workers=2))
    assert got == single
    assert loader.consumed == 2 * len(single)  # both ranks in lockstep: the global position


def _take(it, n):
    return [next(it) for _ in range(n)]


def test_resume_is_exact(token_set: Path) -> None:
    full = _first_tokens(_take(iter(TokenLoader(str(token_set), seq_len=SEQ, seed=9)), 500))
    loader = TokenLoader(str(token_set), seq_len=SEQ, seed=9)
    head = _first_tokens(_take(iter(loader), 137))
    state = json.loads(json.dumps(loader.state_dict()))
    assert set(state) >= {"consumed", "counts", "seed", "fingerprint"} and state["consumed"] == 137
    fresh = TokenLoader(str(token_set), seq_len=SEQ, seed=9)
    fresh.load_state_dict(state)
    tail = _first_tokens(_take(iter(fresh), 500 - 137))
    assert head + tail == full  # crosses the epoch boundary (~300 samples per epoch)


def test_resume_with_fewer_ranks_continues_the_global_order(token_set: Path) -> None:
    full = _first_tokens(_take(iter(TokenLoader(str(token_set), seq_len=SEQ, seed=4)), 400))
    ranks = [
        TokenLoader(str(token_set), seq_len=SEQ, seed=4, rank=r, world_size=4, batch_size=2) for r in range(4)
    ]
    iters = [iter(x) for x in ranks]
    steps = 10
    seen = [_first_tokens(_take(it, steps)) for it in iters]  # 4 ranks x 10 steps x 2 samples
    for r in range(4):  # rank r holds global indices r, r+4, ...
        assert seen[r] == full[r : 4 * 2 * steps : 4]
    states = [x.state_dict() for x in ranks]
    assert all(s == states[0] for s in states)
    resumed = [
        TokenLoader(str(token_set), seq_len=SEQ, seed=4, rank=r, world_size=2, batch_size=4) for r in range(2)
    ]
    for x in resumed:
        x.load_state_dict(states[0])
    got = [_first_tokens(_take(iter(x), 5)) for x in resumed]
    g0 = 4 * 2 * steps
    for r in range(2):
        assert got[r] == full[g0 + r : g0 + 2 * 4 * 5 : 2]


def test_resume_refuses_other_data(token_set: Path, tmp_path: Path) -> None:
    other = write_synthetic_set(tmp_path / "other", [50] * 40, num_shards=2)
    state = TokenLoader(str(token_set), seq_len=SEQ).state_dict()
    with pytest.raises(ResumeError, match="other data"):
        TokenLoader(str(other), seq_len=SEQ).load_state_dict(state)
    with pytest.raises(ResumeError):
        TokenLoader(str(token_set), seq_len=SEQ * 2).load_state_dict(state)


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("consumed", "137"),  # a string that int() would take
        ("consumed", 137.5),
        ("consumed", True),
        ("consumed", -1),
        ("counts", ["70", 67]),
        ("counts", [70.0, 67.0]),
        ("weights", [float("nan"), 0.5]),
        ("seed", None),
        ("sources", [{"name": "a"}]),
    ],
)
def test_resume_refuses_state_that_is_not_plain_numbers(token_set: Path, key: str, value: object) -> None:
    """A checkpoint's loader state may come from a folder others can write: anything but the plain numbers
    ``state_dict`` writes is refused in one line naming the key, never coerced."""
    loader = TokenLoader(str(token_set), seq_len=SEQ, seed=9)
    _take(iter(loader), 137)
    state = {**json.loads(json.dumps(loader.state_dict())), key: value}
    with pytest.raises(ResumeError, match=f"loader state '{key}' must be") as info:
        TokenLoader(str(token_set), seq_len=SEQ, seed=9).load_state_dict(state)
    assert "\n" not in str(info.value)


def test_a_manifest_naming_a_file_outside_its_set_is_refused(token_set: Path) -> None:
    manifest = json.loads((token_set / "manifest.json").read_text())
    manifest["shards"][0]["files"]["tokens"]["path"] = "../elsewhere/shard-00000.tokens.npy"
    (token_set / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(InputError, match="outside the set's folder"):
        TokenLoader(str(token_set), seq_len=SEQ)


def _naive_positions(offsets: np.ndarray, start: int, n: int) -> np.ndarray:
    idx = np.arange(start, start + n)
    doc = np.searchsorted(offsets, idx, side="right") - 1
    return idx - offsets[doc]


def test_positions_reset_at_document_starts(token_set: Path) -> None:
    manifest = read_manifest(str(token_set))
    shard_base = np.concatenate([[0], np.cumsum([s.num_tokens for s in manifest.shards])])
    offsets = [np.load(token_set / s.files["offsets"].path) for s in manifest.shards]
    for s in _take(iter(TokenLoader(str(token_set), seq_len=SEQ, seed=0)), 60):
        first = int(s["input_ids"][0])
        shard = int(np.searchsorted(shard_base, first, side="right") - 1)
        expected = _naive_positions(offsets[shard], first - int(shard_base[shard]), SEQ)
        assert s["positions"].tolist() == expected.tolist()


def test_document_packing_keeps_documents_whole(tmp_path: Path) -> None:
    lengths = [5, 30, 64, 65, 66, 200, 1, 12, 40, 7] * 3
    path = write_synthetic_set(tmp_path / "docs", lengths, num_shards=2)
    loader = TokenLoader(str(path), seq_len=SEQ, seed=0, num_epochs=1, packing="documents")
    covered: list[int] = []
    manifest = read_manifest(str(path))
    starts = set()
    base = 0
    for shard in manifest.shards:
        starts |= set((np.load(path / shard.files["offsets"].path)[:-1] + base).tolist())
        base += shard.num_tokens
    for s in loader:
        ids, labels, pos = s["input_ids"], s["labels"], s["positions"]
        real = int((labels != -100).sum()) + 1  # tokens in the sample
        first = int(ids[0])
        assert first in starts or int(pos[0]) > 0  # a document start, or the next chunk of a long document
        n_in = min(real, SEQ)
        assert torch.equal(labels[: n_in - 1], ids[1:n_in])
        covered += [first] + labels[: real - 1].tolist()
        if real < SEQ:
            assert (ids[real:] == loader.pad_id).all() and int(pos[real]) == 0
    # every token appears (chunk boundaries repeat one token of a long document)
    assert set(covered) == set(range(sum(lengths)))


def test_mixture_proportions_and_weight_change(tmp_path: Path) -> None:
    a = write_synthetic_set(tmp_path / "a", [100] * 50, num_shards=2, base=0)
    b = write_synthetic_set(tmp_path / "b", [100] * 50, num_shards=2, base=1_000_000)
    loader = TokenLoader({str(a): 0.7, str(b): 0.3}, seq_len=SEQ, seed=0, batch_size=8)
    it = iter(loader)
    items = _take(it, 250)  # 2000 samples
    from_b = sum(int((x["input_ids"][:, 0] >= 1_000_000).sum()) for x in items)
    n = 2000
    assert abs(from_b / n - 0.3) < 4 * (0.3 * 0.7 / n) ** 0.5
    assert loader.mix_counts() == {str(a): n - from_b, str(b): from_b}
    loader.set_weights({str(a): 0.0, str(b): 1.0})
    later = _take(it, 10)
    assert all(bool((x["input_ids"][:, 0] >= 1_000_000).all()) for x in later)
    assert loader.mix_counts()[str(b)] == from_b + 80


def test_mixture_resume_is_exact(tmp_path: Path) -> None:
    a = write_synthetic_set(tmp_path / "a", [100] * 20, num_shards=1, base=0)
    b = write_synthetic_set(tmp_path / "b", [100] * 20, num_shards=1, base=1_000_000)
    weights = {str(a): 0.5, str(b): 0.5}
    full = _first_tokens(_take(iter(TokenLoader(weights, seq_len=SEQ, seed=1)), 200))
    loader = TokenLoader(weights, seq_len=SEQ, seed=1)
    head = _first_tokens(_take(iter(loader), 77))
    fresh = TokenLoader(weights, seq_len=SEQ, seed=1)
    fresh.load_state_dict(loader.state_dict())
    assert head + _first_tokens(_take(iter(fresh), 123)) == full


def test_corrupt_shard_is_named(token_set: Path) -> None:
    manifest = read_manifest(str(token_set))
    victim = token_set / manifest.shards[1].files["tokens"].path
    data = bytearray(victim.read_bytes())
    data[-3] ^= 0xFF
    victim.write_bytes(bytes(data))
    with pytest.raises(InputError, match="shard-00001"):
        list(TokenLoader(str(token_set), seq_len=SEQ, num_epochs=1))
    with pytest.raises(InputError, match="shard-00001"):
        list(read_documents(str(token_set)))


def test_read_documents_round_trip(tmp_path: Path) -> None:
    lengths = [3, 1, 10, 7, 100]
    path = write_synthetic_set(tmp_path / "s", lengths, num_shards=2)
    docs = list(read_documents(str(path)))
    assert [len(d) for d in docs] == lengths
    assert np.concatenate(docs).tolist() == list(range(sum(lengths)))


def test_missing_manifest_and_unknown_version(tmp_path: Path, token_set: Path) -> None:
    with pytest.raises(InputError, match="manifest"):
        TokenLoader(str(tmp_path / "nothing"), seq_len=SEQ)
    manifest = json.loads((token_set / "manifest.json").read_text())
    manifest["version"] = 99
    (token_set / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(InputError, match="version 99"):
        TokenLoader(str(token_set), seq_len=SEQ)


def test_fsspec_url_with_local_cache(token_set: Path, tmp_path: Path) -> None:
    import fsspec

    fs = fsspec.filesystem("memory")
    root = f"memory://{tmp_path.name}-set"
    for f in token_set.iterdir():
        fs.pipe(f"{root}/{f.name}", f.read_bytes())
    cache = tmp_path / "cache"
    remote = _first_tokens(TokenLoader(root, seq_len=SEQ, seed=2, num_epochs=1, cache_dir=str(cache)))
    local = _first_tokens(TokenLoader(str(token_set), seq_len=SEQ, seed=2, num_epochs=1))
    assert remote == local
    assert len(list(cache.glob("*.npy"))) == 6
    shutil.rmtree(cache)
    fs.rm(root, recursive=True)


# ---- the vectorized batch path ------------------------------------------------------------------------------


def _stack(items) -> dict[str, torch.Tensor]:
    return {k: torch.stack([s[k] for s in items]) for k in ("input_ids", "labels", "positions")}


def _mixed_dtype_sources(tmp_path: Path) -> dict[str, float]:
    """A uint16 set (ids = stream position) and a uint32 set (ids = 1,000,000 + stream position)."""
    rng = np.random.default_rng(1)
    small = write_synthetic_set(
        tmp_path / "u16", rng.integers(1, 200, size=150), num_shards=2, vocab_size=60_000
    )
    large = write_synthetic_set(tmp_path / "u32", rng.integers(1, 400, size=80), num_shards=3, base=1_000_000)
    assert read_manifest(str(small)).dtype == np.uint16 and read_manifest(str(large)).dtype == np.uint32
    return {str(small): 0.6, str(large): 0.4}


@pytest.mark.parametrize("packing", ["tokens", "documents"])
@pytest.mark.parametrize("mixture", [False, True], ids=["one-set", "mixture"])
def test_batches_equal_stacked_samples(token_set: Path, tmp_path: Path, packing: str, mixture: bool) -> None:
    sources = _mixed_dtype_sources(tmp_path) if mixture else str(token_set)
    kwargs = dict(seq_len=SEQ, seed=11, rank=1, world_size=3, packing=packing)
    single = TokenLoader(sources, **kwargs)
    batched = TokenLoader(sources, **kwargs)
    samples, batches = iter(single), batched.iter_batches(7)
    for _ in range(60):  # 420 samples: several plan blocks of single samples, past an epoch of each set
        want = _stack(_take(samples, 7))
        got = next(batches)
        for k in want:
            assert got[k].dtype == torch.int64 and got[k].is_contiguous()
            assert torch.equal(got[k], want[k]), k
        assert batched.state_dict() == single.state_dict()  # called every step: the incremental counters


def test_batch_positions_and_labels_match_a_naive_reference(tmp_path: Path) -> None:
    """Every row of batches drawn from a uint16 + uint32 mixture equals the window computed token by token."""
    sources = _mixed_dtype_sources(tmp_path)
    reference = {}
    for path in sources:
        manifest = read_manifest(path)
        stream = np.concatenate([np.load(Path(path) / s.files["tokens"].path) for s in manifest.shards])
        bases = np.concatenate([[0], np.cumsum([s.num_tokens for s in manifest.shards])])
        offsets = [np.load(Path(path) / s.files["offsets"].path) for s in manifest.shards]
        reference[path] = (stream.astype(np.int64), bases, offsets)
    loader = TokenLoader(sources, seq_len=SEQ, seed=2, batch_size=9)
    counts = dict.fromkeys(sources, 0)
    for batch in _take(iter(loader), 40):
        for ids, labels, pos in zip(batch["input_ids"], batch["labels"], batch["positions"]):
            first = int(ids[0])
            path = next(p for p in sources if (first >= 1_000_000) == ("u32" in p))
            stream, bases, offsets = reference[path]
            p = first - (1_000_000 if first >= 1_000_000 else 0)  # stream position of the window start
            shard = int(np.searchsorted(bases, p, side="right") - 1)
            assert ids.tolist() == stream[p : p + SEQ].tolist()
            assert labels.tolist() == stream[p + 1 : p + SEQ + 1].tolist()
            expected = _naive_positions(offsets[shard], p - int(bases[shard]), SEQ)
            assert pos.tolist() == expected.tolist()
            counts[path] += 1
    assert loader.mix_counts() == counts and all(counts.values())


def test_document_packing_positions_restart_at_documents_and_padding(tmp_path: Path) -> None:
    lengths = [5, 30, 64, 65, 66, 200, 1, 12, 40, 7] * 3
    path = write_synthetic_set(tmp_path / "docs", lengths, num_shards=2)
    manifest = read_manifest(str(path))
    bases = np.concatenate([[0], np.cumsum([s.num_tokens for s in manifest.shards])])
    offsets = [np.load(path / s.files["offsets"].path) for s in manifest.shards]
    loader = TokenLoader(str(path), seq_len=SEQ, seed=0, num_epochs=1, packing="documents", batch_size=5)
    rows = 0
    for batch in loader:
        for ids, labels, pos in zip(batch["input_ids"], batch["labels"], batch["positions"]):
            real = int((labels != -100).sum()) + 1  # tokens in the sample
            n_in = min(real, SEQ)
            first = int(ids[0])
            shard = int(np.searchsorted(bases, first, side="right") - 1)
            expected = _naive_positions(offsets[shard], first - int(bases[shard]), n_in)
            assert pos[:n_in].tolist() == expected.tolist()
            assert pos[n_in:].tolist() == list(range(SEQ - n_in))  # the padding is one segment of its own
            assert (ids[n_in:] == loader.pad_id).all() and (labels[real - 1 :] == -100).all()
            rows += 1
    assert rows == loader.num_samples()


def test_dataloader_workers_with_document_packing_and_a_mixture(tmp_path: Path) -> None:
    sources = _mixed_dtype_sources(tmp_path)
    kwargs = dict(seq_len=SEQ, seed=3, batch_size=5, packing="documents")
    single = TokenLoader(sources, **kwargs)
    want = _take(iter(single), 30)
    loader = TokenLoader(sources, **kwargs)
    got = _take(iter(loader.data_loader(num_workers=2)), 30)
    for a, b in zip(got, want):
        assert all(torch.equal(a[k], b[k]) for k in b)
    assert loader.consumed == 150 and loader.state_dict() == single.state_dict()


def test_dataloader_workers_single_samples_equal_the_single_process_ones(tmp_path: Path) -> None:
    """Single samples across workers are every K-th of a block (not consecutive): all fields still agree."""
    path = next(iter(_mixed_dtype_sources(tmp_path)))
    kwargs = dict(seq_len=SEQ, seed=4, packing="documents", num_epochs=1)  # every sample, shard ends included
    want = list(TokenLoader(path, **kwargs))
    got = list(TokenLoader(path, **kwargs).data_loader(num_workers=2))
    assert len(got) == len(want) > 100
    for a, b in zip(got, want):
        assert all(torch.equal(a[k], b[k]) for k in b)


def test_padding_at_a_shard_end_is_one_segment_even_if_the_next_shard_has_short_documents(
    tmp_path: Path,
) -> None:
    """The last sample of shard 0 is padded; shard 1's short documents start inside that padding in stream
    coordinates, and must not split it (single samples, batches, and single samples across workers)."""
    path = write_synthetic_set(tmp_path / "ends", [60, 2, 2, 2] * 2, num_shards=2)
    kwargs = dict(seq_len=SEQ, seed=0, packing="documents", num_epochs=1)
    samples = list(TokenLoader(str(path), **kwargs))
    via_workers = list(TokenLoader(str(path), **kwargs).data_loader(num_workers=2))
    batches = list(TokenLoader(str(path), batch_size=3, **kwargs))
    stacked = {k: torch.cat([b[k] for b in batches]) for k in ("input_ids", "labels", "positions")}
    tail = next(s for s in samples if int(s["input_ids"][0]) == 64)  # shard 0's last 2 tokens
    assert tail["positions"].tolist() == [0, 1] + list(range(SEQ - 2))
    for j, s in enumerate(samples):
        assert all(torch.equal(s[k], via_workers[j][k]) and torch.equal(s[k], stacked[k][j]) for k in s)


def test_trainer_batcher_takes_whole_batches_and_resumes_exactly(token_set: Path) -> None:
    from zephyr.trainer.data import Batcher

    stacked = _stack(_take(iter(TokenLoader(str(token_set), seq_len=SEQ, seed=8)), 5 * 12))
    batcher = Batcher(TokenLoader(str(token_set), seq_len=SEQ, seed=8), batch_size=12)
    head = [batcher.next_batch() for _ in range(3)]
    state = batcher.state_dict()
    assert state["consumed"] == 36
    resumed = Batcher(TokenLoader(str(token_set), seq_len=SEQ, seed=8), batch_size=12)
    resumed.load_state_dict(state)
    tail = [resumed.next_batch() for _ in range(2)]
    for k in stacked:
        assert torch.equal(torch.cat([b[k] for b in head + tail]), stacked[k])


def test_permutation_is_pinned_and_per_index_keys_agree() -> None:
    """The order is part of the resume contract: these values must never change (old checkpoints)."""
    from zephyr.tokenize.mixing import derive_key, permute

    assert permute(np.arange(10), 10, derive_key(0, 1)).tolist() == [5, 2, 0, 9, 4, 1, 7, 6, 3, 8]
    assert permute(np.array([0, 5, 999, 123456]), 1000003, derive_key(7, 2)).tolist() == [
        944742,
        169658,
        237368,
        289168,
    ]
    keys = np.array([derive_key(3, e) for e in range(5)], dtype=np.uint64)
    epoch = np.random.default_rng(0).integers(0, 5, size=1000)
    local = np.random.default_rng(1).integers(0, 777, size=1000)
    one_pass = permute(local, 777, keys[epoch])
    for e in range(5):
        assert one_pass[epoch == e].tolist() == permute(local[epoch == e], 777, int(keys[e])).tolist()
    assert sorted(permute(np.arange(777), 777, int(keys[0])).tolist()) == list(range(777))


# -- a plain torch DataLoader around the loader (zephyr.tokenize.loader) ---------------------------------
GUARD = r"plain torch DataLoader .*loader\.data_loader\(num_workers=K\)"


@pytest.mark.parametrize("batch_size", [None, 16], ids=["samples", "batch16"])
def test_plain_dataloader_workers_make_state_dict_raise(token_set: Path, batch_size) -> None:
    kwargs = dict(seq_len=SEQ, seed=7, num_epochs=1)
    single = _first_tokens(TokenLoader(str(token_set), **kwargs))
    loader = TokenLoader(str(token_set), **kwargs)
    plain = list(torch.utils.data.DataLoader(loader, batch_size=batch_size, num_workers=2))
    got = _first_tokens(plain)
    assert sorted(got) == sorted(single)  # every sample once: the plain DataLoader "works"...
    if batch_size is not None:
        assert got != single  # ...but its batches are runs of one worker's samples: another order
    assert loader.consumed == 0  # ...and the parent never moved: resuming from here would restart the epoch
    with pytest.raises(ResumeError, match=GUARD):
        loader.state_dict()
    with pytest.raises(ResumeError, match=GUARD):
        loader.mix_counts()
    with pytest.raises(ResumeError, match=r"set_weights\(\)"):
        loader.set_weights({str(token_set): 1.0})


@pytest.mark.slow  # spawned workers import torch afresh: ~25 s on 2 busy cores
def test_plain_dataloader_with_spawned_workers_is_caught_too(token_set: Path) -> None:
    loader = TokenLoader(str(token_set), seq_len=SEQ, seed=7, num_epochs=1)
    batches = list(
        torch.utils.data.DataLoader(loader, batch_size=16, num_workers=2, multiprocessing_context="spawn")
    )
    assert sum(b["input_ids"].shape[0] for b in batches) == loader.num_samples()
    with pytest.raises(ResumeError, match=GUARD):
        loader.state_dict()


def test_data_loader_wrapper_keeps_exact_state_where_the_plain_one_raises(token_set: Path) -> None:
    kwargs = dict(seq_len=SEQ, seed=7, batch_size=16)
    single = TokenLoader(str(token_set), **kwargs)
    want = _first_tokens(_take(iter(single), 5))
    loader = TokenLoader(str(token_set), **kwargs)
    it = iter(loader.data_loader(num_workers=2))
    got = _first_tokens(_take(it, 5))
    del it
    assert got == want and loader.state_dict() == single.state_dict()
    assert loader.state_dict()["consumed"] == 80


def test_load_state_dict_clears_the_guard_and_num_workers_0_keeps_state(token_set: Path) -> None:
    loader = TokenLoader(str(token_set), seq_len=SEQ, seed=7, num_epochs=1)
    list(torch.utils.data.DataLoader(loader, batch_size=None, num_workers=2))
    with pytest.raises(ResumeError):
        loader.state_dict()
    state = TokenLoader(str(token_set), seq_len=SEQ, seed=7).state_dict()
    loader.load_state_dict(state)  # a known position again
    batches = _take(iter(torch.utils.data.DataLoader(loader, batch_size=4, num_workers=0)), 10)
    assert len(batches) == 10 and loader.state_dict()["consumed"] == 40  # in-process: the parent's own object


def test_data_loader_refuses_a_dataloader_batch_size(token_set: Path) -> None:
    loader = TokenLoader(str(token_set), seq_len=SEQ)
    with pytest.raises(
        ConfigError, match=r"data_loader\(batch_size=\.\.\.\).*TokenLoader\(\.\.\., batch_size=B\)"
    ):
        loader.data_loader(num_workers=2, batch_size=16)
