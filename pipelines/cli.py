"""``zephyr run PIPELINE.yaml``: run a declared pipeline as a batch job (see docs/pipelines.md).

    zephyr run pipelines/configs/quickstart.yaml --job-dir out/quickstart
    zephyr run web --job-dir out/web --set steps.read.paths='[/data/crawl/*.parquet]' --workers 8
    zephyr run cfg.yaml --set steps.fuzzy_dedup.threshold=0.7 --from fuzzy_dedup --until tokenize
    zephyr run cfg.yaml --check                     # validate and list the steps; run nothing
    zephyr run cfg.yaml --explain                   # print every step's engine jobs; run nothing

PIPELINE is a YAML file or the name of a built-in config (``quickstart``, ``web``, ``code``). Rerunning
with the same ``--job-dir`` resumes: complete steps are skipped, the first unfinished one skips its
finished tasks. The global execution options (``--executor``, ``--workers``, ``--cluster``...) pick where
engine tasks run; outputs do not depend on them. Ends with the run's summary (``zephyr.summary``), whose last
line says where the report is.
"""

from __future__ import annotations

import argparse
import sys


def register(subparsers: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    doc = __doc__ or ""
    parser = subparsers.add_parser(
        "run",
        parents=[common],
        help="run a pipeline config (read → filter → dedup → tokenize → train) as a resumable batch job",
        description=doc.split("\n\n")[0],
        epilog="\n\n".join(doc.split("\n\n")[1:]),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "pipeline", metavar="PIPELINE", help="pipeline YAML, or a built-in name: quickstart, web, code"
    )
    parser.add_argument("--job-dir", default=None, help="job folder (default: ./out/<pipeline name>)")
    parser.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a config key: steps.NAME.KEY=VALUE (or steps.INDEX.KEY), or a top-level KEY=VALUE",
    )
    parser.add_argument(
        "--from", dest="from_step", default=None, metavar="STEP", help="rerun from this pipeline step on"
    )
    parser.add_argument(
        "--until", dest="until_step", default=None, metavar="STEP", help="stop after this pipeline step"
    )
    parser.add_argument(
        "--check",
        action="store_true",
        help="validate the config and list its steps; run nothing (a map step's module is found, not imported: "
        "none of its code runs)",
    )
    parser.add_argument(
        "--explain",
        action="store_true",
        help="print every step's engine jobs (physical plans, in the order they run); run nothing",
    )
    parser.add_argument(
        "--no-report", dest="report", action="store_false", help="skip the Markdown/HTML report"
    )
    parser.set_defaults(func=handler)


def handler(args: argparse.Namespace) -> int:
    from pathlib import Path

    from zephyr.pipelines.config import check_added_columns, check_inputs, load_config
    from zephyr.pipelines.runner import ProgressReporter, explain_pipeline, run_pipeline, step_dir_name

    from zephyr.cli import execution_options

    config = load_config(args.pipeline, args.overrides)
    job_dir = Path(args.job_dir) if args.job_dir else Path("out") / config.name
    if args.check:
        check_inputs(config)
        check_added_columns(config)
        print(f"pipeline {config.name!r} ({config.path}): {len(config.steps)} steps, job dir {job_dir}")
        for index, entry in enumerate(config.steps):
            state = "" if entry.enabled else "  (disabled)"
            print(f"  {step_dir_name(index, entry)}: {entry.type}{state}")
        return 0
    if args.explain:
        from zephyr.cli import explained

        return explained(explain_pipeline(config, job_dir, execution=execution_options(args)), args)
    result = run_pipeline(
        config,
        job_dir,
        execution=execution_options(args),
        from_step=args.from_step,
        until_step=args.until_step,
        reporter=ProgressReporter(sys.stderr),
        report=args.report,
    )
    return _summary(result)


def _summary(result):
    """The run's ``Summary``: rows the first data step read, kept by the last one, and what every step
    dropped and quarantined on the way (each step reads what the one before kept), with the report's path
    as its last line. Its ``details`` name each step's status under ``steps``."""
    from zephyr.pipelines.step import STEPS

    from zephyr.summary import Summary

    data = [s for s in result.steps if STEPS[s["type"]].output != "model"]
    reasons: dict[str, int] = {}
    for step in data:
        for reason, n in (step.get("dropped_by_reason") or {}).items():
            reasons[reason] = reasons.get(reason, 0) + int(n)
    report = result.html_report or result.report
    statuses = {s["step"]: s.get("status") for s in result.steps}
    return Summary(
        rows_in=data[0]["rows_in"] if data else 0,
        rows_kept=data[-1]["rows_kept"] if data else 0,
        rows_dropped=sum(int(s.get("rows_dropped", 0)) for s in data),
        rows_quarantined=sum(int(s.get("rows_quarantined", 0)) for s in data),
        dropped_by_reason=reasons,
        output=str(result.job_dir),
        stats=str(result.stats_path) if result.stats_path else None,
        next=f"open {report}" if report else None,
        bytes_in=None,
        details={
            "report": str(result.report) if result.report else None,
            "html_report": str(result.html_report) if result.html_report else None,
            "steps": statuses,
        },
    )
