"""Validation of the trainer's config dataclasses: field types, declared ranges, unknown keys, one error for all.

Each config's ``__post_init__`` calls ``check_fields`` (so ``dataclasses.replace`` and direct construction are
checked too): every field's type against its annotation, ranges declared on the field (``ranged_field``), then
the config's own cross-field rules. All problems are reported at once in one ``ConfigProblems`` (a
``ConfigError``), one line each, led by the key path as written in a config file. Kept apart from the
dataclasses so ``model_config`` and ``config`` share it without importing each other.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import types
import typing
from dataclasses import field
from typing import Any, Literal

from zephyr.errors import ConfigError

__all__ = [
    "ConfigProblems",
    "ranged_field",
    "describe_value",
    "field_hints",
    "field_problems",
    "unknown_keys",
    "check_fields",
]


class ConfigProblems(ConfigError):
    """Every problem found in one config, one line each, each led by its key path (``optim.lr must be ...``).

    One problem reads as that line alone; several as ``invalid training config (N problems):`` and the lines.
    """

    def __init__(self, problems: list[str]):
        self.problems = list(problems)
        if len(self.problems) == 1:
            super().__init__(self.problems[0])
        else:
            super().__init__(
                f"invalid training config ({len(self.problems)} problems):\n  " + "\n  ".join(self.problems)
            )


def ranged_field(
    low: float | None = None,
    high: float | None = None,
    *,
    low_open: bool = False,
    high_open: bool = False,
    sentinel: int | None = None,
    **kw: Any,
) -> Any:
    """A field whose value must lie within [low, high] (open ends as flagged); ``sentinel`` is also allowed."""
    limits = {"low": low, "high": high, "low_open": low_open, "high_open": high_open, "sentinel": sentinel}
    return field(metadata={"range": limits}, **kw)


def _range_problem(key: str, value: float, limits: dict[str, Any]) -> str | None:
    low, high = limits["low"], limits["high"]
    if value == limits["sentinel"]:
        return None
    ok = (
        not math.isnan(value)
        and (low is None or (value > low if limits["low_open"] else value >= low))
        and (high is None or (value < high if limits["high_open"] else value <= high))
    )
    if ok:
        return None
    if high is None:
        wanted = f"{'>' if limits['low_open'] else '>='} {low:g}"
    else:
        wanted = f"within {'(' if limits['low_open'] else '['}{low:g}, {high:g}{')' if limits['high_open'] else ']'}"
    if limits["sentinel"] is not None:
        wanted = f"{limits['sentinel']} or {wanted}"
    return f"{key} must be {wanted}, got {value!r}"


def _describe(hint: Any) -> str:
    """A type annotation in words, as a config file's author writes values (the pipelines config's wording)."""
    origin = typing.get_origin(hint)
    if origin is Literal:
        return "one of " + ", ".join(repr(a) for a in typing.get_args(hint))
    if origin in (typing.Union, types.UnionType):
        *arms, last = [_describe(a) for a in typing.get_args(hint)]
        return f"{', '.join(arms)} or {last}"
    if origin is dict:
        key, value = typing.get_args(hint)
        words = {str: "string", float: "number", int: "integer"}
        return "a mapping" if value is Any else f"a mapping {{{words[key]}: {words[value]}}}"
    if hint is type(None):
        return "null"
    if hint is list:
        return "a list"
    if dataclasses.is_dataclass(hint):
        return f"a mapping of {hint.__name__} keys"
    return {bool: "true or false", int: "an integer", float: "a number", str: "a string"}.get(hint, str(hint))


def _fits(value: Any, hint: Any) -> bool:
    """Whether ``value`` is of the annotated type: bool is not an integer, an integer is a number."""
    origin = typing.get_origin(hint)
    if hint is Any:
        return True
    if origin in (typing.Union, types.UnionType):
        return any(_fits(value, arm) for arm in typing.get_args(hint))
    if hint is type(None):
        return value is None
    if origin is Literal:
        return isinstance(value, str) and value in typing.get_args(hint)
    if origin is dict:
        key, item = typing.get_args(hint)
        return isinstance(value, dict) and all(_fits(k, key) and _fits(v, item) for k, v in value.items())
    if hint is list:
        return isinstance(value, list)
    if hint is bool:
        return isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if hint is float:
        return isinstance(value, int | float) and not isinstance(value, bool)
    return isinstance(value, hint)


def describe_value(value: Any) -> str:
    text = repr(value)
    if len(text) > 60:
        text = text[:57] + "..."
    hint = ""
    if isinstance(value, str):
        try:
            float(value)
        except ValueError:
            pass
        else:
            hint = "; write numbers unquoted"
            if "e" in value.lower() and "." not in value:  # YAML 1.1 (PyYAML) reads 3e-4 as text
                hint += ", with a dot before the exponent (3.0e-4)"
    return f"{text} ({type(value).__name__}){hint}"


@functools.cache
def field_hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def field_problems(obj: Any, prefix: str) -> list[str]:
    """Type and range problems of each field of the dataclass instance ``obj``, keys prefixed with ``prefix``."""
    problems = []
    hints = field_hints(type(obj))
    for f in dataclasses.fields(obj):
        value, key = getattr(obj, f.name), prefix + f.name
        if not _fits(value, hints[f.name]):
            problems.append(f"{key} must be {_describe(hints[f.name])}, got {describe_value(value)}")
        elif "range" in f.metadata and (problem := _range_problem(key, value, f.metadata["range"])):
            problems.append(problem)
    return problems


def unknown_keys(raw: dict[str, Any], cls: type, prefix: str) -> list[str]:
    known = [f.name for f in dataclasses.fields(cls)]
    return [
        f"{prefix}{key} is not a known key; allowed: {', '.join(sorted(known))}"
        for key in raw
        if key not in known
    ]


def check_fields(obj: Any, prefix: str, rules: Any) -> None:
    """Raise ``ConfigProblems`` with the field problems of ``obj``, or else those its cross-field ``rules`` find."""
    problems = field_problems(obj, prefix)
    if not problems:
        problems = rules()
    if problems:
        raise ConfigProblems(problems)
