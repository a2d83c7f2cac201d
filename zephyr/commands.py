"""Engine subcommands: ``convert``, ``count`` and ``sort`` over Parquet/JSONL/Vortex files, and ``explain``.

Each is a one-line plan on the engine, so they also resume (``--work-dir``), retry and spill like any job:

    zephyr convert 'raw/*.jsonl.zst' --output data/ --to parquet --workers 2
    zephyr sort data/ --by url --output sorted/ --memory-budget 512MB
    zephyr count data/

``zephyr explain sort data/ --by url --memory-budget 512MB`` prints the physical plan the same command would
run (stages, shuffles, partition counts, budget shares; ``zephyr.physical``) and runs nothing: it takes the
command's own arguments, without ``--output``. Packages add their commands' plans to the same group
(``explain_commands``): ``zephyr explain dedup exact|fuzzy|url|paragraph|substring`` (``zephyr.dedup.cli``),
``zephyr explain filter`` (``zephyr.pipelines.quality.cli_filter``) and ``zephyr explain tokenize``
(``zephyr.tokenize.writer.plan_text``); a command of several engine jobs prints each job's plan in order with the rules
between them (``jobs_plan_text``).
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Any

from zephyr.io.input_schema import add_schema_arguments

if TYPE_CHECKING:
    from zephyr.budget import Budget
    from zephyr.dataset import Dataset

PlanStep = tuple[str, "Dataset | None"]
"""One step of a multi-job command's printed plan: a job (its title and plan) or a decision between jobs
(its rule, no plan)."""

__all__ = ["PlanStep", "explain_commands", "explained", "jobs_plan_text", "register"]


def _reader(args: argparse.Namespace):
    import zephyr
    from zephyr.io.input_schema import schema_arguments

    return zephyr.read(
        list(args.inputs), format=args.format, on_error=args.on_error, **schema_arguments(args)
    )


def _add_inputs(parser: argparse.ArgumentParser) -> None:
    from zephyr.cli import add_on_error

    parser.add_argument("inputs", nargs="+", metavar="INPUT", help="files, directories, globs or fsspec URLs")
    parser.add_argument("--format", choices=("auto", "parquet", "jsonl", "vortex"), default="auto")
    add_on_error(parser)
    add_schema_arguments(parser)


def _write(dataset, args: argparse.Namespace) -> int:
    from zephyr.cli import execution_options

    kwargs = execution_options(args).as_kwargs()
    to = getattr(args, "to", "parquet")
    if to == "jsonl":
        result = dataset.write_jsonl(args.output, compression=args.compression, **kwargs)
    elif to == "vortex":
        result = dataset.write_vortex(args.output, **kwargs)
    else:
        result = dataset.write_parquet(args.output, **kwargs)
    import json

    from zephyr.io.layout import stats_path
    from zephyr.io.paths import write_bytes_atomic
    from zephyr.summary import from_stages

    write_bytes_atomic(stats_path(args.output), json.dumps(result.stats, indent=1, default=str).encode())
    return from_stages(
        result.stats["stages"],
        output=args.output,
        stats=stats_path(args.output),
        details={"files": len(result.files)},
        next=f"zephyr count {args.output}",
    )


def _convert(args: argparse.Namespace) -> int:
    return _write(_reader(args), args)


def _sorted(args: argparse.Namespace):
    by = [c.strip() for c in args.by.split(",") if c.strip()]
    return _reader(args).sort(*by, descending=args.descending)


def _sort(args: argparse.Namespace) -> int:
    return _write(_sorted(args), args)


_EXPLAINED = {"convert": _reader, "sort": _sorted, "count": _reader}
"""Command → its dataset, built from the parsed arguments exactly as the command builds it."""


def _explain(args: argparse.Namespace):
    from zephyr.cli import execution_options

    dataset = _EXPLAINED[args.explain_command](args)
    return explained(dataset.explain(**execution_options(args).as_kwargs()), args)


def explained(plan: str, args: argparse.Namespace):
    """How every ``zephyr explain`` command ends: the plan on stdout (with ``--json``: under the summary's
    ``details.plan``), a summary of nothing read or written."""
    from zephyr.summary import Summary

    if not args.json:
        sys.stdout.write(plan + "\n")
    return Summary(0, 0, bytes_in=None, details={"ran": False, "plan": plan})


def jobs_plan_text(
    command: str,
    steps: list[PlanStep],
    budget: Budget,
    execution: dict[str, Any],
    *,
    then: str = "the budget shares",
) -> str:
    """The plan of a command that runs several engine jobs (``zephyr explain dedup ...``, ``filter``,
    ``tokenize``): a header, each job's plan (``Dataset.explain`` without its budget lines) or decision
    (a ``then:`` line: ``then`` says what they hold), then the budget's shares once."""
    lines = [
        f"{command}: nothing ran. The physical plans of its engine jobs in the order they run; "
        f"'then:' lines are {then} that choose between them"
    ]
    for title, plan in steps:
        if plan is None:
            lines.append(f"then: {title}")
            continue
        lines.append(title)
        text = plan.explain(**execution).split("\nbudget shares", 1)[0]
        lines.extend("  " + line for line in text.splitlines())
    lines.append(f"budget shares (bytes per task, of {budget.bytes:,}):")
    lines.extend("  " + line for line in budget.describe().splitlines())
    return "\n".join(lines)


