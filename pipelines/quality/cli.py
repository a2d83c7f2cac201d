"""``zephyr`` subcommands of the quality package: normalize, langid, filter, quality train|score, pii, decontaminate.

Every command reads Parquet or JSONL inputs (files, directories, globs), runs on the engine with the global
execution options, and writes Parquet ``part-00000.parquet``, ``part-00001.parquet``, ... into ``--output``,
plus sidecars whose names start with ``_`` (``_stats.json``, format version 1), which Parquet readers skip:
reading the output directory gives exactly the kept rows (``zephyr.io.publish``). ``zephyr filter`` also
writes ``_dropped/`` (rows with ``drop_reason``; ``--dropped-output DIR`` puts them elsewhere), ``_quarantine/``
(null texts, ``reject_reason``), counts that balance (``rows_in = rows_kept + rows_dropped +
rows_quarantined``) and the retention report ``_report.json`` / ``_report.md``. Commands that run several
engine jobs (``filter``, ``quality score``) put ``tasks``, ``tasks_resumed`` and ``task_retries`` summed over
all of them, and one entry per job (``jobs``), at the top of their ``_stats.json`` (``zephyr.job_stats``).
"""

from __future__ import annotations

import argparse
import json
import logging
import shutil
import tempfile
from pathlib import Path
from typing import Any

from zephyr.pipelines.quality.cli_common import (
    STATS,
    engine_options,
    one_job_summary,
    read_text_inputs,
    write_json,
)

__all__ = ["register"]

log = logging.getLogger(__name__)

def _cmd_normalize(args: argparse.Namespace) -> int:
    from zephyr.pipelines.quality.batch_ops import Normalize
    from zephyr.pipelines.quality.normalize import NormalizeConfig

    cfg = NormalizeConfig(fix_mojibake=args.fix_mojibake, collapse_whitespace=not args.keep_whitespace)
    result = read_text_inputs(args).map_batches(Normalize(cfg, args.text_column), name="normalize").write_parquet(
        args.output, **engine_options(args)
    )
    return one_job_summary(result, args, next=f"zephyr langid {args.output} --output OUT")


def _cmd_langid(args: argparse.Namespace) -> int:
    from zephyr.pipelines.quality.batch_ops import LanguageFilter
    from zephyr.pipelines.quality.langid import LangIdConfig, LanguageIdentifier
    from zephyr.pipelines.quality.lid_model import ensure_lid_model

    model = args.model or str(ensure_lid_model())  # fail fast, before any task starts
    if args.dropped_output:
        from zephyr import dropped

        dropped.check(args)
    lang, score = args.output_column, f"{args.output_column}_score"
    config = LangIdConfig(model_path=model, max_chars=args.max_chars, lang_column=lang, score_column=score)
    ds = read_text_inputs(args, adds=(lang, score), rename="--output-column NAME")
    ds = ds.map_batches(LanguageIdentifier(config, args.text_column, args.overwrite), name="langid")
    langs = tuple(x.strip() for x in args.languages.split(",")) if args.languages else None
    language_filter = LanguageFilter(langs, args.min_score, lang, score)
    filtering = args.languages or args.min_score > 0
    if args.dropped_output:
        from zephyr.dropped import keep_all, write_routed

        verdict = language_filter.reasons if filtering else keep_all
        routed = write_routed(ds, verdict, args.output, args.dropped_output, engine_options(args))
        job = (routed.kept or routed.verdict).stats
        write_json(Path(args.output) / STATS, {"version": 1, "job": job, "dropped_output": args.dropped_output})
        return routed.summary(
            output=args.output, stats=str(Path(args.output) / STATS), dropped_output=args.dropped_output,
            next=f"zephyr filter {args.output} --output OUT",
        )
    if filtering:
        ds = ds.map_batches(language_filter, name="language_filter")
    result = ds.write_parquet(args.output, **engine_options(args))
    write_json(Path(args.output) / STATS, {"version": 1, "job": result.stats})
    return one_job_summary(result, args, next=f"zephyr filter {args.output} --output OUT")


# The report totals of a run without input rows (``merge_summaries`` of nothing leaves them empty).
_NO_ROWS: dict[str, Any] = {
    "rows_in": 0,
    "bytes_in": 0,
    "rows_kept": 0,
    "bytes_kept": 0,
    "rows_dropped": 0,
    "rows_quarantined": 0,
    "dropped_rows_by_reason": {},
    "dropped_bytes_by_reason": {},
    "balanced": True,
}


def _cmd_filter(args: argparse.Namespace) -> int:
    from zephyr import job_stats

    with job_stats.recording() as jobs:  # annotate, three routes and the report are separate engine jobs
        return _filter(args, jobs)


