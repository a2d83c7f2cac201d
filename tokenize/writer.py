"""Corpus → globally shuffled token shards, through the zephyr engine.

Plan (each step is an engine stage, so it runs on any executor and resumes with ``work_dir``):

1. ``read_parquet``/``read_jsonl`` the inputs (only the text, id and source columns), after checking each
   input file's text column (``zephyr.io.text_column``: strings, never numbers turned into text).
2. ``map_batches(tokenize)`` (``zephyr.tokenize.encode_step``): ``batch_rows`` documents at a time (this
   bounds peak memory), encoded in one call on the tokenizer's threads (every core of the machine, also when
   tasks run side by side: see ``TokenizeBatch``). The encoder's flat ids go, as little-endian bytes in the shard
   dtype and without EOS/BOS (step 5 adds them), into one spill file (``zephyr.tokenize.spill``); the
   stage's output is one small *reference* row per
   document: the shuffle key (``key_hi``, ``key_lo``: a seeded 128-bit xxh3 of the document, of its id when
   ``id_column`` is given so duplicate texts do not land side by side, the text hash breaking ties),
   ``num_tokens``, ``spill_file``, ``spill_offset`` and ``source``. Null texts are quarantined
   (``reject_reason = "null_text"``), never silently lost. The job's ``tokens`` counter gives the total.
3. The total token count decides the number of shards: ``ceil(total_tokens * itemsize / shard_bytes)``.
   Without any document (empty inputs, or only null texts) steps 4 and 5 are skipped and the set is one
   empty shard, still a valid set for the loader.
4. ``sort(key_hi, key_lo, boundaries=shard_cuts(P))`` of the references: the global document shuffle, over
   ~50 bytes a document instead of its tokens, cut into P even ranges of the ``key_hi`` hash space
   (``writer_plan.reference_sort``). Output shard i is the sort's partition i, so shard contents depend only
   on the data, the seed and the shard size — never on the worker count, the executor or how the inputs were
   split into tasks (cuts from a key sample did: each task samples its own references). Equal keys mean equal
   text (and id), hence equal tokens: ties cannot change bytes.
5. ``map(pack)`` over the partitions (``zephyr.tokenize.pack_step``): read each partition's references
   ``batch_rows`` at a time, gather their ids from the spill files with a gap for EOS (and BOS) around each
   document, store the special tokens, and append them to ``shard-<i>.tokens.npy`` + ``.offsets.npy``
   (+ Megatron ``.bin``/``.idx``), hashing as they are written; the driver writes ``manifest.json`` last.

Token bytes are thus written once (spill) and read once (pack); peak memory per worker is one batch of
documents (texts, ids, references) whatever the input size, plus what the input format itself needs to
decode (one Parquet row group's text column).

Arguments of ``write_token_shards``::

    data: a ``zephyr.Dataset``, or Parquet/JSONL paths (files, directories, globs, fsspec URLs).
    tokenizer: path of a ``tokenizer.json`` (or a ``TextTokenizer``).
    output: directory (any fsspec URL: local, ``s3://``, ``gs://``...) for the shards and ``manifest.json``.
    text_column: the column with the document text.
    id_column: a column of document ids for the shuffle key; ``"auto"`` uses ``id`` when the inputs have
        one, ``None`` keys on the text alone (then exact duplicate texts end up next to each other).
    source_column: a column whose per-value document/token counts go into the manifest's source mix;
        ``"auto"`` uses ``source`` when present.
    shard_size: target bytes of tokens per shard (e.g. ``"512MB"``); the shard count is
        ``ceil(total token bytes / shard_size)``.
    seed: shuffle seed; the same seed and inputs give byte-identical shards.
    bos: ``"never"`` or ``"always"``. EOS is always appended.
    engine: ``"auto"`` (the fastest engine proven identical to HF: fastokens, then tiktoken, then HF itself),
        or one of ``"fastokens"``, ``"tiktoken"``, ``"hf"`` (an engine that cannot be proven is an error).
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

The set is built in the output's sidecar (``OUTPUT.zephyr/staging/shards``, ``zephyr.io.layout``) and swapped
in whole when complete (``zephyr.io.publish.publish_folder``): a set a finished run wrote stays readable until
the new one is complete.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
from zephyr.tokenize.encode_step import TokenizeBatch
from zephyr.tokenize.format import join_path, token_dtype
from zephyr.tokenize.inputs import (
    detect_column,
    input_columns,
    input_dataset,
    input_paths,
    plan_tasks,  # noqa: F401  (tests read it here)
)
from zephyr.tokenize.pack_step import PackPartition, shard_directory
from zephyr.tokenize.shards import write_manifest, write_shard
from zephyr.tokenize.tokenizer import BosPolicy, EngineChoice, TextTokenizer
from zephyr.tokenize.writer_plan import (  # DRIVER_MAX_WORKERS, _worker_pool: read here before they moved
    DRIVER_MAX_WORKERS,  # noqa: F401
    WriterPlacement,
    pack_job,
    pack_threads,
    place_writer,
    reference_sort,
    shard_count,
    tokenize_job,
)
from zephyr.tokenize.writer_plan import driver_encodes as _driver_encodes
from zephyr.tokenize.writer_plan import worker_pool as _worker_pool  # noqa: F401

from zephyr.errors import ConfigError
from zephyr.io.paths import absolute
from zephyr.sizes import parse_bytes

if TYPE_CHECKING:
    from zephyr.dataset import Dataset

__all__ = [
    "write_token_shards",
    "TokenizeResult",
    "TokenizeBatch",
    "check_text_paths",
    "checked_shard_bytes",
    "read_columns",
    "text_tokenizer",
    "writer_input",
]

log = logging.getLogger(__name__)

_MIN_SHARD_BYTES = 1 << 10


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
    data: Dataset | str | Sequence[str],
    *,
    tokenizer: str | TextTokenizer,
    output: str,
    text_column: str = "text",
    id_column: str | None = "auto",
    source_column: str | None = "auto",
    shard_size: int | str = "512MB",
    seed: int = 0,
    bos: BosPolicy = "never",
    engine: EngineChoice = "auto",
    eos_token: str | None = None,
    bos_token: str | None = None,
    batch_rows: int = 1024,
    megatron: bool = False,
    unify_schemas: bool = False,
    schema: Any = None,
    on_error: str = "raise",
    overwrite: bool = False,
    **execution: Any,
) -> TokenizeResult:
    """Tokenize ``data`` into a globally shuffled token-shard set at ``output`` (format: ``zephyr.tokenize.format``)
    and return what was written. ``data`` is a ``zephyr.Dataset`` or Parquet/JSONL paths; the same seed and
    inputs give byte-identical shards. Every argument is described in this module's docstring ("Arguments").
    """
    import zephyr

    shard_bytes = checked_shard_bytes(shard_size, batch_rows)
    output = absolute(output)  # pack tasks write it, maybe on workers in another working directory
    options = zephyr.ExecutionOptions.from_kwargs(**execution)
    from zephyr.io import claim

    if isinstance(data, zephyr.Dataset):
        inputs = []
    else:
        inputs = [str(data)] if isinstance(data, str | os.PathLike) else [str(p) for p in data]
    tokenizer_path = [str(tokenizer)] if isinstance(tokenizer, str | os.PathLike) else []
    with claim.claimed(
        output, inputs=[*inputs, *tokenizer_path], overwrite=overwrite, work_dir=options.work_dir
    ):
        return _write_token_shards(
            data,
            tokenizer,
            output,
            options,
            execution,
            text_column=text_column,
            id_column=id_column,
            source_column=source_column,
            shard_bytes=shard_bytes,
            seed=seed,
            bos=bos,
            engine=engine,
            eos_token=eos_token,
            bos_token=bos_token,
            batch_rows=batch_rows,
            megatron=megatron,
            unify_schemas=unify_schemas,
            schema=schema,
            on_error=on_error,
        )


def _write_token_shards(
    data: Any,
    tokenizer: Any,
    output: str,
    options: Any,
    execution: dict[str, Any],
    *,
    text_column: str,
    id_column: str | None,
    source_column: str | None,
    shard_bytes: int,
    seed: int,
    bos: BosPolicy,
    engine: EngineChoice,
    eos_token: str | None,
    bos_token: str | None,
    batch_rows: int,
    megatron: bool,
    unify_schemas: bool,
    schema: Any,
    on_error: str,
) -> TokenizeResult:
    """``write_token_shards`` on its claimed output."""
    import zephyr
    from zephyr.io import layout
    from zephyr.io.publish import publish_folder

    building = layout.side_path(output, "staging", "shards")
    tokenizer_args = (tokenizer, bos, engine, eos_token, bos_token)
    # jobs that run in this process: the tokenizer loads and proves itself on a thread from here on
    encodes_here = options.executor == "inprocess" or _driver_encodes(options)
    tok = text_tokenizer(*tokenizer_args, warm=True) if encodes_here else None
    if not isinstance(data, zephyr.Dataset):  # a Dataset's batches are checked by the tokenize step itself
        check_text_paths(data, text_column)
    placed = place_writer(data, options, execution)
    pool, in_driver, concurrency = placed.pool, placed.in_driver, placed.concurrency
    from zephyr import job_stats
    from zephyr.executors import reuse_workers

    # One worker pool for the writer's engine jobs. It starts here, so the workers import while the driver
    # parses and proves the tokenizer. The stats' task totals cover all of those jobs (``jobs``: one each).
    with reuse_workers(pool) as execution, job_stats.recording() as engine_jobs:
        tok = tok or text_tokenizer(
            *tokenizer_args, warm=in_driver
        )  # in_driver: a small job (ReadPlan.small)
        id_column, source_column = read_columns(data, id_column, source_column)
        dataset = writer_input(
            data,
            [text_column, id_column, source_column],
            placed,
            on_error,
            unify_schemas=unify_schemas,
            schema=schema,
        )
        _replace_set(building)
        scratch = _scratch_dir(output, execution.get("work_dir"))
        if engine != "auto":
            _ = tok.engine  # a forced engine that cannot be proven fails here, before any task
        try:
            columns = {"text_column": text_column, "id_column": id_column, "source_column": source_column}
            spill_dir = f"{scratch}/spill"
            batch_fn = TokenizeBatch(tok, **columns, seed=seed, spill_dir=spill_dir)
            dtype, threads = token_dtype(tok.vocab_size), pack_threads(placed, options)
            pack = _PackPlan(building, scratch, dtype, shard_bytes, megatron, batch_rows, threads)
            refs = tokenize_job(dataset, batch_fn, batch_rows).write_parquet(f"{scratch}/refs", **execution)
            shards, per_source, stats = _shuffle_and_pack(refs, pack, tok, execution)
            inputs = [] if isinstance(data, zephyr.Dataset) else _input_names(data)
            sources = {"inputs": inputs, "text_column": text_column, "id_column": id_column}
            sources.update(source_column=source_column, per_source=per_source)
            manifest = write_manifest(building, shards, meta=_manifest_meta(tok, pack, seed, refs, sources))
            stats["rows"] = _row_accounts(refs.stats)
            stats.update(job_stats.summarize(engine_jobs))  # tokenize, sort and pack jobs, not only the sort
            stats["tokenize_plan"] = _tokenize_plan(refs, pool, options, concurrency)
        except BaseException:
            if execution.get("work_dir") is None:
                _remove_tree(scratch)  # nothing could resume from it
            raise
        _remove_tree(scratch)
        _keep_only_the_set(building, manifest)
        publish_folder(building, output)
        return TokenizeResult(output, manifest, stats)


def _keep_only_the_set(directory: str, manifest: dict[str, Any]) -> None:
    """Remove what the set's manifest does not name from the folder about to be published (shards an aborted
    run of another shard count left in the staging folder)."""
    import fsspec
    from zephyr.tokenize.format import MANIFEST_NAME

    named = {MANIFEST_NAME} | {
        f["path"] for shard in manifest["shards"] for f in shard["files"].values() if isinstance(f, dict)
    }
    fs, root = fsspec.core.url_to_fs(directory)
    for entry in fs.find(root):
        if entry[len(root.rstrip("/")) + 1 :] not in named:
            fs.rm(entry)


def read_columns(
    data: Any, id_column: str | None, source_column: str | None
) -> tuple[str | None, str | None]:
    """The id and source columns the writer reads (``"auto"``: ``id``/``source`` when the inputs have one)."""
    names = input_columns(data) if "auto" in (id_column, source_column) else None
    return detect_column(names, id_column, "id"), detect_column(names, source_column, "source")


def writer_input(
    data: Any, columns: list[str | None], placed: WriterPlacement, on_error: str, **schema: Any
) -> Dataset:
    """``data`` as the tokenize job reads it: a ``Dataset`` as it is, paths as only ``columns``, split by the
    placement's read plan (of the writer and of ``zephyr explain tokenize``)."""
    import zephyr

    if isinstance(data, zephyr.Dataset):
        return data
    wanted = [c for c in columns if c]
    return input_dataset(data, wanted, placed.approx_shard_bytes, on_error, **schema)


