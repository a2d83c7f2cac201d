"""``zephyr dedup exact|fuzzy``: the dedup command line (registered by ``zephyr.cli``; ``paragraph``, ``url`` and
``substring`` are in ``zephyr.dedup.cli_text``).

::

    zephyr dedup exact INPUT... --output DIR [--level document|paragraph] [--normalize default|none|simplify]
                       [--mode annotate|remove] [--text-column text] [--id-column id] [--priority-column COL]
    zephyr dedup fuzzy INPUT... --output DIR [--threshold 0.8] [--preset datatrove|nemo|redpajama] [--ngram N]
                       [--shingle word|char] [--bands B --rows-per-band R] [--num-perm K] [--no-verify]
                       [--clusters anchored|components] [--bucket-links 8] [--signature-device auto|cpu|cuda|xpu]
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
import logging
import typing
import warnings
from typing import Any

from zephyr.dedup.cli_common import (
    DEFAULT_EXECUTOR,
    action_kwargs,
    add_common_io,
    check_dropped_output,
    exact_dedup_arguments,
    finish,
    internal_mode,
    output_of,
    paragraph_dedup_of_inputs,
    read_inputs,
    recorded,
    write_output,
)
from zephyr.dedup.config import (
    CLUSTER_RULES,
    NORMALIZATIONS,
    PRESETS,
    SIGNATURE_DEVICES,
    ExactDedupConfig,
    FuzzyDedupConfig,
)

from zephyr.config import ZephyrDeprecationWarning
from zephyr.errors import ConfigError

__all__ = ["register"]

logger = logging.getLogger(__name__)


@recorded
def _exact(args: argparse.Namespace) -> int:
    from zephyr.dedup import compiled

    from zephyr.cli import execution_options
    from zephyr.executors import reuse_workers

    opts = execution_options(args)
    check_dropped_output(args)
    if args.level == "document":
        # one pool for the hash pass and the final pass; workers load the normalization kernels at start
        preload = (
            ("zephyr.dedup.compiled:warm_up",) if compiled.available() and args.normalize != "none" else ()
        )
        with reuse_workers(action_kwargs(opts), preload=preload) as execution:
            return _run_exact_document(args, execution)
    if args.dropped_output:
        from zephyr.errors import ConfigError

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
    from zephyr.dedup.dataset_ops import exact_dedup_dataset

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
    if args.rows is not None:  # the old flag, read until the next release
        if args.rows_per_band is not None:
            raise ConfigError("--rows is the old name of --rows-per-band; give only --rows-per-band")
        warnings.warn(
            "--rows is renamed --rows-per-band (the old flag is read until the next release)",
            ZephyrDeprecationWarning,
            stacklevel=2,
        )
        given["rows_per_band"] = args.rows
    if args.no_verify:
        given["verify"] = False
    return FuzzyDedupConfig.from_dict(given)


@recorded
def _fuzzy(args: argparse.Namespace) -> int:
    from zephyr.dedup import compiled

    from zephyr.cli import execution_options
    from zephyr.executors import reuse_workers

    opts = execution_options(args)
    # one worker pool for the candidate/verify/components jobs, started before the driver's own imports
    # so the workers import (and load the MinHash kernels) meanwhile
    preload = ("zephyr.dedup.compiled:warm_up",) if compiled.available() else ()
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
    from zephyr.dedup.dataset_ops import StripRowNumbers, fuzzy_dedup_dataset

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
    from zephyr.cli import add_dropped_output

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

    from zephyr.dedup.cli_text import register_text_commands

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
    ``--output``; prints their engine jobs' plans and runs nothing (``zephyr.dedup.explain``)."""
    from zephyr.dedup.cli_text import register_text_explains

    from zephyr.cli import explain_commands

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
    from zephyr.dedup.explain import exact_plan_text

    from zephyr.cli import execution_options, explained

    return explained(exact_plan_text(args, action_kwargs(execution_options(args))), args)


def _explain_fuzzy(args: argparse.Namespace):
    from zephyr.dedup.explain import fuzzy_plan_text

    from zephyr.cli import execution_options, explained

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
    fuzzy.add_argument("--rows", type=int, default=None, help="deprecated: the old name of --rows-per-band")
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
        help="where MinHash signatures are computed (same integers everywhere); auto: a CUDA/XPU device when "
        "torch sees one, else the compiled CPU kernels",
    )
    fuzzy.add_argument(
        "--bucket-links",
        type=int,
        default=None,
        help="pair each LSH bucket member with at most this many earlier members "
        f"(default {_default('bucket_links')}): bounds giant buckets",
    )
