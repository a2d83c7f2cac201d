"""``zephyr tokenize INPUT... --tokenizer PATH --output DIR``: corpus → globally shuffled token shards.

Registered by ``zephyr.cli`` through ``register(subparsers, common)``; the global execution options
(``--workers``, ``--executor``, ...) come from ``common``. Heavy imports happen in the handler.
"""

from __future__ import annotations

import argparse
import json

__all__ = ["register", "handler"]


def register(subparsers: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    from zephyr.cli import add_on_error, add_output_dir

    parser = subparsers.add_parser(
        "tokenize",
        parents=[common],
        help="tokenize a corpus into globally shuffled token shards (+ optional Megatron .bin/.idx)",
        description="Tokenize Parquet/JSONL documents with a tokenizer.json, shuffle them globally (seeded), "
        "and pack them into flat token shards with a manifest (see docs/tokenize.md).",
    )
    parser.add_argument(
        "inputs", nargs="+", metavar="INPUT", help="Parquet/JSONL files, directories or globs"
    )
    parser.add_argument("--tokenizer", required=True, help="path of a HF tokenizer.json")
    add_output_dir(parser, "output directory for shards and manifest.json")
    add_on_error(parser)
    parser.add_argument("--text-column", default="text", help="column with the document text (default: text)")
    parser.add_argument(
        "--id-column", default="auto", help="id column for the shuffle key ('auto': id if present; 'none')"
    )
    parser.add_argument(
        "--source-column", default="auto", help="column counted in the manifest's source mix ('auto', 'none')"
    )
    parser.add_argument("--shard-size", default="512MB", help="target token bytes per shard (default 512MB)")
    parser.add_argument("--seed", type=int, default=0, help="shuffle seed (default 0)")
    parser.add_argument(
        "--bos", choices=("never", "always"), default="never", help="prepend BOS to documents"
    )
    parser.add_argument(
        "--engine",
        choices=("auto", "fastokens", "tiktoken", "hf"),
        default="auto",
        help="encoder (default auto)",
    )
    parser.add_argument("--eos-token", default=None, help="EOS token text when it cannot be detected")
    parser.add_argument("--bos-token", default=None, help="BOS token text (with --bos always)")
    parser.add_argument(
        "--batch-rows", type=int, default=1024, help="documents per tokenize batch (bounds memory)"
    )
    parser.add_argument("--megatron", action="store_true", help="also write Megatron .bin/.idx per shard")
    from zephyr.io.input_schema import add_schema_arguments

    add_schema_arguments(parser)
    parser.set_defaults(func=handler)


def handler(args: argparse.Namespace) -> int:
    from zephyr.tokenize.writer import write_token_shards

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
            "small_job_bytes",
        )
    }
    result = write_token_shards(
        args.inputs,
        tokenizer=args.tokenizer,
        output=args.output,
        text_column=args.text_column,
        id_column=_column(args.id_column),
        source_column=_column(args.source_column),
        shard_size=args.shard_size,
        seed=args.seed,
        bos=args.bos,
        engine=args.engine,
        eos_token=args.eos_token,
        bos_token=args.bos_token,
        batch_rows=args.batch_rows,
        megatron=args.megatron,
        **schema_arguments(args),
        on_error=args.on_error,
        **execution,
    )
    summary = {
        "output": result.output,
        "shards": len(result.manifest["shards"]),
        "documents": result.num_documents,
        "tokens": result.num_tokens,
        "engine": result.manifest["tokenizer"]["engine"],
        "rows": result.stats.get("rows"),
    }
    print(json.dumps(summary))
    return 0
