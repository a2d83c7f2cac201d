"""The one config base: field declarations, type and range checks with key paths, reading config files,
``--set KEY=VALUE`` values and byte sizes — shared by ``zephyr run`` (``zephyr.pipelines.config``),
``zephyr train`` (``zephyr.trainer.config``) and the packages' own config dataclasses (``zephyr.dedup.config``...).

Configs are frozen dataclasses. Each field documents itself where it is declared; a field may carry a
declared range (``ranged_field``), mark a filesystem path (``path_field``) or hold a byte size
(``metadata={"bytes": True}``: what ``parse_bytes`` reads). Checks report every problem at
once, each line led by its key path as written in a config file (``optim.lr must be ...``,
``steps[3].threshold: must be within (0, 1], got 1.5``). Values meet type hints in one place: a hint in words
for error messages (``describe_type``), a bad value described with a fix (``describe_value``), and the one
converter behind ``coerce`` (raw config values, read as a config file means them) and ``fits`` (values
already in a dataclass, converted not at all):

>>> describe_type(int | None), describe_type(list[str])
('an integer or null', 'a list of a string')
>>> coerce(3, float, "lr"), coerce("en", list[str], "languages"), fits(3, float), fits(True, int)
(3.0, ['en'], True, False)

Config text: one ``--set KEY=VALUE`` value (``parse_value``), ``${VAR}`` in a raw config (``expand_env``) and
a YAML or JSON config file read as a raw mapping (``read_mapping``):

>>> parse_value("0.7"), parse_value("[en, de]"), parse_value("1e-3"), parse_value("flex"), parse_value(" ")
(0.7, ['en', 'de'], 0.001, 'flex', '')

A package keeps its own config dataclass; an owner embeds it (``embedded_field``) and a config file writes its
keys flat beside the owner's (``build_flat``/``flat_dict``).

Byte sizes such as ``"512MB"``, ``"4GiB"`` or ``1_000_000``: decimal units (kB, MB, GB, TB) are powers of
1000, binary units (KiB, MiB, GiB, TiB) powers of 1024, a bare number is bytes:

>>> parse_bytes("512MB"), parse_bytes("1.5GiB"), format_bytes(1536)
(512000000, 1610612736, '1.5 KiB')

Only the standard library is imported at module level: the trainer and the token loader import this with
torch, numpy and fsspec alone (``tests/trainer/test_imports.py``); PyYAML is imported where text is parsed.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import functools
import json
import math
import os
import re
import types
import typing
from dataclasses import field
from pathlib import Path
from typing import Any, Literal

from zephyr.errors import ConfigError


class ConfigProblems(ConfigError):
    """Every problem found in one config, one line each, each led by its key path (``optim.lr must be ...``).

    One problem reads as that line alone; several as ``invalid training config (N problems):`` and the lines
    (``what`` names the config; ``path``, when given, leads the message).
    """

    def __init__(self, problems: list[str], *, what: str = "training config", path: str | None = None):
        self.problems = list(problems)
        self.path = path
        where = f"{path}: " if path else ""
        several = f"invalid {what} ({len(self.problems)} problems):\n  " if len(self.problems) > 1 else ""
        super().__init__(where + several + "\n  ".join(self.problems))


class FieldError(ConfigError):
    """A bad value of one field, raised from a config's ``__post_init__``; the loader prefixes the key path
    (``steps[3].`` in a pipeline), so the package configs need not know where they are embedded."""

    def __init__(self, key: str, message: str):
        super().__init__(f"{key}: {message}")
        self.key = key
        self.detail = message


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
    return field(metadata={"range": (low, high, low_open, high_open, sentinel)}, **kw)


def path_field(default: Any = None, **kw: Any) -> Any:
    """A field holding the path of a file read (or a list of them): resolved relative to the config file, and
    never the output of a command that reads it (``reads``, ``zephyr.flags``)."""
    if isinstance(default, list):
        return field(default_factory=lambda: list(default), metadata={"path": True, "reads": True, **kw})
    return field(default=default, metadata={"path": True, "reads": True, **kw})


# -- range checks -------------------------------------------------------------------------------------------
def _range_problem(value: float, limits: tuple[Any, ...]) -> str | None:
    """``must be within (0, 1], got 1.5`` when ``value`` is outside ``limits`` (see ``ranged_field``), else None."""
    low, high, low_open, high_open, sentinel = limits
    if value == sentinel:  # None too: an optional field left unset
        return None
    above = low is None or (value > low if low_open else value >= low)
    if above and (high is None or (value < high if high_open else value <= high)) and not math.isnan(value):
        return None
    if high is None:
        wanted = f"{'>' if low_open else '>='} {low:g}"
    else:
        wanted = f"within {'(' if low_open else '['}{low:g}, {high:g}{')' if high_open else ']'}"
    either = f"{sentinel} or " if sentinel is not None else ""
    return f"must be {either}{wanted}, got {value!r}"


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
        elif "range" in f.metadata and (problem := _range_problem(value, f.metadata["range"])):
            problems.append(f"{key} {problem}")
        elif f.metadata.get("column") and value is not None and not value.strip():
            problems.append(f"{key} must name a column, or be null for the default")
        elif f.metadata.get("bytes") and value is not None:
            try:
                parse_bytes(value)
            except ConfigError as exc:
                problems.append(f"{key} {exc}")
    return problems


def check_field_values(obj: Any) -> None:
    """Raise ``FieldError`` for the first field of ``obj`` whose value does not fit its type or declared range
    (``field_problems``): the check a package's config makes in its ``__post_init__`` (a config built in Python
    gets it as the command line's choices and a config file's loader give it)."""
    if problems := field_problems(obj, ""):
        key, _, problem = problems[0].partition(" ")
        raise FieldError(key, problem)


def unknown_keys(raw: dict[str, Any], known: typing.Iterable[str], prefix: str, of: str = "") -> list[str]:
    """One line per key of ``raw`` that is not ``known``, naming the allowed keys (``of``: whose keys)."""
    allowed = sorted(known)
    return [
        f"{prefix}{key} is not a known key{of}; allowed: {', '.join(allowed)}"
        for key in raw
        if key not in allowed
    ]


def check_fields(obj: Any, prefix: str, rules: Any) -> None:
    """Raise ``ConfigProblems`` with the field problems of ``obj``, or else those its cross-field ``rules`` find."""
    if problems := field_problems(obj, prefix) or rules():
        raise ConfigProblems(problems)


RemovalMode = typing.Literal["annotate", "remove"]
"""The two modes of every op that removes rows (dedup, decontaminate): ``annotate`` keeps every row and adds the
op's columns, ``remove`` drops the rows it finds; ``coerce(mode, RemovalMode, "mode")`` checks one."""


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


