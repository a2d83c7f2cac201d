"""``zephyr`` subcommands of the quality package: normalize, langid, filter, quality train|score, pii, decontaminate.

Every command reads Parquet or JSONL inputs (files, directories, globs), runs on the engine with the global
execution options, and writes Parquet ``part-00000.parquet``, ``part-00001.parquet``, ... into ``--output``,
and nothing else, so reading the output directory gives exactly the kept rows; the rest is in its sidecar
``OUTPUT.zephyr/`` (``zephyr.io.layout``): ``stats.json`` (format version 1). ``zephyr filter`` also writes
``dropped/`` there (rows with ``drop_reason``; ``--dropped-output DIR`` puts them elsewhere), ``quarantine/``
(null texts, ``reject_reason``), counts that balance (``rows_in = rows_kept + rows_dropped +
rows_quarantined``) and the retention report ``report.json`` / ``report.md``. Commands that run several
engine jobs (``filter``, ``quality score``) put ``tasks``, ``tasks_resumed`` and ``task_retries`` summed over
all of them, and one entry per job (``jobs``), at the top of their ``stats.json`` (``zephyr.job_stats``).
"""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

from zephyr.pipelines.quality._text import require_extra
from zephyr.pipelines.quality.cli_common import (
    engine_options,
    one_job_summary,
    read_text_inputs,
    side,
    stats_path,
    write_json,
)
from zephyr.pipelines.quality.cli_filter import add_filter_arguments, explain_filter_command, filter_command

log = logging.getLogger(__name__)


def _cmd_normalize(args: argparse.Namespace) -> int:
    from zephyr.pipelines.quality.normalize import Normalize, NormalizeConfig

    cfg = NormalizeConfig(fix_mojibake=args.fix_mojibake, collapse_whitespace=not args.keep_whitespace)
    if cfg.fix_mojibake:
        require_extra("ftfy", "quality", "zephyr normalize --fix-mojibake")
    result = (
        read_text_inputs(args)
        .map_batches(Normalize(cfg, args.text_column), name="normalize")
        .write_parquet(args.output, **engine_options(args))
    )
    write_json(stats_path(args), {"version": 1, "job": result.stats})
    return one_job_summary(result, args, next=f"zephyr langid {args.output} --output OUT")


def _cmd_langid(args: argparse.Namespace) -> int:
    from zephyr.pipelines.quality.langid import (
        LangIdConfig,
        LanguageFilter,
        LanguageIdentifier,
        ensure_lid_model,
    )

    require_extra("fasttext", "quality", "zephyr langid")
    model = args.model or str(ensure_lid_model())  # fail fast, before any task starts
    if args.dropped_output:
        from zephyr import removal

        removal.check(args)
    lang, score = args.output_column, f"{args.output_column}_score"
    config = LangIdConfig(model_path=model, max_chars=args.max_chars, lang_column=lang, score_column=score)
    ds = read_text_inputs(args, adds=(lang, score), rename="--output-column NAME")
    ds = ds.map_batches(LanguageIdentifier(config, args.text_column, args.replace_columns), name="langid")
    langs = tuple(x.strip() for x in args.languages.split(",")) if args.languages else None
    language_filter = LanguageFilter(langs, args.min_score, lang, score)
    filtering = args.languages or args.min_score > 0
    if args.dropped_output:
        from zephyr.removal import keep_all, write_routed

        verdict = language_filter.reasons if filtering else keep_all
        routed = write_routed(ds, verdict, args.output, args.dropped_output, engine_options(args))
        job = (routed.kept or routed.verdict).stats
        write_json(stats_path(args), {"version": 1, "job": job, "dropped_output": args.dropped_output})
        return routed.summary(
            output=args.output,
            stats=str(stats_path(args)),
            dropped_output=args.dropped_output,
            next=f"zephyr filter {args.output} --output OUT",
        )
    if filtering:
        ds = ds.map_batches(language_filter, name="language_filter")
    result = ds.write_parquet(args.output, **engine_options(args))
    write_json(stats_path(args), {"version": 1, "job": result.stats})
    return one_job_summary(result, args, next=f"zephyr filter {args.output} --output OUT")


