"""``TokenShardOptions``: how ``write_token_shards`` cuts, orders and encodes token shards — the options that
``zephyr tokenize`` (its flags) and the pipeline's ``tokenize`` stage (its keys, embedded) share.

Standard library only (and ``zephyr.sizes``), so loading a pipeline config or building the CLI imports no
tokenizer, numpy or pyarrow. ``shard_size`` is the old name of ``shard_bytes`` (a byte count), read with a
``ZephyrDeprecationWarning`` until the next release; ``write_token_shards`` keeps its ``shard_size``
argument, which ``writer_kwargs`` fills.

>>> TokenShardOptions(shard_bytes="4MB", seed=3).writer_kwargs()["shard_size"]
'4MB'
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Literal

from zephyr.config import FieldError, require_at_least
from zephyr.errors import ConfigError

__all__ = ["TokenShardOptions"]


@dataclass(frozen=True)
class TokenShardOptions:
    """Token-shard options of ``write_token_shards`` (see its docstring for each one's effect on the output)."""

    RENAMED: ClassVar[dict[str, str]] = {"shard_size": "shard_bytes"}
    """Old key → new key, read with a warning until the next release."""

    shard_bytes: str = "512MB"
    """Target bytes of tokens per shard (e.g. ``512MB``); the shard count is ``ceil(token bytes / shard_bytes)``."""
    seed: int = 0
    """Document shuffle seed; the same seed and inputs give byte-identical shards."""
    bos: Literal["never", "always"] = "never"
    """Prepend BOS to every document (EOS is always appended)."""
    engine: Literal["auto", "fastokens", "tiktoken", "hf"] = "auto"
    """The encoder: ``auto`` is the fastest one proven identical to HF tokenizers."""
    batch_rows: int = 1024
    """Documents per tokenize batch (bounds worker memory)."""
    megatron: bool = False
    """Also write Megatron ``.bin``/``.idx`` per shard."""

    def __post_init__(self) -> None:
        from zephyr.sizes import parse_bytes

        require_at_least("batch_rows", self.batch_rows, 1)
        try:
            parse_bytes(self.shard_bytes)
        except (ConfigError, ValueError) as exc:
            raise FieldError("shard_bytes", f"not a byte size ({exc}); e.g. 64MB") from None

    def writer_kwargs(self) -> dict[str, Any]:
        """These options as ``write_token_shards`` keyword arguments."""
        return {
            "shard_size": self.shard_bytes,
            "seed": self.seed,
            "bos": self.bos,
            "engine": self.engine,
            "batch_rows": self.batch_rows,
            "megatron": self.megatron,
        }
