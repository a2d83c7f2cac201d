"""``zephyr dedup exact|fuzzy|paragraph|url|substring`` and their ``zephyr explain`` twins.

What the dedup commands share: reading the inputs, the dup columns, the stats file and the common flags
(``zephyr.dedup.cli`` registers ``exact`` and ``fuzzy``, ``zephyr.dedup.cli`` the text-level kinds).

What ``zephyr explain dedup exact|fuzzy|paragraph|url|substring`` prints: the engine jobs a dedup command runs, in order, each with
its physical plan (``Dataset.explain``: stages, shuffles, partition counts), and between them the budget
shares (``zephyr.budget``) that choose the path, against sizes known only once the job before has run.

Nothing runs and nothing is written: the inputs are listed and their Parquet footers read, as for any plan.
The plans are the ones the commands run, listed by each method next to the code that runs them
(``exact_plans``, ``url_plans``, ``fuzzy_plans``, ``substring_plans``; paragraph dedup is one job:
``paragraph_dedup_of_inputs``, ``paragraph_bloom_of_inputs``); a job that reads an earlier job's files is
planned over that job's lazy plan (the run reads the files instead); the budget's shares are printed once.

``zephyr dedup paragraph|url|substring``: the dedup commands of web text (registered by ``zephyr.dedup.cli``).

::

    zephyr dedup paragraph INPUT... --output DIR [--method exact|bloom] [--expected N] [--fp-rate 1e-4]
                           [--keep-first-in-doc] [--save-filter FILE] [--load-filter FILE]
    zephyr dedup url INPUT... --output DIR [--url-column url] [--mode annotate|remove]
    zephyr dedup substring INPUT... --output DIR [--min-bytes 100] [--min-doc-bytes 0] [--anchor-bytes N]

Each writes Parquet parts and ``DIR.zephyr/stats.json`` like ``zephyr dedup exact``.

``zephyr dedup exact|fuzzy``: the dedup command line (registered by ``zephyr.cli``; ``paragraph``, ``url`` and
``substring`` are in ``zephyr.dedup.cli``).

::

    zephyr dedup exact INPUT... --output DIR [--level document|paragraph] [--normalize default|none|simplify]
                       [--mode annotate|remove] [--text-column text] [--id-column id] [--priority-column COL]
    zephyr dedup fuzzy INPUT... --output DIR [--threshold 0.8] [--preset datatrove|nemo|redpajama] [--ngram N]
                       [--shingle word|char] [--bands B --rows-per-band R] [--num-perm K] [--no-verify]
                       [--clusters anchored|components] [--bucket-links 8] [--signature-device cpu|cuda|xpu|torch-cpu]
                       [--mode annotate|remove] [--text-column text] [--id-column id|none]
                       [--index DIR [--update-index]] [--write-index DIR]
    both:              [--replace-columns | --output-column NAME]   (annotate mode: the dup columns; see read_inputs)

Inputs are Parquet or JSON-lines files, directories or globs (``.jsonl``/``.json``/``.gz``/``.zst`` are read
as JSON lines). The output is Parquet with every input column, plus the dup columns in ``annotate`` mode;
``DIR.zephyr/stats.json`` (the sidecar, ``zephyr.io.layout``) holds the job statistics (per stage rows in/out/dropped/quarantined, counters with
the cluster-size histogram ``dedup/cluster_size=N``); its top-level ``tasks``, ``tasks_resumed``,
``task_retries`` and ``jobs`` cover every engine job of the run, its ``stages`` the final write. Rows with
null text pass through unchanged and are counted (``dedup/null_text``). Incremental dedup: ``--write-index
DIR`` keeps the signatures of this run's kept rows; a later run with ``--index DIR`` also removes rows near
them, and ``--update-index`` adds its own kept rows (``zephyr.dedup.index``). Imports of the engine happen
inside the handlers, so ``zephyr --help`` stays fast.
"""

from __future__ import annotations

import argparse
import functools
import json
import logging
import os
import typing
from typing import TYPE_CHECKING, Any

from zephyr.dedup.config import (
    CLUSTER_RULES,
    DEDUP_APPROX_SHARD_BYTES,
    NORMALIZATIONS,
    PRESETS,
    SIGNATURE_DEVICES,
    ExactDedupConfig,
    FuzzyDedupConfig,
    SubstringConfig,
)

import zephyr
from zephyr.cli import (
    PlanStep,
    add_dropped_output,
    add_on_error,
    add_output_dir,
    add_replace_columns,
    execution_options,
    explain_commands,
    explained,
    jobs_plan_text,
)
from zephyr.config import REMOVAL_MODES
from zephyr.errors import ConfigError

if TYPE_CHECKING:
    from zephyr.budget import Budget


logger = logging.getLogger("zephyr.dedup.cli")


DEFAULT_EXECUTOR = "threads"
"""Dedup's work is Arrow, Parquet and numba ``nogil`` kernels: threads of one process use the cores without
each worker process importing pyarrow, polars and numba first (``zephyr.executors.threads``). The output is
the same bytes on every executor; ``--executor local`` isolates tasks in processes."""


DUP_COLUMNS = {
    "document": ("dup_cluster", "dup_cluster_size", "dup_keep"),
    "paragraph": ("dup_paragraphs", "dup_paragraph_bytes"),
    "none": (),
}
"""The columns dedup computes, by level: written in ``annotate`` mode, removed in ``remove`` mode. A command
sets ``dup_level`` when its own ``--level`` does not say (``paragraph``, ``url``, ``substring``: none)."""