def explain_commands(subparsers) -> argparse._SubParsersAction:
    """The ``zephyr explain`` command group, for a package to add the plans of its own commands (``zephyr
    explain dedup exact``): ``register`` creates it, before the packages listed after this module in
    ``zephyr.cli.COMMAND_MODULES`` register theirs."""
    return subparsers.choices["explain"].commands


def _count(args: argparse.Namespace):
    """Prints the readable rows on stdout (the command's data: ``n=$(zephyr count data/)``); rows set aside
    by ``--on-error quarantine`` are in the summary, never lost silently (the count alone would not show
    them). With ``--json`` the count is the summary's ``rows_kept`` and stdout holds only the JSON."""
    from zephyr import job_stats
    from zephyr.cli import execution_options
    from zephyr.summary import Summary

    with job_stats.recording() as jobs:
        rows = _reader(args).count(**execution_options(args).as_kwargs())
    if not args.json:
        sys.stdout.write(f"{rows}\n")
    quarantined = sum(job.get("rows_quarantined", 0) for job in jobs)
    where = next((job["quarantine_dir"] for job in jobs if job.get("quarantine_dir")), None)
    return Summary(rows + quarantined, rows, rows_quarantined=quarantined, quarantine_output=where)


def register(subparsers, common: argparse.ArgumentParser) -> None:
    from zephyr.cli import add_output_dir

    convert = subparsers.add_parser("convert", parents=[common], help="rewrite files in another format")
    _add_inputs(convert)
    add_output_dir(convert, "output directory (part-00000.<ext>, ...)")
    convert.add_argument("--to", choices=("parquet", "jsonl", "vortex"), default="parquet")
    convert.add_argument("--compression", choices=("gzip", "zstd"), default=None, help="for --to jsonl")
    convert.set_defaults(func=_convert)

    sort = subparsers.add_parser("sort", parents=[common], help="globally sort rows by columns (nulls last)")
    _add_inputs(sort)
    _add_sort_keys(sort)
    add_output_dir(sort)
    sort.set_defaults(func=_sort, to="parquet")

    count = subparsers.add_parser("count", parents=[common], help="count rows")
    _add_inputs(count)
    count.set_defaults(func=_count)
    _register_explain(subparsers, common)


def _add_sort_keys(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--by", required=True, help="comma-separated column names")
    parser.add_argument("--descending", action="store_true")


def _register_explain(subparsers, common: argparse.ArgumentParser) -> None:
    explain = subparsers.add_parser(
        "explain",
        help="print the physical plan of an engine command without running it",
        description="Print the physical plan a command would run: its stages in order, the shuffles between "
        "them, partition counts and the memory budget's shares in bytes. Nothing runs; inputs are listed and "
        "Parquet footers read to size partitions as the run would. Give the command's own arguments without "
        "--output, e.g. zephyr explain sort data/ --by url --memory-budget 512MB. Commands of several engine "
        "jobs (dedup exact|fuzzy|url|paragraph|substring, filter, tokenize) print each job's plan in the order "
        "they run, with 'then:' lines for the rules and budget shares that choose between them.",
    )
    commands = explain.add_subparsers(dest="explain_command", metavar="COMMAND", required=True)
    explain.commands = commands  # where other packages add theirs (``explain_commands``)
    for name in _EXPLAINED:
        parser = commands.add_parser(name, parents=[common], help=f"the plan of zephyr {name}")
        _add_inputs(parser)
        if name == "sort":
            _add_sort_keys(parser)
        parser.set_defaults(func=_explain)
