"""What ``zephyr explain tokenize`` prints: the writer's engine jobs in order (``zephyr.tokenize.writer``
steps 2-5), each built by the function the writer runs (``writer_plan``: ``tokenize_job``,
``reference_sort``, ``pack_job``; where they run: ``place_writer``), with the rules between them.

Nothing runs and nothing is written: the inputs are listed, their text columns checked and Parquet footers
read, and the tokenizer file is read (for its vocabulary: the shard dtype, and its special tokens). The
shard count is ``ceil(total tokens × itemsize / shard_bytes)``, known only once the tokenize job has counted
the tokens: the sort and the pack are planned with one shard and the rule is printed.
"""

from __future__ import annotations

from typing import Any

__all__ = ["tokenize_plan_text"]

_SCRATCH = "OUTPUT.zephyr/work"
"""The scratch folder of a run without ``--work-dir`` (``writer._scratch_dir``), as the plan names it."""


def tokenize_plan_text(
    data: Any,
    *,
    tokenizer: str,
    text_column: str = "text",
    id_column: str | None = "auto",
    source_column: str | None = "auto",
    shard_size: int | str = "512MB",
    seed: int = 0,
    bos: str = "never",
    engine: str = "auto",
    eos_token: str | None = None,
    bos_token: str | None = None,
    batch_rows: int = 1024,
    megatron: bool = False,
    unify_schemas: bool = False,
    schema: Any = None,
    on_error: str = "raise",
    **execution: Any,
) -> str:
    """The jobs ``write_token_shards(data, ...)`` runs with these arguments (the same, but the output; path
    inputs)."""
    from zephyr.tokenize.encode_step import TokenizeBatch
    from zephyr.tokenize.format import token_dtype
    from zephyr.tokenize.pack_step import PackPartition
    from zephyr.tokenize.writer import (
        check_text_paths,
        checked_shard_bytes,
        read_columns,
        text_tokenizer,
        writer_input,
    )
    from zephyr.tokenize.writer_plan import pack_threads, place_writer, tokenize_job

    from zephyr.budget import Budget
    from zephyr.commands import jobs_plan_text
    from zephyr.options import ExecutionOptions

    shard_bytes = checked_shard_bytes(shard_size, batch_rows)
    options = ExecutionOptions.from_kwargs(**execution)
    check_text_paths(data, text_column)
    placed = place_writer(data, options, execution)
    tok = text_tokenizer(tokenizer, bos, engine, eos_token, bos_token)
    id_column, source_column = read_columns(data, id_column, source_column)
    schema_kw = {"unify_schemas": unify_schemas, "schema": schema}
    dataset = writer_input(data, [text_column, id_column, source_column], placed, on_error, **schema_kw)
    names = {"text_column": text_column, "id_column": id_column, "source_column": source_column}
    batch_fn = TokenizeBatch(tok, **names, seed=seed, spill_dir=f"{_SCRATCH}/spill")
    refs = tokenize_job(dataset, batch_fn, batch_rows)
    dtype = token_dtype(tok.vocab_size)
    packer = PackPartition(
        "OUTPUT",
        dtype.name,
        megatron,
        f"{_SCRATCH}/spill",
        batch_rows,
        eos_id=tok.eos_id,
        bos_id=tok.bos_id,
        threads=pack_threads(placed, options),
    )
    rules = (_placement(placed, options), _shard_rule(dtype, shard_bytes))
    steps = _steps(refs, packer, rules, batch_rows, megatron)
    budget = Budget(options.memory_budget_bytes)
    return jobs_plan_text("zephyr tokenize", steps, budget, placed.pool, then="the rules")


def _shard_rule(dtype: Any, shard_bytes: int) -> str:
    """The shard count's rule (``writer_plan.shard_count``), with this run's dtype and shard size."""
    return (
        f"shards P = ceil(total tokens × {dtype.itemsize} bytes ({dtype.name}) / shard_bytes {shard_bytes:,}): "
        "the total is job 1's tokens counter, unknown before the run, so jobs 2-3 are planned with P = 1; no "
        "document: they are skipped and the set is one empty shard"
    )


def _steps(refs: Any, packer: Any, rules: tuple[str, ...], batch_rows: int, megatron: bool) -> list:
    """The writer's three jobs (``writer_plan``), with the placement and the shard rule between them."""
    from zephyr.tokenize.writer_plan import pack_job, reference_sort

    return [
        (
            f"job 1: tokenize, {batch_rows:,} documents a batch (batch_rows: bounds a task's memory); token ids "
            "to spill files, one reference row a document to Parquet",
            refs,
        ),
        *((rule, None) for rule in rules),
        (
            "job 2: the reference sort by (key_hi, key_lo) into P partitions, one a shard, cut evenly on the "
            "key_hi hash space (no key sample: the same shards from any input split; its first stage is "
            "job 1: the sort reads job 1's reference files)",
            reference_sort(refs, 1),
        ),
        (
            f"job 3: pack, {_pack_tasks(packer)}, {batch_rows:,} references a read, tokens gathered from the "
            "spill files → OUTPUT/shard-*.tokens.npy" + (" + Megatron .bin/.idx" if megatron else ""),
            pack_job([f"{_SCRATCH}/sorted/part-00000.parquet"], packer),
        ),
    ]


def _pack_tasks(packer: Any) -> str:
    """How the pack job splits its shards into tasks (``writer_plan.pack_job``)."""
    if packer.threads > 1:
        return f"one task packing {packer.threads} shards at a time on threads (writer_plan.pack_threads)"
    return "one task a shard"


def _placement(placed: Any, options: Any) -> str:
    """Where the writer's jobs run, and the rule that says so (``writer_plan.worker_pool``)."""
    from zephyr.tokenize.writer_plan import DRIVER_MAX_WORKERS, driver_encodes

    if options.executor == "inprocess":
        return "every job runs in this process (--executor inprocess)"
    if placed.in_driver and placed.read_plan is not None and placed.read_plan.small:
        return (
            "every job runs in this process: a small job (the read plan's rule, ReadPlan.small: inputs under "
            f"small_job_bytes {options.small_job_bytes_value:,} or one read task; small_job_bytes=0 forces workers)"
        )
    if placed.in_driver and driver_encodes(options):
        return (
            f"every job runs in this process: local with {options.num_workers} ≤ DRIVER_MAX_WORKERS "
            f"{DRIVER_MAX_WORKERS} workers, the encoder on every core (small_job_bytes=0 forces workers)"
        )
    workers = placed.pool.get("workers") or options.num_workers
    tasks = f" of the read plan's {placed.read_plan.tasks}" if placed.read_plan is not None else ""
    return (
        f"the jobs run on {workers} {options.executor} workers, no more than the tokenize tasks that run at "
        f"once ({placed.concurrency}{tasks})"
    )
