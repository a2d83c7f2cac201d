"""Corpus → globally shuffled token shards, through the zephyr engine: ``write_token_shards``, and ``plans``,
the same engine jobs unrun (what ``zephyr explain tokenize`` prints: built by the functions the writer runs, so
the printed plan is the plan that runs).

The writer reads its inputs, then runs three engine jobs (each resumes with ``work_dir``, on any executor):

0. ``read_parquet``/``read_jsonl`` the inputs (only the text, id and source columns), after checking each
   input file's text column (``zephyr.io.text_column``: strings, never numbers turned into text).
1. ``map_batches(tokenize)`` (``zephyr.tokenize._encode``): ``batch_rows`` documents at a time (this
   bounds peak memory), encoded in one call on the tokenizer's threads (every core of the machine, also when
   tasks run side by side: see ``TokenizeBatch``). The encoder's flat ids go, as little-endian bytes in the shard
   dtype and without EOS/BOS (job 3 adds them), into one spill file (``zephyr.tokenize._pack``); the
   job's output is one small *reference* row per document: the shuffle key (``key_hi``, ``key_lo``: a seeded
   128-bit xxh3 of the document, of its id when ``id_column`` is given so duplicate texts do not land side by
   side, the text hash breaking ties), ``num_tokens``, ``spill_file``, ``spill_offset`` and ``source``. Null
   texts are quarantined (``quarantine_reason = "null_text"``), never silently lost. The job's ``tokens`` counter
   gives the total, and the total decides the number of shards: ``ceil(total_tokens * itemsize /
   shard_bytes)`` (``_shuffle_and_pack``). Without any document (empty inputs, or only null texts) jobs 2 and 3 are
   skipped and the set is one empty shard, still a valid set for the loader.
2. ``sort(key_hi, key_lo, boundaries=shard_cuts(P))`` of the references: the global document shuffle, over
   ~50 bytes a document instead of its tokens, cut into P even ranges of the ``key_hi`` hash space
   (``reference_sort``). Output shard i is the sort's partition i, so shard contents depend only on the data,
   the seed and the shard size — never on the worker count, the executor or how the inputs were split into
   tasks (cuts from a key sample did: each task samples its own references). Equal keys mean equal text (and
   id), hence equal tokens: ties cannot change bytes.
3. ``map(pack)`` over the partitions (``zephyr.tokenize._pack``): read each partition's references
   ``batch_rows`` at a time, gather their ids from the spill files with a gap for EOS (and BOS) around each
   document, store the special tokens, and append them to ``shard-<i>.tokens.npy`` + ``.offsets.npy``
   (+ Megatron ``.bin``/``.idx``), hashing as they are written; the driver writes ``manifest.json`` last.

Token bytes are thus written once (spill) and read once (pack); peak memory per worker is one batch of
documents (texts, ids, references) whatever the input size, plus what the input format itself needs to
decode (one Parquet row group's text column).

Where the jobs run (``place_writer``): the read split (``approx_shard_bytes``), the task count and the
small-job decision are the engine's (``zephyr.physical.plan_read``); tokenize decides only how many tokenize tasks run
at once on one machine (the worker pool's size; each task encodes on every core), and whether the jobs run in
this process (the engine's small-job rule, or a local pool of at most ``DRIVER_MAX_WORKERS``
workers). Outputs never depend on it: shard bytes are a function of the data, the seed and the shard size only.

Arguments of ``write_token_shards`` (the settings from ``text_column`` to ``megatron`` are
``zephyr.tokenize.config.TokenizeConfig``'s fields, with its defaults; ``shard_bytes`` may be an int)::

    data: a ``zephyr.Dataset``, or Parquet/JSONL paths (files, directories, globs, fsspec URLs).
    tokenizer: path of a ``tokenizer.json`` (or a ``TextTokenizer``).
    output: directory (any fsspec URL: local, ``s3://``, ``gs://``...) for the shards and ``manifest.json``.
    text_column: the column with the document text.
    id_column: a column of document ids for the shuffle key; ``"auto"`` uses ``id`` when the inputs have
        one, ``None`` keys on the text alone (then exact duplicate texts end up next to each other).
    source_column: a column whose per-value document/token counts go into the manifest's source mix;
        ``"auto"`` uses ``source`` when present.
    shard_bytes: target bytes of tokens per shard (e.g. ``"512MB"``); the shard count is
        ``ceil(total token bytes / shard_bytes)``.
    seed: shuffle seed; the same seed and inputs give byte-identical shards.
    bos: ``"never"`` or ``"always"``. EOS is always appended.
    engine: ``"auto"`` (fastokens when it is proven identical to HF, else HF itself), or ``"fastokens"`` or
        ``"hf"`` (an engine that cannot be proven is an error).
    eos_token / bos_token: the special tokens' text, when detection fails (e.g. ``"</s>"``).
    batch_rows: documents per tokenize batch and per pack read; with the reference sort this bounds the
        writer's own memory per worker (the encoder's and the Parquet reader's own state come on top).
    megatron: also write Megatron ``.bin``/``.idx`` per shard.
    unify_schemas / schema: how input files that disagree on a column's type are read (path inputs only;
        ``zephyr.io.input_schema``): promote by the documented rule, or cast every file to a schema.
    on_error: for path inputs, ``"raise"`` on a bad input row (invalid JSON line, invalid UTF-8) naming file
        and line, or ``"quarantine"`` to set it aside; ``stats["rows"]`` says where every input row went.
    overwrite: replace the output folder's content even when it holds files zephyr did not write (the set is
        claimed like any output, ``zephyr.io.claim``: not an input, locked, only zephyr's files).
    execution: engine execution options (``executor``, ``workers``, ``memory_budget``, ``work_dir``...).

The set is built in the output's sidecar (``OUTPUT.zephyr/staging/shards``, ``zephyr.io.layout``) and published
when complete (``zephyr.io.claim.publish_folder``): a run that fails leaves the set a finished run wrote as it
was.

``plans`` takes the same arguments (``output`` optional): nothing runs and nothing is written; the inputs are
listed, their text columns checked and Parquet footers read, and the tokenizer file is read (for its
vocabulary: the shard dtype, and its special tokens). The shard count is known only once the tokenize job
has counted the tokens: the sort and the pack are planned with one shard and the rule is printed.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import math
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
from zephyr.tokenize._encode import TokenizeBatch
from zephyr.tokenize._pack import PackPartition, string_array
from zephyr.tokenize.config import TokenizeConfig
from zephyr.tokenize.shards import ShardInfo, token_dtype, write_manifest, write_shard
from zephyr.tokenize.tokenizer import BosPolicy, EngineChoice, TextTokenizer

from zephyr.config import parse_bytes
from zephyr.errors import ZephyrError
from zephyr.io.paths import absolute

if TYPE_CHECKING:
    from zephyr.dataset import Dataset
    from zephyr.options import ExecutionOptions
    from zephyr.physical import ReadPlan

log = logging.getLogger(__name__)


DRIVER_MAX_WORKERS = 2
"""With at most this many local workers, the writer's jobs run in the driver process. One process already
gives the encoder every core (its own threads), decodes the next input batch on a thread meanwhile
(``zephyr.tasks.read_ahead``), and loads, proves and warms the tokenizer once; two worker processes pay each of those
twice plus their start-up (~3 CPU-s at 320 MB). Measured at 320 MB on 2 cores with fastokens: 4.30 s in the
driver vs 5.22 s on 2 workers (median of 3; fastokens in memory 2.31 s); with tiktoken at 80 MB, 5.8 vs
6.2 s. With more workers, one Python thread (decoding, hashing, spilling) would not keep up with the encoder."""


DRIVER_MIN_BUDGET_BYTES = 512 << 20
"""Below this ``memory_budget`` the writer keeps its worker processes even with ``DRIVER_MAX_WORKERS`` or fewer:
the driver holds more than a worker's stream of ``batch_rows`` batches (the read-ahead batch, the batches in
flight, the driver's own job state beside the encoder's caches), ~300-410 MiB above its baseline whatever the
budget. Measured with benchmarks/budget_peaks.py (inputs 6x the budget): at ``--memory-budget 64MiB`` 151 MiB
above it where the budget allows 1.25 x 64 = 80; at 256MiB 299-363 MiB over three runs, against 320 allowed
(1.17-1.42x); at 512MiB 360-383 MiB (0.70-0.75x) with one batch in flight, 401 MiB (0.78x) with three, and
320 MiB (0.63x; 354 MiB, 0.35x, at 1GiB) with two on the encode threads kept while batches come
(``TokenizeBatch.IN_FLIGHT``, ``_encode._encode_threads``). On workers at 64MiB: 1.03x."""


_CONFIG_FIELDS = dataclasses.fields(TokenizeConfig)


@dataclass(frozen=True)
class TokenizeResult:
    """What ``write_token_shards`` wrote: the output directory, its manifest (as a dict) and engine stats."""

    output: str
    manifest: dict[str, Any]
    stats: dict[str, Any]

    @property
    def num_tokens(self) -> int:
        return int(self.manifest["num_tokens"])

    @property
    def num_documents(self) -> int:
        return int(self.manifest["num_documents"])


def write_token_shards(
    data: Dataset | str | Sequence[str], *, tokenizer: str | TextTokenizer, output: str, **arguments: Any
) -> TokenizeResult:
    """Tokenize ``data`` into a globally shuffled token-shard set at ``output`` (format: ``zephyr.tokenize.shards``)
    and return what was written. ``data`` is a ``zephyr.Dataset`` or Parquet/JSONL paths; the same seed and
    inputs give byte-identical shards. ``arguments``: ``unify_schemas``, ``schema``, ``on_error``, ``overwrite``,
    ``TokenizeConfig``'s fields (``text_column``, ``seed``, ``shard_bytes``..., its defaults where not given) and
    the engine's execution options. Every argument is described in this module's docstring ("Arguments").
    """
    return _write(data, tokenizer, output=output, explain=False, **arguments)


def plans(data: Any, *, tokenizer: str, **arguments: Any) -> list[tuple[str, Dataset | None]]:
    """The engine jobs ``write_token_shards(data, tokenizer=..., **arguments)`` runs (path inputs; ``output``
    optional), in order, each built by the code the writer runs, with the rules between them (``None``: a
    rule). Nothing runs (see the module docstring)."""
    return _write(data, tokenizer, explain=True, **arguments)[0]


def plan_text(data: Any, *, tokenizer: str, **arguments: Any) -> str:
    """What ``zephyr explain tokenize`` prints: ``plans`` through the multi-job printer
    (``zephyr.physical.explain_jobs``) with the options the writer runs them with, and the budget's shares."""
    from zephyr.budget import Budget
    from zephyr.physical import explain_jobs

    planned, pool, options = _write(data, tokenizer, explain=True, **arguments)
    budget = Budget(options.memory_budget_bytes)
    return explain_jobs("zephyr tokenize", planned, budget, pool, then="the rules")


