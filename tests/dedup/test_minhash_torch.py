"""The torch signature path (what runs on CUDA/XPU) gives the CPU kernels' integers, and is selectable."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
import zephyr.dedup._minhash as minhash_torch
from zephyr.dedup import FuzzyDedupConfig, fuzzy_dedup, open_index, write_generation
from zephyr.dedup._hashing import Shingles, shingle_hashes
from zephyr.dedup._minhash import make_permutations, resolve_signature_device, signatures, signatures_on

import zephyr
from zephyr.errors import ConfigError

torch = pytest.importorskip("torch")


def _random_shingles(rng: np.random.Generator, lengths: list[int]) -> Shingles:
    offsets = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    hashes = rng.integers(0, 2**64, size=int(offsets[-1]), dtype=np.uint64)
    hashes[: min(4, len(hashes))] = [0, 2**64 - 1, 2**63, 2**63 - 1][
        : min(4, len(hashes))
    ]  # edge bit patterns
    return Shingles(hashes=hashes, offsets=offsets)


SHAPES = {
    "one doc": [7],
    "one shingle each": [1, 1, 1],
    "empty docs between": [0, 5, 0, 0, 3, 0],
    "all empty": [0, 0],
    "mixed lengths": [1, 2, 3, 4, 5, 6, 7, 8, 9, 17, 33, 100, 255, 256, 257, 1000],
    "one long doc": [20_000],
}


@pytest.mark.parametrize("scheme", ["affine64", "mersenne61"])
@pytest.mark.parametrize("shape", list(SHAPES), ids=list(SHAPES))
def test_torch_equals_cpu_kernels(scheme, shape):
    s = _random_shingles(np.random.default_rng(len(shape)), SHAPES[shape])
    perms = make_permutations(32, seed=3, scheme=scheme)
    assert np.array_equal(minhash_torch.signatures_torch(s, perms, device="cpu"), signatures(s, perms))


@pytest.mark.parametrize("scheme", ["affine64", "mersenne61"])
def test_many_blocks(monkeypatch, scheme):
    """Tiny blocks: every length bucket spans many blocks, each written to its own rows."""
    monkeypatch.setattr(minhash_torch, "_CPU_BLOCK_ELEMENTS", 1 << 9)
    rng = np.random.default_rng(5)
    s = _random_shingles(rng, rng.integers(0, 300, size=400).tolist())
    perms = make_permutations(16, seed=9, scheme=scheme)
    assert np.array_equal(minhash_torch.signatures_torch(s, perms, device="cpu"), signatures(s, perms))


def test_real_text_and_dispatcher():
    texts = pa.array(["the quick brown fox jumps over the lazy dog " * k for k in range(1, 30)] + ["", None])
    s = shingle_hashes(texts, n=5)
    perms = make_permutations(112)
    want = signatures(s, perms)
    for device in ("cpu", "torch-cpu"):
        assert np.array_equal(signatures_on(s, perms, device), want)


def test_device_resolution():
    assert resolve_signature_device("cpu") == "cpu"
    assert resolve_signature_device("torch-cpu") == "torch-cpu"
    if not torch.cuda.is_available():
        with pytest.raises(ConfigError, match="sees no cuda device"):
            resolve_signature_device("cuda")
    for gone in ("tpu", "auto"):  # no device is guessed: torch is imported only when asked for
        with pytest.raises(ConfigError, match="must be one of"):
            resolve_signature_device(gone)


def test_config_field_is_validated_and_not_part_of_the_index_settings(tmp_path):
    """Every device gives the same signatures, so an index written on one opens on another."""
    with pytest.raises(ConfigError, match="signature_device"):
        FuzzyDedupConfig(signature_device="gpu")
    index, rows = str(tmp_path / "index"), zephyr.from_items([{"id": 1, "text": "a b c d e f g h"}])
    write_generation(index, rows, FuzzyDedupConfig(), create=True, execution={"executor": "inprocess"})
    assert open_index(index, FuzzyDedupConfig(signature_device="torch-cpu")).docs == 1


def test_fuzzy_dedup_same_output_on_the_torch_path():
    base = "the quick brown fox jumps over the lazy dog and runs far away into the green forest today "
    t = pa.table({"id": [1, 2, 3, 4], "text": [base * 3, base * 3 + "again", "something else " * 9, ""]})
    cpu = fuzzy_dedup(t, FuzzyDedupConfig(threshold=0.7), mode="annotate").table
    on_torch = fuzzy_dedup(
        t, FuzzyDedupConfig(threshold=0.7, signature_device="torch-cpu"), mode="annotate"
    ).table
    assert cpu.equals(on_torch)
