"""The ``zephyr`` command line: one entry point, a subcommand per capability.

Every subcommand accepts the global execution options (``--workers``, ``--executor``, ``--cluster``,
``--memory-budget``, ``--work-dir``) after its own name, e.g. ``zephyr dedup exact IN --output OUT --workers 2``.
Each capability registers its subcommands from its own package through ``register(subparsers, common)``;
``COMMAND_MODULES`` lists them. Heavy imports happen inside the handlers, so ``zephyr --help`` is fast.

A handler returns a ``zephyr.summary.Summary``; ``main`` times the command and prints it the one way every
command ends: a table on stderr, or with ``--json`` one JSON object on stdout with the same keys for every
command (``zephyr.summary.KEYS``).

Ctrl-C ends a command with one line (``zephyr dedup fuzzy: interrupted; rerun the same command to resume``)
and exit code 130, after the command has stopped its workers (``_catch_interrupts``).

Engine subcommands: ``convert``, ``count`` and ``sort`` over Parquet/JSONL/Vortex files, and ``explain``.

Each is a one-line plan on the engine, so they also resume (``--work-dir``), retry and spill like any job:

    zephyr convert 'raw/*.jsonl.zst' --output data/ --to parquet --workers 2
    zephyr sort data/ --by url --output sorted/ --memory-budget 512MB
    zephyr count data/

``zephyr explain sort data/ --by url --memory-budget 512MB`` prints the physical plan the same command would
run (stages, shuffles, partition counts, budget shares; ``zephyr.physical``) and runs nothing: it takes the
command's own arguments, without ``--output``. Packages add their commands' plans to the same group
(``explain_commands``): ``zephyr explain dedup exact|fuzzy|url|paragraph|substring`` (``zephyr.dedup.explain``),
``zephyr explain filter`` (``zephyr.pipelines.quality.cli_filter``) and ``zephyr explain tokenize``
(``zephyr.tokenize.writer.plan_text``); a command of several engine jobs prints each job's plan in order with the rules
between them (``jobs_plan_text``).

What the ``zephyr`` command prints when a command fails: one line to act on, and where the rest is.

Every subcommand's errors pass through ``report_failure`` (called once, by ``zephyr.cli.main``), so they all
read the same way on stderr::

    zephyr convert: error: InputError: in.jsonl:2: invalid JSON: ... or pass --on-error quarantine ... [stage ...]
    full traceback: /home/me/.local/state/zephyr/logs/zephyr-4242.log

Why: a worker's traceback is 25-60 lines of engine frames, and the line a person can act on (the error class,
the file and line or row, the fix) is at its bottom, often below a second traceback. The full text is not
lost: it goes to a log file every time, and ``-v`` prints it too.

The log folder is the user's own (``log_dir``): ``$XDG_STATE_HOME/zephyr/logs`` (``~/.local/state/zephyr/logs``
by default), or ``zephyr-<uid>`` in the temp directory when that cannot be made. A traceback names files and
paths of the user's data, and a shared temp directory lets anyone plant a symbolic link where a log will be
opened, so the folder must be a directory (not a link) owned by the user with mode 0700 — one that is not is
refused, never repaired — and each log is created new (``O_CREAT | O_EXCL | O_NOFOLLOW``, mode 0600): a
name already taken, a link included, is never opened. Only the newest ``KEEP_LOGS`` logs are kept.

Messages of the library name its keyword arguments (``on_error='quarantine'``); on the command line they are
flags, so ``_CLI_SPELLING`` rewrites them here rather than every message knowing who called it.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import gc
import importlib
import logging
import os
import shlex
import signal
import stat
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from zephyr.errors import ConfigError, ResumeError, TaskError, one_line
from zephyr.options import ExecutionOptions

if TYPE_CHECKING:
    from zephyr.budget import Budget
    from zephyr.dataset import Dataset

__all__ = [
    "main",
    "build_parser",
    "execution_options",
    "quarantine_dir",
    "add_on_error",
    "add_output_dir",
    "add_dropped_output",
    "add_replace_columns",
    "report_failure",
    "log_dir",
    "write_log",
    "KEEP_LOGS",
    "PlanStep",
    "explain_commands",
    "explained",
    "jobs_plan_text",
    "register",
]


COMMAND_MODULES = (  # after the engine commands of this module (convert, count, sort, explain)
    "zephyr.dedup.cli",
    "zephyr.pipelines.quality.cli",
    "zephyr.pipelines.web.cli",
    "zephyr.tokenize.cli",
    "zephyr.trainer.cli",
    "zephyr.pipelines.cli",
)


def _common_parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    group = common.add_argument_group("execution (accepted by every command)")
    group.add_argument("--workers", type=int, default=None, help="workers (default: one per core)")
    group.add_argument(
        "--executor",
        choices=("inprocess", "threads", "local", "dask"),
        default=None,
        help="where tasks run: worker processes (local, the default), threads of this process (threads: the "
        "default of the dedup commands, whose work releases the GIL), one task at a time (inprocess), or dask",
    )
    group.add_argument("--cluster", default=None, help="dask scheduler address, e.g. tcp://127.0.0.1:8786")
    group.add_argument(
        "--memory-budget", default="1GiB", help="bytes of data per worker before spilling (e.g. 512MB, 4GiB)"
    )
    group.add_argument("--work-dir", default=None, help="fsspec URL for spills/markers; given, reruns resume")
    group.add_argument(
        "--small-job-bytes",
        default="4MiB",
        help="with --executor local, inputs estimated below this run in this process (0: always use workers)",
    )
    group.add_argument("--max-retries", type=int, default=2, help="extra tries per failing task")
    group.add_argument(
        "--coalesce-runs",
        choices=("auto", "always", "never"),
        default="auto",
        help="concatenate each group of map tasks' shuffle runs before the reducers read them: fewer requests "
        "on an object store (auto: there, when the runs' parts are small)",
    )
    group.add_argument(
        "--progress",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="one progress line on stderr: rows and bytes read (training: steps), rate, ETA (default: only on a "
        "terminal)",
    )
    group.add_argument(
        "--json",
        action="store_true",
        help="end with one JSON object on stdout (rows in/kept/dropped/quarantined, bytes, seconds, output; "
        "the same keys for every command, see zephyr.summary) instead of the summary table on stderr",
    )
    group.add_argument("-v", "--verbose", action="count", default=0, help="more log output (-vv for debug)")
    return common


def add_on_error(parser: argparse.ArgumentParser) -> None:
    """``--on-error raise|quarantine`` for a command that reads input; read it back as ``args.on_error``.

    One definition for every command, so the hint in bad-input errors (``--on-error quarantine``, see
    ``zephyr.cli``) is true wherever it is printed.
    """
    parser.add_argument(
        "--on-error",
        choices=("raise", "quarantine"),
        default="raise",
        help="bad input rows (invalid JSON lines, invalid UTF-8): fail naming file and line (raise, the default) "
        "or set them aside in the quarantine output and go on (quarantine; counted in the stats)",
    )


def add_replace_columns(
    parser: argparse.ArgumentParser, columns: str, *, default: str, output_help: str
) -> None:
    """``--replace-columns`` and ``--output-column NAME`` for a command that adds ``columns`` to the rows; read
    them back as ``args.replace_columns`` and ``args.output_column`` (``default`` when not given).

    Without either, such a command refuses an input that already has one of them (``zephyr.removal``):
    replacing a column is a choice a person makes, never a side effect. One definition, so the hint in that
    error (``--replace-columns``, see ``zephyr.cli``) is true wherever it is printed.
    """
    parser.add_argument(
        "--replace-columns",
        action="store_true",
        help=f"replace {columns} when the input already has them (without it: an error, before any work)",
    )
    parser.add_argument(
        "--output-column", default=default, metavar="NAME", help=f"{output_help} (default: {default})"
    )


def add_dropped_output(parser: argparse.ArgumentParser, what: str) -> None:
    """``--dropped-output DIR`` for a command that drops rows; read it back as ``args.dropped_output``. The
    command routes its rows with ``zephyr.removal`` when it is given (one definition: the same words and
    semantics on every command)."""
    parser.add_argument(
        "--dropped-output",
        default=None,
        metavar="DIR",
        help=f"also write the {what} to DIR as Parquet, each with its reason in a drop_reason column "
        "(default: dropped rows are counted, not kept)",
    )


def add_output_dir(parser: argparse.ArgumentParser, help: str = "output directory") -> None:
    """``--output DIR`` and ``--overwrite`` for a command that writes a directory. ``main`` claims it before the
    command starts (``zephyr.io.claim``): refused in one line when it is, contains or lies inside an input, when
    another command holds its lock, or when it holds files zephyr did not write (unless ``--overwrite``); a
    read-only location or a file in the way is one line naming the path, not a failure after the work."""
    parser.add_argument("--output", required=True, help=help)
    parser.add_argument(
        "--overwrite",
        action="store_true",
        help="replace the output folder's content even when it holds files zephyr did not write (without it: "
        "an error naming one, before any work); a folder a finished zephyr run wrote is replaced without it",
    )
    parser.set_defaults(output_is_dir=True)


def execution_options(args: argparse.Namespace) -> ExecutionOptions:
    """The ``ExecutionOptions`` given by the global flags of a parsed command line. Without ``--executor``, a
    command's own ``default_executor`` (``parser.set_defaults``) applies, else ``local``."""
    return ExecutionOptions(
        executor=args.executor or getattr(args, "default_executor", "local"),
        workers=args.workers,
        cluster=args.cluster,
        memory_budget=args.memory_budget,
        work_dir=args.work_dir,
        max_retries=args.max_retries,
        progress=getattr(args, "progress", None),
        quarantine_dir=quarantine_dir(args),
        small_job_bytes=args.small_job_bytes,
        coalesce_runs=getattr(args, "coalesce_runs", "auto"),
    )


