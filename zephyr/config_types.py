"""Config values against type hints: a hint in words for error messages (``describe_type``), a bad value
described with a fix (``describe_value``), and the one converter behind ``coerce`` (raw config values, read
as a config file means them) and ``fits`` (values already in a dataclass, converted not at all).

Split out of ``zephyr.config`` (which re-exports every name); standard library only.

>>> describe_type(int | None), describe_type(list[str])
('an integer or null', 'a list of a string')
>>> coerce(3, float, "lr"), coerce("en", list[str], "languages"), fits(3, float), fits(True, int)
(3.0, ['en'], True, False)
"""

from __future__ import annotations

import dataclasses
import types
import typing
from typing import Any, Literal

from zephyr.errors import ConfigError

__all__ = ["describe_type", "describe_value", "coerce", "fits"]

_WORDS = {bool: "true or false", int: "an integer", float: "a number", str: "a string"}
_KEY_WORDS = {bool: "boolean", int: "integer", float: "number", str: "string"}


def describe_type(hint: Any) -> str:
    """A type annotation in words, as a config file's author writes values."""
    origin = typing.get_origin(hint)
    if origin is Literal:
        return "one of " + ", ".join(repr(a) for a in typing.get_args(hint))
    if origin in (typing.Union, types.UnionType):
        *arms, last = [describe_type(a) for a in typing.get_args(hint)]
        return f"{', '.join(arms)} or {last}"
    if origin is list:
        return f"a list of {describe_type(typing.get_args(hint)[0])}"
    if origin is dict:
        key, value = typing.get_args(hint)
        if key in _KEY_WORDS and value in _KEY_WORDS:
            return f"a mapping {{{_KEY_WORDS[key]}: {_KEY_WORDS[value]}}}"
        return "a mapping"
    if hint is type(None):
        return "null"
    if hint is list:
        return "a list"
    if dataclasses.is_dataclass(hint):
        return f"a mapping of {hint.__name__} keys"
    return _WORDS.get(hint, str(hint))


def describe_value(value: Any) -> str:
    """``repr`` (cut at 60 characters) and type of a bad value, with a hint for numbers written as text."""
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


class _Mismatch(Exception):
    pass


_CHECKS = {  # bool is never an integer; an integer is a number
    type(None): lambda v: v is None,
    bool: lambda v: isinstance(v, bool),
    int: lambda v: isinstance(v, int) and not isinstance(v, bool),
    float: lambda v: isinstance(v, int | float) and not isinstance(v, bool),
    list: lambda v: isinstance(v, list),
    dict: lambda v: isinstance(v, dict),
}


def _convert(value: Any, hint: Any, lenient: bool) -> Any:
    """``value`` as the annotated type, or ``_Mismatch``. bool is never an integer; an integer is a number.
    ``lenient`` (raw config files) also reads one string as a one-item list and a number as a string."""
    origin = typing.get_origin(hint)
    if hint is Any:
        return value
    if origin in (typing.Union, types.UnionType):
        for arm in typing.get_args(hint):
            try:
                return _convert(value, arm, lenient)
            except _Mismatch:
                continue
        raise _Mismatch
    if origin is Literal:
        if isinstance(value, str | bool | int) and value in typing.get_args(hint):
            return value
    elif origin is list:
        value = [value] if lenient and isinstance(value, str) else value
        if isinstance(value, list):
            (inner,) = typing.get_args(hint)
            return [_convert(v, inner, lenient) for v in value]
    elif origin is dict:
        key, item = typing.get_args(hint)
        if isinstance(value, dict):
            return {_convert(k, key, lenient): _convert(v, item, lenient) for k, v in value.items()}
    elif hint is float and _CHECKS[float](value):
        return float(value) if lenient else value
    elif hint is str:
        if isinstance(value, str):
            return value
        if lenient and _CHECKS[float](value):
            return str(value)
    elif hint in _CHECKS:
        if _CHECKS[hint](value):
            return value
    elif not isinstance(hint, type) or isinstance(value, hint):
        return value  # a hint this checker does not know (a Protocol, a callable...) is the config's to check
    raise _Mismatch


def coerce(value: Any, hint: Any, where: str) -> Any:
    """``value`` checked against a type hint and converted as a config file means it (``3`` → ``3.0`` for a
    number, ``en`` → ``[en]`` for a list); ``ConfigError`` ``WHERE: must be TYPE, got VALUE`` otherwise."""
    try:
        return _convert(value, hint, lenient=True)
    except _Mismatch:
        raise ConfigError(f"{where}: must be {describe_type(hint)}, got {value!r}") from None


def fits(value: Any, hint: Any) -> bool:
    """Whether ``value`` (already in a dataclass) is of the annotated type, converting nothing."""
    try:
        _convert(value, hint, lenient=False)
    except _Mismatch:
        return False
    return True
