"""Fixtures for zephyr.tokenize: a small byte-level BPE trained on the spot, and synthetic token-shard sets."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest

from ..bpe import train_tiny_bpe
from ..token_sets import synthetic_meta

TRAIN_TEXT = [
    "The quick brown fox jumps over the lazy dog. It's 2024; we'll see what they've done!",
    "def tokenize(text):\n    return [ord(c) for c in text]  # 42 characters\n",
    "Zürich, São Paulo, Kraków and Москва are cities. 東京 is too. Emoji: 🎉😀",
    "Lorem ipsum dolor sit amet, consectetur adipiscing elit, sed do eiusmod tempor incididunt.",
    "   indented   text\twith\ttabs\n\nand blank lines   \n",
] * 20


def train_bpe(path: Path, *, vocab_size: int = 600, lowercase: bool = False) -> Path:
    """Train a GPT-2-style byte-level BPE on ``TRAIN_TEXT`` (optionally with a normalizer, which rules out the
    fast path)."""
    return train_tiny_bpe(path, TRAIN_TEXT, vocab_size=vocab_size, lowercase=lowercase)


@pytest.fixture(scope="session")
def bpe_tokenizer(tmp_path_factory) -> Path:
    return train_bpe(tmp_path_factory.mktemp("tok") / "tokenizer.json")


def write_synthetic_set(
    directory: Path,
    doc_lengths: Sequence[int],
    *,
    num_shards: int = 3,
    base: int = 0,
    vocab_size: int = 1 << 20,
    stream: np.ndarray | None = None,
) -> Path:
    """A shard set whose token at stream position p is ``base + p`` (uint32), so windows are identifiable;
    or ``stream[p]`` when given."""
    import pyarrow as pa
    from zephyr.tokenize.shards import token_dtype, write_manifest, write_shard

    dtype = token_dtype(vocab_size)
    lengths = np.asarray(doc_lengths, dtype=np.int64)
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    if stream is None:
        stream = np.arange(offsets[-1], dtype=np.int64) + base
    stream = np.asarray(stream).astype(dtype)
    shards = []
    for s, docs in enumerate(np.array_split(np.arange(len(lengths)), num_shards)):
        lo, hi = int(offsets[docs[0]]), int(offsets[docs[-1] + 1])
        body = offsets[docs[0] : docs[-1] + 2] - lo
        tokens = pa.LargeBinaryArray.from_buffers(
            pa.large_binary(),
            len(docs),
            [None, pa.py_buffer(body * dtype.itemsize), pa.py_buffer(stream[lo:hi].tobytes())],
        )
        table = pa.table({"tokens": tokens, "source": pa.array(["synthetic"] * len(docs))})
        info, _ = write_shard(str(directory), f"shard-{s:05d}", [table], dtype=dtype, num_tokens=hi - lo)
        shards.append(info)
    write_manifest(str(directory), shards, meta=synthetic_meta(dtype.name, vocab_size))
    return directory


@pytest.fixture
def token_set(tmp_path) -> Path:
    """~20k tokens in 3 shards, documents of 1..300 tokens."""
    rng = np.random.default_rng(0)
    return write_synthetic_set(tmp_path / "set", rng.integers(1, 300, size=140))


def global_sequence(loaders: list, batches: int, batch_size: int) -> list[list[int]]:
    """The global sample sequence (input ids) of a set of ranks: rank r's j-th sample is index r + j * W."""
    W = len(loaders)
    per_rank = []
    for loader in loaders:
        it = loader.iter_batches(batch_size)
        per_rank.append([row.tolist() for _ in range(batches) for row in next(it)["input_ids"]])
    return [per_rank[g % W][g // W] for g in range(W * len(per_rank[0]))]


def documents(tok, texts: Sequence[str]) -> list[list[int]]:  # noqa: ANN001 - a TextTokenizer
    """Each text's ids as a shard holds them: BOS (policy ``"always"``), HF's ids (``encode_bodies``), EOS."""
    body, lengths = tok.encode_bodies(texts)
    bos = [] if tok.bos_id is None else [tok.bos_id]
    return [bos + ids.tolist() + [tok.eos_id] for ids in np.split(body, np.cumsum(lengths)[:-1])]