def _write(
    data: Any,
    tokenizer: str | TextTokenizer,
    *,
    explain: bool,
    output: str = "OUTPUT",
    unify_schemas: bool = False,
    schema: Any = None,
    on_error: str = "raise",
    overwrite: bool = False,
    **settings: Any,
) -> Any:
    """``write_token_shards``: ``settings`` are ``TokenizeConfig``'s fields (checked once, here) and the execution
    options. ``explain``: build the same jobs, then return them unrun (``_explained``: the jobs, the execution
    options of its jobs, the ``ExecutionOptions``) before anything is claimed, started or written."""
    import zephyr
    from zephyr import job_stats
    from zephyr.executors import reuse_workers
    from zephyr.io import claim, layout
    from zephyr.io.claim import publish_folder
    from zephyr.io.layout import remove_folder
    from zephyr.io.sources import check_text_inputs

    config = TokenizeConfig(**{f.name: settings.pop(f.name) for f in _CONFIG_FIELDS if f.name in settings})
    shard_bytes, batch_rows = parse_bytes(config.shard_bytes), config.batch_rows
    # pack tasks write the output, maybe on workers in another working directory
    output = output if explain else absolute(output)
    options = zephyr.ExecutionOptions.from_kwargs(**settings)
    inputs = [] if isinstance(data, zephyr.Dataset) else _input_names(data)
    tokenizer_path = [str(tokenizer)] if isinstance(tokenizer, str | os.PathLike) else []
    claimed = contextlib.nullcontext()
    if not explain:
        given = [*inputs, *tokenizer_path]
        claimed = claim.claimed(output, inputs=given, overwrite=overwrite, work_dir=options.work_dir)
    with claimed:
        # the packer writes the set where it is built, published whole at the end
        building = output if explain else layout.side_path(output, "staging", "shards")
        tokenizer_args = (tokenizer, config.bos, config.engine, config.eos_token, config.bos_token)
        # jobs that run in this process: the tokenizer loads and proves itself on a thread from here on
        encodes_here = options.executor == "inprocess" or driver_encodes(options)
        tok = text_tokenizer(*tokenizer_args, warm=True) if encodes_here and not explain else None
        if not isinstance(data, zephyr.Dataset):  # a Dataset's batches are checked by the tokenize job itself
            check_text_inputs(_input_names(data), config.text_column)  # strings, never numbers as text
        placed = place_writer(data, options, settings)
        # One worker pool for the writer's engine jobs. It starts here, so the workers import while the driver
        # parses and proves the tokenizer. The stats' task totals cover all of those jobs (``jobs``: one each).
        pool = contextlib.nullcontext(placed.pool) if explain else reuse_workers(placed.pool)
        with pool as execution, job_stats.recording() as engine_jobs:
            # in the driver: a small job
            tok = tok or text_tokenizer(*tokenizer_args, warm=placed.in_driver and not explain)
            scratch = _scratch_dir(output, None if explain else execution.get("work_dir"))
            id_column, source_column = read_columns(data, config.id_column, config.source_column)
            names = {
                "text_column": config.text_column,
                "id_column": id_column,
                "source_column": source_column,
            }
            schemas = {"unify_schemas": unify_schemas, "schema": schema}
            dataset = writer_input(data, list(names.values()), placed, on_error, **schemas)
            spill_dir = f"{scratch}/spill"
            batch_fn = TokenizeBatch(tok, **names, seed=config.seed, spill_dir=spill_dir)
            dtype = token_dtype(tok.vocab_size)
            threads = pack_threads(placed, options)
            ids = {"eos_id": tok.eos_id, "bos_id": tok.bos_id}
            packer = PackPartition(
                building, dtype.name, config.megatron, spill_dir, batch_rows, **ids, threads=threads
            )
            tokenize_job = dataset.map_batches(batch_fn, batch_rows=batch_rows, name="tokenize")  # job 1
            if explain:
                jobs = _explained(tokenize_job, packer, placed, shard_bytes, config.megatron, output, scratch)
                return jobs, placed.pool, options
            _replace_set(building)
            if config.engine != "auto":
                _ = tok.engine  # a forced engine that cannot be proven fails here, before any task
            try:
                refs = tokenize_job.write_parquet(f"{scratch}/refs", **execution)
                packed = _shuffle_and_pack(refs, packer, shard_bytes, scratch, execution)
                shards, per_source, stats = packed
                sources = {"inputs": inputs, "text_column": config.text_column, "id_column": id_column}
                sources.update(source_column=source_column, per_source=per_source)
                # the engines the tokenize tasks used (each proved its own), "+"-joined when processes differed
                counters = job_stats.counter_totals(refs.stats.get("stages", []))
                used = sorted(
                    k.removeprefix("engine_") for k, v in counters.items() if k.startswith("engine_") and v
                )
                engine = {"path": tok.path, "sha256": tok.sha256, "engine": "+".join(used) or tok.engine}
                meta = {  # the manifest's fields besides the shard list (zephyr.tokenize.shards)
                    "dtype": dtype.name,
                    "vocab_size": tok.vocab_size,
                    "eos_id": tok.eos_id,
                    "bos_id": tok.bos_id,
                    "bos_policy": tok.bos_policy,
                    "tokenizer": engine,
                    "seed": config.seed,
                    "shard_size_bytes": shard_bytes,  # the manifest's key for shard_bytes (format version 1)
                    "sources": sources,
                }
                manifest = write_manifest(building, shards, meta=meta)
                read = refs.stats["stages"][0] if refs.stats.get("stages") else {}  # the tokenize stage's
                stats["rows"] = {  # where every input row went: in = kept + dropped + quarantined
                    "in": read.get("rows_in", 0),
                    "kept": read.get("rows_out", 0),
                    "dropped": read.get("rows_dropped", 0),
                    "quarantined": read.get("rows_quarantined", 0),
                }
                # the tokenize, sort and pack jobs, not the sort alone
                stats.update(job_stats.summarize(engine_jobs))
                pool = placed.pool
                executor = pool.get("executor", "local")
                stats["tokenize_plan"] = {  # how the tokenize job ran (plan_tasks)
                    "tasks": sum(st.get("tasks", 0) for st in refs.stats.get("stages", [])),
                    "concurrent_tasks": placed.concurrency,
                    "executor": executor if isinstance(executor, str) else "custom",
                    "workers": 0 if executor == "inprocess" else (pool.get("workers") or options.num_workers),
                }
            except BaseException:
                if execution.get("work_dir") is None:
                    remove_folder(scratch)  # nothing could resume from it
                raise
            remove_folder(scratch)
            _keep_only_the_set(building, manifest)
            publish_folder(building, output)
            return TokenizeResult(output, manifest, stats)