def read_inputs(args: argparse.Namespace):
    """The inputs, after the column check (``annotate`` mode: none of the columns it writes may exist unless
    ``--replace-columns``), with the input's own ``dup_*`` columns set aside where they must pass unchanged: in
    ``remove`` mode (dedup's columns of those names are removed with the duplicates) and with
    ``--output-column`` (dedup's are renamed at the end). ``output_of`` undoes it."""
    from zephyr.cli import schema_arguments
    from zephyr.removal import check_input_columns, set_aside

    internal, written = dup_columns(args)
    if args.mode == "annotate":
        check_input_columns(
            args.inputs, written, replace_columns=args.replace_columns, rename="--output-column NAME"
        )
    schema = schema_arguments(args)  # --unify-schemas / --schema FILE
    ds = zephyr.read(
        args.inputs, approx_shard_bytes=DEDUP_APPROX_SHARD_BYTES, on_error=args.on_error, **schema
    )
    return ds.map_batches(set_aside(internal), name="dedup.aside") if sets_aside(args) else ds


def dup_columns(args: argparse.Namespace) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(the columns dedup computes at this level, the names ``annotate`` writes them under)."""
    internal = DUP_COLUMNS[getattr(args, "dup_level", None) or getattr(args, "level", "document")]
    return internal, tuple(args.output_column + name[len("dup") :] for name in internal)


def sets_aside(args: argparse.Namespace) -> bool:
    return bool(dup_columns(args)[0]) and (args.mode == "remove" or args.output_column != "dup")


def output_of(args: argparse.Namespace, out: Any) -> Any:
    """The dedup result as written: its columns under ``--output-column`` names, the input's own restored."""
    from zephyr.removal import ASIDE_PREFIX, RenameColumns

    if not sets_aside(args):
        return out
    internal, written = dup_columns(args)
    names = tuple(zip(internal, written)) if args.mode == "annotate" else ()
    restore = tuple((ASIDE_PREFIX + name, name) for name in internal)
    return out.map_batches(RenameColumns(names + restore, replace=args.replace_columns), name="dedup.columns")


def finish(result: Any, output: str, extra: dict[str, Any], jobs: list[dict[str, Any]], routed: Any = None):
    """Write ``OUTPUT.zephyr/stats.json`` and return the command's ``Summary`` (``zephyr.summary``).

    ``routed`` (a ``zephyr.removal.Routed``, with ``--dropped-output``): the run wrote its kept and removed
    rows in separate jobs; ``result`` is the kept rows' write, and the accounting comes from all three."""
    from zephyr import job_stats
    from zephyr.summary import from_stages

    stats = dict(result.stats)
    stats.update(
        job_stats.summarize(jobs)
    )  # task totals of every engine job (``recorded``), not only this write
    stats["dedup"] = extra
    counters: dict[str, int] = {}
    for stage in stats.get("stages", []):
        for key, value in (stage.get("counters") or {}).items():
            if key.startswith("dedup/"):
                counters[key] = counters.get(key, 0) + value
    hist = {k.split("=", 1)[1]: v for k, v in counters.items() if k.startswith("dedup/cluster_size=")}
    stats["dedup"]["cluster_size_histogram"] = dict(sorted(hist.items(), key=lambda kv: int(kv[0])))
    stats["dedup"]["counters"] = counters
    stats["dedup"]["rows"] = row_balance(stats.get("stages", []))
    from zephyr.io.layout import stats_path as side_stats

    stats_path = side_stats(output)
    fields: dict[str, Any] = {
        "output": output,
        "stats": stats_path,
        "next": f"zephyr tokenize {output} --tokenizer tokenizer.json --output tokens/",
        "details": {"kind": extra.get("kind"), "files": len(result.files)},
    }
    if routed is not None:
        summary = routed.summary(dropped_output=extra["dropped_output"], **fields)
        stats["dedup"]["rows"] = {
            "in": summary.rows_in,
            "kept": summary.rows_kept,
            "dropped": summary.rows_dropped,
            "quarantined": summary.rows_quarantined,
        }
    else:
        summary = from_stages(stats.get("stages", []), **fields)
    from zephyr.io.paths import write_bytes_atomic

    write_bytes_atomic(stats_path, json.dumps(stats, indent=2, sort_keys=True, default=str).encode())
    logger.info("dedup: %d files written to %s; counters %s", len(result.files), output, counters)
    return summary


def write_output(args: argparse.Namespace, out: Any, execution: dict[str, Any], extra: dict[str, Any]):
    """Write a document-level dedup's ``out`` to ``--output``: as it is, or, with ``--dropped-output``
    (``out`` then made in ``annotate`` mode), split by ``dup_keep`` into the kept rows and the removed ones
    with ``drop_reason = duplicate`` (``zephyr.removal``). Returns (the kept rows' write, the routing)."""
    if not getattr(args, "dropped_output", None):
        return output_of(args, out).write_parquet(args.output, **execution), None
    from zephyr.removal import Unless, write_routed

    extra["dropped_output"] = args.dropped_output
    routed = write_routed(
        out,
        Unless("dup_keep", "duplicate"),
        args.output,
        args.dropped_output,
        execution,
        finish=lambda d: output_of(args, d),
        working=DUP_COLUMNS["document"],
    )
    return routed.kept or routed.verdict, routed


def internal_mode(args: argparse.Namespace) -> str:
    """The mode dedup runs in: ``annotate`` when ``--dropped-output`` needs the verdict of every row."""
    return "annotate" if getattr(args, "dropped_output", None) else args.mode


def exact_dedup_arguments(args: argparse.Namespace) -> dict[str, Any]:
    """The keyword arguments the flags give ``exact_dedup_dataset`` and ``exact_plans``, one list so that
    ``zephyr explain dedup exact`` shows the plans ``zephyr dedup exact`` runs."""
    return {
        "text_column": args.text_column,
        "id_column": args.id_column,
        "normalize": args.normalize,
        "mode": internal_mode(args),
        "priority_column": args.priority_column,
    }


