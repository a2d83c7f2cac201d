"""``zephyr filter``: the heuristic rules (``filters``; Gopher, C4, FineWeb, url) on the engine, with the
dropped rows, the quarantined ones and a retention report beside the kept output (registered by
``zephyr.pipelines.quality.cli``; helpers shared with it in ``cli_common``).

The jobs: one annotates every row with its first failing rule (``filters.FilterAnnotator``) into a scratch
folder; three route the annotated rows (``filters.RouteByReason``: kept → ``--output``, dropped →
``OUTPUT.zephyr/dropped/``, quarantined → ``OUTPUT.zephyr/quarantine/``) and one summarizes them for
``OUTPUT.zephyr/report.json`` / ``report.md`` (the sidecar, ``zephyr.io.layout``). Input lines that cannot be
read go to ``OUTPUT.zephyr/unreadable/`` (the engine's quarantine schema: source, line, reason, raw), apart
from the quarantined rows, which keep their input columns.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from zephyr.pipelines.quality.cli_common import engine_options, read_text_inputs, side, stats_path, write_json
from zephyr.pipelines.quality.config import DEFAULT_RULES
from zephyr.pipelines.quality.filter_config import HeuristicFilterConfig

if TYPE_CHECKING:
    from zephyr.dataset import Dataset

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


def add_filter_arguments(p: argparse.ArgumentParser) -> None:
    """The flags of ``zephyr filter`` after its inputs, output and ``--text-column``."""
    from zephyr.cli import add_replace_columns

    p.add_argument(
        "--rules",
        default=",".join(DEFAULT_RULES),
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
    add_replace_columns(
        p,
        "a drop_reason column",
        default="drop_reason",
        output_help="the reason column of the dropped rows (OUTPUT.zephyr/dropped/); an input's own drop_reason "
        "then stays as it is",
    )
    p.add_argument(
        "--dropped-output",
        default=None,
        metavar="DIR",
        help="where the dropped rows (with drop_reason) go (default: OUTPUT.zephyr/dropped)",
    )


def filter_command(args: argparse.Namespace) -> int:
    from zephyr import job_stats

    with job_stats.recording() as jobs:  # annotate, three routes and the report are separate engine jobs
        return _filter(args, jobs)


@dataclass
class _Routed:
    """What the engine jobs of one ``zephyr filter`` left: the stats of the job that wrote the kept rows
    (the annotating job's when there was no input row), the rows ``--on-error quarantine`` set aside before
    the filters, and the report's per-batch summaries."""

    engine_stats: dict[str, Any]
    unreadable: int
    unreadable_dir: str | None
    report_parts: list[Any] = field(default_factory=list)


def _filter(args: argparse.Namespace, jobs: list[dict[str, Any]]) -> int:
    args.filter_config = _filter_config(args)  # checks the rules before any work
    if "url" in args.filter_config.rules:
        from zephyr.pipelines.quality._text import require_extra

        require_extra("tldextract", "web", "zephyr filter --rules url")
    if args.dropped_output:
        from zephyr.io.publish import check_side_dir

        check_side_dir(args.dropped_output, args.output, "--dropped-output")
    out = Path(args.output)
    # quarantine/ holds the rows the filters quarantine (input columns + reject_reason); unreadable input lines
    # (source, line, reason, raw) have another schema, so they go to a folder of their own
    args.quarantine_dir = str(side(args, "unreadable"))
    ds, aside = _annotated_input(args, args.filter_config)
    routed = _annotate_and_route(args, ds, aside, out)
    return _write_report(args, jobs, routed, out)


def _filter_config(args: argparse.Namespace) -> HeuristicFilterConfig:
    """The rules the flags ask for, as the ``heuristic_filter`` pipeline step holds them (one check of
    rule names and settings); a bad value names its flag."""
    from zephyr.pipelines.quality.filters import rule_names

    from zephyr.config import FieldError
    from zephyr.errors import ConfigError

    try:
        return HeuristicFilterConfig(rule_names(args.rules), _rule_overrides(args), args.default_lang)
    except FieldError as exc:
        flag = "--rules" if exc.key == "rules" else "--url-blocklist"
        raise ConfigError(f"{flag}: {exc.detail}") from None


def _annotated_input(
    args: argparse.Namespace, rules: HeuristicFilterConfig
) -> tuple[Dataset, tuple[str, ...]]:
    """The input with every row's first failing rule in ``drop_reason``, and the input columns set aside
    around the filter (with ``--output-column``, an input's own ``drop_reason``, restored by the routes)."""
    from zephyr.pipelines.quality.filters import FilterAnnotator, reason_aside
    from zephyr.pipelines.quality.normalize import Normalize

    from zephyr.removal import set_aside

    reason = args.output_column
    ds = read_text_inputs(args, adds=(reason,), rename="--output-column NAME")
    aside = reason_aside(reason)
    if aside:
        ds = ds.map_batches(set_aside(aside), name="set_aside")
    if args.normalize:
        ds = ds.map_batches(Normalize(text_column=args.text_column), name="normalize")
    if "url" in rules.overrides:
        from zephyr.pipelines.web.urls import NormalizeUrls

        ds = ds.map_batches(NormalizeUrls(args.url_column), name="normalize_urls")
    lang_column = None if args.lang_column == "" else args.lang_column
    annotate = FilterAnnotator(
        ",".join(rules.rules),
        rules.overrides,
        args.text_column,
        lang_column,
        rules.default_lang,
        args.replace_columns,
    )
    return ds.map_batches(annotate, name="filter"), aside


def _annotate_and_route(args: argparse.Namespace, ds: Dataset, aside: tuple[str, ...], out: Path) -> _Routed:
    """Write the annotated rows to a scratch folder in the output's sidecar, then route them to the kept
    output, ``dropped/`` and ``quarantine/`` and summarize them for the report; the scratch folder goes."""
    import zephyr
    from zephyr.io.layout import remove_folder, scratch_dir

    opts = engine_options(args)
    scratch = scratch_dir(str(out), "annotated")
    try:
        written = ds.write_parquet(scratch, overwrite=True, **opts)
        routed = _Routed(
            written.stats, written.stats["rows_quarantined"], written.stats.get("quarantine_dir")
        )
        if (
            not written.files
        ):  # the annotator keeps every row: no file means no input row, and nothing to route
            return routed
        annotated = zephyr.read_parquet(list(written.files))
        (kept_dir, kept_plan), *others = route_plans(args, annotated, aside, out)
        routed.engine_stats = kept_plan.write_parquet(kept_dir, **opts).stats
        for where, plan in others:  # folders of the sidecar, or a --dropped-output the command claimed
            plan.write_parquet(where, overwrite=True, **opts)
        routed.report_parts = [report_plan(args, annotated).to_arrow(**opts)]
        return routed
    finally:
        remove_folder(scratch)


def route_plans(
    args: argparse.Namespace, annotated: Dataset, aside: tuple[str, ...], out: Path
) -> list[tuple[str, Dataset]]:
    """(folder, plan) of the routing jobs over the annotated rows, in the order they run: kept rows to
    ``out``, dropped ones to ``--dropped-output`` (default ``out.zephyr/dropped``), quarantined ones to
    ``out.zephyr/quarantine``; used by the command and by ``zephyr explain filter``."""
    from zephyr.pipelines.quality.filters import RouteByReason

    from zephyr.io.layout import dropped_dir, quarantine_dir

    reason = args.output_column
    routes = (
        ("kept", "route_kept", str(out)),
        ("dropped", "route_dropped", args.dropped_output or dropped_dir(str(out))),
        ("quarantined", "route_quarantine", quarantine_dir(str(out))),
    )
    return [
        (where, annotated.map_batches(RouteByReason(kind, reason, aside), name=name))
        for kind, name, where in routes
    ]


def report_plan(args: argparse.Namespace, annotated: Dataset) -> Dataset:
    """The report's per-batch summaries of the annotated rows (collected by the driver, ``to_arrow``)."""
    return annotated.map_batches(_summarize(args), name="report")


def explain_filter_command(args: argparse.Namespace) -> Any:
    """``zephyr explain filter``: the plans on stdout, nothing run (``zephyr.cli.explained``)."""
    from zephyr.cli import explained

    return explained(filter_plan_text(args), args)


def filter_plan_text(args: argparse.Namespace) -> str:
    """What ``zephyr explain filter`` prints: the command's engine jobs in order, built by the functions it
    runs (``_annotated_input``, ``route_plans``, ``report_plan``). The routes and the report read the
    annotated rows' files; here they are planned over the annotating job's plan. Nothing runs."""
    from zephyr.budget import Budget
    from zephyr.cli import jobs_plan_text
    from zephyr.options import ExecutionOptions

    args.filter_config = _filter_config(args)
    ds, aside = _annotated_input(args, args.filter_config)
    out = Path("OUTPUT")
    annotate = (
        f"job 1: every row with its first failing rule (rules {args.rules}) in {args.output_column}, written "
        "to a scratch folder in OUTPUT.zephyr"
    )
    then = "no file written (no input row): nothing to route; else jobs 2-5 read the annotated files"
    steps: list[tuple[str, Dataset | None]] = [(annotate, ds), (then + " (planned over job 1's plan)", None)]
    routes = zip(("kept", "dropped", "quarantined"), route_plans(args, ds, aside, out))
    for number, (kind, (where, plan)) in enumerate(routes, 2):
        steps.append((f"job {number}: the {kind} rows → {where}", plan))
    report = "job 5: the report's per-batch summaries, to the driver (OUTPUT.zephyr/report.json, report.md)"
    steps.append((report, report_plan(args, ds)))
    opts = engine_options(args)
    budget = Budget(ExecutionOptions.from_kwargs(**opts).memory_budget_bytes)
    return jobs_plan_text("zephyr filter", steps, budget, opts, then="the rules")


def _summarize(args: argparse.Namespace) -> Any:
    """The report's per-batch summary (``report.summarize_batch``) with this command's columns."""
    from zephyr.pipelines.quality.filters import summarize_batch

    source = args.source_column if args.source_column else None
    text_column, id_column, samples = args.text_column, args.id_column, args.samples
    return lambda t: summarize_batch(
        t, text_column=text_column, source_column=source, id_column=id_column, sample_size=samples
    )


def _write_report(args: argparse.Namespace, jobs: list[dict[str, Any]], routed: _Routed, out: Path) -> int:
    """``stats.json``, ``report.json`` and ``report.md`` in the output's sidecar, a ``TaskError`` if the counts
    do not balance, and the command's summary."""
    from zephyr.pipelines.quality.filters import merge_summaries, report_markdown

    from zephyr import job_stats
    from zephyr.io.layout import dropped_dir, quarantine_dir

    report = merge_summaries(routed.report_parts, sample_size=args.samples)
    report["totals"] = totals = report["totals"] or dict(_NO_ROWS)
    if (
        routed.unreadable
    ):  # never reached the filters, so the report does not see them; they are input all the same
        totals["rows_in"] += routed.unreadable
        totals["rows_quarantined"] += routed.unreadable
        totals["rows_unreadable"] = routed.unreadable
        totals["unreadable_quarantine_dir"] = routed.unreadable_dir
    # engine: the job that wrote the kept rows; tasks, tasks_resumed, task_retries and jobs: every engine job
    stats = {
        "version": 1,
        "rules": args.rules,
        **totals,
        "dropped_output": args.dropped_output or dropped_dir(str(out)),
        "engine": routed.engine_stats,
        **job_stats.summarize(jobs),
    }
    write_json(stats_path(args), stats)
    write_json(side(args, "report.json"), report)
    side(args, "report.md").write_text(report_markdown(report), encoding="utf-8")
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
        stats=str(stats_path(args)),
        dropped_output=stats["dropped_output"],
        quarantine_output=quarantine_dir(str(out)),
        next=f"zephyr dedup fuzzy {out} --output OUT --mode remove",
        details={"report": str(side(args, "report.md")), "rules": args.rules},
    )


def _rule_overrides(args: argparse.Namespace) -> dict[str, dict[str, Any]]:
    """Settings of rule families that take some (the url rules: blocklist file, url column); the blocklist is
    read now, so a bad line fails before any work, naming the file and line."""
    from zephyr.pipelines.quality.filters import rule_names

    if "url" not in rule_names(args.rules):
        if args.url_blocklist:
            from zephyr.errors import ConfigError

            raise ConfigError("--url-blocklist needs the url rules: add url to --rules")
        return {}
    if args.url_blocklist:
        from zephyr.pipelines.web.urls import load_blocklist

        load_blocklist(args.url_blocklist)
    return {"url": {"blocklist": args.url_blocklist, "url_column": args.url_column}}