def _filter(args: argparse.Namespace, jobs: list[dict[str, Any]]) -> int:
    from zephyr.pipelines.quality.batch_ops import FilterAnnotator, Normalize, RouteByReason
    from zephyr.pipelines.quality.filters import DROP_REASON, build_rule_families
    from zephyr.pipelines.quality.report import merge_summaries, report_markdown, summarize_batch

    import zephyr
    from zephyr import job_stats
    from zephyr.io.added_columns import set_aside

    overrides = _rule_overrides(args)
    build_rule_families(args.rules, **overrides)  # validate names before any work
    if args.dropped_output:
        from zephyr.io.publish import check_side_dir

        check_side_dir(args.dropped_output, args.output, "--dropped-output")
    out = Path(args.output)
    # _quarantine/ holds the rows the filters quarantine (input columns + reject_reason); unreadable input lines
    # (source, line, reason, raw) go to a folder in it that its readers skip
    args.quarantine_dir = str(out / "_quarantine" / "_unreadable")
    opts = engine_options(args)
    reason = args.output_column
    ds = read_text_inputs(args, adds=(reason,), rename="--output-column NAME")
    out.mkdir(parents=True, exist_ok=True)
    # with --output-column, an input's own drop_reason steps aside for the filter and comes back unchanged
    aside = (DROP_REASON,) if reason != DROP_REASON else ()
    if aside:
        ds = ds.map_batches(set_aside(aside), name="set_aside")
    if args.normalize:
        ds = ds.map_batches(Normalize(text_column=args.text_column), name="normalize")
    if "url" in overrides:
        from zephyr.pipelines.web.urls import NormalizeUrls

        ds = ds.map_batches(NormalizeUrls(args.url_column), name="normalize_urls")
    lang_column = None if args.lang_column == "" else args.lang_column
    annotate = FilterAnnotator(args.rules, overrides, args.text_column, lang_column, args.default_lang, args.overwrite)
    scratch = Path(tempfile.mkdtemp(prefix=".annotated-", dir=out))
    try:
        written = ds.map_batches(annotate, name="filter").write_parquet(str(scratch), **opts)
        engine_stats = written.stats
        unreadable = written.stats["rows_quarantined"]  # input rows set aside by --on-error quarantine
        parts = []
        if written.files:  # the annotator keeps every row: no file means no input row, and nothing to route
            annotated = zephyr.read_parquet(list(written.files))
            kept = annotated.map_batches(RouteByReason("kept", reason, aside), name="route_kept").write_parquet(
                str(out), **opts
            )
            engine_stats = kept.stats
            annotated.map_batches(RouteByReason("dropped", reason, aside), name="route_dropped").write_parquet(
                args.dropped_output or str(out / "_dropped"), **opts
            )
            annotated.map_batches(RouteByReason("quarantined", reason, aside), name="route_quarantine").write_parquet(
                str(out / "_quarantine"), **opts
            )
            source = args.source_column if args.source_column else None
            parts = [
                annotated.map_batches(
                    lambda t: summarize_batch(
                        t,
                        text_column=args.text_column,
                        source_column=source,
                        id_column=args.id_column,
                        sample_size=args.samples,
                    ),
                    name="report",
                ).to_arrow(**opts)
            ]
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    report = merge_summaries(parts, sample_size=args.samples)
    report["totals"] = totals = report["totals"] or dict(_NO_ROWS)
    if unreadable:  # never reached the filters, so the report does not see them; they are input all the same
        totals["rows_in"] += unreadable
        totals["rows_quarantined"] += unreadable
        totals["rows_unreadable"] = unreadable
        totals["unreadable_quarantine_dir"] = written.stats["quarantine_dir"]
    # engine: the job that wrote the kept rows; tasks, tasks_resumed, task_retries and jobs: every engine job
    stats = {
        "version": 1,
        "rules": args.rules,
        **totals,
        "dropped_output": args.dropped_output or str(out / "_dropped"),
        "engine": engine_stats,
        **job_stats.summarize(jobs),
    }
    write_json(out / STATS, stats)
    write_json(out / "_report.json", report)
    (out / "_report.md").write_text(report_markdown(report), encoding="utf-8")
    if not totals["balanced"]:
        from zephyr.errors import TaskError

        raise TaskError(f"row accounting does not balance: {json.dumps(totals)}")
    from zephyr.summary import Summary

    return Summary(
        rows_in=totals["rows_in"],
        rows_kept=totals["rows_kept"],
        rows_dropped=totals["rows_dropped"],
        rows_quarantined=totals["rows_quarantined"],
        dropped_by_reason=dict(totals.get("dropped_rows_by_reason") or {}),
        output=str(out),
        stats=str(out / STATS),
        dropped_output=stats["dropped_output"],
        quarantine_output=str(out / "_quarantine"),
        next=f"zephyr dedup fuzzy {out} --output OUT --mode remove",
        details={"report": str(out / "_report.md"), "rules": args.rules},
    )