def paragraph_dedup_of_inputs(args: argparse.Namespace) -> Any:
    """The exact paragraph dedup of the inputs as the flags ask (``paragraph_dedup_dataset``): the plan of
    ``dedup exact --level paragraph``, of ``dedup paragraph --method exact`` and of their ``explain``."""
    from zephyr.dedup.exact import paragraph_dedup_dataset

    return paragraph_dedup_dataset(
        read_inputs(args),
        text_column=args.text_column,
        id_column=args.id_column,
        normalize=args.normalize,
        mode=args.mode,
    )


def check_bloom_flags(args: argparse.Namespace) -> None:
    """Refuse, before any work, ``--method bloom`` flags that cannot size or load a filter."""
    from zephyr.dedup.bloom import BloomFilter

    if args.load_filter is None and args.expected is None:
        raise ConfigError(
            "--method bloom needs --expected N (paragraphs the filter must hold) or --load-filter FILE"
        )
    if args.load_filter is not None:
        BloomFilter.load(args.load_filter).check_compatible(
            args.normalize, "\n", args.load_filter
        )  # fail now
    else:
        BloomFilter.sizing(args.expected, args.fp_rate)


def paragraph_bloom_of_inputs(args: argparse.Namespace, partial: str | None) -> Any:
    """The Bloom paragraph dedup of the inputs as the flags ask (one task, input order; ``partial``: where
    the task saves its filter): the plan of ``dedup paragraph --method bloom`` and of its ``explain``."""
    from zephyr.dedup.bloom import BloomParagraphDedup

    stage = BloomParagraphDedup(
        args.expected or 1,
        args.fp_rate,
        args.text_column,
        args.normalize,
        "\n",
        args.mode,
        args.keep_first_in_doc,
        args.load_filter,
        partial,
    )
    return output_of(args, read_inputs(args).reshard(1).map_batches(stage, name="dedup.paragraph.bloom"))


def check_dropped_output(args: argparse.Namespace) -> None:
    """``--dropped-output`` needs ``--mode remove`` (annotate drops nothing) and a place of its own."""
    if not getattr(args, "dropped_output", None):
        return
    from zephyr import removal

    if args.mode != "remove":
        raise ConfigError("--dropped-output needs --mode remove: --mode annotate keeps every row")
    removal.check(args)


def row_balance(stages: list[dict]) -> dict[str, int]:
    """The input rows and where they went: ``in = kept + dropped + quarantined``. The first stage reads the
    input (a paragraph-level run reads it twice: counted once); kept rows are what the last stage wrote."""
    if not stages:
        return {"in": 0, "kept": 0, "dropped": 0, "quarantined": 0}
    return {
        "in": stages[0]["rows_in"],
        "kept": stages[-1]["rows_out"],
        "dropped": sum(s["rows_dropped"] for s in stages),
        "quarantined": stages[0]["rows_quarantined"],
    }


def recorded(handler):
    """Run a dedup handler with every engine job it starts recorded (hash or candidate jobs, then the final
    write) in ``args.engine_jobs``, so ``finish`` reports the retries and resumed tasks of all of them."""

    @functools.wraps(handler)
    def run(args: argparse.Namespace) -> int:
        from zephyr import job_stats

        with job_stats.recording() as jobs:
            args.engine_jobs = jobs
            return handler(args)

    return run


def action_kwargs(opts: Any) -> dict[str, Any]:
    return opts.as_kwargs()


def add_common_io(p: argparse.ArgumentParser, *, output: bool = True) -> None:
    """The flags every dedup command shares; ``output=False`` for ``zephyr explain dedup``, which writes nothing."""

    p.add_argument(
        "inputs", nargs="+", metavar="INPUT", help="Parquet/JSON-lines files, directories or globs"
    )
    add_on_error(p)
    if output:
        add_output_dir(p, "output directory (Parquet parts; stats in OUTPUT.zephyr/stats.json)")
    p.add_argument(
        "--mode",
        choices=REMOVAL_MODES,  # zephyr.config: standard library only, so --help stays fast
        default="remove",
        help="remove: drop duplicates (the default); annotate: add dup_cluster/dup_cluster_size/dup_keep",
    )
    p.add_argument("--text-column", default="text")
    p.add_argument(
        "--id-column",
        default="id",
        type=column_or_none,
        help="ids order rows: the smallest id of a cluster is kept (rows that share an id, or have none, are "
        "still separate rows); 'none': no id column, input order decides",
    )
    p.add_argument("--priority-column", default=None, help="keep the row with the largest value instead")
    from zephyr.cli import add_schema_arguments

    add_schema_arguments(p)
    add_replace_columns(
        p,
        "the dup columns (--mode annotate)",
        default="dup",
        output_help="--mode annotate: write NAME_cluster, NAME_cluster_size, NAME_keep (paragraphs: "
        "NAME_paragraphs, NAME_paragraph_bytes); an input's own dup_* columns then pass unchanged, as they "
        "always do in --mode remove",
    )


def column_or_none(value: str) -> str | None:
    return None if value.lower() == "none" else value


def _budget(execution: dict[str, Any]) -> Any:
    """The budget whose shares a plan prints (imported here, so ``zephyr --help`` loads no dedup kernels)."""
    from zephyr.dedup._rows import budget_of

    return budget_of(execution)


