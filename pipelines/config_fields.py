"""Field helpers of the pipeline stage configs: path fields, range checks, and the per-field error.

Stage configs live in ``zephyr.pipelines.config`` and, for the web stages, ``zephyr.pipelines.web.config``;
both use these, and ``config`` registers the web stages, so the helpers sit below both (a module of their own)
instead of in ``config``, which the web configs would then import back.
"""

from __future__ import annotations

from dataclasses import field
from typing import Any

from zephyr.errors import ConfigError

__all__ = ["FieldError", "path_field", "require_within", "require_at_least", "require_column_name"]


def path_field(default: Any = None, **kw: Any) -> Any:
    """A field holding a filesystem path (or list of paths): resolved relative to the config file."""
    if isinstance(default, list):
        return field(default_factory=lambda: list(default), metadata={"path": True, **kw})
    return field(default=default, metadata={"path": True, **kw})


class FieldError(ConfigError):
    """A bad value of one field; the loader prefixes the key path."""

    def __init__(self, key: str, message: str):
        super().__init__(f"{key}: {message}")
        self.key = key
        self.detail = message


def require_within(key: str, value: float, low: float, high: float, *, low_open: bool = False) -> None:
    """Raise ``FieldError`` unless ``low <= value <= high`` (``low < value`` with ``low_open``)."""
    ok = (value > low if low_open else value >= low) and value <= high
    if not ok:
        bracket = "(" if low_open else "["
        raise FieldError(key, f"must be within {bracket}{low:g}, {high:g}], got {value!r}")


def require_at_least(key: str, value: int | float | None, low: int | float) -> None:
    """Raise ``FieldError`` when ``value`` is set and below ``low`` (``None`` means the default)."""
    if value is not None and value < low:
        raise FieldError(key, f"must be >= {low}, got {value!r}")


def require_column_name(key: str, value: str | None) -> None:
    """Raise ``FieldError`` for a blank column name (``None`` means the pipeline's default column)."""
    if value is not None and not value.strip():
        raise FieldError(key, "must name a column, or be null for the default")