def _keep_only_the_set(directory: str, manifest: dict[str, Any]) -> None:
    """Remove what the set's manifest does not name from the folder about to be published (shards an aborted
    run of another shard count left in the staging folder)."""
    import fsspec
    from zephyr.tokenize.shards import MANIFEST_NAME

    named = {MANIFEST_NAME} | {
        f["path"] for shard in manifest["shards"] for f in shard["files"].values() if isinstance(f, dict)
    }
    fs, root = fsspec.core.url_to_fs(directory)
    for entry in fs.find(root):
        if entry[len(root.rstrip("/")) + 1 :] not in named:
            fs.rm(entry)


def _explained(
    tokenize_job: Dataset,
    packer: PackPartition,
    placed: WriterPlacement,
    shard_bytes: int,
    megatron: bool,
    output: str,
    scratch: str,
) -> list[tuple[str, Dataset | None]]:
    """``plans``: the jobs the writer built (the sort and the pack planned with one shard) and the rules."""
    dtype, threads, batch_rows = np.dtype(packer.dtype), packer.threads, packer.batch_rows
    tasks = f"one task packing {threads} shards at a time on threads (pack_threads)"  # else one a shard
    return [
        (
            f"job 1: tokenize, {batch_rows:,} documents a batch (batch_rows: bounds a task's memory); token ids "
            "to spill files, one reference row a document to Parquet",
            tokenize_job,
        ),
        (placed.reason, None),
        (  # the shard count's rule (``_shuffle_and_pack``)
            f"shards P = ceil(total tokens × {dtype.itemsize} bytes ({dtype.name}) / shard_bytes "
            f"{shard_bytes:,}): the total is job 1's tokens counter, unknown before the run, so jobs 2-3 are "
            "planned with P = 1; no document: they are skipped and the set is one empty shard",
            None,
        ),
        (
            "job 2: the global shuffle: the references sorted by their shuffle key (a seeded hash of each "
            "document) into P partitions, one a shard, cut into P even ranges of the key (no sampling: the same "
            "shards from any input split; the sort reads job 1's reference files)",
            reference_sort(tokenize_job, 1),
        ),
        (
            f"job 3: pack, {tasks if threads > 1 else 'one task a shard'}, {batch_rows:,} references a read, "
            f"tokens gathered from the spill files → {output}/shard-*.tokens.npy"
            + (" + Megatron .bin/.idx" if megatron else ""),
            pack_job([f"{scratch}/sorted/part-00000.parquet"], packer),
        ),
    ]