def exact_plan_text(args: argparse.Namespace, execution: dict[str, Any]) -> str:
    """The jobs of ``zephyr dedup exact`` with these arguments."""
    from zephyr.dedup.exact import exact_plans

    budget = _budget(execution)
    if args.level == "paragraph":
        out = paragraph_dedup_of_inputs(args)
        title = "job 1: the output (rows in one partition, paragraphs seen earlier removed)"
        return _text("exact --level paragraph", [(title, output_of(args, out))], budget, execution)
    finish = lambda out: output_of(args, out)  # noqa: E731
    steps = exact_plans(read_inputs(args), budget=budget, finish=finish, **exact_dedup_arguments(args))
    return _text("exact", steps, budget, execution)


def url_plan_text(args: argparse.Namespace, execution: dict[str, Any]) -> str:
    """The jobs of ``zephyr dedup url`` with these arguments: exact dedup's, on the normalized URL."""
    from zephyr.dedup.exact import url_plans

    budget = _budget(execution)
    steps = url_plans(
        read_inputs(args),
        budget=budget,
        url_column=args.url_column,
        finish=lambda out: output_of(args, out),
        id_column=args.id_column,
        mode=internal_mode(args),
        priority_column=args.priority_column,
    )
    return _text("url", steps, budget, execution)


def paragraph_plan_text(args: argparse.Namespace, execution: dict[str, Any]) -> str:
    """The job of ``zephyr dedup paragraph``: ``--method exact`` as ``dedup exact --level paragraph``, or
    ``--method bloom``'s one pass, its filter sized by ``--expected``/``--fp-rate`` (or ``--load-filter``)."""
    from zephyr.dedup.bloom import BloomFilter

    budget = _budget(execution)
    if args.method == "exact":
        title = "job 1: the output (rows in one partition, paragraphs seen earlier removed)"
        steps: list[PlanStep] = [(title, output_of(args, paragraph_dedup_of_inputs(args)))]
        return _text("paragraph --method exact", steps, budget, execution)
    check_bloom_flags(args)
    if args.load_filter is not None:
        bloom = BloomFilter.load(args.load_filter)
        bits, hashes, sized = bloom.num_bits, bloom.num_hashes, f"loaded from {args.load_filter}"
    else:
        bits, hashes = BloomFilter.sizing(args.expected, args.fp_rate)
        sized = f"sized for --expected {args.expected:,} at --fp-rate {args.fp_rate:g}"
    filter_line = (
        f"the filter ({(bits + 7) // 8:,} bytes, {hashes} probes a paragraph, {sized}) is held by the one "
        "task, outside the budget's shares"
        + (f"; saved to {args.save_filter} after the run" if args.save_filter else "")
    )
    steps = [
        (
            "job 1: the output, one task in input order (reshard(1)), paragraphs the filter has seen removed",
            paragraph_bloom_of_inputs(args, None),
        ),
        (filter_line, None),
    ]
    return _text("paragraph --method bloom", steps, budget, execution)


def substring_plan_text(args: argparse.Namespace, config: SubstringConfig, execution: dict[str, Any]) -> str:
    """The jobs of ``zephyr dedup substring`` (``substring_dedup_dataset``'s passes)."""
    from zephyr.dedup.substring import substring_plans

    budget = _budget(execution)
    return _text("substring", substring_plans(read_inputs(args), config, budget=budget), budget, execution)


def fuzzy_plan_text(args: argparse.Namespace, config: FuzzyDedupConfig, execution: dict[str, Any]) -> str:
    """The jobs of ``zephyr dedup fuzzy`` with these arguments (``config``: its ``FuzzyDedupConfig``)."""
    from zephyr.dedup.fuzzy import fuzzy_plans

    budget = _budget(execution)
    steps = fuzzy_plans(
        read_inputs(args),
        config,
        budget=budget,
        index=bool(args.index),
        finish=lambda out: output_of(args, out),
        text_column=args.text_column,
        id_column=args.id_column,
        mode=internal_mode(args),
        priority_column=args.priority_column,
    )
    return _text("fuzzy", steps, budget, execution)


def _text(kind: str, steps: list[PlanStep], budget: Budget, execution: dict[str, Any]) -> str:
    then = "the rules" if kind.startswith("paragraph") else "the budget shares"  # bloom's filter is no share
    return jobs_plan_text(f"zephyr dedup {kind}", steps, budget, execution, then=then)


@recorded
def _url(args: argparse.Namespace) -> int:
    from zephyr.dedup.exact import url_dedup_dataset

    from zephyr.executors import reuse_workers

    check_dropped_output(args)
    with reuse_workers(action_kwargs(execution_options(args))) as execution:
        path: dict[str, Any] = {}
        out = url_dedup_dataset(
            read_inputs(args),
            url_column=args.url_column,
            id_column=args.id_column,
            mode=internal_mode(args),
            priority_column=args.priority_column,
            execution=execution,
            stats=path,
        )
        extra = {"kind": "url", "url_column": args.url_column, "mode": args.mode, **path}
        result, routed = write_output(args, out, execution, extra)
        return finish(result, args.output, extra, args.engine_jobs, routed)


@recorded
def _paragraph(args: argparse.Namespace) -> int:
    """``zephyr dedup paragraph``: the exact paragraph dedup (``--method exact``, in id order) or the Bloom
    filter's single streaming pass in input order (``--method bloom``)."""

    opts = action_kwargs(execution_options(args))
    extra: dict[str, Any] = {
        "kind": "paragraph",
        "method": args.method,
        "normalize": args.normalize,
        "mode": args.mode,
    }
    if args.method == "exact":
        out = paragraph_dedup_of_inputs(args)
        return finish(
            output_of(args, out).write_parquet(args.output, **opts), args.output, extra, args.engine_jobs
        )
    return _paragraph_bloom(args, opts, extra)