def quarantine_dir(args: argparse.Namespace) -> str | None:
    """Where a command's quarantined rows go: the folder a command picked (``args.quarantine_dir``), else
    ``OUTPUT.zephyr/quarantine`` for a command that writes a directory (in its sidecar, ``zephyr.io.layout``),
    else the engine's default (``<work_dir>/quarantine``, or a temporary folder)."""
    chosen = getattr(args, "quarantine_dir", None)
    if chosen is not None:
        return chosen
    if getattr(args, "output_is_dir", False):
        from zephyr.io.layout import quarantine_dir as beside

        return beside(args.output)
    return None


_INPUT_ARGS = ("inputs", "eval", "model", "labelled", "test", "load_filter", "url_blocklist", "tokenizer")
"""Parsed arguments that name files a command reads: an output may not be, contain or lie inside them."""


def _claim(args: argparse.Namespace, claims: contextlib.ExitStack) -> None:
    """Claim what the command writes for its whole run (``zephyr.io.claim``, ``zephyr.io.lock``): its output
    folder and ``--dropped-output`` (not an input, locked, only zephyr's files unless ``--overwrite``) and its
    work dir (locked from the first of its engine jobs to the last; a command of one job, such as ``count``, is
    locked by that job, ``zephyr.job.Job``). Refusals are one line, before any work."""
    from zephyr.io import claim, lock

    if args.command == "explain":  # runs nothing: claims nothing, and leaves no folder behind
        return
    inputs: list[str] = []
    for name in _INPUT_ARGS:
        value = getattr(args, name, None)
        if isinstance(value, str):
            inputs.append(value)
        elif isinstance(value, list | tuple):
            inputs.extend(v for v in value if isinstance(v, str))
    inputs = [p for p in inputs if _names_a_path(p)]
    work_dir = getattr(args, "work_dir", None)
    overwrite = getattr(args, "overwrite", False)
    if getattr(args, "output_is_dir", False):
        claims.enter_context(
            claim.claimed(args.output, inputs=inputs, overwrite=overwrite, work_dir=work_dir, flag="--output")
        )
    dropped = getattr(args, "dropped_output", None)
    if dropped:
        claims.enter_context(
            claim.claimed(dropped, inputs=inputs, overwrite=overwrite, flag="--dropped-output")
        )
    if work_dir and getattr(args, "output_is_dir", False):  # jobs of one command, one after the other
        claims.enter_context(lock.held(f"{work_dir.rstrip('/')}/lock.json", "the work dir", work_dir))


