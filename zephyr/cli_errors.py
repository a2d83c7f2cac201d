"""What the ``zephyr`` command prints when a command fails: one line to act on, and where the rest is.

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
import os
import stat
import sys
import tempfile
import time
import traceback

from zephyr.errors import ConfigError, ResumeError, TaskError, one_line

__all__ = ["report_failure", "log_dir", "write_log", "KEEP_LOGS"]

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
