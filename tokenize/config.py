"""``TokenizeConfig``: what ``write_token_shards`` reads and how it cuts, orders and encodes token shards — the
settings of ``write_token_shards`` (its keywords and their defaults), ``zephyr tokenize`` (its flags,
``zephyr.flags``) and the pipeline's ``tokenize`` step (its shard keys, embedded), declared once.
``TokenizerTrain``: ``train_tokenizer``'s settings and ``zephyr tokenizer train``'s flags, checked when built.

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

from zephyr.config import FieldError, check_field_values, parse_bytes, ranged_field

MIN_SHARD_BYTES = 1 << 10
DEFAULT_SPECIAL_TOKENS: tuple[str, ...] = ("<|endoftext|>",)
"""GPT-2's end-of-text token: the EOS ``TextTokenizer`` finds and the token shards append to documents."""


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

    shard_bytes: int | str = field(default="512MB", metadata={"bytes": True})
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
        if (size := parse_bytes(self.shard_bytes)) < MIN_SHARD_BYTES:
            raise FieldError(
                "shard_bytes",
                f"must be at least {MIN_SHARD_BYTES} bytes, got {self.shard_bytes!r} ({size} bytes); give a larger "
                "size, e.g. 64MiB",
            )


SHARD_KEYS = ("shard_bytes", "seed", "bos", "engine", "batch_rows", "megatron")
"""The shard settings: a pipeline's ``tokenize`` step embeds these (it reads the pipeline's columns)."""


def _tokens(text: str) -> list[str]:
    return [t for t in text.split(",") if t.strip()]


@dataclass(frozen=True)
class TokenizerTrain:
    """``zephyr tokenizer train``'s settings (``train_tokenizer``'s arguments), checked when built."""

    vocab_size: int = field(default=0, metadata={"required": True})
    """Ids in the tokenizer, special tokens included."""
    output: str = field(default="", metadata={"required": True})
    """The tokenizer.json to write (in a folder: FOLDER/tokenizer.json)."""
    text_column: str = "text"
    """Column with the document text."""
    sample_bytes: int | str = "256MB"
    """Most text the trainer sees (lowered by --memory-budget)."""
    min_frequency: int = ranged_field(1, default=2)
    """Fewest occurrences of a merged pair."""
    special_tokens: list[str] = field(
        default_factory=lambda: list(DEFAULT_SPECIAL_TOKENS),
        metadata={"parse": _tokens, "metavar": "TOKEN[,TOKEN]"},
    )
    """Comma-separated added tokens; the first is the EOS of the token shards (default <|endoftext|>)."""

    def __post_init__(self) -> None:
        check_field_values(self)
        tokens = self.special_tokens
        if not tokens:
            raise FieldError(
                "special_tokens",
                "give at least one special token: the first is the end-of-text (EOS) token that token shards "
                f"append to every document (e.g. --special-tokens {DEFAULT_SPECIAL_TOKENS[0]})",
            )
        for token in tokens:
            if not token or token != token.strip():
                raise FieldError(
                    "special_tokens", f"{token!r} must be non-empty, without surrounding whitespace"
                )
        if len(set(tokens)) != len(tokens):
            raise FieldError("special_tokens", f"must not repeat a token, got {tokens}")
        if self.vocab_size <= 256 + len(tokens):
            raise FieldError(
                "vocab_size",
                f"must be above {256 + len(tokens)} (the 256 byte ids and {len(tokens)} special token(s) come "
                f"first), got {self.vocab_size}",
            )