def check_text_paths(paths: str | Sequence[str], text_column: str) -> None:
    """Refuse, before any task, an input file whose text column is not strings (``zephyr.io.text_column``)."""
    from zephyr.io.text_column import check_text_inputs

    files, fmt = input_paths(paths)
    check_text_inputs(files, text_column, format=fmt)


def checked_shard_bytes(shard_size: int | str, batch_rows: int) -> int:
    """``shard_size`` in bytes, after refusing a shard under ``_MIN_SHARD_BYTES`` or ``batch_rows`` < 1."""
    shard_bytes = parse_bytes(shard_size)
    if shard_bytes < _MIN_SHARD_BYTES:
        raise ConfigError(
            f"shard_size must be at least {_MIN_SHARD_BYTES} bytes, got {shard_size!r} ({shard_bytes} bytes); "
            "give a larger size, e.g. 64MiB (--shard-bytes / shard_size=)"
        )
    if batch_rows < 1:
        raise ConfigError(f"batch_rows must be >= 1, got {batch_rows}")
    return shard_bytes


def text_tokenizer(
    tokenizer: str | TextTokenizer,
    bos: BosPolicy,
    engine: EngineChoice,
    eos_token: str | None,
    bos_token: str | None,
    *,
    warm: bool = False,
) -> TextTokenizer:
    """The given ``TextTokenizer``, or one loaded from a ``tokenizer.json`` path (its encoder threads are set per
    batch by ``TokenizeBatch``: every core); ``warm``: it loads and proves itself on a thread from now on, for
    jobs that run in this process (``TextTokenizer.warm_in_background``), where fastokens encodes on all cores
    but one: the Python thread that feeds it keeps that one (``tokenizer.fastokens_pool_threads``)."""
    if not isinstance(tokenizer, TextTokenizer):
        tokenizer = TextTokenizer(tokenizer, bos=bos, engine=engine, eos_token=eos_token, bos_token=bos_token)
    if warm:
        tokenizer.warm_in_background(fastokens_threads=(os.cpu_count() or 1) - 1)
    return tokenizer