def read_columns(
    data: Any, id_column: str | None, source_column: str | None
) -> tuple[str | None, str | None]:
    """The id and source columns the writer reads: ``"auto"`` is ``id``/``source`` when the first Parquet input
    has that column, else none."""
    names = input_columns(data) if "auto" in (id_column, source_column) else None

    def chosen(wanted: str | None, default: str) -> str | None:
        return wanted if wanted != "auto" else (default if names and default in names else None)

    return chosen(id_column, "id"), chosen(source_column, "source")


def writer_input(
    data: Any, columns: list[str | None], placed: WriterPlacement, on_error: str, **schema: Any
) -> Dataset:
    """``data`` as the tokenize job reads it: a ``Dataset`` as it is, paths as only ``columns``, split by the
    placement's read plan (the engine's, of the writer and of ``zephyr explain tokenize``)."""
    import zephyr

    if isinstance(data, zephyr.Dataset):
        return data
    from zephyr.io.paths import input_files

    paths, fmt = input_files(_input_names(data))
    plan = None if placed.in_driver else placed.read_plan  # in the driver tasks run one after another anyway
    split = {"approx_shard_bytes": plan.approx_shard_bytes if plan else None, "on_error": on_error, **schema}
    if fmt == "jsonl":
        return zephyr.read_jsonl(paths, **split)
    return zephyr.read_parquet(paths, columns=[c for c in columns if c], **split)


