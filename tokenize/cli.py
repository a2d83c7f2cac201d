"""``zephyr tokenize INPUT... --tokenizer PATH --output DIR``: corpus → globally shuffled token shards (and
``zephyr explain tokenize``: its jobs, unrun), and ``zephyr tokenizer train INPUT... --vocab-size N --output
tokenizer.json``: a byte-level BPE for it.

The flags come from dataclasses (``zephyr.flags``): ``TokenizeConfig`` (the shard settings, shared with the
pipeline's tokenize step), ``TokenizeInputs`` (the tokenizer and the columns read) and ``TokenizerTrain``
(``zephyr tokenizer train``). Registered by ``zephyr.cli`` through ``register(subparsers, common)``; the global
execution options (``--workers``, ``--executor``, ``--memory-budget``...) come from ``common``. Heavy imports
happen in the handlers.
"""

from __future__ import annotations

import argparse
import dataclasses
from dataclasses import dataclass, field
from typing import Any, Literal

from zephyr.tokenize.config import TokenizeConfig

from zephyr.flags import add_flags, config_from_flags


def _column(value: str) -> str | None:
    return None if value.lower() == "none" else value


@dataclass(frozen=True)
class TokenizeInputs:
    """What ``zephyr tokenize`` reads besides the inputs: the tokenizer and the columns."""

    tokenizer: str = field(default="", metadata={"required": True})
    """Path of a HF tokenizer.json."""
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


def _tokens(text: str) -> list[str]:
    return [t for t in text.split(",") if t.strip()]


@dataclass(frozen=True)
class TokenizerTrain:
    """``zephyr tokenizer train``'s settings (``train_tokenizer``'s arguments)."""

    vocab_size: int = field(default=0, metadata={"required": True})
    """Ids in the tokenizer, special tokens included."""
    output: str = field(default="", metadata={"required": True})
    """The tokenizer.json to write (in a folder: FOLDER/tokenizer.json)."""
    text_column: str = "text"
    """Column with the document text."""
    sample_bytes: str = "256MB"
    """Most text the trainer sees (lowered by --memory-budget)."""
    min_frequency: int = 2
    """Fewest occurrences of a merged pair."""
    special_tokens: list[str] = field(
        default_factory=lambda: ["<|endoftext|>"], metadata={"parse": _tokens, "metavar": "TOKEN[,TOKEN]"}
    )
    """Comma-separated added tokens; the first is the EOS of the token shards (default <|endoftext|>)."""
    format: Literal["auto", "parquet", "jsonl", "vortex"] = "auto"
    """The input format (auto: from the file names, or their first bytes)."""