def _paragraph_bloom(args: argparse.Namespace, opts: dict[str, Any], extra: dict[str, Any]) -> int:
    import uuid

    check_bloom_flags(args)
    partial = None
    if args.save_filter is not None:
        partial = f"{args.save_filter}.tmp-{uuid.uuid4().hex[:8]}"
    out = paragraph_bloom_of_inputs(args, partial)
    result = out.write_parquet(args.output, **opts)
    bloom = _final_filter(args, partial)
    if args.save_filter is not None:
        bloom.save(args.save_filter)
        if partial is not None and os.path.exists(partial):
            os.remove(partial)
    num_bits, num_hashes = bloom.num_bits, bloom.num_hashes
    extra.update(
        fp_rate=bloom.fp_rate,
        expected=bloom.expected,
        filter_bytes=(num_bits + 7) // 8,
        num_hashes=num_hashes,
        inserted=bloom.inserted,
        false_positive_rate_now=bloom.false_positive_rate(),
        keep_first_in_doc=args.keep_first_in_doc,
        filter_saved=args.save_filter,
    )
    if bloom.inserted > bloom.expected:
        logger.warning(
            "bloom dedup: %d paragraphs inserted into a filter sized for %d: its false-positive rate is now %.2g "
            "(asked %.2g); rerun with a larger --expected",
            bloom.inserted,
            bloom.expected,
            bloom.false_positive_rate(),
            bloom.fp_rate,
        )
    return finish(result, args.output, extra, args.engine_jobs)


def _final_filter(args: argparse.Namespace, partial: str | None):
    """The filter after the run: the task's saved copy, else (no batch ran, or not saved) its starting
    state with the inserts counted from the job's counters (bits not needed then)."""
    from zephyr.dedup.bloom import BloomFilter

    if partial is not None and os.path.exists(partial):
        return BloomFilter.load(partial)
    if args.load_filter is not None:
        return BloomFilter.load(args.load_filter)
    return BloomFilter.for_capacity(args.expected, args.fp_rate, normalize=args.normalize)


@recorded
def _substring(args: argparse.Namespace) -> int:
    """Exact substring dedup (``zephyr.dedup.substring``): removed bytes per source, top repeated spans."""
    import shutil
    import tempfile

    from zephyr.dedup.substring import SHORT_DOC, substring_dedup_dataset

    from zephyr.executors import reuse_workers

    config = substring_config(args)
    opts = action_kwargs(execution_options(args))
    scratch = tempfile.mkdtemp(prefix="zephyr-substring-", dir=opts.get("work_dir") if _local(opts) else None)
    try:
        with reuse_workers(opts) as execution:
            info: dict[str, Any] = {}
            out = substring_dedup_dataset(
                read_inputs(args), config, execution=execution, scratch=scratch, stats=info
            )
            result = out.write_parquet(args.output, **execution)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    counters = {k: v for st in result.stats.get("stages", []) for k, v in (st.get("counters") or {}).items()}
    per_source = {
        k.split("=", 1)[1]: v for k, v in counters.items() if k.startswith("substring/bytes_removed/source=")
    }
    dropped = sum(
        op.get("dropped_by_reason", {}).get(SHORT_DOC, 0) for st in result.stats["stages"] for op in st["ops"]
    )
    extra = {
        "kind": "substring",
        **info,
        "min_doc_bytes": config.min_doc_bytes,
        "bytes_removed": counters.get("substring/bytes_removed", 0),
        "bytes_removed_per_source": per_source,
        "docs_changed": counters.get("substring/docs_changed", 0),
        "docs_dropped_short": dropped,
    }
    logger.info(
        "substring dedup: %d bytes removed from %d documents", extra["bytes_removed"], extra["docs_changed"]
    )
    return finish(result, args.output, extra, args.engine_jobs)


def substring_config(args: argparse.Namespace):
    """The ``SubstringConfig`` of the flags (``--unit tokens`` needs an existing ``--tokenizer``): of the
    command and of ``zephyr explain dedup substring``."""
    from zephyr.dedup.substring import SubstringConfig

    _check_no_annotation(args)
    return SubstringConfig(
        min_bytes=args.min_bytes,
        anchor_bytes=args.anchor_bytes,
        min_doc_bytes=args.min_doc_bytes,
        text_column=args.text_column,
        source_column=args.source_column or None,
        top_spans=args.top_spans,
        tokenizer=_tokenizer(args),
    )


def _check_no_annotation(args: argparse.Namespace) -> None:
    """Substring dedup cuts the repeated spans out of the text and adds no column: the shared dedup flags that
    choose or name added columns would be ignored, so they are refused instead."""

    if args.mode != "remove":
        raise ConfigError(
            "zephyr dedup substring removes the repeated spans from the text; it has no --mode annotate "
            "(leave --mode out)"
        )
    if args.replace_columns or args.output_column != "dup":
        raise ConfigError(
            "zephyr dedup substring adds no column, so --replace-columns and --output-column do not apply (leave them out)"
        )


def _tokenizer(args: argparse.Namespace) -> str | None:

    if args.unit == "bytes":
        if args.tokenizer:
            raise ConfigError("--tokenizer is for --unit tokens")
        return None
    if not args.tokenizer:
        raise ConfigError("--unit tokens needs --tokenizer FILE (a tokenizer.json)")
    if not os.path.exists(args.tokenizer):
        raise ConfigError(f"--tokenizer {args.tokenizer}: no such file")
    return args.tokenizer


def _local(opts: dict[str, Any]) -> bool:
    work_dir = opts.get("work_dir")
    return bool(work_dir) and "://" not in str(work_dir)