@dataclass(frozen=True)
class _PackPlan:
    """Where and how steps 3-5 write the shards (the arguments every pack task shares)."""

    output: str
    scratch: str
    dtype: np.dtype
    shard_bytes: int
    megatron: bool
    batch_rows: int
    threads: int
    """Shards packed at once by one pack task (``writer_plan.pack_threads``)."""


def _input_names(data: Any) -> list[str]:
    return [os.fspath(p) for p in ([data] if isinstance(data, str | os.PathLike) else data)]


def _manifest_meta(
    tok: TextTokenizer, pack: _PackPlan, seed: int, refs: Any, sources: dict[str, Any]
) -> dict[str, Any]:
    """The manifest's fields besides the shard list (``zephyr.tokenize.format``)."""
    return {
        "dtype": pack.dtype.name,
        "vocab_size": tok.vocab_size,
        "eos_id": tok.eos_id,
        "bos_id": tok.bos_id,
        "bos_policy": tok.bos_policy,
        "tokenizer": {"path": tok.path, "sha256": tok.sha256, "engine": _engine_used(refs.stats, tok)},
        "seed": seed,
        "shard_size_bytes": pack.shard_bytes,
        "sources": sources,
    }


def _tokenize_plan(refs: Any, pool: dict[str, Any], options: Any, concurrency: int) -> dict[str, Any]:
    """How the tokenize step ran (see ``zephyr.tokenize.inputs.plan_tasks``), for the result's stats."""
    executor = pool.get("executor", "local")
    return {
        "tasks": sum(st.get("tasks", 0) for st in refs.stats.get("stages", [])),
        "concurrent_tasks": concurrency,
        "executor": executor if isinstance(executor, str) else "custom",
        "workers": 0 if executor == "inprocess" else (pool.get("workers") or options.num_workers),
    }


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


