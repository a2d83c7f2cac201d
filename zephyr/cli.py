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
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import importlib
import logging
import os
import shlex
import signal
import sys
import threading
import time
from collections.abc import Callable, Sequence

from zephyr.options import ExecutionOptions

__all__ = [
    "main",
    "build_parser",
    "execution_options",
    "quarantine_dir",
    "add_on_error",
    "add_output_dir",
    "add_dropped_output",
    "add_replace_columns",
]

COMMAND_MODULES = (
    "zephyr.commands",  # engine utilities: convert, count, sort, stats
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
    ``zephyr.cli_errors``) is true wherever it is printed.
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

    Without either, such a command refuses an input that already has one of them (``zephyr.io.added_columns``):
    replacing a column is a choice a person makes, never a side effect. One definition, so the hint in that
    error (``--replace-columns``, see ``zephyr.cli_errors``) is true wherever it is printed.
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
    command routes its rows with ``zephyr.dropped`` when it is given (one definition: the same words and
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
        from zephyr.cli_errors import report_failure

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


if __name__ == "__main__":
    console_main()