def build_flat(
    cls: type, body: dict[str, Any], where: str, errors: list[str], *, also: tuple[str, ...] = ()
) -> Any:
    """An instance of ``cls`` from a flat mapping (see ``embedded_field``), or None with every problem
    appended to ``errors`` as ``WHERE.KEY: ...``: unknown keys (``also`` names keys the caller handles, for
    the allowed list), required keys left out, each value checked against its declaring class's annotation,
    then each embedded config built (by its ``from_dict`` when it has one) and the owner itself."""
    known = flat_fields(cls)
    own: dict[str, Any] = {}
    inner: dict[str, dict[str, Any]] = {}
    start = len(errors)
    errors += unknown_keys(body, [*known, *also], f"{where}.", f" of a {cls.__name__}")
    for key, value in body.items():
        if key not in known:
            continue
        _, owner, embed = known[key]
        try:
            value = coerce(value, field_hints(owner)[key], f"{where}.{key}")
        except ConfigError as exc:
            errors.append(str(exc))
            continue
        (own if embed is None else inner.setdefault(embed, {}))[key] = value
    missing = [key for key, (f, _, _) in known.items() if f.metadata.get("required") and key not in body]
    errors += [f"{where}.{key}: required" for key in missing]
    if len(errors) > start:
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


# -- values against type hints -------------------------------------------------------------------------------
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
    """A value that does not fit a type hint (``_convert``; ``coerce`` and ``fits`` say how)."""


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