def _remove_tree(url: str) -> None:
    import fsspec

    fs, root = fsspec.core.url_to_fs(url)
    with contextlib.suppress(FileNotFoundError):
        fs.rm(root, recursive=True)


def _shuffle_and_pack(
    refs: Any, pack: _PackPlan, tok: TextTokenizer, execution: dict[str, Any]
) -> tuple[list[Any], dict[str, dict[str, int]], dict[str, Any]]:
    """Steps 3-5: the shard count from the token total, the reference sort, one pack task per shard.
    Returns (shard infos, per-source counts, the sort's stats)."""
    import zephyr

    dtype = pack.dtype
    total_tokens, num_docs = _counter(refs.stats, "tokens"), _counter(refs.stats, "documents")
    num_shards = shard_count(total_tokens, dtype.itemsize, pack.shard_bytes)
    log.info(
        "tokenize: %d documents, %d tokens x %d bytes / shard_size %d bytes -> %d shards",
        num_docs,
        total_tokens,
        dtype.itemsize,
        pack.shard_bytes,
        num_shards,
    )
    if not refs.files:  # no document (empty inputs, or only null texts): a valid set of one empty shard
        with shard_directory(pack.output) as directory:
            info, per_source = write_shard(
                directory, "shard-00000", [], dtype=dtype, num_tokens=0, megatron=pack.megatron
            )
        return [info], per_source, dict(refs.stats)
    refs_read = zephyr.read_parquet(sorted(refs.files))
    written = reference_sort(refs_read, num_shards).write_parquet(f"{pack.scratch}/sorted", **execution)
    parts = sorted(written.files)
    packer = PackPartition(
        pack.output,
        dtype.name,
        pack.megatron,
        f"{pack.scratch}/spill",
        pack.batch_rows,
        eos_id=tok.eos_id,
        bos_id=tok.bos_id,
        threads=pack.threads,
    )
    shards, per_source = _pack(parts, packer, execution)
    return [s for s in shards if s.num_documents > 0] or shards[:1], per_source, dict(written.stats)