def _names_a_path(value: str) -> bool:
    """A file argument, not a name (``--tokenizer gpt2`` names a preset; a path has a separator or exists)."""
    return "/" in value or os.path.exists(value)


def build_parser() -> argparse.ArgumentParser:
    common = _common_parser()
    parser = argparse.ArgumentParser(
        prog="zephyr",
        description="zephyr: process LLM pretraining corpora — shuffle, dedup, filter, tokenize, train.",
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    register(subparsers, common)
    for module_name in COMMAND_MODULES:
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name != module_name:  # the module exists but one of its imports is missing: say so
                raise
            continue
        module.register(subparsers, common)
    return parser


def _label(args: argparse.Namespace) -> str:
    """``zephyr dedup fuzzy``: the command words the user typed (the parsers' ``*command`` destinations)."""
    words = [args.command] + [v for k, v in sorted(vars(args).items()) if k.endswith("_command") and v]
    return "zephyr " + " ".join(str(w) for w in words if w)


def _emit(summary, args: argparse.Namespace, seconds: float, quarantine: str | None) -> None:
    """Print a command's ``Summary`` the one way every command ends (``zephyr.summary``)."""
    from zephyr.summary import emit

    if summary.quarantine_output is None:
        summary.quarantine_output = quarantine
    inputs = getattr(args, "inputs", None)
    emit(summary, command=_label(args), seconds=seconds, inputs=inputs, as_json=getattr(args, "json", False))


def _interrupted_line(args: argparse.Namespace) -> str:
    """What Ctrl-C prints: the command and how to go on. Only a command that keeps its work (``--work-dir``,
    ``zephyr run``'s job folder, training's checkpoints) resumes; the others start again."""
    keeps = getattr(args, "work_dir", None) or args.command == "run" or getattr(args, "checkpoint_dir", None)
    if keeps:
        return f"{_label(args)}: interrupted; rerun the same command to resume"
    return (
        f"{_label(args)}: interrupted; rerun the same command to start again (with --work-dir DIR, a rerun "
        "resumes)"
    )


def _catch_interrupts(line: str) -> Callable[[], None]:
    """Ctrl-C while a command runs. The first raises ``KeyboardInterrupt`` where the driver is, and the command
    unwinds: executors stop their workers (``close``), clusters close, ``main`` prints ``line`` and returns
    130. A second one while that goes on ends the process at once with ``line``: its local workers die with it
    (``executors/local.py``), and so do dask's (their parent-alive pipe). Left alone where the caller ignores
    Ctrl-C (a background job) or has a handler of its own, and off the main thread, where none can be set.
    Returns the function that puts the caller's handler back."""
    if (
        threading.current_thread() is not threading.main_thread()
        or signal.getsignal(signal.SIGINT) is not signal.default_int_handler
    ):
        return lambda: None
    seen = 0

    def on_sigint(signum: int, frame: object) -> None:
        nonlocal seen
        seen += 1
        if seen == 1:
            raise KeyboardInterrupt
        print(line, file=sys.stderr, flush=True)
        os._exit(130)

    signal.signal(signal.SIGINT, on_sigint)
    return lambda: signal.signal(signal.SIGINT, signal.default_int_handler)


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    level = logging.WARNING - 10 * min(getattr(args, "verbose", 0), 2)
    fresh = not logging.getLogger().handlers
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if fresh:  # the level holds for loggers set lower too (distributed's INFO records reached stderr)
        logging.getLogger().handlers[0].setLevel(level)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    interrupted = _interrupted_line(args)
    restore_sigint = _catch_interrupts(interrupted)
    try:
        from zephyr import job_stats, progress
        from zephyr.io import lock
        from zephyr.summary import Summary

        lock.set_command_line(shlex.join(["zephyr", *(sys.argv[1:] if argv is None else argv)]))
        started = time.perf_counter()
        with contextlib.ExitStack() as claims:
            _claim(args, claims)
            with (
                job_stats.recording() as jobs,
                progress.command(_label(args), getattr(args, "progress", None)),
            ):
                outcome = args.func(args)
            code = outcome.exit_code if isinstance(outcome, Summary) else int(outcome or 0)
            quarantine = quarantine_dir(args)
            if code == 0 and quarantine is not None:
                from zephyr.io.publish import prune_quarantine

                prune_quarantine(quarantine, jobs)
        if isinstance(outcome, Summary):
            _emit(outcome, args, time.perf_counter() - started, quarantine)
        return code
    except Exception as exc:  # one line to act on; the traceback goes to a log file (and to stderr with -v)
        return report_failure(exc, args, None if argv is None else list(argv))
    except KeyboardInterrupt:  # the command has unwound: its workers are stopped
        print(interrupted, file=sys.stderr)
        return 130
    finally:
        restore_sigint()


def _short_deprecation_lines() -> None:
    """Show a renamed key or flag (``zephyr.config.ZephyrDeprecationWarning``) as one ``zephyr: deprecated:``
    line, not Python's ``file:line:`` form with a source line; other warnings keep Python's format. Set only
    by the executable: ``main`` called in-process (tests, notebooks) leaves the caller's warning hooks alone."""
    import warnings

    from zephyr.config import ZephyrDeprecationWarning

    python_format = warnings.formatwarning

    def short(
        message: Warning | str, category: type[Warning], filename: str, lineno: int, line: str | None = None
    ) -> str:
        if issubclass(category, ZephyrDeprecationWarning):
            return f"zephyr: deprecated: {message}\n"
        return python_format(message, category, filename, lineno, line)

    warnings.formatwarning = short


def console_main() -> None:
    """The ``zephyr`` executable: ``main``, then exit without the interpreter's teardown.

    Every command has closed its files, workers and clusters by the time ``main`` returns; what remains is
    unloading pyarrow's allocators, LLVM (numba) and thread pools, ~0.25–0.6 s of a short command's wall time.
    """
    _short_deprecation_lines()
    code = main()
    gc.collect()  # scratch folders (materialize) are removed by finalizers, which os._exit would skip
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


PlanStep = tuple[str, "Dataset | None"]
"""One step of a multi-job command's printed plan: a job (its title and plan) or a decision between jobs
(its rule, no plan)."""


def _reader(args: argparse.Namespace):
    import zephyr
    from zephyr.io.schema import schema_arguments

    return zephyr.read(
        list(args.inputs), format=args.format, on_error=args.on_error, **schema_arguments(args)
    )


def _add_inputs(parser: argparse.ArgumentParser) -> None:
    from zephyr.io.schema import add_schema_arguments

    parser.add_argument("inputs", nargs="+", metavar="INPUT", help="files, directories, globs or fsspec URLs")
    parser.add_argument("--format", choices=("auto", "parquet", "jsonl", "vortex"), default="auto")
    add_on_error(parser)
    add_schema_arguments(parser)


def _write(dataset, args: argparse.Namespace) -> int:
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
    explain dedup exact``): ``register`` creates it, before the packages of
    ``COMMAND_MODULES`` register theirs."""
    return subparsers.choices["explain"].commands


def _count(args: argparse.Namespace):
    """Prints the readable rows on stdout (the command's data: ``n=$(zephyr count data/)``); rows set aside
    by ``--on-error quarantine`` are in the summary, never lost silently (the count alone would not show
    them). With ``--json`` the count is the summary's ``rows_kept`` and stdout holds only the JSON."""
    from zephyr import job_stats
    from zephyr.summary import Summary

    with job_stats.recording() as jobs:
        rows = _reader(args).count(**execution_options(args).as_kwargs())
    if not args.json:
        sys.stdout.write(f"{rows}\n")
    quarantined = sum(job.get("rows_quarantined", 0) for job in jobs)
    where = next((job["quarantine_dir"] for job in jobs if job.get("quarantine_dir")), None)
    return Summary(rows + quarantined, rows, rows_quarantined=quarantined, quarantine_output=where)


def register(subparsers, common: argparse.ArgumentParser) -> None:
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


KEEP_LOGS = 20
"""Traceback logs kept in the log folder; older ones are removed when a new one is written."""

_CLI_SPELLING = (
    ("pass replace_columns=True", "pass --replace-columns", "replace_columns"),
    ("pass overwrite=True", "pass --overwrite", "overwrite"),
    ("on_error='quarantine'", "--on-error quarantine", "on_error"),
    ('on_error="quarantine"', "--on-error quarantine", "on_error"),
    (
        "Pass schema= to read_jsonl with the type you want for it (e.g. pa.string())",
        "Pass --schema FILE with the type you want for it (e.g. a YAML file of 'column: string')",
        "schema",
    ),
)
"""(library spelling, command-line spelling, the ``argparse`` dest that must exist for the flag to apply)."""


def log_dir() -> str:
    """The user's log folder: ``$XDG_STATE_HOME/zephyr/logs``, or ``~/.local/state/zephyr/logs`` (the XDG
    default). ``write_log`` falls back to ``zephyr-<uid>`` in the temp directory when this cannot be made."""
    state = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    return os.path.join(state, "zephyr", "logs")


def _private_dir(path: str) -> int:
    """An open descriptor of the folder ``path``, created 0700 when missing; raises ``OSError`` naming why a
    folder that exists cannot hold logs (a link, another owner, open to others)."""
    with contextlib.suppress(FileExistsError):
        os.makedirs(os.path.dirname(path), exist_ok=True)
        os.mkdir(path, 0o700)
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        info = os.fstat(fd)  # of the folder opened, not of whatever the name points to by now
        if info.st_uid != os.geteuid():
            raise OSError(errno.EPERM, f"owned by uid {info.st_uid}, not by you; remove it", path)
        if stat.S_IMODE(info.st_mode) & 0o077:
            raise OSError(
                errno.EPERM,
                f"mode {stat.S_IMODE(info.st_mode):04o}, not 0700; remove it or chmod 700 it",
                path,
            )
    except BaseException:
        os.close(fd)
        raise
    return fd


def _create_log(dir_fd: int) -> tuple[str, int]:
    """A new log file in the folder ``dir_fd`` (``O_EXCL | O_NOFOLLOW``, 0600): its name and open descriptor."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    for attempt in range(100):  # a pid seen before (recycled, or a second failure in one process)
        name = f"zephyr-{os.getpid()}.log" if attempt == 0 else f"zephyr-{os.getpid()}.{attempt}.log"
        try:
            return name, os.open(name, flags, 0o600, dir_fd=dir_fd)
        except FileExistsError:
            continue
    raise OSError(errno.EEXIST, "100 logs of this process id exist already", f"zephyr-{os.getpid()}.log")


def _prune(dir_fd: int, keep: int) -> None:
    """Remove all but the newest ``keep`` logs (by modification time; names break ties)."""
    logs = []
    for name in os.listdir(dir_fd):
        if name.startswith("zephyr-") and name.endswith(".log"):
            with contextlib.suppress(FileNotFoundError):  # another zephyr pruning at the same time
                logs.append((os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mtime_ns, name))
    for _, name in sorted(logs, reverse=True)[keep:]:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(name, dir_fd=dir_fd)


def write_log(text: str) -> str:
    """Write ``text`` to a new log file in the user's log folder (see the module docstring) and return its
    path; raises ``OSError`` when neither folder can take it."""
    fallback = os.path.join(tempfile.gettempdir(), f"zephyr-{os.geteuid()}")
    problems = []
    for folder in (log_dir(), fallback):
        try:
            fd = _private_dir(folder)
        except OSError as exc:
            problems.append(f"{folder}: {exc.strerror or exc}")
            continue
        try:
            name, log_fd = _create_log(fd)
            with open(log_fd, "w", encoding="utf-8") as f:
                f.write(text)
            _prune(fd, KEEP_LOGS)
            return os.path.join(folder, name)
        finally:
            os.close(fd)
    raise OSError(errno.EPERM, "no private log folder: " + "; ".join(problems))


def _summary(exc: BaseException, args: argparse.Namespace) -> str:
    text = str(exc) if isinstance(exc, TaskError) else one_line(exc)
    text = " ".join(text.split())  # one line, whatever the message held
    return _cli_spelling(text, args)


def _cli_spelling(text: str, args: argparse.Namespace) -> str:
    for library, flag, dest in _CLI_SPELLING:
        if hasattr(args, dest):
            text = text.replace(library, flag)
    return text


def _write_log(exc: BaseException, argv: list[str]) -> tuple[str | None, str | None]:
    """Log the full traceback (the workers' included, as notes): (the log's path, None), or (None, why not)."""
    text = f"{time.strftime('%Y-%m-%d %H:%M:%S')} zephyr {' '.join(argv)}\n"
    text += "".join(traceback.format_exception(exc)) + "\n"
    try:
        return write_log(text), None
    except OSError as err:  # the disk may be full, the folders refused
        return None, " ".join(str(err.strerror or err).split())


def report_failure(exc: BaseException, args: argparse.Namespace, argv: list[str] | None = None) -> int:
    """Print the failure of ``zephyr <args.command>`` (one line; the traceback too with ``-v``), log the full
    traceback, and return the exit code (1). Configuration errors (``ConfigError``, ``ResumeError``) print
    their message only: each listed problem on its own line, no traceback log."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if isinstance(exc, ConfigError | ResumeError) and not getattr(args, "verbose", 0):
        # a bad setting, found before any work: the message is the whole story (a list of problems keeps
        # one line each), and a traceback of the checking code would help nobody
        print(f"zephyr {args.command}: error: {_cli_spelling(str(exc), args)}", file=sys.stderr)
        return 1
    path, unwritten = _write_log(exc, argv)
    if getattr(args, "verbose", 0):
        traceback.print_exception(exc, file=sys.stderr)
    print(f"zephyr {args.command}: error: {_summary(exc, args)}", file=sys.stderr)
    if path is not None:
        print(f"full traceback: {path}", file=sys.stderr)
    else:
        print(f"full traceback: not written ({unwritten}); rerun with -v to see it", file=sys.stderr)
    return 1


if __name__ == "__main__":
    console_main()