def _cmd_pii(args: argparse.Namespace) -> int:
    from zephyr.pipelines.quality.pii import PIIConfig, RedactPII, count_columns

    kinds = tuple(k.strip() for k in args.kinds.split(","))
    config = PIIConfig(kinds=kinds, count_columns=not args.no_count_columns, column_prefix=args.output_column)
    ds = read_text_inputs(args, adds=count_columns(config), rename="--output-column NAME")
    result = ds.map_batches(
        RedactPII(config, args.text_column, args.replace_columns), name="pii"
    ).write_parquet(args.output, **engine_options(args))
    counts = {k: v for st in result.stats.get("stages", []) for k, v in st.get("counters", {}).items()}
    write_json(stats_path(args), {"version": 1, "pii_counts": counts, "job": result.stats})
    return one_job_summary(result, args, details={"pii_counts": counts})


def _cmd_decontaminate(args: argparse.Namespace) -> int:
    from zephyr.pipelines.quality.decontaminate import Decontaminate, build_eval_index, read_eval_texts

    if args.dropped_output:
        from zephyr import removal
        from zephyr.errors import ConfigError

        if args.mode != "remove":
            raise ConfigError("--dropped-output needs --mode remove: --mode annotate keeps every row")
        removal.check(args)
    out = Path(args.output)
    index_path = side(args, "eval-ngrams.npz")  # read by the tasks: in the sidecar, not among the data
    step = Decontaminate(
        str(index_path), args.mode, args.text_column, args.replace_columns, args.output_column
    )
    ds = read_text_inputs(
        args, adds=step.columns, rename="--output-column NAME"
    )  # before the eval index is built
    index_path.parent.mkdir(parents=True, exist_ok=True)
    index = build_eval_index(read_eval_texts(args.eval, args.eval_column), n=args.n)
    index.save(index_path)
    if args.dropped_output:
        from zephyr.removal import write_routed

        routed = write_routed(ds, step.reasons, str(out), args.dropped_output, engine_options(args))
        result = routed.kept or routed.verdict
    else:
        result = ds.map_batches(step, name="decontaminate").write_parquet(str(out), **engine_options(args))
    eval_stats = {
        "eval_items": index.items,
        "eval_ngrams": int(len(index.hashes)),
        "eval_items_shorter_than_n": index.short_items,
    }
    aside = {"dropped_output": args.dropped_output} if args.dropped_output else {}
    write_json(stats_path(args), {"version": 1, **eval_stats, "job": result.stats, **aside})
    fields = dict(
        next=f"zephyr tokenize {out} --tokenizer tokenizer.json --output tokens/", details=eval_stats
    )
    if args.dropped_output:
        return routed.summary(
            output=str(out), stats=str(stats_path(args)), dropped_output=args.dropped_output, **fields
        )
    return one_job_summary(result, args, **fields)