def text_tokenizer(
    tokenizer: str | TextTokenizer,
    bos: BosPolicy,
    engine: EngineChoice,
    eos_token: str | None,
    bos_token: str | None,
    *,
    warm: bool = False,
) -> TextTokenizer:
    """The given ``TextTokenizer``, or one loaded from a ``tokenizer.json`` path; ``warm``: it loads and proves itself on a thread from now on, for
    jobs that run in this process (``TextTokenizer.warm_in_background``), where fastokens encodes on all cores
    but one: the Python thread that feeds it keeps that one (``tokenizer.fastokens_pool_threads``)."""
    if not isinstance(tokenizer, TextTokenizer):
        tokenizer = TextTokenizer(tokenizer, bos=bos, engine=engine, eos_token=eos_token, bos_token=bos_token)
    if warm:
        tokenizer.warm_in_background(fastokens_threads=(os.cpu_count() or 1) - 1)
    return tokenizer


def plan_tasks(data: Any, options: ExecutionOptions) -> tuple[ReadPlan | None, int]:
    """(the engine's read plan of path inputs, tokenize tasks that run at once on one machine).

    The read split, the task count and whether the writer's jobs run in this process are the engine's
    (``zephyr.physical.plan_read``, the rule every job follows). What stays here is tokenize's own: no more
    tasks at once (worker processes) than the plan has tasks, since each worker loads the tokenizer; every
    task encodes on all cores (``TokenizeBatch``). In-process tasks run one at a time (all cores
    each); a ``Dataset`` input is read as it is (no plan, one task per worker at once); unreadable inputs
    fail later, with the engine's own message (no plan).
    """
    workers = options.num_workers
    if options.executor == "inprocess":
        return None, 1
    if not isinstance(data, str | os.PathLike | list | tuple):  # a Dataset
        return None, workers
    from zephyr.physical import plan_read

    try:
        plan = plan_read(_input_names(data), options, split=True)
    except (OSError, ValueError, ZephyrError):
        return None, workers
    return plan, max(1, min(workers, plan.tasks))


