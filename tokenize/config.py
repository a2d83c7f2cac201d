"""``TokenizeConfig``: what ``write_token_shards`` reads and how it cuts, orders and encodes token shards — the
settings of ``write_token_shards`` (its keywords and their defaults), ``zephyr tokenize`` (its flags,
``zephyr.flags``) and the pipeline's ``tokenize`` step (its shard keys, embedded), declared once.

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


def _column(value: str) -> str | None:
    return None if value.lower() == "none" else value


@dataclass(frozen=True)
class TokenizeConfig:
    """The settings of ``write_token_shards`` (see its module's docstring for each one's effect)."""

    text_column: str = "text"
    """Column with the document text."""
    id_column: str | None = field(default="auto", metadata={"parse": _column})
    """Id column for the shuffle key: auto (id when present), none, or a column."""
    source_column: str | None = field(default="auto", metadata={"parse": _column})
    """Column counted in the manifest's source mix: auto (source when present), none, or a column."""
    eos_token: str | None = None
    """EOS token text when it cannot be detected."""
    bos_token: str | None = None
    """BOS token text (with --bos always)."""

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


SHARD_KEYS = ("shard_bytes", "seed", "bos", "engine", "batch_rows", "megatron")
"""The shard settings: a pipeline's ``tokenize`` step embeds these (it reads the pipeline's columns)."""
