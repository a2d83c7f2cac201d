"""A tiny GPT-2-style byte-level BPE trained on the spot: the one recipe of every test that needs a real
``tokenizer.json`` (``<|endoftext|>`` as its only special token, the full byte alphabet, so any text encodes)."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path


def train_tiny_bpe(path: Path, texts: Iterable[str], *, vocab_size: int, lowercase: bool = False) -> Path:
    """Train on ``texts`` and save to ``path`` (returned); ``lowercase`` adds a normalizer."""
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    if lowercase:
        tok.normalizer = normalizers.Lowercase()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=["<|endoftext|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer=trainer)
    tok.save(str(path))
    return path