def input_columns(data: Any) -> list[str] | None:
    """Column names of the first Parquet input (``None``: not Parquet paths, or unreadable)."""
    if not isinstance(data, str | os.PathLike | list | tuple):  # a Dataset
        return None
    import fsspec
    import pyarrow.parquet as pq

    try:
        fs, first = fsspec.core.url_to_fs(_input_names(data)[0])
        if fs.isdir(first):
            first = sorted(p for p in fs.find(first) if p.endswith(".parquet"))[0]
        with fs.open(first, "rb") as handle:
            return pq.read_schema(handle).names
    except (IndexError, OSError, ValueError):
        return None


@dataclass(frozen=True)
class WriterPlacement:
    """Where the writer's jobs run and how its inputs are split (``place_writer``)."""

    read_plan: ReadPlan | None
    concurrency: int
    """Tokenize tasks that run at once on one machine (``plan_tasks``)."""
    pool: dict[str, Any]
    """The execution options of every job of the writer."""
    reason: str
    """Where the jobs run and the rule that says so: logged, and printed by ``zephyr explain tokenize``."""

    @property
    def in_driver(self) -> bool:
        return self.pool.get("executor") == "inprocess"


def place_writer(data: Any, options: ExecutionOptions, execution: dict[str, Any]) -> WriterPlacement:
    """The read plan of ``data`` and the execution options of the writer's jobs. A job the engine calls small
    (``ReadPlan.small``: its inputs are under ``small_job_bytes``, or its read split leaves one task) runs in
    this process, like every small engine job: a worker would add its start-up and nothing else (the driver
    only waits meanwhile); ``small_job_bytes=0`` turns that off. So does a local pool of at most
    ``DRIVER_MAX_WORKERS`` workers (``driver_encodes``). Otherwise no more worker processes than tokenize
    tasks: more would only import and sit idle on the cores the encoder threads use (later stages are a small
    sort and I/O-bound packing). Outputs depend on neither."""
    read_plan, concurrency = plan_tasks(data, options)
    pool = dict(execution)
    forces = "--small-job-bytes 0 forces workers"
    if options.executor == "inprocess":
        reason = "every job runs in this process (--executor inprocess)"
    elif read_plan is not None and read_plan.small:
        pool["executor"] = "inprocess"
        reason = (
            "every job runs in this process: a small job (inputs under --small-job-bytes "
            f"{options.small_job_bytes_value:,} bytes, or one read task; {forces})"
        )
    elif driver_encodes(options):
        pool["executor"] = "inprocess"
        reason = (
            f"every job runs in this process: with {options.num_workers} local workers (at most "
            f"{DRIVER_MAX_WORKERS}) the encoder's own threads on every core do more ({forces})"
        )
    else:
        if options.executor == "local" and concurrency < options.num_workers:
            pool["workers"] = concurrency
        tasks = f" of the read plan's {read_plan.tasks}" if read_plan is not None else ""
        reason = (
            f"the jobs run on {pool.get('workers') or options.num_workers} {options.executor} workers, no more "
            f"than the tokenize tasks that run at once ({concurrency}{tasks})"
        )
    log.info("tokenize: %s", reason)
    return WriterPlacement(read_plan, concurrency, pool, reason)


