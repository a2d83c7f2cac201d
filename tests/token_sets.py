"""The manifest of a synthetic token-shard set: shards written by hand, without a tokenizer (EOS id 0, no BOS)."""

from __future__ import annotations

from typing import Any


def synthetic_meta(dtype: str, vocab_size: int) -> dict[str, Any]:
    """``write_manifest``'s ``meta`` for tokens of ``dtype`` (a numpy dtype name) below ``vocab_size``."""
    return {
        "dtype": dtype,
        "vocab_size": vocab_size,
        "eos_id": 0,
        "bos_id": None,
        "bos_policy": "never",
        "tokenizer": {"path": None, "sha256": "0" * 64, "engine": "none"},
        "seed": 0,
        "sources": {},
    }
