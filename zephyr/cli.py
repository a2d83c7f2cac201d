"""The ``zephyr`` command line: one entry point, a command per capability, declared once.

A command is a ``Command``: its words (``"dedup exact"``), the dataclasses whose fields are its flags
(``zephyr.flags``: type, default and help from each field), the function it runs and, when it has one, the
function that plans it (its ``zephyr explain`` twin prints what that returns and runs nothing). Flags that
several commands share are declared once, as the option groups ``Inputs`` (the files read), ``Output`` (the
folder written), ``zephyr.removal.Removal`` (what a removing command does with the rows it removes) and
``ExecutionOptions`` (how it runs: accepted by every command after its name, e.g. ``zephyr dedup exact IN
--output OUT --workers 2``). Each package's ``cli`` module ends in ``COMMANDS = [Command(...), ...]`` (and
``GROUPS``, the help of its first words); ``COMMAND_MODULES`` lists them.

A command returns a ``zephyr.summary.Summary``; ``main`` times the command and prints it the one way every
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
command's own arguments (its ``--output`` and ``--overwrite`` are accepted and ignored, so a command line works
with ``explain`` in front); a command of several engine jobs prints each job's plan in order with the rules
between them (``zephyr.physical.explain_jobs``).

What the ``zephyr`` command prints when a command fails: one line to act on, and where the rest is.

Every subcommand's errors pass through ``report_failure`` (called once, by ``zephyr.cli.main``), so they all
read the same way on stderr::

    zephyr convert: error: InputError: in.jsonl:2: invalid JSON: ... or pass --on-error quarantine ... [stage ...]
    full traceback: /home/me/.local/state/zephyr/logs/zephyr-4242-k2n7q0x1.log

Why: a worker's traceback is 25-60 lines of engine frames, and the line a person can act on (the error class,
the file and line or row, the fix) is at its bottom, often below a second traceback. The full text is not
lost: it goes to a log file every time, and ``-v`` prints it too.

The log folder is the user's own: ``$XDG_STATE_HOME/zephyr/logs`` (``~/.local/state/zephyr/logs`` by
default, made mode 0700), or the temp directory when that cannot be made. A traceback names files and paths of
the user's data, and in a shared temp directory anyone can plant a symbolic link where a log will be opened, so
each log is a new file, ``zephyr-<pid>-<random>.log`` (``tempfile.mkstemp``: ``O_CREAT | O_EXCL``, mode
0600): a name already taken, a link included, is never opened. Only the newest ``KEEP_LOGS`` logs of the log folder are kept.

Messages of the library name its keyword arguments (``on_error='quarantine'``); on the command line they are
flags, so ``_cli_spelling`` rewrites them here, from the command's own flags, rather than every message knowing
who called it.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import glob
import importlib
import inspect
import logging
import os
import re
import shlex
import signal
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any, Literal

from zephyr.config import ConfigProblems
from zephyr.errors import ConfigError, ResumeError, TaskError, one_line
from zephyr.flags import add_flags, comma_names, config_from_flags, flag_specs, metavar
from zephyr.options import ExecutionOptions
from zephyr.removal import Removal

if TYPE_CHECKING:
    from zephyr.dataset import Dataset

log = logging.getLogger(__name__)

COMMAND_MODULES = {  # after the engine commands of this module (convert, count, sort, explain)
    "zephyr.dedup.cli": ("dedup",),
    "zephyr.tokenize.cli": ("tokenize", "tokenizer"),
    "zephyr.trainer.cli": ("train",),
    "zephyr.pipelines.cli": (
        "run",
        "normalize",
        "langid",
        "filter",
        "quality",
        "pii",
        "decontaminate",
        "extract",
    ),
}
"""Each package's command module and the first words of its commands: ``main`` imports only the module of the
command typed (``zephyr train`` needs neither pyarrow nor polars); ``--help``, or a word not listed here,
imports them all."""


def _writes(args: argparse.Namespace) -> bool:
    """Whether the command typed (``args.zephyr``: its ``Command`` and whether it is the ``explain`` twin) writes
    a directory: it has the ``Output`` group, and is not its ``explain`` twin."""
    command, explain = getattr(args, "zephyr", (None, True))
    return not explain and any(issubclass(cls, Output) for cls in command.options.values())


def _claim(args: argparse.Namespace, claims: contextlib.ExitStack) -> None:
    """Claim what the command writes for its whole run (``zephyr.io.claim``): its output
    folder and ``--dropped-output`` (not an input, locked, only zephyr's files unless ``--overwrite``) and its
    work dir (locked from the first of its engine jobs to the last; a command of one job, such as ``count``, is
    locked by that job, ``zephyr.job.Job``). Refusals are one line, before any work."""
    from zephyr.io import claim

    command, explain = args.zephyr
    if explain:  # runs nothing: claims nothing, and leaves no folder behind
        return
    reads = [s.dest for c in command.options.values() for s in flag_specs(c) if s.field.metadata.get("reads")]
    values = [getattr(args, dest, None) for dest in reads]  # the files read: not to be written
    given = [v for value in values for v in (value if isinstance(value, list | tuple) else [value])]
    # a file argument, not a name (``--tokenizer gpt2`` names a preset): a path has a separator or exists
    inputs = [p for p in given if isinstance(p, str) and ("/" in p or os.path.exists(p))]
    work_dir = getattr(args, "work_dir", None)
    overwrite = getattr(args, "overwrite", False)
    if _writes(args):
        claims.enter_context(
            claim.claimed(args.output, inputs=inputs, overwrite=overwrite, work_dir=work_dir, flag="--output")
        )
    dropped = getattr(args, "dropped_output", None)
    if dropped:
        claims.enter_context(
            claim.claimed(dropped, inputs=inputs, overwrite=overwrite, flag="--dropped-output")
        )
    if work_dir and _writes(args):  # jobs of one command, one after the other
        claims.enter_context(claim.held(f"{work_dir.rstrip('/')}/lock.json", "the work dir", work_dir))


def build_parser(argv: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """The ``zephyr`` parser: the engine's ``COMMANDS`` and those of every module of ``COMMAND_MODULES``, each
    ``Command`` with its ``explain`` twin when it has ``plans``.
    Given the command line ``argv``, only the module of its command (``zephyr explain WORD``: of WORD)."""
    words = [a for a in argv or () if not a.startswith("-")][:2]
    word = words[1] if words[:1] == ["explain"] and len(words) > 1 else (words or [None])[0]
    own = {command.words.split()[0] for command in COMMANDS}
    chosen = [m for m, first in COMMAND_MODULES.items() if word in first]
    parser = _parser(chosen if chosen or word in own else list(COMMAND_MODULES))
    if chosen and word not in parser._subparsers._group_actions[0].choices:
        return _parser(list(COMMAND_MODULES))  # the word moved to another module: look in all of them
    return parser


def _parser(module_names: list[str]) -> argparse.ArgumentParser:
    """The parser of the engine's commands and those of ``module_names``: each command's parser has the flags of
    its option groups, after the flags every command accepts (``ExecutionOptions``' fields, ``--json`` and
    ``-v``). A flag not given is left out of the namespace: its default is the field's (``--executor``: the
    command's own ``default_executor``)."""
    from zephyr import __version__

    common = argparse.ArgumentParser(add_help=False)
    add_flags(common, ExecutionOptions, group="execution (accepted by every command)")
    group = common._action_groups[-1]
    group.add_argument(
        "--json",
        action="store_true",
        help="end with one JSON object on stdout (rows in/kept/dropped/quarantined, bytes, seconds, output; "
        "the same keys for every command, see zephyr.summary) instead of the summary table on stderr",
    )
    group.add_argument("-v", "--verbose", action="count", default=0, help="more log output (-vv for debug)")
    parser = argparse.ArgumentParser(
        allow_abbrev=False,
        prog="zephyr",
        description="zephyr: process LLM pretraining corpora — shuffle, dedup, filter, tokenize, train.",
    )
    parser.add_argument("--version", action="version", version=f"zephyr {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    modules = [sys.modules[__name__]]
    for module_name in module_names:
        try:
            modules.append(importlib.import_module(module_name))
        except ModuleNotFoundError as exc:
            if exc.name != module_name:  # the module exists but one of its imports is missing: say so
                raise
    groups = {words: text for module in modules for words, text in getattr(module, "GROUPS", {}).items()}
    actions: dict[tuple[str, ...], Any] = {(): subparsers}

    def add(command: Command, explain: bool = False) -> None:
        """Add the parser of ``command`` (or of its ``explain`` twin) under its words, making the groups of its
        first words when missing (``dedup`` of ``dedup exact``; their help from a module's ``GROUPS``)."""
        words = (("explain",) if explain else ()) + tuple(command.words.split())
        for depth in range(1, len(words)):
            path = words[:depth]
            if path not in actions:
                group = actions[path[:-1]].add_parser(path[-1], help=groups.get(" ".join(path)))
                dest = "_".join(path) + "_command"
                actions[path] = group.add_subparsers(dest=dest, metavar="COMMAND", required=True)
        help, description = command.texts()
        if explain:
            help, description = f"the plan of zephyr {command.words}", f"The plan of: {description}"
        owner = actions[words[:-1]]
        # ``zephyr train [CONFIG]`` has no subcommands: ``train check`` is one command named by both words
        if isinstance(owner, argparse.ArgumentParser):  # (``main`` joins them)
            words, owner = (*words[:-2], " ".join(words[-2:])), actions[words[:-2]]
        # allow_abbrev: a flag is its whole name (a prefix read as a flag took --output DIR for --output-column)
        parser = owner.add_parser(
            words[-1], parents=[common], help=help, description=description, allow_abbrev=False
        )
        actions[words] = parser
        for cls in command.options.values():
            # the command's own line works with explain in front
            ignored = explain and issubclass(cls, Output)
            title = next((t for c, t in _GROUP_TITLES.items() if issubclass(cls, c)), None)
            title = "output (accepted and ignored: explain writes nothing)" if ignored else title
            add_flags(parser, cls, group=title, skip=command.skip, optional=ignored)
        parser.set_defaults(zephyr=(command, explain))

    for command in COMMANDS:
        add(command)
    explain = subparsers.add_parser("explain", help=_EXPLAIN_HELP, description=_EXPLAIN_DESCRIPTION)
    actions[("explain",)] = explain.add_subparsers(dest="explain_command", metavar="COMMAND", required=True)
    for module in modules:
        for command in module.COMMANDS if module is not modules[0] else []:
            add(command)
        for command in module.COMMANDS:
            if command.plans is not None:
                add(command, explain=True)
    return parser


_EXPLAIN_HELP = "print the physical plan of a command without running it"
_EXPLAIN_DESCRIPTION = (
    "Print the physical plan of each engine job a command would run, in order: stages, shuffles, partition "
    "counts, budget shares. Nothing runs. Give the command's own arguments (--output is accepted and "
    "ignored), e.g. zephyr explain sort data/ --by url --memory-budget 512MB."
)


def _label(args: argparse.Namespace) -> str:
    """``zephyr dedup fuzzy``: the words of the command typed (its ``Command.words``), else its first word."""
    command, explain = getattr(args, "zephyr", (None, False))
    return f"zephyr {'explain ' * explain}{command.words}" if command else f"zephyr {args.command}"


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

    def again(signum: int, frame: object) -> None:
        print(line, file=sys.stderr, flush=True)
        os._exit(130)

    def first(signum: int, frame: object) -> None:
        signal.signal(signal.SIGINT, again)
        raise KeyboardInterrupt

    signal.signal(signal.SIGINT, first)
    return lambda: signal.signal(signal.SIGINT, signal.default_int_handler)


def main(argv: Sequence[str] | None = None) -> int:
    from zephyr.flags import joined_sizes

    argv = joined_sizes(sys.argv[1:] if argv is None else argv)
    parser = build_parser(argv)
    if " ".join(argv[:2]) in parser._subparsers._group_actions[0].choices:  # ``train check``: one command
        argv = [" ".join(argv[:2]), *argv[2:]]
    args = parser.parse_args(argv)
    level = logging.WARNING - 10 * min(getattr(args, "verbose", 0), 2)
    fresh = not logging.getLogger().handlers
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if fresh:  # the level holds for loggers set lower too (distributed's INFO records reached stderr)
        logging.getLogger().handlers[0].setLevel(level)
    if not hasattr(args, "zephyr"):
        parser.print_help()
        return 2
    # what Ctrl-C prints: only a command that keeps its work (--work-dir, zephyr run's job folder, training's
    # checkpoints) resumes; the others start again
    keeps = getattr(args, "work_dir", None) or args.command == "run" or getattr(args, "checkpoint_dir", None)
    how = "resume" if keeps else "start again (with --work-dir DIR, a rerun resumes)"
    interrupted = f"{_label(args)}: interrupted; rerun the same command to {how}"
    restore_sigint = _catch_interrupts(interrupted)
    try:
        from zephyr import job_stats, progress
        from zephyr.io import claim, layout
        from zephyr.summary import Summary, emit

        claim.set_command_line(shlex.join(["zephyr", *argv]))
        started = time.perf_counter()
        # quarantined rows: OUTPUT.zephyr/quarantine for a command that writes a directory (its sidecar,
        # zephyr.io.layout), else the engine's default (None: <work_dir>/quarantine, or a temporary folder)
        quarantine = layout.quarantine_dir(args.output) if _writes(args) else None
        with contextlib.ExitStack() as claims:
            _claim(args, claims)
            with (
                job_stats.recording() as jobs,
                progress.command(_label(args), getattr(args, "progress", None)),
            ):
                outcome = _run_command(*args.zephyr, args, quarantine)
            code = outcome.exit_code if isinstance(outcome, Summary) else int(outcome or 0)
            if code == 0 and quarantine is not None:
                claim.prune_quarantine(quarantine, jobs)
        if isinstance(outcome, Summary):  # printed the one way every command ends (``zephyr.summary``)
            if outcome.quarantine_output is None:
                outcome.quarantine_output = quarantine
            seconds, inputs = time.perf_counter() - started, getattr(args, "inputs", None)
            emit(
                outcome,
                command=_label(args),
                seconds=seconds,
                inputs=inputs,
                as_json=getattr(args, "json", False),
            )
        return code
    except Exception as exc:  # one line to act on; the traceback goes to a log file (and to stderr with -v)
        return report_failure(exc, args, argv)
    except KeyboardInterrupt:  # the command has unwound: its workers are stopped
        print(interrupted, file=sys.stderr)
        return 130
    finally:
        restore_sigint()


def console_main() -> None:
    """The ``zephyr`` executable: ``main``, then exit without the interpreter's teardown.

    Every command has closed its files, workers and clusters by the time ``main`` returns; what remains is
    unloading pyarrow's allocators, LLVM (numba) and thread pools, ~0.25–0.6 s of a short command's wall time.
    """
    code = main()
    gc.collect()  # scratch folders (materialize) are removed by finalizers, which os._exit would skip
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


# -- option groups: declared once, the flags of every command that reads or writes files ------------------
@dataclass(frozen=True)
class Inputs:
    """The files a command reads; ``read()`` is the dataset they make."""

    inputs: list[str] = field(
        default_factory=list, metadata={"positional": True, "metavar": "INPUT", "reads": True}
    )
    """Files, directories, globs or fsspec URLs."""
    format: Literal["auto", "parquet", "jsonl", "vortex"] = "auto"
    """The input format (auto: from the file names, or their first bytes)."""
    on_error: Literal["raise", "quarantine"] = "raise"
    """Bad input rows (invalid JSON lines, invalid UTF-8): fail naming file and line (raise) or set them aside
    in the quarantine output and go on (quarantine; counted in the stats)."""
    unify_schemas: bool = False
    """Promote types that differ between input files (int32+int64 -> int64, int+double -> double)."""
    schema: str | None = field(default=None, metadata={"metavar": "FILE"})
    """Cast every input file to this schema (a Parquet file, or a JSON/YAML map of column to type)."""

    def read(self, **options: Any) -> Dataset:
        """The inputs as a dataset (``zephyr.read``), with ``options`` such as ``approx_shard_bytes``."""
        import zephyr

        given = {f.name: getattr(self, f.name) for f in fields(Inputs)[1:]}  # format, on_error... as flagged
        return zephyr.read(list(self.inputs), **given, **options)


@dataclass(frozen=True)
class Output:
    """The folder a command writes. ``main`` claims it before the command starts (``zephyr.io.claim``):
    refused in one line when it is, contains or lies inside an input, when another command holds its lock, or
    when it holds files zephyr did not write (unless ``overwrite``)."""

    output: str = field(default="", metadata={"required": True, "metavar": "DIR"})
    """Output directory (data files only; stats, quarantine and lock in OUTPUT.zephyr/)."""
    overwrite: bool = False
    """Replace the output folder's content even when it holds files zephyr did not write (without it: an error
    naming one, before any work); a folder a finished zephyr run wrote is replaced without it."""


_GROUP_TITLES = {Inputs: "inputs", Output: "output", Removal: "removed rows"}


# -- the command registry ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class Command:
    """One ``zephyr`` command, declared once: its words, the dataclasses whose fields are its flags, what it
    runs and what it would run.

    ``run`` is called with one object per entry of ``options`` (by its key, built from the flags by
    ``zephyr.flags.config_from_flags``; an options class's ``what`` names it in a list of problems) and
    ``execution`` (the ``ExecutionOptions`` of the execution flags,
    ``default_executor`` unless ``--executor``), and returns a ``zephyr.summary.Summary``. Given ``plans``
    (called like ``run``, without the ``Output`` group), ``zephyr explain WORDS`` exists too: it prints the
    jobs ``plans`` returns (a list of ``zephyr.physical.PlannedJob``, one ``Dataset``, the plan's text, or any object
    whose ``explain(**execution)`` gives it) and runs nothing, so
    the printed plan is the one ``run`` executes when ``run`` executes ``plans``. The help is the first line of
    ``run``'s docstring, the description its first paragraph."""

    words: str
    run: Callable[..., Any]
    options: dict[str, type] = field(default_factory=dict)
    plans: Callable[..., Any] | None = None
    default_executor: str = "local"
    then: str = "the budget shares"
    """What the ``then:`` lines of a multi-job plan hold (``zephyr.physical.explain_jobs``)."""
    skip: tuple[str, ...] = ()
    """Flags of ``options`` left out, by key path (``train check`` declares its own ``--dispatch``)."""

    def texts(self) -> tuple[str, str]:
        """(help, description): the first sentence of ``run``'s docstring, and its first paragraph."""
        doc = inspect.cleandoc(self.run.__doc__ or "")
        first = " ".join(doc.split("\n\n")[0].split())
        short = first.split(". ")[0].rstrip(".")
        return short[:1].lower() + short[1:], first

    def configs(self, given: dict[str, Any], *, explain: bool = False) -> dict[str, Any]:
        """The ``run``/``plans`` keywords the parsed flags ``given`` ask for (``Output`` left out to explain)."""
        return {
            name: config_from_flags(cls, given, what=getattr(cls, "what", f"zephyr {self.words} options"))
            for name, cls in self.options.items()
            if not (explain and issubclass(cls, Output))
        }


def _run_command(command: Command, explain: bool, args: argparse.Namespace, quarantine: str | None) -> Any:
    """Build the configs of ``command`` from the parsed flags and run it (or print its plans); its quarantined
    rows go to ``quarantine`` (None: the engine's default)."""
    given = vars(args)
    configs = command.configs(given, explain=explain)
    execution = config_from_flags(ExecutionOptions, given, what="execution options").replace(
        executor=given.get("executor") or command.default_executor,  # without --executor: the command's
        quarantine_dir=quarantine,
    )
    if not explain:
        planning = {k: v for k, v in configs.items() if not isinstance(v, Output)}
        if command.plans is not None:
            expect_planned(lambda: command.plans(**planning, execution=execution), execution.as_kwargs())
        return command.run(**configs, execution=execution)
    return explain_planned(
        command.words, command.plans(**configs, execution=execution), execution, command.then
    )


def explain_planned(words: str, planned: Any, execution: ExecutionOptions, then: str) -> Any:
    """The ``Summary`` of ``zephyr explain WORDS``, which prints the plans a command's ``plans`` returned (a
    list of ``PlannedJob``: ``zephyr.physical.explain_jobs``; the text itself; else the object's own
    ``explain``) and reads no row; ``zephyr run PIPELINE --explain`` prints a pipeline's the same way."""
    from zephyr.budget import Budget
    from zephyr.physical import explain_jobs
    from zephyr.summary import Summary

    if isinstance(planned, list):
        budget = Budget(execution.memory_budget_bytes)
        plan = explain_jobs(f"zephyr {words}", planned, budget, execution.as_kwargs(), then=then)
    else:  # the plan's text, or an object that writes it (a Dataset)
        plan = planned if isinstance(planned, str) else planned.explain(**execution.as_kwargs())
    return Summary(0, 0, details={"ran": False, "plan": plan}, printed=plan)


def expect_planned(plans: Callable[[], Any], execution: dict[str, Any], what: str = "") -> None:
    """Announce to the progress bar, when one is drawn, the bytes the jobs ``plans()`` plans will read, so that
    its one bar covers them all from the start (``zephyr.progress``); ``what`` starts the log line when the
    plans cannot be built (the run reports its own errors; the bar then grows as the jobs start)."""
    from zephyr import progress
    from zephyr.physical import planned_bytes

    display = progress.current()
    if display is None or isinstance(display, progress.Quiet):
        return
    try:
        display.expect(planned_bytes(plans(), execution))
    except Exception as exc:  # noqa: BLE001 - the run reports its own errors; the bar grows without a plan
        log.info("%sthe progress bar's total grows as the jobs start (no planned total: %s)", what, exc)


# -- the engine's own commands: convert, sort, count ------------------------------------------------------
@dataclass(frozen=True)
class ConvertConfig:
    """``zephyr convert``'s settings."""

    to: Literal["parquet", "jsonl", "vortex"] = "parquet"
    """The output format."""
    compression: Literal["gzip", "zstd"] | None = None
    """Compression of the JSONL files (with --to jsonl)."""


@dataclass(frozen=True)
class SortConfig:
    """``zephyr sort``'s settings."""

    by: list[str] = field(
        default_factory=list, metadata={"parse": comma_names, "required": True, "metavar": "COLUMNS"}
    )
    """Comma-separated column names."""
    descending: bool = False
    """Sort from the largest value down (nulls still last)."""


def _write(dataset: Dataset, output: Output, execution: ExecutionOptions, command: str, **kw: Any) -> Any:
    """Write ``dataset`` (``to``: the format, default parquet), then ``OUTPUT.zephyr/stats.json``; returns the
    command's ``Summary``."""
    from zephyr.summary import write_summary

    write = getattr(dataset, f"write_{kw.pop('to', 'parquet')}")  # write_parquet, write_jsonl, write_vortex
    result = write(output.output, **execution.as_kwargs(), **kw)
    files = {"files": len(result.files)}
    return write_summary(
        result, output.output, command, files, details=files, next=f"zephyr count {output.output}"
    )


def convert(inputs: Inputs, output: Output, execution: ExecutionOptions, config: ConvertConfig) -> Any:
    """Rewrite files in another format."""
    kw = {"compression": config.compression} if config.to == "jsonl" else {}
    return _write(inputs.read(), output, execution, "convert", to=config.to, **kw)


def _sorted(inputs: Inputs, execution: ExecutionOptions, config: SortConfig) -> Dataset:
    return inputs.read().sort(*config.by, descending=config.descending)


def sort(inputs: Inputs, output: Output, execution: ExecutionOptions, config: SortConfig) -> Any:
    """Globally sort rows by columns (nulls last)."""
    return _write(_sorted(inputs, execution, config), output, execution, "sort")


def count(inputs: Inputs, execution: ExecutionOptions) -> Any:
    """Count rows.

    Prints the readable rows on stdout (the command's data: ``n=$(zephyr count data/)``); rows set aside by
    ``--on-error quarantine`` are in the summary, never lost silently (the count alone would not show them).
    With ``--json`` the count is the summary's ``rows_kept`` and stdout holds only the JSON."""
    from zephyr import job_stats
    from zephyr.summary import Summary

    with job_stats.recording() as jobs:
        rows = inputs.read().count(**execution.as_kwargs())
    quarantined = sum(job.get("rows_quarantined", 0) for job in jobs)
    where = next((job["quarantine_dir"] for job in jobs if job.get("quarantine_dir")), None)
    return Summary(
        rows + quarantined, rows, rows_quarantined=quarantined, quarantine_output=where, printed=str(rows)
    )


COMMANDS = [
    Command(
        "convert",
        convert,
        {"inputs": Inputs, "output": Output, "config": ConvertConfig},
        plans=lambda inputs, **_: inputs.read(),
    ),
    Command("sort", sort, {"inputs": Inputs, "output": Output, "config": SortConfig}, plans=_sorted),
    Command("count", count, {"inputs": Inputs}, plans=lambda inputs, **_: inputs.read()),
]
"""The engine's commands; every package's ``cli`` module ends in its own ``COMMANDS`` list."""


KEEP_LOGS = 20
"""Traceback logs kept in the log folder; older ones are removed when a new one is written."""

_KEYWORD = re.compile(
    r"(?<![\w./'\"-])([a-z]+(?:_[a-z]+)*)(=(True\b|'[^']*'|\"[^\"]*\"|[A-Z]+\b)?)?(?![\w/'\"-])"
)
"""A keyword argument as the library's messages write it: ``NAME=True``, ``NAME='value'``, ``NAME=FIX``,
``NAME=`` or a bare ``NAME`` (with an underscore: a word of the sentence is no keyword; ``_cli_spelling``
takes a bare one only as the subject that starts a message)."""


def _cli_spelling(text: str, args: argparse.Namespace, *, bare: bool = True) -> str:
    """``text`` with the library's keyword arguments spelled as the command's flags (``pass
    replace_columns=True`` → ``pass --replace-columns``, ``on_error='quarantine'`` → ``--on-error quarantine``,
    ``schema=`` → ``--schema FILE``, and with ``bare`` a message's subject: ``dropped_output needs ...`` →
    ``--dropped-output needs ...``); a name that is no flag of the command stays as it is, and so does a bare
    name elsewhere (a list of a config file's keys)."""
    command = getattr(args, "zephyr", (None,))[0]
    classes = [ExecutionOptions, *(command.options.values() if command else ())]
    flags = {spec.field.name: (spec.flag, metavar(spec)) for cls in classes for spec in flag_specs(cls)}

    def spelled(match: re.Match[str]) -> str:
        name, equals, value = match.groups()
        if name not in flags or not (equals or (bare and match.start() == 0 and "_" in name)):
            return match.group(0)
        flag, metavar = flags[name]
        if not equals or value == "True":
            return flag
        return f"{flag} {value.strip(chr(34) + chr(39)) if value else metavar}"

    return _KEYWORD.sub(spelled, text)


def _write_log(exc: BaseException, argv: list[str]) -> str:
    """Log the full traceback (the workers' included, as notes) in a new file (see the module docstring);
    returns the line that says where it is, or why it is not."""
    text = f"{time.strftime('%Y-%m-%d %H:%M:%S')} zephyr {' '.join(argv)}\n"
    text += "".join(traceback.format_exception(exc)) + "\n"
    state = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    folder: str | None = os.path.join(state, "zephyr", "logs")
    try:
        os.makedirs(folder, mode=0o700, exist_ok=True)
    except OSError:
        folder = None  # the temp directory: mkstemp's new, random names are safe there too
    try:
        fd, path = tempfile.mkstemp(prefix=f"zephyr-{os.getpid()}-", suffix=".log", dir=folder)
        with open(fd, "w", encoding="utf-8") as f:
            f.write(text)
    except OSError as err:  # the disk may be full, the folder not writable
        why = " ".join(str(err.strerror or err).split())
        return f"full traceback: not written ({why}); rerun with -v to see it"
    logs = []
    for name in glob.glob(os.path.join(glob.escape(folder), "zephyr-*.log")) if folder else ():
        with contextlib.suppress(OSError):  # another zephyr pruning at the same time
            logs.append((os.lstat(name).st_mtime_ns, name))
    for _, name in sorted(logs, reverse=True)[KEEP_LOGS:]:
        with contextlib.suppress(OSError):
            os.unlink(name)
    return f"full traceback: {path}"


def report_failure(exc: BaseException, args: argparse.Namespace, argv: list[str] | None = None) -> int:
    """Print the failure of ``zephyr <args.command>`` (one line; the traceback too with ``-v``), log the full
    traceback, and return the exit code (1). Configuration errors (``ConfigError``, ``ResumeError``) print
    their message only: each listed problem on its own line, no traceback log."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if isinstance(exc, ConfigError | ResumeError) and not getattr(args, "verbose", 0):
        # a bad setting, found before any work: the message is the whole story (a list of problems keeps
        # one line each), and a traceback of the checking code would help nobody
        # config problems name their keys, and the flags that gave a value already (zephyr.flags)
        text = _cli_spelling(str(exc), args, bare=not isinstance(exc, ConfigProblems))
        print(f"{_label(args)}: error: {text}", file=sys.stderr)
        return 1
    where = _write_log(exc, argv)
    if getattr(args, "verbose", 0):
        traceback.print_exception(exc, file=sys.stderr)
    text = " ".join((str(exc) if isinstance(exc, TaskError) else one_line(exc)).split())  # one line, always
    print(f"{_label(args)}: error: {_cli_spelling(text, args)}", file=sys.stderr)
    print(where, file=sys.stderr)
    return 1


if __name__ == "__main__":  # the one module object: commands of other packages import its classes
    from zephyr.cli import console_main as run_zephyr

    run_zephyr()