def register(subparsers: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    """Add this package's commands to ``zephyr``: one helper per command adds its flags."""

    def command(name: str, func, help: str, sub=subparsers) -> argparse.ArgumentParser:
        p = sub.add_parser(name, parents=[common], help=help, description=help)
        p.set_defaults(func=func)
        return p

    _add_normalize(
        command("normalize", _cmd_normalize, "NFC, control characters, whitespace (code-safe), optional ftfy")
    )
    _add_langid(
        command(
            "langid", _cmd_langid, "add lang/lang_score with fastText lid.176; optionally keep some languages"
        )
    )
    _add_filter(
        command(
            "filter", filter_command, "heuristic quality filters (Gopher, C4, FineWeb) with per-rule counts"
        )
    )
    _add_filter_explain(subparsers, common)
    q = subparsers.add_parser("quality", help="fastText quality classifier: train | score")
    _add_quality(command, q.add_subparsers(dest="quality_command", metavar="SUBCOMMAND"))
    _add_pii(command("pii", _cmd_pii, "replace e-mails, phone numbers and IP addresses with placeholders"))
    _add_decontaminate(
        command(
            "decontaminate",
            _cmd_decontaminate,
            "remove or annotate documents sharing a 13-gram with an eval set",
        )
    )


def _io(p: argparse.ArgumentParser, inputs: bool = True, output: bool = True) -> None:
    """Inputs, output (unless ``output=False``: ``zephyr explain``), ``--on-error`` and the schema flags
    (with ``inputs``), and ``--text-column``."""
    from zephyr.cli import add_on_error, add_output_dir, add_schema_arguments

    if inputs:
        p.add_argument("inputs", nargs="+", metavar="INPUT", help="Parquet/JSONL files, directories or globs")
        if output:
            add_output_dir(p)
        add_on_error(p)
        add_schema_arguments(p)
    p.add_argument("--text-column", default="text")


def _add_normalize(p: argparse.ArgumentParser) -> None:
    _io(p)
    p.add_argument("--fix-mojibake", action="store_true", help="repair mojibake with ftfy")
    p.add_argument("--keep-whitespace", action="store_true", help="do not collapse whitespace")


def _add_langid(p: argparse.ArgumentParser) -> None:
    from zephyr.cli import add_dropped_output, add_replace_columns

    _io(p)
    p.add_argument("--model", default=None, help="LID model (default: ZEPHYR_LID_MODEL or the cache)")
    p.add_argument("--languages", default=None, help="comma-separated languages to keep, e.g. en,de")
    p.add_argument("--min-score", type=float, default=0.0, help="drop rows whose lang_score is below this")
    p.add_argument("--max-chars", type=int, default=10_000, help="predict on the first N characters")
    add_replace_columns(
        p,
        "the language columns",
        default="lang",
        output_help="write the language to NAME and its score to NAME_score, e.g. to keep a claimed-language "
        "column the input already has",
    )
    add_dropped_output(p, "rows --languages/--min-score drop")


def _add_filter(p: argparse.ArgumentParser) -> None:
    _io(p)
    add_filter_arguments(p)


def _add_filter_explain(subparsers: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    """``zephyr explain filter``: the command's flags without ``--output``; prints its jobs' plans."""
    from zephyr.cli import explain_commands

    p = explain_commands(subparsers).add_parser("filter", parents=[common], help="the plans of zephyr filter")
    _io(p, output=False)
    add_filter_arguments(p)
    p.set_defaults(func=explain_filter_command)


def _add_quality(command, qsub: argparse._SubParsersAction) -> None:
    """``zephyr quality train`` and ``zephyr quality score`` (``cli_classifier``)."""
    from zephyr.pipelines.quality.cli_classifier import score_command, train_command

    from zephyr.cli import add_replace_columns

    p = command("train", train_command, "train a fastText hq/lq classifier from labelled Parquet", qsub)
    p.add_argument("labelled", help="Parquet with text and label columns")
    p.add_argument("--output", required=True, help="model file (.bin); a .report.json is written beside it")
    p.add_argument("--test", default=None, help="held-out Parquet (default: a hash-based split of the input)")
    p.add_argument("--holdout", type=float, default=0.2)
    p.add_argument("--label-column", default="label")
    p.add_argument("--positive", default="hq")
    p.add_argument("--negative", default="lq")
    p.add_argument("--epoch", type=int, default=10)
    p.add_argument("--threads", type=int, default=1)
    _io(p, inputs=False)
    p = command("score", score_command, "add quality_score and quality_bucket (by quantile)", qsub)
    _io(p)
    p.add_argument("--model", required=True)
    p.add_argument("--buckets", type=int, default=5)
    p.add_argument("--positive", default="hq")
    add_replace_columns(
        p,
        "the score and bucket columns",
        default="quality_score",
        output_help="write the score to NAME and its bucket to NAME_bucket",
    )


def _add_pii(p: argparse.ArgumentParser) -> None:
    from zephyr.cli import add_replace_columns

    _io(p)
    p.add_argument("--kinds", default="email,ipv6,ipv4,phone")
    p.add_argument("--no-count-columns", action="store_true", help="do not add pii_<kind> columns")
    add_replace_columns(
        p, "the count columns", default="pii", output_help="name the count columns NAME_<kind>"
    )


def _add_decontaminate(p: argparse.ArgumentParser) -> None:
    from zephyr.cli import add_dropped_output, add_replace_columns

    _io(p)
    p.add_argument("--eval", nargs="+", required=True, help="eval set(s), Parquet or JSONL")
    p.add_argument("--eval-column", nargs="+", default=["text"])
    p.add_argument("-n", type=int, default=13)
    p.add_argument(
        "--mode",
        choices=("remove", "annotate"),
        default="remove",
        help="remove the contaminated rows, or annotate every row",
    )
    add_replace_columns(
        p,
        "the flag columns (--mode annotate)",
        default="contaminated",
        output_help="--mode annotate: write the flag to NAME and the matching n-grams to NAME_ngrams",
    )
    add_dropped_output(p, "contaminated rows (--mode remove)")
