"""``zephyr tokenize INPUT... --tokenizer PATH --output DIR``: corpus → globally shuffled token shards, and
``zephyr tokenizer train INPUT... --vocab-size N --output tokenizer.json``: a byte-level BPE for it.

Registered by ``zephyr.cli`` through ``register(subparsers, common)``; the global execution options
(``--workers``, ``--executor``, ``--memory-budget``...) come from ``common``. Heavy imports happen in the handlers.
"""

from __future__ import annotations

import argparse
import typing
import warnings
from typing import Any

from zephyr.tokenize.options import TokenShardOptions

from zephyr.config import ZephyrDeprecationWarning
from zephyr.errors import ConfigError

__all__ = ["register", "handler", "explain_handler", "train_handler"]


def register(subparsers: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    parser = subparsers.add_parser(
        "tokenize",
        parents=[common],
        help="tokenize a corpus into globally shuffled token shards (+ optional Megatron .bin/.idx)",
        description="Tokenize Parquet/JSONL documents with a tokenizer.json, shuffle them globally (seeded), "
        "and pack them into flat token shards with a manifest (see docs/tokenize.md).",
    )
    _add_tokenize_flags(parser)
    parser.set_defaults(func=handler)
    _register_tokenizer(subparsers, common)
    from zephyr.commands import explain_commands

    explain = explain_commands(subparsers).add_parser(
        "tokenize", parents=[common], help="the plans of zephyr tokenize"
    )
    _add_tokenize_flags(explain, output=False)
    explain.set_defaults(func=explain_handler)


def _add_tokenize_flags(parser: argparse.ArgumentParser, *, output: bool = True) -> None:
    """The flags of ``zephyr tokenize``; ``output=False`` for ``zephyr explain tokenize``, which writes nothing."""
    from zephyr.cli import add_on_error, add_output_dir

    parser.add_argument(
        "inputs", nargs="+", metavar="INPUT", help="Parquet/JSONL files, directories or globs"
    )
    parser.add_argument("--tokenizer", required=True, help="path of a HF tokenizer.json")
    if output:
        add_output_dir(parser, "output directory for shards and manifest.json")
    add_on_error(parser)
    parser.add_argument("--text-column", default="text", help="column with the document text (default: text)")
    parser.add_argument(
        "--id-column", default="auto", help="id column for the shuffle key ('auto': id if present; 'none')"
    )
    parser.add_argument(
        "--source-column", default="auto", help="column counted in the manifest's source mix ('auto', 'none')"
    )
    _add_shard_options(parser)
    parser.add_argument("--eos-token", default=None, help="EOS token text when it cannot be detected")
    parser.add_argument("--bos-token", default=None, help="BOS token text (with --bos always)")
    from zephyr.io.input_schema import add_schema_arguments

    add_schema_arguments(parser)


def _add_shard_options(parser: argparse.ArgumentParser) -> None:
    """The ``TokenShardOptions`` flags, with that dataclass's defaults and choices (the pipeline's tokenize
    stage embeds the same dataclass, so the two cannot drift apart)."""
    default = TokenShardOptions()
    hints = typing.get_type_hints(TokenShardOptions)
    parser.add_argument(
        "--shard-bytes",
        default=None,
        help=f"target token bytes per shard (default {default.shard_bytes})",
    )
    parser.add_argument("--shard-size", default=None, help="deprecated: the old name of --shard-bytes")
    parser.add_argument(
        "--seed", type=int, default=default.seed, help=f"shuffle seed (default {default.seed})"
    )
    parser.add_argument(
        "--bos", choices=typing.get_args(hints["bos"]), default=default.bos, help="prepend BOS to documents"
    )
    parser.add_argument(
        "--engine",
        choices=typing.get_args(hints["engine"]),
        default=default.engine,
        help=f"encoder (default {default.engine})",
    )
    parser.add_argument(
        "--batch-rows",
        type=int,
        default=default.batch_rows,
        help="documents per tokenize batch (bounds memory)",
    )
    parser.add_argument("--megatron", action="store_true", help="also write Megatron .bin/.idx per shard")


def _shard_options(args: argparse.Namespace) -> TokenShardOptions:
    """The ``TokenShardOptions`` of the flags; ``--shard-size`` is read as ``--shard-bytes`` with a warning."""
    shard_bytes = args.shard_bytes
    if args.shard_size is not None:
        if shard_bytes is not None:
            raise ConfigError("--shard-size is the old name of --shard-bytes; give only --shard-bytes")
        warnings.warn(
            "--shard-size is renamed --shard-bytes (the old flag is read until the next release)",
            ZephyrDeprecationWarning,
            stacklevel=2,
        )
        shard_bytes = args.shard_size
    given = {"shard_bytes": shard_bytes} if shard_bytes is not None else {}
    return TokenShardOptions(
        **given,
        seed=args.seed,
        bos=args.bos,
        engine=args.engine,
        batch_rows=args.batch_rows,
        megatron=args.megatron,
    )


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
    parser.add_argument(
        "--vocab-size", type=int, required=True, help="ids in the tokenizer, special tokens included"
    )
    parser.add_argument(
        "--output", required=True, help="the tokenizer.json to write (in a folder: FOLDER/tokenizer.json)"
    )
    parser.add_argument("--text-column", default="text", help="column with the document text (default: text)")
    parser.add_argument(
        "--sample-bytes",
        default="256MB",
        help="most text the trainer sees (default 256MB; lowered by --memory-budget)",
    )
    parser.add_argument(
        "--min-frequency", type=int, default=2, help="fewest occurrences of a merged pair (default 2)"
    )
    parser.add_argument(
        "--special-tokens",
        default="<|endoftext|>",
        help="comma-separated added tokens; the first is the EOS of the token shards (default <|endoftext|>)",
    )
    parser.add_argument("--format", choices=("auto", "parquet", "jsonl", "vortex"), default="auto")
    add_on_error(parser)
    parser.set_defaults(func=train_handler)
    group.set_defaults(func=lambda args: group.print_help() or 2)


def train_handler(args: argparse.Namespace) -> int:
    from zephyr.tokenize.train_tokenizer import train_tokenizer

    tokens = [t for t in args.special_tokens.split(",") if t.strip()]
    result = train_tokenizer(
        args.inputs,
        vocab_size=args.vocab_size,
        output=args.output,
        text_column=args.text_column,
        sample_bytes=args.sample_bytes,
        memory_budget=args.memory_budget,
        min_frequency=args.min_frequency,
        special_tokens=tokens,
        format=args.format,
        on_error=args.on_error,
    )
    from zephyr.summary import Summary

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
    and for ``zephyr explain tokenize`` (``tokenize_plan_text`` takes the same)."""
    from zephyr.cli import execution_options
    from zephyr.io.input_schema import schema_arguments

    def _column(value: str) -> str | None:
        return None if value.lower() == "none" else value

    options = execution_options(args)
    execution = {
        k: getattr(options, k)
        for k in (
            "executor",
            "workers",
            "memory_budget",
            "work_dir",
            "cluster",
            "max_retries",
            "quarantine_dir",
            "small_job_bytes",
        )
    }
    return dict(
        tokenizer=args.tokenizer,
        text_column=args.text_column,
        id_column=_column(args.id_column),
        source_column=_column(args.source_column),
        **_shard_options(args).writer_kwargs(),
        eos_token=args.eos_token,
        bos_token=args.bos_token,
        **schema_arguments(args),
        on_error=args.on_error,
        **execution,
    )


def explain_handler(args: argparse.Namespace) -> Any:
    """``zephyr explain tokenize``: the writer's jobs on stdout, nothing run (``zephyr.tokenize.explain``)."""
    from zephyr.tokenize.explain import tokenize_plan_text

    from zephyr.commands import explained

    return explained(tokenize_plan_text(args.inputs, **_writer_arguments(args)), args)


def handler(args: argparse.Namespace) -> int:
    from zephyr.tokenize.writer import write_token_shards

    result = write_token_shards(args.inputs, output=args.output, **_writer_arguments(args))
    from zephyr.summary import Summary

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
