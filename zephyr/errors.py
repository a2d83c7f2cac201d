"""The zephyr exception tree, one class per kind of failure.

Messages name the thing that failed (file, line, row group, shard, column) and, where there is one, the fix.
User input is checked with these exceptions, never with ``assert`` (``python -O`` strips asserts).
"""

from __future__ import annotations

import errno
import os


class ZephyrError(Exception):
    """Base class of every error zephyr raises on purpose."""


class ConfigError(ZephyrError, ValueError):
    """A bad argument or configuration value, found before any work starts."""


class MissingExtra(ConfigError):
    """A command, step or method needs a package of an optional extra that is not installed (``require``)."""


def require(module: str, extra: str, what: str) -> None:
    """Refuse ``what`` (``"zephyr langid"``, ``"format='vortex'"``) in one line naming the extra to install
    when ``module`` cannot be imported: called in the driver where the work is built, before any task, so a
    missing extra is never a task that fails (and is retried) on every worker."""
    import importlib.util

    try:
        found = importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a parent package missing, or a module without a spec
        found = False
    if not found:
        raise MissingExtra(f"{what} needs {module}: pip install 'zephyr-data[{extra}]'")


class InputError(ZephyrError):
    """Unreadable input: corrupt Parquet, truncated .gz/.zst, invalid JSON or UTF-8, an empty Parquet file.

    ``path`` and ``line``/``row`` say where, when known.
    """

    def __init__(
        self, message: str, *, path: str | None = None, line: int | None = None, row: int | None = None
    ):
        at = f":{line}" if line is not None else f" (row {row})" if row is not None else ""
        super().__init__((f"{path}{at}: " if path is not None else "") + message)
        self.path = path
        self.line = line
        self.row = row


class SchemaError(ZephyrError):
    """A missing column or a column whose type does not fit the operation."""


class ColumnExistsError(SchemaError, ConfigError):
    """A step would replace a column the input already has, and was not told to (``replace_columns=True``).

    A ``ConfigError`` too: it is found before any work (``zephyr.removal``) and the fix is an option,
    so commands print its one line without a traceback log."""


class ClaimError(ConfigError):
    """A command may not take a folder it would write: the output overlaps an input, holds files zephyr did not
    write (the fix: ``overwrite=True`` / ``--overwrite``), or another command holds its lock. Found before any
    work (``zephyr.io.claim``); one line naming the folder, the file or holder, and the fix."""


class OutputError(ZephyrError):
    """An output path that cannot be written: read-only, not a directory, out of space. The message names it;
    the ``OSError`` is its cause."""


class TaskError(ZephyrError):
    """A task kept failing after its retries; names the stage, the input shard and the last error.

    The message is one line (what a person reads first); the worker's full traceback, which can be 60 lines,
    is kept in ``worker_traceback`` and attached as a note, so Python still prints it under the exception.
    """

    def __init__(
        self,
        message: str,
        *,
        stage: str | None = None,
        shard: str | None = None,
        worker_traceback: str | None = None,
    ):
        super().__init__(message)
        self.stage = stage
        self.shard = shard
        self.worker_traceback = worker_traceback
        if worker_traceback:
            self.add_note(f"worker traceback:\n{worker_traceback}")


class ResumeError(ZephyrError):
    """A work directory or checkpoint that belongs to a different plan or configuration."""


PERMANENT_ERRNOS: dict[int, tuple[str, str]] = {
    errno.ENOSPC: ("disk full", "free some space or write elsewhere"),
    errno.EDQUOT: ("disk quota exceeded", "free some space or write elsewhere"),
    errno.EACCES: ("permission denied", "choose a location you can write to, or fix its permissions"),
    errno.EPERM: ("operation not permitted", "choose a location you can write to, or fix its permissions"),
    errno.EROFS: ("read-only file system", "choose a location on a writable file system"),
    errno.ENOTDIR: ("not a directory", "a part of the path is a file; choose a directory path"),
    errno.EISDIR: ("is a directory", "a directory is where a file should go; choose another path"),
    errno.EEXIST: (
        "a file is in the way",
        "it exists and is not a directory; remove it or choose another path",
    ),
    errno.ELOOP: ("symlink loop", "a symbolic link on this path leads back to itself; fix or remove it"),
}
"""OS errors that the same task on the same paths meets again on every try, each with its words and its fix:
the job fails at once with these words instead of retrying (``executors.base.is_retryable``)."""