def register(subparsers: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    from zephyr.cli import add_output_dir, explain_commands

    parser = subparsers.add_parser(
        "tokenize",
        parents=[common],
        help="tokenize a corpus into globally shuffled token shards (+ optional Megatron .bin/.idx)",
        description="Tokenize Parquet/JSONL documents with a tokenizer.json, shuffle them globally (seeded), "
        "and pack them into flat token shards with a manifest (see docs/tokenize.md).",
    )
    _add_tokenize_flags(parser)
    add_output_dir(parser, "output directory for shards and manifest.json")
    parser.set_defaults(func=handler)
    explain = explain_commands(subparsers).add_parser(
        "tokenize", parents=[common], help="the plans of zephyr tokenize"
    )
    _add_tokenize_flags(explain)
    explain.set_defaults(func=explain_handler)
    _register_tokenizer(subparsers, common)


def _add_tokenize_flags(parser: argparse.ArgumentParser) -> None:
    """The flags ``zephyr tokenize`` and ``zephyr explain tokenize`` share (the latter writes nothing)."""
    from zephyr.cli import add_on_error
    from zephyr.io.schema import add_schema_arguments

    parser.add_argument(
        "inputs", nargs="+", metavar="INPUT", help="Parquet/JSONL files, directories or globs"
    )
    add_flags(parser, TokenizeInputs)
    add_flags(parser, TokenizeConfig)
    add_on_error(parser)
    add_schema_arguments(parser)


def _register_tokenizer(subparsers: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    from zephyr.cli import add_on_error

    group = subparsers.add_parser(
        "tokenizer",
        help="make a tokenizer.json (zephyr tokenizer train)",
        description="Tokenizer files for `zephyr tokenize` (see docs/tokenize.md).",
    )
    commands = group.add_subparsers(dest="tokenizer_command", metavar="COMMAND")
    parser = commands.add_parser(
        "train",
        parents=[common],
        help="train a byte-level BPE tokenizer.json on a bounded sample of a corpus",
        description="Train a GPT-2-style byte-level BPE with HF tokenizers on the first bytes of every input file "
        "(an equal share each, up to --sample-bytes, lowered to fit --memory-budget) and write it atomically. "
        "The same inputs give the same file. See docs/tokenize.md.",
    )
    parser.add_argument(
        "inputs", nargs="+", metavar="INPUT", help="Parquet/JSONL/Vortex files, folders, globs, URLs"
    )
    add_flags(parser, TokenizerTrain)
    add_on_error(parser)
    parser.set_defaults(func=train_handler)
    group.set_defaults(func=lambda args: group.print_help() or 2)


def train_handler(args: argparse.Namespace) -> Any:
    from zephyr.tokenize.train_tokenizer import train_tokenizer

    from zephyr.summary import Summary

    settings = dataclasses.asdict(config_from_flags(TokenizerTrain, vars(args)))
    result = train_tokenizer(
        args.inputs, **settings, memory_budget=args.memory_budget, on_error=args.on_error
    )
    details = result.to_dict()
    output = details.pop("output")
    return Summary(
        rows_in=result.documents + result.rows_quarantined,
        rows_kept=result.documents,
        rows_quarantined=result.rows_quarantined,
        output=output,
        next=f"zephyr tokenize {' '.join(args.inputs)} --tokenizer {output} --output tokens/",
        details=details,
    )


def _writer_arguments(args: argparse.Namespace) -> dict[str, Any]:
    """``write_token_shards``' keyword arguments from the flags, but the output: one mapping for the command
    and for ``zephyr explain tokenize`` (``zephyr.tokenize.writer.plans`` takes the same)."""
    from zephyr.cli import execution_options
    from zephyr.io.schema import schema_arguments

    given = vars(args)
    options = execution_options(args)
    keys = ("executor", "workers", "memory_budget", "work_dir", "cluster", "max_retries", "quarantine_dir")
    return {
        **dataclasses.asdict(config_from_flags(TokenizeInputs, given)),
        **config_from_flags(TokenizeConfig, given).writer_kwargs(),
        **schema_arguments(args),
        "on_error": args.on_error,
        **{k: getattr(options, k) for k in (*keys, "small_job_bytes")},
    }


def explain_handler(args: argparse.Namespace) -> Any:
    """``zephyr explain tokenize``: the writer's jobs on stdout, nothing run (``zephyr.tokenize.writer.plans``)."""
    from zephyr.tokenize.writer import plan_text

    from zephyr.cli import explained

    return explained(plan_text(args.inputs, **_writer_arguments(args)), args)


def handler(args: argparse.Namespace) -> Any:
    from zephyr.tokenize.writer import write_token_shards

    from zephyr.summary import Summary

    result = write_token_shards(args.inputs, output=args.output, **_writer_arguments(args))
    rows = result.stats.get("rows") or {}
    return Summary(
        rows_in=rows.get("in", 0),
        rows_kept=rows.get("kept", 0),
        rows_dropped=rows.get("dropped", 0),
        rows_quarantined=rows.get("quarantined", 0),
        output=result.output,
        stats=f"{result.output.rstrip('/')}/manifest.json",
        next=f"zephyr train --data {result.output} --preset tiny --steps 100",
        details={
            "shards": len(result.manifest["shards"]),
            "documents": result.num_documents,
            "tokens": result.num_tokens,
            "engine": result.manifest["tokenizer"]["engine"],
        },
    )