# -- config text ---------------------------------------------------------------------------------------------
def parse_value(text: str) -> Any:
    """The value of a ``--set KEY=VALUE`` override, the same in ``zephyr run`` and ``zephyr train``.

    JSON first (so ``1e-3`` is a number, as JSON and YAML 1.2 read it, where PyYAML's YAML 1.1 reads text),
    then YAML (``[en, de]``, ``yes``, unquoted strings), then the text itself; empty text is ``""``. Without
    PyYAML (a training node with torch, numpy and fsspec only) the YAML step is skipped: JSON values and plain
    text still read the same, and only YAML-only forms such as ``[en, de]`` stay text."""
    if not text.strip():
        return ""
    with contextlib.suppress(json.JSONDecodeError):
        return json.loads(text)
    try:
        import yaml
    except ImportError:
        return text
    with contextlib.suppress(yaml.YAMLError):
        return yaml.safe_load(text)
    return text


_ENV = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")


def expand_env(value: Any, where: str = "") -> Any:
    """``${VAR}`` and ``${VAR:-default}`` in every string of a raw config; an unset variable without a
    default is a ``ConfigError`` naming its key path."""
    if isinstance(value, dict):
        return {k: expand_env(v, f"{where}.{k}" if where else str(k)) for k, v in value.items()}
    if isinstance(value, list):
        return [expand_env(v, f"{where}[{i}]") for i, v in enumerate(value)]
    if isinstance(value, str) and "${" in value:

        def sub(match: re.Match[str]) -> str:
            name, default = match.group(1), match.group(2)
            if name in os.environ:
                return os.environ[name]
            if default is not None:
                return default
            raise ConfigError(
                f"{where}: environment variable {name} is not set (and ${{{name}}} has no :-default)"
            )

        return _ENV.sub(sub, value)
    return value


def read_mapping(path: str | os.PathLike[str], what: str) -> dict[str, Any]:
    """The raw mapping in a YAML (or ``.json``) config file, unvalidated; ``what`` names the file in errors
    (``training config``). PyYAML is imported only for a YAML file."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read {what} {path}: {exc.strerror or exc}") from None
    if str(path).endswith(".json"):
        try:
            raw = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ConfigError(f"{path}: not valid JSON ({exc})") from None
    else:
        try:
            import yaml
        except ImportError as exc:  # pragma: no cover - pyyaml is a project dependency
            raise ConfigError(f"reading {path} needs PyYAML: pip install pyyaml") from exc
        try:
            raw = yaml.safe_load(text) or {}
        except yaml.YAMLError as exc:
            raise ConfigError(f"{path}: not valid YAML ({' '.join(str(exc).split())})") from None
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: a {what} must be a mapping of keys to values")
    return raw


# -- byte sizes ----------------------------------------------------------------------------------------------
# each unit parse_bytes reads (lower case), in bytes; zephyr.flags.joined_sizes knows a unit by it too
BYTE_UNITS = {"": 1, "b": 1}
for _power, _prefix in enumerate("kmgt", start=1):  # kB and k are decimal, KiB binary
    BYTE_UNITS |= {_prefix: 1000**_power, f"{_prefix}b": 1000**_power, f"{_prefix}ib": 1024**_power}
_PATTERN = re.compile(r"^\s*([0-9]*\.?[0-9]+)\s*([a-zA-Z]*)\s*$")


def parse_bytes(value: int | float | str) -> int:
    """Return ``value`` in bytes; raises ``ConfigError`` naming the value when it cannot be read."""
    if isinstance(value, bool):
        raise ConfigError(f"not a byte size: {value!r}")
    if isinstance(value, int | float):
        if value < 0:
            raise ConfigError(f"byte size must be >= 0, got {value!r}")
        return int(value)
    match = _PATTERN.match(str(value).replace("_", ""))
    if not match or match.group(2).lower() not in BYTE_UNITS:
        raise ConfigError(f"not a byte size: {value!r} (examples: 512MB, 4GiB, 1000000)")
    return int(float(match.group(1)) * BYTE_UNITS[match.group(2).lower()])


def format_bytes(num_bytes: float, *, decimal: bool = False) -> str:
    """Human-readable size, for logs and reports: binary units (KiB, MiB...), or ``decimal`` ones (kB, MB...)."""
    size, base = float(num_bytes), 1000 if decimal else 1024
    units = ("B", "kB", "MB", "GB", "TB") if decimal else ("B", "KiB", "MiB", "GiB", "TiB")
    power = 0
    while abs(size) >= base and power < len(units) - 1:
        size, power = size / base, power + 1
    return f"{size:.0f} B" if power == 0 else f"{size:.1f} {units[power]}"
