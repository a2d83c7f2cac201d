"""The zephyr exception tree, one class per kind of failure.

Messages name the thing that failed (file, line, row group, shard, column) and, where there is one, the fix.
User input is checked with these exceptions, never with ``assert`` (``python -O`` strips asserts).
"""

from __future__ import annotations

__all__ = [
    "ZephyrError",
    "ConfigError",
    "InputError",
    "SchemaError",
    "TaskError",
    "ResumeError",
]


class ZephyrError(Exception):
    """Base class of every error zephyr raises on purpose."""


class ConfigError(ZephyrError, ValueError):
    """A bad argument or configuration value, found before any work starts."""


class InputError(ZephyrError):
    """Unreadable input: corrupt Parquet, truncated .gz/.zst, invalid JSON or UTF-8, an empty Parquet file.

    ``path`` and ``line``/``row`` say where, when known.
    """

    def __init__(self, message: str, *, path: str | None = None, line: int | None = None, row: int | None = None):
        where = ""
        if path is not None:
            where = path
            if line is not None:
                where += f":{line}"
            elif row is not None:
                where += f" (row {row})"
            where += ": "
        super().__init__(where + message)
        self.path = path
        self.line = line
        self.row = row


class SchemaError(ZephyrError):
    """A missing column or a column whose type does not fit the operation."""


class TaskError(ZephyrError):
    """A task kept failing after its retries; names the stage, the input shard and the last error."""

    def __init__(self, message: str, *, stage: str | None = None, shard: str | None = None):
        super().__init__(message)
        self.stage = stage
        self.shard = shard


class ResumeError(ZephyrError):
    """A work directory or checkpoint that belongs to a different plan or configuration."""
