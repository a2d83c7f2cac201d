"""What the ``zephyr`` command prints when a command fails: one line to act on, and where the rest is.

Every subcommand's errors pass through ``report_failure`` (called once, by ``zephyr.cli.main``), so they all
read the same way on stderr::

    zephyr convert: error: InputError: in.jsonl:2: invalid JSON: ... or pass --on-error quarantine ... [stage ...]
    full traceback: /tmp/zephyr-4242.log

Why: a worker's traceback is 25-60 lines of engine frames, and the line a person can act on (the error class,
the file and line or row, the fix) is at its bottom, often below a second traceback. The full text is not
lost: it goes to a log file (``$TMPDIR/zephyr-<pid>.log``) every time, and ``-v`` prints it too.

Messages of the library name its keyword arguments (``on_error='quarantine'``); on the command line they are
flags, so ``_CLI_SPELLING`` rewrites them here rather than every message knowing who called it.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
import traceback

from zephyr.errors import ConfigError, ResumeError, TaskError, one_line

__all__ = ["report_failure", "log_path"]

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


def log_path() -> str:
    """The file a failing command writes its full traceback to: one per process, in the temp directory."""
    return os.path.join(tempfile.gettempdir(), f"zephyr-{os.getpid()}.log")


def _summary(exc: BaseException, args: argparse.Namespace) -> str:
    text = str(exc) if isinstance(exc, TaskError) else one_line(exc)
    text = " ".join(text.split())  # one line, whatever the message held
    return _cli_spelling(text, args)


def _cli_spelling(text: str, args: argparse.Namespace) -> str:
    for library, flag, dest in _CLI_SPELLING:
        if hasattr(args, dest):
            text = text.replace(library, flag)
    return text


def _write_log(path: str, exc: BaseException, argv: list[str]) -> str | None:
    """Write the full traceback (the workers' included, as notes); returns why not when it cannot."""
    try:
        with open(path, "a", encoding="utf-8") as f:
            f.write(f"{time.strftime('%Y-%m-%d %H:%M:%S')} zephyr {' '.join(argv)}\n")
            f.write("".join(traceback.format_exception(exc)))
            f.write("\n")
    except OSError as err:  # the temp directory may be on the disk that is full
        return one_line(err)
    return None


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
    path = log_path()
    unwritten = _write_log(path, exc, argv)
    if getattr(args, "verbose", 0):
        traceback.print_exception(exc, file=sys.stderr)
    print(f"zephyr {args.command}: error: {_summary(exc, args)}", file=sys.stderr)
    if unwritten is None:
        print(f"full traceback: {path}", file=sys.stderr)
    else:
        print(f"full traceback: not written ({unwritten}); rerun with -v to see it", file=sys.stderr)
    return 1