def register_text_commands(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    """Add ``paragraph``, ``url`` and ``substring`` under ``zephyr dedup``."""

    para = sub.add_parser(
        "paragraph",
        parents=[common],
        help="remove paragraphs (lines) seen earlier: exact, or one Bloom-filter pass",
    )
    add_common_io(para)
    _add_paragraph_flags(para)
    para.set_defaults(func=_paragraph, default_executor=DEFAULT_EXECUTOR)

    url = sub.add_parser(
        "url",
        parents=[common],
        help="one row per normalized URL (lower-case host, no default port/fragment/utm_*)",
    )
    add_common_io(url)
    _add_url_flags(url)
    add_dropped_output(url, "rows --mode remove drops (a URL seen before)")
    url.set_defaults(func=_url, default_executor=DEFAULT_EXECUTOR)

    substring = sub.add_parser(
        "substring",
        parents=[common],
        help="remove repeats of byte spans of at least --min-bytes (exact substrings)",
    )
    add_common_io(substring)
    _add_substring_flags(substring)
    substring.set_defaults(func=_substring, default_executor=DEFAULT_EXECUTOR)


def register_text_explains(kinds: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    """``zephyr explain dedup paragraph|url|substring``: each command's own flags without ``--output``
    (and ``--dropped-output``); prints its engine jobs' plans and runs nothing (``zephyr.dedup.cli``)."""
    for name, add_flags in (
        ("paragraph", _add_paragraph_flags),
        ("url", _add_url_flags),
        ("substring", _add_substring_flags),
    ):
        parser = kinds.add_parser(name, parents=[common], help=f"the jobs of zephyr dedup {name}")
        add_common_io(parser, output=False)
        add_flags(parser)
        parser.set_defaults(func=_explain_text, default_executor=DEFAULT_EXECUTOR)


def _explain_text(args: argparse.Namespace):

    execution = action_kwargs(execution_options(args))
    if args.explain_dedup_command == "substring":
        return explained(substring_plan_text(args, substring_config(args), execution), args)
    plan_text = {"paragraph": paragraph_plan_text, "url": url_plan_text}
    return explained(plan_text[args.explain_dedup_command](args, execution), args)


def _add_paragraph_flags(para: argparse.ArgumentParser) -> None:
    para.set_defaults(mode="remove", dup_level="paragraph")
    para.add_argument(
        "--method",
        choices=("exact", "bloom"),
        default="exact",
        help="exact: every paragraph hash in memory, id order; bloom: fixed memory from --expected/--fp-rate, "
        "one pass in input order, false positives at most --fp-rate",
    )
    para.add_argument("--normalize", choices=NORMALIZATIONS, default="default")
    para.add_argument("--expected", type=int, default=None, help="bloom: paragraphs the filter is sized for")
    para.add_argument("--fp-rate", type=float, default=1e-4, help="bloom: false-positive rate at --expected")
    para.add_argument(
        "--keep-first-in-doc",
        action="store_true",
        help="bloom: a paragraph repeated inside the document where it first appears keeps every copy there",
    )
    para.add_argument(
        "--save-filter", default=None, metavar="FILE", help="bloom: write the filter here after the run"
    )
    para.add_argument("--load-filter", default=None, metavar="FILE", help="bloom: start from a saved filter")


def _add_url_flags(url: argparse.ArgumentParser) -> None:
    url.set_defaults(dup_level="document")
    url.add_argument("--url-column", default="url", help="the URL column (default url)")


def _add_substring_flags(substring: argparse.ArgumentParser) -> None:
    substring.set_defaults(
        mode="remove", dup_level="none"
    )  # adds no column: --replace-columns has nothing to do
    substring.add_argument(
        "--min-bytes", type=int, default=100, help="shortest repeated span removed (bytes)"
    )
    substring.add_argument(
        "--min-doc-bytes",
        type=int,
        default=0,
        help="drop documents left shorter than this (substring_short_doc)",
    )
    substring.add_argument(
        "--anchor-bytes", type=int, default=None, help="winnowing anchor length (default 32)"
    )
    substring.add_argument(
        "--source-column", default="source", help="report removed bytes per value ('' = none)"
    )
    substring.add_argument("--top-spans", type=int, default=20, help="most repeated spans in the stats")
    substring.add_argument(
        "--unit",
        choices=("bytes", "tokens"),
        default="bytes",
        help="what removed spans snap to: UTF-8 characters (bytes) or the token starts of --tokenizer",
    )
    substring.add_argument(
        "--tokenizer", default=None, metavar="FILE", help="tokenizer.json for --unit tokens"
    )


@recorded
def _exact(args: argparse.Namespace) -> int:
    import zephyr.dedup._compiled as compiled

    from zephyr.executors import reuse_workers

    opts = execution_options(args)
    check_dropped_output(args)
    if args.level == "document":
        # one pool for the hash pass and the final pass; workers load the normalization kernels at start
        preload = (
            ("zephyr.dedup._compiled:warm_up",) if compiled.NUMBA_ENABLED and args.normalize != "none" else ()
        )
        with reuse_workers(action_kwargs(opts), preload=preload) as execution:
            return _run_exact_document(args, execution)
    if args.dropped_output:
        raise ConfigError(
            "--dropped-output needs --level document: paragraph dedup rewrites rows, it drops none"
        )
    out = paragraph_dedup_of_inputs(args)
    result = output_of(args, out).write_parquet(args.output, **action_kwargs(opts))
    return finish(
        result,
        args.output,
        {"kind": "exact", "level": args.level, "normalize": args.normalize, "mode": args.mode},
        args.engine_jobs,
    )


def _run_exact_document(args: argparse.Namespace, execution: dict[str, Any]) -> int:
    from zephyr.dedup.exact import exact_dedup_dataset

    path: dict[str, Any] = {}
    out = exact_dedup_dataset(
        read_inputs(args),
        **exact_dedup_arguments(args),
        execution=execution,
        stats=path,
    )
    extra = {"kind": "exact", "level": args.level, "normalize": args.normalize, "mode": args.mode, **path}
    result, routed = write_output(args, out, execution, extra)
    return finish(result, args.output, extra, args.engine_jobs, routed)


_FUZZY_FLAGS = (  # FuzzyDedupConfig fields with a flag of their own; --no-verify sets ``verify``
    "threshold",
    "preset",
    "ngram",
    "shingle",
    "normalize",
    "bands",
    "rows_per_band",
    "num_perm",
    "seed",
    "clusters",
    "signature_device",
    "bucket_links",
)


def _fuzzy_config(args: argparse.Namespace) -> FuzzyDedupConfig:
    """The ``FuzzyDedupConfig`` of the flags given (the dataclass's defaults for the rest, a preset's when
    ``--preset`` is given), built as a pipeline step builds it (``FuzzyDedupConfig.from_dict``)."""
    given: dict[str, Any] = {k: getattr(args, k) for k in _FUZZY_FLAGS if getattr(args, k) is not None}
    if args.no_verify:
        given["verify"] = False
    return FuzzyDedupConfig.from_dict(given)


@recorded
def _fuzzy(args: argparse.Namespace) -> int:
    import zephyr.dedup._compiled as compiled

    from zephyr.executors import reuse_workers

    opts = execution_options(args)
    # one worker pool for the candidate/verify/components jobs, started before the driver's own imports
    # so the workers import (and load the MinHash kernels) meanwhile
    preload = ("zephyr.dedup._compiled:warm_up",) if compiled.NUMBA_ENABLED else ()
    with reuse_workers(action_kwargs(opts), preload=preload) as execution:
        return _run_fuzzy(args, execution)


def _index_args(args: argparse.Namespace, config: Any) -> Any:
    """The opened ``--index`` (checked against ``config`` before any work), after checking the flags agree."""
    from zephyr.dedup.index import open_index

    if args.update_index and args.index is None:
        raise ConfigError("--update-index needs --index DIR (the index to add to)")
    if args.index is not None and args.write_index is not None:
        raise ConfigError(
            "--write-index starts a new index; to add to --index DIR, pass --update-index instead"
        )
    if args.write_index is not None and open_index(args.write_index, config, missing_ok=True) is not None:
        raise ConfigError(
            f"a signature index already exists at {args.write_index}; "
            f"add to it with --index {args.write_index} --update-index"
        )
    return open_index(args.index, config) if args.index is not None else None


def _write_index(args: argparse.Namespace, config: Any, annotated: Any, execution: dict[str, Any]) -> dict:
    """Append this run's rows (kept, and removed ones tied to their kept row) to ``--index`` (with
    ``--update-index``) or ``--write-index``; called after the output is written."""
    from zephyr.dedup.index import write_generation

    target = args.write_index or args.index
    entry = write_generation(
        target,
        annotated,
        config,
        text_column=args.text_column,
        id_column=args.id_column,
        create=args.write_index is not None,
        execution=execution,
    )
    logger.info(
        "fuzzy dedup: %d documents (%d kept) added to the signature index %s",
        entry["docs"],
        entry["kept"],
        target,
    )
    return {"path": target, **entry}


def _run_fuzzy(args: argparse.Namespace, execution: dict[str, Any]) -> int:
    from zephyr.dedup.fuzzy import fuzzy_dedup_dataset

    config = _fuzzy_config(args)
    check_dropped_output(args)
    index = _index_args(args, config)
    bands, rows = config.bands_rows()
    logger.info(
        "fuzzy dedup: %s %d-grams, %d bands x %d rows = %d permutations, LSH threshold (1/b)^(1/r) = %.3f, "
        "Jaccard threshold %.2f, verification %s, %s clusters",
        config.shingle,
        config.ngram,
        bands,
        rows,
        config.num_perm_resolved,
        config.lsh_threshold,
        config.threshold,
        "on" if config.verify else "off",
        config.clusters,
    )
    graph: dict[str, Any] = {}
    indexing = args.write_index is not None or args.update_index
    out = fuzzy_dedup_dataset(
        read_inputs(args),
        config,
        text_column=args.text_column,
        id_column=args.id_column,
        mode="annotate" if indexing else internal_mode(args),
        priority_column=args.priority_column,
        execution=execution,
        stats=graph,
        index=index,
        row_numbers=indexing,
    )
    from zephyr.dedup._rows import StripRowNumbers

    strip = StripRowNumbers(internal_mode(args))
    written = out.map_batches(strip, name="dedup.fuzzy.output") if indexing else out
    extra = {
        "kind": "fuzzy",
        "config": config.to_dict(),
        "bands": bands,
        "rows": rows,
        "lsh_threshold": config.lsh_threshold,
        "mode": args.mode,
    }
    result, routed = write_output(args, written, execution, extra)
    if indexing:
        graph["index_written"] = _write_index(args, config, out, execution)
    return finish(result, args.output, {**extra, **graph}, args.engine_jobs, routed)


def register(subparsers: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    """Add ``dedup`` with ``exact`` and ``fuzzy`` to the ``zephyr`` command line."""

    dedup = subparsers.add_parser(
        "dedup",
        help="deduplication: exact (documents, paragraphs), url, paragraph, substring, fuzzy (MinHash-LSH)",
    )
    sub = dedup.add_subparsers(dest="dedup_command", metavar="KIND")
    sub.required = True

    exact = sub.add_parser("exact", parents=[common], help="exact dedup of documents or paragraphs")
    add_common_io(exact)
    _add_exact_flags(exact)
    add_dropped_output(exact, "duplicates --mode remove drops (--level document)")
    exact.set_defaults(func=_exact, default_executor=DEFAULT_EXECUTOR)

    register_text_commands(sub, common)

    fuzzy = sub.add_parser("fuzzy", parents=[common], help="MinHash-LSH near-duplicate dedup, verified")
    add_common_io(fuzzy)
    _add_fuzzy_flags(fuzzy)
    fuzzy.add_argument(
        "--index",
        metavar="DIR",
        default=None,
        help="signature index of earlier runs' kept rows: rows near an indexed document are duplicates too",
    )
    fuzzy.add_argument(
        "--update-index",
        action="store_true",
        help="with --index: append this run's kept rows to the index (after the output is written)",
    )
    fuzzy.add_argument(
        "--write-index",
        metavar="DIR",
        default=None,
        help="start a new signature index at DIR holding this run's kept rows",
    )
    add_dropped_output(fuzzy, "near-duplicates --mode remove drops")
    fuzzy.set_defaults(func=_fuzzy, default_executor=DEFAULT_EXECUTOR)
    _register_explain(subparsers, common)


def _add_exact_flags(exact: argparse.ArgumentParser) -> None:
    exact_fields = ExactDedupConfig.__dataclass_fields__
    exact.add_argument(
        "--level",
        choices=typing.get_args(_hint(ExactDedupConfig, "level")),
        default=exact_fields["level"].default,
    )
    exact.add_argument(
        "--normalize",
        choices=NORMALIZATIONS,
        default=exact_fields["normalize"].default,
        help="default: NFC + lower case + whitespace collapse; none: byte-exact",
    )


def _register_explain(subparsers: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    """``zephyr explain dedup exact|fuzzy|paragraph|url|substring``: the commands' own flags without
    ``--output``; prints their engine jobs' plans and runs nothing (``zephyr.dedup.cli``)."""

    group = explain_commands(subparsers).add_parser(
        "dedup", help="the plans of zephyr dedup exact|fuzzy|paragraph|url|substring"
    )
    kinds = group.add_subparsers(dest="explain_dedup_command", metavar="KIND", required=True)
    exact = kinds.add_parser("exact", parents=[common], help="the jobs of zephyr dedup exact")
    add_common_io(exact, output=False)
    _add_exact_flags(exact)
    exact.set_defaults(func=_explain_exact, default_executor=DEFAULT_EXECUTOR)
    fuzzy = kinds.add_parser("fuzzy", parents=[common], help="the jobs of zephyr dedup fuzzy")
    add_common_io(fuzzy, output=False)
    _add_fuzzy_flags(fuzzy)
    fuzzy.add_argument("--index", metavar="DIR", default=None, help="as for zephyr dedup fuzzy")
    fuzzy.set_defaults(func=_explain_fuzzy, default_executor=DEFAULT_EXECUTOR)
    register_text_explains(kinds, common)


def _explain_exact(args: argparse.Namespace):

    return explained(exact_plan_text(args, action_kwargs(execution_options(args))), args)


def _explain_fuzzy(args: argparse.Namespace):

    text = fuzzy_plan_text(args, _fuzzy_config(args), action_kwargs(execution_options(args)))
    return explained(text, args)


def _hint(cls: type, name: str) -> Any:
    return typing.get_type_hints(cls)[name]


def _default(name: str) -> Any:
    return FuzzyDedupConfig.__dataclass_fields__[name].default


def _add_fuzzy_flags(fuzzy: argparse.ArgumentParser) -> None:
    """The MinHash flags: choices and defaults come from ``FuzzyDedupConfig`` (a flag left out keeps the
    dataclass's default, or the preset's), so the CLI and pipeline steps cannot drift apart."""
    fuzzy.add_argument(
        "--threshold", type=float, default=None, help=f"Jaccard threshold (default {_default('threshold')})"
    )
    fuzzy.add_argument("--preset", choices=PRESETS, default=None)
    fuzzy.add_argument(
        "--ngram", type=int, default=None, help=f"shingle length (default {_default('ngram')})"
    )
    fuzzy.add_argument(
        "--shingle",
        choices=typing.get_args(_hint(FuzzyDedupConfig, "shingle")),
        default=None,
        help=f"default {_default('shingle')}",
    )
    fuzzy.add_argument(
        "--normalize", choices=NORMALIZATIONS, default=None, help=f"default {_default('normalize')}"
    )
    fuzzy.add_argument("--bands", type=int, default=None, help="LSH bands (with --rows-per-band)")
    fuzzy.add_argument(
        "--rows-per-band", type=int, default=None, help="signature values per LSH band (with --bands)"
    )
    fuzzy.add_argument("--num-perm", type=int, default=None)
    fuzzy.add_argument(
        "--seed", type=int, default=None, help=f"permutation seed (default {_default('seed')})"
    )
    fuzzy.add_argument("--no-verify", action="store_true", help="skip the exact Jaccard check of candidates")
    fuzzy.add_argument(
        "--clusters",
        choices=CLUSTER_RULES,
        default=None,
        help=f"{_default('clusters')} (default): a row is removed only if it is similar to its cluster's kept "
        "row; components: transitive clusters (a chain A~B~C joins A and C however different they are)",
    )
    fuzzy.add_argument(
        "--signature-device",
        choices=SIGNATURE_DEVICES,
        default=None,
        help="where MinHash signatures are computed (same integers everywhere): cpu (default), or torch on "
        "cuda, xpu or torch-cpu",
    )
    fuzzy.add_argument(
        "--bucket-links",
        type=int,
        default=None,
        help="pair each LSH bucket member with at most this many earlier members "
        f"(default {_default('bucket_links')}): bounds giant buckets",
    )
