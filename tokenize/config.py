"""``TokenizeConfig``: how ``write_token_shards`` cuts, orders and encodes token shards — the settings that
``zephyr tokenize`` (its flags, ``zephyr.flags``) and the pipeline's ``tokenize`` step (its keys, embedded)
share, declared once.

Standard library only (and ``zephyr.config``), so loading a pipeline config or building the CLI imports no
tokenizer, numpy or pyarrow.

Its fields are ``write_token_shards`` keyword arguments (``dataclasses.asdict(config)``):

>>> import dataclasses
>>> dataclasses.asdict(TokenizeConfig(shard_bytes="4MB", seed=3))["shard_bytes"]
'4MB'
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from zephyr.config import check_field_values, ranged_field


@dataclass(frozen=True)
class TokenizeConfig:
    """Token-shard settings of ``write_token_shards`` (see its module's docstring for each one's effect)."""

    shard_bytes: str = field(default="512MB", metadata={"bytes": True})
    """Target bytes of tokens per shard (e.g. 512MB); the shard count is ceil(token bytes / shard_bytes)."""
    seed: int = 0
    """Document shuffle seed; the same seed and inputs give byte-identical shards."""
    bos: Literal["never", "always"] = "never"
    """Prepend BOS to every document (EOS is always appended)."""
    engine: Literal["auto", "fastokens", "hf"] = "auto"
    """The encoder: ``auto`` is the fastest one proven identical to HF tokenizers."""
    batch_rows: int = ranged_field(1, default=1024)
    """Documents per tokenize batch (bounds worker memory)."""
    megatron: bool = False
    """Also write Megatron ``.bin``/``.idx`` per shard."""

    def __post_init__(self) -> None:
        check_field_values(self)