def _rule_overrides(args: argparse.Namespace) -> dict[str, dict[str, Any]]:
    """Settings of rule families that take some (the url rules: blocklist file, url column); the blocklist is
    read now, so a bad line fails before any work, naming the file and line."""
    names = [n.strip() for n in args.rules.split(",")]
    if "url" not in names:
        if args.url_blocklist:
            from zephyr.errors import ConfigError

            raise ConfigError("--url-blocklist needs the url rules: add url to --rules")
        return {}
    if args.url_blocklist:
        from zephyr.pipelines.web.urls import load_blocklist

        load_blocklist(args.url_blocklist)
    return {"url": {"blocklist": args.url_blocklist, "url_column": args.url_column}}


def _cmd_pii(args: argparse.Namespace) -> int:
    from zephyr.pipelines.quality.batch_ops import RedactPII
    from zephyr.pipelines.quality.pii import PIIConfig, count_columns

    kinds = tuple(k.strip() for k in args.kinds.split(","))
    config = PIIConfig(kinds=kinds, count_columns=not args.no_count_columns, column_prefix=args.output_column)
    ds = read_text_inputs(args, adds=count_columns(config), rename="--output-column NAME")
    result = ds.map_batches(RedactPII(config, args.text_column, args.overwrite), name="pii").write_parquet(
        args.output, **engine_options(args)
    )
    counts = {k: v for st in result.stats.get("stages", []) for k, v in st.get("counters", {}).items()}
    write_json(Path(args.output) / STATS, {"version": 1, "pii_counts": counts, "job": result.stats})
    return one_job_summary(result, args, details={"pii_counts": counts})


def _cmd_decontaminate(args: argparse.Namespace) -> int:
    from zephyr.pipelines.quality.batch_ops import Decontaminate
    from zephyr.pipelines.quality.decontaminate import build_eval_index, check_mode, read_eval_texts

    args.mode = check_mode(args.mode, "--mode")  # --mode flag|drop: the old names, with a warning
    if args.dropped_output:
        from zephyr import dropped
        from zephyr.errors import ConfigError

        if args.mode != "remove":
            raise ConfigError("--dropped-output needs --mode remove: --mode annotate keeps every row")
        dropped.check(args)
    out = Path(args.output)
    index_path = out / "_eval-ngrams.npz"  # read by the tasks; ``_``: not part of the output data
    step = Decontaminate(str(index_path), args.mode, args.text_column, args.overwrite, args.output_column)
    ds = read_text_inputs(args, adds=step.columns, rename="--output-column NAME")  # before the eval index is built
    out.mkdir(parents=True, exist_ok=True)
    index = build_eval_index(read_eval_texts(args.eval, args.eval_column), n=args.n)
    index.save(index_path)
    if args.dropped_output:
        from zephyr.dropped import write_routed

        routed = write_routed(ds, step.reasons, str(out), args.dropped_output, engine_options(args))
        result = routed.kept or routed.verdict
    else:
        result = ds.map_batches(step, name="decontaminate").write_parquet(str(out), **engine_options(args))
    eval_stats = {
        "eval_items": index.items,
        "eval_ngrams": int(len(index.hashes)),
        "eval_items_shorter_than_n": index.short_items,
    }
    side = {"dropped_output": args.dropped_output} if args.dropped_output else {}
    write_json(out / STATS, {"version": 1, **eval_stats, "job": result.stats, **side})
    fields = dict(next=f"zephyr tokenize {out} --tokenizer tokenizer.json --output tokens/", details=eval_stats)
    if args.dropped_output:
        return routed.summary(output=str(out), stats=str(out / STATS), dropped_output=args.dropped_output, **fields)
    return one_job_summary(result, args, **fields)