def _pack(parts: list[str], packer: PackPartition, execution: dict[str, Any]) -> tuple[list[Any], dict]:
    """Step 5. When a rerun skipped finished pack tasks, their shards are in ``output`` since the interrupted
    run: each file must still have the size and sha256 that run recorded (``zephyr.resume.check_files``), or
    every shard is packed again, so the manifest never vouches for bytes it did not see written."""
    from zephyr import job_stats, resume

    with job_stats.recording() as jobs:
        packed = pack_job(parts, packer).to_arrow(**execution)
    shards, per_source = _collect(packed.to_pylist())
    if not any(stage.get("tasks_resumed") for job in jobs for stage in job.get("stages", [])):
        return shards, per_source
    records = {
        join_path(packer.output, f.path): {"bytes": f.bytes, "sha256": f.sha256}
        for shard in shards
        for f in shard.files.values()
    }
    problem = resume.check_files(records)
    if problem is None:
        return shards, per_source
    log.warning("tokenize: %s; packing the shards again", problem)
    packer.attempt += 1
    return _collect(pack_job(parts, packer).to_arrow(**execution).to_pylist())


def _row_accounts(stats: dict[str, Any]) -> dict[str, int]:
    """Where every input row went (the tokenize stage's counts): in = kept + dropped + quarantined."""
    read = stats["stages"][0] if stats.get("stages") else {}
    return {
        "in": read.get("rows_in", 0),
        "kept": read.get("rows_out", 0),
        "dropped": read.get("rows_dropped", 0),
        "quarantined": read.get("rows_quarantined", 0),
    }


def _engine_used(stats: dict[str, Any], tok: TextTokenizer) -> str:
    """The engine(s) the tokenize tasks used (each decided and proved it in its own process), e.g.
    ``"fastokens"``; several, when processes differed (e.g. one lacked fastokens), joined by ``+``."""
    names = set()
    for stage in stats.get("stages", []):
        names |= {
            k.removeprefix("engine_")
            for k, v in stage.get("counters", {}).items()
            if k.startswith("engine_") and v
        }
    return "+".join(sorted(names)) if names else tok.engine


def _counter(stats: dict[str, Any], name: str) -> int:
    """A counter summed over a job's stages (the tokenize stage's ``tokens``/``documents``)."""
    return int(sum(stage.get("counters", {}).get(name, 0) for stage in stats.get("stages", [])))


def _collect(rows: list[dict[str, Any]]) -> tuple[list[Any], dict[str, dict[str, int]]]:
    import json

    from zephyr.tokenize.format import ShardInfo

    shards, per_source = [], {}
    for row in sorted(rows, key=lambda r: r["index"]):
        shards.append(ShardInfo.from_json(json.loads(row["shard"])))
        for src, counts in json.loads(row["per_source"]).items():
            entry = per_source.setdefault(src, {"documents": 0, "tokens": 0})
            entry["documents"] += counts["documents"]
            entry["tokens"] += counts["tokens"]
    return shards, dict(sorted(per_source.items()))
