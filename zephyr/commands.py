"""Engine subcommands: ``convert``, ``count`` and ``sort`` over Parquet/JSONL/Vortex files.

Each is a one-line plan on the engine, so they also resume (``--work-dir``), retry and spill like any job:

    zephyr convert 'raw/*.jsonl.zst' --output data/ --to parquet --workers 2
    zephyr sort data/ --by url --output sorted/ --memory-budget 512MB
    zephyr count data/
"""

from __future__ import annotations

import argparse
import sys

from zephyr.io.input_schema import add_schema_arguments

__all__ = ["register"]


def _reader(args: argparse.Namespace):
    import zephyr
    from zephyr.io.input_schema import schema_arguments

    return zephyr.read(list(args.inputs), format=args.format, on_error=args.on_error, **schema_arguments(args))


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
    if not result.files:  # no row to write: the output is an empty directory, not a missing one
        import fsspec

        fs, root = fsspec.core.url_to_fs(args.output)
        fs.makedirs(root, exist_ok=True)
    from zephyr.summary import from_stages

    return from_stages(
        result.stats["stages"],
        output=args.output,
        details={"files": len(result.files)},
        next=f"zephyr count {args.output}",
    )


def _convert(args: argparse.Namespace) -> int:
    return _write(_reader(args), args)


def _sort(args: argparse.Namespace) -> int:
    by = [c.strip() for c in args.by.split(",") if c.strip()]
    return _write(_reader(args).sort(*by, descending=args.descending), args)


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
    sort.add_argument("--by", required=True, help="comma-separated column names")
    sort.add_argument("--descending", action="store_true")
    add_output_dir(sort)
    sort.set_defaults(func=_sort, to="parquet")

    count = subparsers.add_parser("count", parents=[common], help="count rows")
    _add_inputs(count)
    count.set_defaults(func=_count)
