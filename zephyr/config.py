"""The one config base: field declarations, type and range checks with key paths, reading config files, and
``--set KEY=VALUE`` values — shared by ``zephyr run`` (``zephyr.pipelines.config``), ``zephyr train``
(``zephyr.trainer.config``) and the packages' own config dataclasses (``zephyr.dedup.config``...).

Configs are frozen dataclasses. Each field documents itself where it is declared; a field may carry a
declared range (``ranged_field``) or mark a filesystem path (``path_field``). Checks report every problem at
once, each line led by its key path as written in a config file (``optim.lr must be ...``,
``steps[3].threshold: must be within (0, 1], got 1.5``):

>>> describe_type(int | None), describe_type(list[str])
('an integer or null', 'a list of a string')
>>> coerce(3, float, "lr"), coerce("en", list[str], "languages")
(3.0, ['en'])
>>> parse_value("0.7"), parse_value("[en, de]"), parse_value("1e-3"), parse_value("flex")
(0.7, ['en', 'de'], 0.001, 'flex')

A package keeps its own config dataclass; an owner embeds it (``embedded_field``) and a config file writes its
keys flat beside the owner's (``build_flat``/``flat_dict``). A renamed key is declared in a ``RENAMED`` class
attribute and still read, with a ``ZephyrDeprecationWarning``, until the next release (``renamed_keys``); a renamed value of a choice (``--mode flag`` → ``annotate``) likewise
(``renamed_value``).

Two parts live in their own modules and are re-exported here: type hints in words and value conversion
(``zephyr.config_types``: ``describe_type``, ``coerce``, ``fits``) and config text (``zephyr.config_text``:
``parse_value``, ``expand_env``, ``read_mapping``).

Only the standard library is imported at module level: the trainer and the token loader import this with
torch, numpy and fsspec alone (``tests/trainer/test_imports.py``); PyYAML is imported where text is parsed.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import math
import typing
import warnings
from dataclasses import field
from typing import Any

from zephyr.config_text import expand_env, parse_value, read_mapping
from zephyr.config_types import coerce, describe_type, describe_value, fits
from zephyr.errors import ConfigError

__all__ = [
    "ConfigProblems",
    "FieldError",
    "ZephyrDeprecationWarning",
    "ranged_field",
    "path_field",
    "range_problem",
    "require_within",
    "require_at_least",
    "require_column_name",
    "describe_type",
    "describe_value",
    "coerce",
    "fits",
    "field_hints",
    "field_problems",
    "unknown_keys",
    "check_fields",
    "renamed_keys",
    "renamed_value",
    "REMOVAL_MODES",
    "check_removal_mode",
    "embedded_field",
    "flat_fields",
    "build_flat",
    "flat_dict",
    "parse_value",
    "expand_env",
    "read_mapping",
]


class ConfigProblems(ConfigError):
    """Every problem found in one config, one line each, each led by its key path (``optim.lr must be ...``).

    One problem reads as that line alone; several as ``invalid training config (N problems):`` and the lines
    (``what`` names the config; ``path``, when given, leads the message).
    """

    def __init__(self, problems: list[str], *, what: str = "training config", path: str | None = None):
        self.problems = list(problems)
        self.path = path
        where = f"{path}: " if path else ""
        if len(self.problems) == 1:
            super().__init__(where + self.problems[0])
        else:
            lines = "\n  ".join(self.problems)
            super().__init__(f"{where}invalid {what} ({len(self.problems)} problems):\n  {lines}")


class FieldError(ConfigError):
    """A bad value of one field, raised from a config's ``__post_init__``; the loader prefixes the key path
    (``steps[3].`` in a pipeline), so the package configs need not know where they are embedded."""

    def __init__(self, key: str, message: str):
        super().__init__(f"{key}: {message}")
        self.key = key
        self.detail = message


class ZephyrDeprecationWarning(FutureWarning):
    """A config key or flag renamed in this release, still read until the next one. A ``FutureWarning``: the
    authors of config files and command lines must change, and Python shows them ``FutureWarning`` by default."""


# -- field declarations -------------------------------------------------------------------------------------
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


def path_field(default: Any = None, **kw: Any) -> Any:
    """A field holding a filesystem path (or list of paths): resolved relative to the config file."""
    if isinstance(default, list):
        return field(default_factory=lambda: list(default), metadata={"path": True, **kw})
    return field(default=default, metadata={"path": True, **kw})


# -- range checks -------------------------------------------------------------------------------------------
def range_problem(value: float, limits: dict[str, Any]) -> str | None:
    """``must be within (0, 1], got 1.5`` when ``value`` is outside ``limits`` (see ``ranged_field``), else None."""
    low, high = limits.get("low"), limits.get("high")
    if value == limits.get("sentinel"):
        return None
    ok = (
        not math.isnan(value)
        and (low is None or (value > low if limits.get("low_open") else value >= low))
        and (high is None or (value < high if limits.get("high_open") else value <= high))
    )
    if ok:
        return None
    if high is None:
        wanted = f"{'>' if limits.get('low_open') else '>='} {low:g}"
    else:
        wanted = (
            f"within {'(' if limits.get('low_open') else '['}{low:g}, {high:g}"
            f"{')' if limits.get('high_open') else ']'}"
        )
    if limits.get("sentinel") is not None:
        wanted = f"{limits['sentinel']} or {wanted}"
    return f"must be {wanted}, got {value!r}"


def require_within(key: str, value: float, low: float, high: float, *, low_open: bool = False) -> None:
    """Raise ``FieldError`` unless ``low <= value <= high`` (``low < value`` with ``low_open``)."""
    problem = range_problem(value, {"low": low, "high": high, "low_open": low_open})
    if problem:
        raise FieldError(key, problem)


def require_at_least(key: str, value: int | float | None, low: int | float) -> None:
    """Raise ``FieldError`` when ``value`` is set and below ``low`` (``None`` means the default)."""
    if value is not None and value < low:
        raise FieldError(key, f"must be >= {low}, got {value!r}")


def require_column_name(key: str, value: str | None) -> None:
    """Raise ``FieldError`` for a blank column name (``None`` means the pipeline's default column)."""
    if value is not None and not value.strip():
        raise FieldError(key, "must name a column, or be null for the default")


# -- dataclass checks ---------------------------------------------------------------------------------------
@functools.cache
def field_hints(cls: type) -> dict[str, Any]:
    """The resolved type hints of a dataclass's fields (cached: ``get_type_hints`` re-evaluates strings)."""
    return typing.get_type_hints(cls)


def field_problems(obj: Any, prefix: str) -> list[str]:
    """Type and range problems of each field of the dataclass instance ``obj``, keys prefixed with ``prefix``."""
    problems = []
    hints = field_hints(type(obj))
    for f in dataclasses.fields(obj):
        value, key = getattr(obj, f.name), prefix + f.name
        if not fits(value, hints[f.name]):
            problems.append(f"{key} must be {describe_type(hints[f.name])}, got {describe_value(value)}")
        elif "range" in f.metadata and (problem := range_problem(value, f.metadata["range"])):
            problems.append(f"{key} {problem}")
    return problems


def unknown_keys(raw: dict[str, Any], cls: type, prefix: str) -> list[str]:
    """One line per key of ``raw`` that is not a field of ``cls``, naming the allowed keys."""
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


def renamed_keys(raw: dict[str, Any], renames: dict[str, str], where: str = "") -> dict[str, Any]:
    """``raw`` with each old key of ``renames`` (old → new) under its new name, warning once per key with a
    ``ZephyrDeprecationWarning``; both names at once is a ``FieldError`` (which value was meant is unknown)."""
    out = dict(raw)
    for old, new in renames.items():
        if old not in out:
            continue
        if new in out:
            raise FieldError(old, f"{old} is the old name of {new}; give only {new}")
        warnings.warn(
            f"{where}{old} is renamed {new}; write {new} (the old key is read until the next release)",
            ZephyrDeprecationWarning,
            stacklevel=3,
        )
        out[new] = out.pop(old)
    return out


def renamed_value(value: Any, renames: dict[Any, Any], where: str) -> Any:
    """``value`` under its new name when it is an old one of ``renames`` (old → new), with a
    ``ZephyrDeprecationWarning`` naming ``where`` (a flag or key, e.g. ``--mode``); any other value unchanged,
    for the caller's own choice check. For renamed values of a choice, where ``renamed_keys`` renames keys."""
    if value not in renames:
        return value
    new = renames[value]
    warnings.warn(
        f"{where} {value} is renamed {where} {new}; write {new} (the old value is read until the next release)",
        ZephyrDeprecationWarning,
        stacklevel=3,
    )
    return new


REMOVAL_MODES = ("annotate", "remove")
"""The two modes of every op that removes rows (dedup, decontaminate): ``annotate`` keeps every row and adds the
op's columns, ``remove`` drops the rows it finds."""


def check_removal_mode(mode: str, where: str = "mode", old: dict[str, str] | None = None) -> str:
    """``mode`` as one of ``REMOVAL_MODES``; an op's old name for one (``old``, old → new) is read with a
    ``ZephyrDeprecationWarning``, any other value is a ``ConfigError`` naming the choices.

    >>> check_removal_mode("remove")
    'remove'
    """
    mode = renamed_value(mode, old or {}, where)
    if mode not in REMOVAL_MODES:
        raise ConfigError(f"{where} must be 'annotate' or 'remove', got {mode!r}")
    return mode


# -- embedded configs ---------------------------------------------------------------------------------------
def embedded_field(cls: type, *, keys: tuple[str, ...] | None = None) -> Any:
    """A field holding a package's own config dataclass whose keys a config file writes flat, beside the
    owner's: ``threshold:`` in a pipeline's ``fuzzy_dedup`` stage is ``FuzzyDedupConfig.threshold``. The
    package declares (and documents, and checks) each key once; the owner embeds it instead of copying it.
    ``keys`` limits the keys taken (the others keep the package's defaults)."""
    return field(default_factory=cls, metadata={"embed": cls, "keys": keys})


@functools.cache
def flat_fields(cls: type) -> dict[str, tuple[dataclasses.Field, type, str | None]]:
    """Every key a config file may write for ``cls``, in declaration order, embedded keys in place of their
    field: key → (its ``Field``, the class declaring it, the embedding field's name or None)."""
    out: dict[str, tuple[dataclasses.Field, type, str | None]] = {}
    for f in dataclasses.fields(cls):
        inner = f.metadata.get("embed")
        if inner is None:
            out[f.name] = (f, cls, None)
            continue
        keys = f.metadata.get("keys")
        for g in dataclasses.fields(inner):
            if keys is None or g.name in keys:
                out[g.name] = (g, inner, f.name)
    return out


def _renames(cls: type) -> dict[str, str]:
    renames = dict(getattr(cls, "RENAMED", {}))
    for f in dataclasses.fields(cls):
        if "embed" in f.metadata:
            renames.update(getattr(f.metadata["embed"], "RENAMED", {}))
    return renames


def build_flat(
    cls: type, body: dict[str, Any], where: str, errors: list[str], *, also: tuple[str, ...] = ()
) -> Any:
    """An instance of ``cls`` from a flat mapping (see ``embedded_field``), or None with every problem
    appended to ``errors`` as ``WHERE.KEY: ...``: unknown keys (``also`` names keys the caller handles, for
    the allowed list), required keys left out, each value checked against its declaring class's annotation,
    old key names read under their new ones (``RENAMED`` class attributes, with a warning), then each
    embedded config built (by its ``from_dict`` when it has one) and the owner itself."""
    try:
        body = renamed_keys(body, _renames(cls), f"{where}.")
    except FieldError as exc:
        errors.append(f"{where}.{exc.key}: {exc.detail}")
        return None
    known = flat_fields(cls)
    own: dict[str, Any] = {}
    inner: dict[str, dict[str, Any]] = {}
    ok = True
    for key, value in body.items():
        if key not in known:
            allowed = ", ".join(sorted([*known, *also]))
            errors.append(f"{where}.{key}: unknown key for a {cls.__name__}; allowed: {allowed}")
            ok = False
            continue
        _, owner, embed = known[key]
        try:
            value = coerce(value, field_hints(owner)[key], f"{where}.{key}")
        except ConfigError as exc:
            errors.append(str(exc))
            ok = False
            continue
        (own if embed is None else inner.setdefault(embed, {}))[key] = value
    for key, (f, _, _) in known.items():
        if f.metadata.get("required") and key not in body:
            errors.append(f"{where}.{key}: required")
            ok = False
    if not ok:
        return None
    try:
        for f in dataclasses.fields(cls):
            if "embed" in f.metadata:
                embedded, values = f.metadata["embed"], inner.get(f.name, {})
                make = getattr(embedded, "from_dict", None)
                own[f.name] = make(values) if make is not None else embedded(**values)
        return cls(**own)
    except FieldError as exc:
        errors.append(f"{where}.{exc.key}: {exc.detail}")
    except ConfigError as exc:
        errors.append(f"{where}: {exc}")
    return None


def flat_dict(obj: Any) -> dict[str, Any]:
    """The flat mapping of a config built by ``build_flat`` (what a config file writes; fingerprints hash it)."""
    out = {}
    for key, (_, _, embed) in flat_fields(type(obj)).items():
        value = getattr(getattr(obj, embed) if embed else obj, key)
        out[key] = dataclasses.asdict(value) if dataclasses.is_dataclass(value) else copy.deepcopy(value)
    return out