READ_ERRNOS = (errno.EACCES, errno.EPERM, errno.ELOOP)
"""OS errors of reading an input that ``read_error`` names for what they are."""


def _symlink_loop_at(path: str) -> str | None:
    """The first symbolic link on the local ``path`` (itself included) that cannot be resolved because it
    leads back to itself (``ELOOP``), or None: for ``/data/a/out`` where ``a`` links to ``b`` and ``b`` to
    ``a``, that is ``/data/a``, the link to fix, which the error's own path does not say."""
    current = ""
    for part in os.path.abspath(path).split(os.sep):
        current = os.path.join(current, part) if current else os.sep
        if os.path.islink(current):
            try:
                os.stat(current)
            except OSError as exc:
                return current if exc.errno == errno.ELOOP else None
    return None


def describe_os_error(exc: OSError, path: str | None = None) -> str:
    """One line for an ``OSError``: what happened in plain words, the path, and the fix.

    >>> describe_os_error(OSError(errno.ENOSPC, "No space left on device", "/data/out/part-00000.parquet"))
    'disk full: /data/out/part-00000.parquet: No space left on device (free some space or write elsewhere)'
    """
    where = path if path is not None else exc.filename
    words, fix = PERMANENT_ERRNOS.get(exc.errno or 0, (None, ""))
    if exc.errno == errno.ELOOP and where is not None:
        loop = _symlink_loop_at(os.fsdecode(where))
        words = f"symlink loop at {loop}" if loop is not None else words
    text = exc.strerror or str(exc)
    if words is None:
        return (
            f"{type(exc).__name__}: {where}: {text}" if where is not None else f"{type(exc).__name__}: {exc}"
        )
    where_text = f"{where}: " if where is not None else "(path not known): "
    return f"{words}: {where_text}{text} ({fix})"


def read_error(exc: OSError, path: str) -> InputError:
    """The ``InputError`` for an ``OSError`` met reading the input ``path`` (a file or a folder to list): a
    permission or a symbolic link loop is named as what it is (``describe_os_error``'s fixes are a writer's:
    "choose a location you can write to" says nothing about an input that cannot be read).

    >>> str(read_error(PermissionError(errno.EACCES, "Permission denied"), "in.jsonl"))
    'cannot read in.jsonl: permission denied (make it readable to this user, e.g. chmod a+r, or run as one who can read it)'
    """
    text = describe_os_error(exc, path)  # a symbolic link loop: the link to fix
    if exc.errno in (errno.EACCES, errno.EPERM):
        fix = "chmod a+rx for a folder" if os.path.isdir(path) else "chmod a+r"
        text = f"permission denied (make it readable to this user, e.g. {fix}, or run as one who can read it)"
    error = InputError(f"cannot read {path}: {text}")
    error.path = path
    return error


def one_line(exc: BaseException) -> str:
    """What a person reads first about ``exc``: its class and message on one line (an ``OSError`` in words).

    >>> one_line(InputError("invalid JSON", path="in.jsonl", line=3))
    'InputError: in.jsonl:3: invalid JSON'
    """
    if isinstance(exc, OSError) and not isinstance(exc, ZephyrError) and exc.errno is not None:
        return describe_os_error(exc)
    text = " ".join(str(exc).split()) or repr(exc)  # a message listing several problems keeps them all
    return f"{type(exc).__name__}: {text}"