def driver_encodes(options: Any) -> bool:
    """Whether a ``local`` job of at most ``DRIVER_MAX_WORKERS`` workers runs in the driver: not with
    ``small_job_bytes=0``, which forces worker processes as for every engine job, nor with a memory budget under
    ``DRIVER_MIN_BUDGET_BYTES``."""
    return (
        options.executor == "local"
        and options.num_workers <= DRIVER_MAX_WORKERS
        and options.small_job_bytes_value > 0
        and options.memory_budget_bytes >= DRIVER_MIN_BUDGET_BYTES
    )


def pack_threads(placed: WriterPlacement, options: Any) -> int:
    """Shards the pack job writes at once in the driver: as many as the local workers it stands in for
    (``driver_encodes``, or a small job), at most one a core; one with ``executor="inprocess"`` (the jobs run
    one task after another by request) or when workers pack. The pack of a shard spends most of its time
    reading spills, writing and hashing, which release the GIL: at 320 MB on 2 cores two threads took the pack
    job from 0.57-0.73 s to 0.41-0.52 s (3 interleaved runs), for one more batch of tokens in memory."""
    if not placed.in_driver or options.executor != "local":
        return 1
    return max(1, min(options.num_workers, os.cpu_count() or 1))


def reference_sort(refs: Dataset, num_shards: int) -> Dataset:
    """Job 2: the global document shuffle, the references sorted by their seeded key into one partition a
    shard. Shard ``i`` holds the keys whose ``key_hi`` is in ``[i * 2**64 / P, (i + 1) * 2**64 / P)``
    (``shard_cuts``): the keys are uniform hashes, so the shards are even in expectation, and a shard's
    documents depend only on the data, the seed and the shard count, never on how the input was split into
    tasks (a key sample's cuts did: each task sampled its own references)."""
    return refs.sort("key_hi", "key_lo", boundaries=shard_cuts(num_shards))


