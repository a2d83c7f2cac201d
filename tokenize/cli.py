"""``zephyr tokenize INPUT... --tokenizer PATH --output DIR``: corpus → globally shuffled token shards (and
``zephyr explain tokenize``: its jobs, unrun), and ``zephyr tokenizer train INPUT... --vocab-size N --output
tokenizer.json``: a byte-level BPE for it.

Both are ``zephyr.cli.Command``s: their flags come from dataclasses (``zephyr.flags``): the shared ``Inputs``
(with the tokenizer: ``TokenFiles``) and ``Output`` groups, ``TokenizeConfig`` (``write_token_shards``'
settings, shared with the pipeline's tokenize step) and ``TokenizerTrain`` (``zephyr tokenizer train``).
Heavy imports happen in the functions that run.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Literal

from zephyr.tokenize.config import TokenizeConfig, TokenizerTrain

from zephyr.cli import Command, Inputs, Output
from zephyr.options import ExecutionOptions


@dataclass(frozen=True)
class TokenFiles(Inputs):
    """The files ``zephyr tokenize`` reads: Parquet or JSONL, told apart by their names, and the tokenizer."""

    format: Literal["auto"] = field(default="auto", metadata={"flag": False})
    tokenizer: str = field(default="", metadata={"required": True, "reads": True})
    """Path of a HF tokenizer.json."""


@dataclass(frozen=True)
class SampleFiles(Inputs):
    """The files ``zephyr tokenizer train`` samples, read as they are (a sample needs no schema)."""

    unify_schemas: bool = field(default=False, metadata={"flag": False})
    schema: str | None = field(default=None, metadata={"flag": False})


def _writer_arguments(
    inputs: TokenFiles, config: TokenizeConfig, execution: ExecutionOptions
) -> dict[str, Any]:
    """``write_token_shards``' keyword arguments but the output: one mapping for the command and for ``zephyr
    explain tokenize`` (``zephyr.tokenize.writer.plan_text`` takes the same)."""
    # on_error, unify_schemas...
    files = {f.name: getattr(inputs, f.name) for f in dataclasses.fields(Inputs)[2:]}
    return {"tokenizer": inputs.tokenizer, **files, **dataclasses.asdict(config), **execution.as_kwargs()}


def tokenize(
    inputs: TokenFiles,
    output: Output,
    config: TokenizeConfig,
    execution: ExecutionOptions,
) -> Any:
    """Tokenize a corpus into globally shuffled token shards (+ optional Megatron .bin/.idx). Parquet/JSONL
    documents are tokenized with a tokenizer.json, shuffled globally (seeded) and packed into flat token shards
    with a manifest (see docs/tokenize.md)."""
    from zephyr.tokenize.writer import write_token_shards

    from zephyr.summary import Summary

    arguments = _writer_arguments(inputs, config, execution)
    result = write_token_shards(inputs.inputs, output=output.output, overwrite=output.overwrite, **arguments)
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


def tokenize_plans(inputs: TokenFiles, config: TokenizeConfig, execution: ExecutionOptions) -> Any:
    """The writer's jobs, printed with the options each runs with (the writer places them itself: in this
    process for a small input), so the plan is explained by the writer, not with the command line's options."""
    from zephyr.tokenize.writer import plan_text

    return plan_text(inputs.inputs, **_writer_arguments(inputs, config, execution))


def train(inputs: SampleFiles, config: TokenizerTrain, execution: ExecutionOptions) -> Any:
    """Train a byte-level BPE tokenizer.json on a bounded sample of a corpus. A GPT-2-style byte-level BPE is
    trained with HF tokenizers on the first bytes of every input file (an equal share each, up to
    --sample-bytes, lowered to fit --memory-budget) and written atomically. The same inputs give the same file.
    See docs/tokenize.md."""
    from zephyr.tokenize.train_tokenizer import train_tokenizer

    from zephyr.summary import Summary

    files = {"format": inputs.format, "on_error": inputs.on_error}
    result = train_tokenizer(
        inputs.inputs, **dataclasses.asdict(config), **files, memory_budget=execution.memory_budget
    )
    details = result.to_dict()
    output = details.pop("output")
    return Summary(
        rows_in=result.documents + result.rows_quarantined,
        rows_kept=result.documents,
        rows_quarantined=result.rows_quarantined,
        output=output,
        next=f"zephyr tokenize {' '.join(inputs.inputs)} --tokenizer {output} --output tokens/",
        details=details,
    )


GROUPS = {"tokenizer": "make a tokenizer.json (zephyr tokenizer train)"}
COMMANDS = [
    Command(
        "tokenize",
        tokenize,
        {"inputs": TokenFiles, "output": Output, "config": TokenizeConfig},
        plans=tokenize_plans,
    ),
    Command("tokenizer train", train, {"inputs": SampleFiles, "config": TokenizerTrain}),
]