def register(subparsers: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    from zephyr.pipelines.quality.cli_classifier import score_command, train_command

    from zephyr.cli import add_dropped_output, add_on_error, add_output_dir, add_overwrite
    from zephyr.io.input_schema import add_schema_arguments

    def command(name: str, func, help: str, sub=subparsers) -> argparse.ArgumentParser:
        p = sub.add_parser(name, parents=[common], help=help, description=help)
        p.set_defaults(func=func)
        return p

    def io(p: argparse.ArgumentParser, inputs: bool = True) -> None:
        if inputs:
            p.add_argument(
                "inputs", nargs="+", metavar="INPUT", help="Parquet/JSONL files, directories or globs"
            )
            add_output_dir(p)
            add_on_error(p)
            add_schema_arguments(p)
        p.add_argument("--text-column", default="text")

    p = command("normalize", _cmd_normalize, "NFC, control characters, whitespace (code-safe), optional ftfy")
    io(p)
    p.add_argument("--fix-mojibake", action="store_true", help="repair mojibake with ftfy")
    p.add_argument("--keep-whitespace", action="store_true", help="do not collapse whitespace")

    p = command(
        "langid", _cmd_langid, "add lang/lang_score with fastText lid.176; optionally keep some languages"
    )
    io(p)
    p.add_argument("--model", default=None, help="LID model (default: ZEPHYR_LID_MODEL or the cache)")
    p.add_argument("--languages", default=None, help="comma-separated languages to keep, e.g. en,de")
    p.add_argument("--min-score", type=float, default=0.0, help="drop rows whose lang_score is below this")
    p.add_argument("--max-chars", type=int, default=10_000, help="predict on the first N characters")
    add_overwrite(
        p, "the language columns", default="lang",
        output_help="write the language to NAME and its score to NAME_score, e.g. to keep a claimed-language "
        "column the input already has",
    )
    add_dropped_output(p, "rows --languages/--min-score drop")

    p = command("filter", _cmd_filter, "heuristic quality filters (Gopher, C4, FineWeb) with per-rule counts")
    io(p)
    p.add_argument(
        "--rules",
        default="gopher,c4,fineweb",
        help="comma-separated: gopher, gopher_quality, gopher_repetition, c4, fineweb, url (URL normalization, "
        "invalid URLs, --url-blocklist)",
    )
    p.add_argument(
        "--url-blocklist",
        default=None,
        metavar="FILE",
        help="with --rules url: domains/hosts to drop, one per line (example: pipelines/web/data/blocklist.example.txt)",
    )
    p.add_argument("--url-column", default="url", help="the URL column the url rules read and normalize")
    p.add_argument("--lang-column", default="lang", help="per-row language for stop words ('' = none)")
    p.add_argument("--default-lang", default="en")
    p.add_argument("--source-column", default="source", help="report retention per value of this column")
    p.add_argument("--id-column", default="id")
    p.add_argument(
        "--samples", type=int, default=5, help="sampled examples per rule and source in the report"
    )
    p.add_argument("--normalize", action="store_true", help="normalize text before filtering")
    add_overwrite(
        p, "a drop_reason column", default="drop_reason",
        output_help="the reason column of the dropped rows (_dropped/); an input's own drop_reason then stays as it is",
    )
    p.add_argument(
        "--dropped-output",
        default=None,
        metavar="DIR",
        help="where the dropped rows (with drop_reason) go (default: OUTPUT/_dropped)",
    )

    q = subparsers.add_parser("quality", help="fastText quality classifier: train | score")
    qsub = q.add_subparsers(dest="quality_command", metavar="SUBCOMMAND")
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
    io(p, inputs=False)
    p = command("score", score_command, "add quality_score and quality_bucket (by quantile)", qsub)
    io(p)
    p.add_argument("--model", required=True)
    p.add_argument("--buckets", type=int, default=5)
    p.add_argument("--positive", default="hq")
    add_overwrite(
        p, "the score and bucket columns", default="quality_score",
        output_help="write the score to NAME and its bucket to NAME_bucket",
    )

    p = command("pii", _cmd_pii, "replace e-mails, phone numbers and IP addresses with placeholders")
    io(p)
    p.add_argument("--kinds", default="email,ipv6,ipv4,phone")
    p.add_argument("--no-count-columns", action="store_true", help="do not add pii_<kind> columns")
    add_overwrite(p, "the count columns", default="pii", output_help="name the count columns NAME_<kind>")

    p = command(
        "decontaminate", _cmd_decontaminate, "remove or annotate documents sharing a 13-gram with an eval set"
    )
    io(p)
    p.add_argument("--eval", nargs="+", required=True, help="eval set(s), Parquet or JSONL")
    p.add_argument("--eval-column", nargs="+", default=["text"])
    p.add_argument("-n", type=int, default=13)
    p.add_argument(
        "--mode", choices=("remove", "annotate", "drop", "flag"), default="remove",
        help="remove the contaminated rows, or annotate every row (drop, flag: deprecated old names)",
    )
    add_overwrite(
        p, "the flag columns (--mode annotate)", default="contaminated",
        output_help="--mode annotate: write the flag to NAME and the matching n-grams to NAME_ngrams",
    )
    add_dropped_output(p, "contaminated rows (--mode remove)")