def shard_cuts(num_shards: int) -> list[int]:
    """``num_shards - 1`` even split points of the ``uint64`` key space (``ceil(i * 2**64 / P)``)."""
    return [-(-(i << 64) // num_shards) for i in range(1, num_shards)]


def pack_job(parts: list[str], packer: Any) -> Dataset:
    """Job 3: each sorted partition (``parts``, in order) packed into its shard by ``packer`` (a
    ``PackPartition``): one task a partition, or one task for all of them when the packer packs several at
    once on threads (``pack_threads``: in the driver, where tasks run one after another)."""
    import pyarrow as pa
    from zephyr.shuffle.writer import numpy_to_arrow

    import zephyr

    # built from buffers: ``from_items`` (``pa.Table.from_pylist``) would import pandas in the driver (~1 s)
    jobs = pa.Table.from_arrays(
        [
            numpy_to_arrow(np.arange(len(parts), dtype=np.int64)),
            string_array([f"shard-{i:05d}" for i in range(len(parts))]),
            string_array(parts),
        ],
        names=["index", "name", "path"],
    )
    tasks = 1 if packer.threads > 1 else max(1, len(parts))
    return zephyr.from_arrow(jobs, num_shards=tasks).map_batches(packer, name="pack")


def _input_names(data: Any) -> list[str]:
    return [os.fspath(p) for p in ([data] if isinstance(data, str | os.PathLike) else data)]


def _replace_set(output: str) -> None:
    """Invalidate a set being built at ``output`` (its manifest goes first) and create the directory."""
    import fsspec

    fs, root = fsspec.core.url_to_fs(output)
    manifest = f"{root}/manifest.json"
    if fs.exists(manifest):
        fs.rm(manifest)
    fs.makedirs(root, exist_ok=True)


def _scratch_dir(output: str, work_dir: str | None) -> str:
    """Spills, references and the sorted partitions: under the job's ``work_dir`` (any fsspec URL every worker
    sees, e.g. on object storage for a cluster of machines) when given, else ``<output>.zephyr/work``. A fixed name
    per output, so a rerun with the same ``work_dir`` finds its finished tasks (the engine fingerprints its
    outputs by path); removed once the set is complete."""
    import hashlib

    if work_dir is None:
        from zephyr.io.layout import side_path

        return side_path(output, "work")
    return f"{absolute(work_dir).rstrip('/')}/tokenize-{hashlib.sha256(output.encode()).hexdigest()[:12]}"


def _shuffle_and_pack(
    refs: Any, packer: PackPartition, shard_bytes: int, scratch: str, execution: dict[str, Any]
) -> tuple[list[Any], dict[str, dict[str, int]], dict[str, Any]]:
    """Jobs 2 and 3: the shard count from the token total, the reference sort, one pack task per shard.
    Returns (shard infos, per-source counts, the sort's stats)."""
    import zephyr
    from zephyr.job_stats import counter_totals

    dtype = np.dtype(packer.dtype)
    counters = counter_totals(refs.stats.get("stages", []))
    total_tokens, num_docs = counters.get("tokens", 0), counters.get("documents", 0)
    num_shards = max(1, math.ceil(total_tokens * dtype.itemsize / shard_bytes))  # at least one
    log.info(
        "tokenize: %d documents, %d tokens x %d bytes / shard_bytes %d -> %d shards",
        num_docs,
        total_tokens,
        dtype.itemsize,
        shard_bytes,
        num_shards,
    )
    if not refs.files:  # no document (empty inputs, or only null texts): a valid set of one empty shard
        info, per_source = write_shard(
            packer.output, "shard-00000", [], dtype=dtype, num_tokens=0, megatron=packer.megatron
        )
        return [info], per_source, dict(refs.stats)
    refs_read = zephyr.read_parquet(sorted(refs.files))
    written = reference_sort(refs_read, num_shards).write_parquet(f"{scratch}/sorted", **execution)
    parts = sorted(written.files)
    # a rerun skips a finished pack task only while its shards still have the size and sha256 it recorded
    # (``PackPartition.side_folder``): the manifest never vouches for bytes it did not see written
    shards, per_source = _collect(pack_job(parts, packer).to_arrow(**execution).to_pylist())
    return [s for s in shards if s.num_documents > 0] or shards[:1], per_source, dict(written.stats)


def _collect(rows: list[dict[str, Any]]) -> tuple[list[Any], dict[str, dict[str, int]]]:
    import json

    from zephyr.job_stats import add_counts

    shards, per_source = [], {}
    for row in sorted(rows, key=lambda r: r["index"]):
        shards.append(ShardInfo.from_json(json.loads(row["shard"])))
        for src, counts in json.loads(row["per_source"]).items():
            add_counts(per_source.setdefault(src, {"documents": 0, "tokens": 0}), counts)
    return shards, dict(sorted(per_source.items()))
