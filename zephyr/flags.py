"""Command-line flags derived from config dataclasses: one flag per field, its type from the annotation, its
default from the field, its help from the docstring written under the field. A command declares its settings
once, as a config dataclass (what a config file, a pipeline step and a Python caller also use), and the
command line cannot drift from it.

``add_flags(parser, Config)`` adds the flags; argparse leaves a flag that was not given out of the namespace
(``default=SUPPRESS``), so ``config_from_flags(Config, vars(args), base=file_mapping)`` sees only what the
command line says and lays it over the config file (or preset) and the field defaults — torchtitan's
precedence: flags, then file, then defaults. The config is then built and checked once, and every problem
is reported together, each named by the flag that gave the value (``--lr must be > 0, got -1.0``) or, for a
value from the file, by its key path (``optim.lr ...``).

How a field becomes a flag:

- ``batch_size: int`` → ``--batch-size N``; ``X | None`` reads as ``X``; a ``Literal`` gives the choices;
  ``bool`` gives ``--x``/``--no-x``; ``list[str]`` is repeatable; any other type reads its text as
  ``--set KEY=VALUE`` does (``zephyr.config.parse_value``: JSON, then YAML, then the text).
- A field holding another config (``optim: OptimConfig``, ``moe: MoEConfig | None``) gives that config's
  flags, unprefixed, under the key path (``--lr`` sets ``optim.lr``); so does a mapping of overrides of
  another config's fields (``field(metadata={"overrides": ModelConfig})``: ``--d-model`` sets
  ``model.d_model``; no default is shown there, the base holds it). Embedded configs
  (``zephyr.config.embedded_field``) give flat keys, as config files write them.
- Field metadata: ``flag=False`` (no flag), ``flag="--name"`` (another spelling), ``metavar``, ``choices``
  (for a hint that does not give them), ``show_default=False`` (the help says the default itself),
  ``repeat=True`` (the flag may be repeated; its values come as a list), ``parse`` (a callable from the
  given text, or list with ``repeat``, to the value; a ``ConfigError``/``ValueError`` names the flag),
  ``positional=True`` (an argument without dashes: ``nargs="+"`` for a list, else ``"?"``), ``required=True``,
  ``reads=True`` (the value names files the command reads: ``zephyr.cli`` refuses an output among them).

Standard library and ``zephyr.config`` only: ``zephyr --help`` and the training side import this.

>>> import argparse
>>> from dataclasses import dataclass
>>> @dataclass(frozen=True)
... class Demo:
...     rate: float = 0.5
...     shape: str = "round"
>>> parser = argparse.ArgumentParser()
>>> add_flags(parser, Demo)
>>> config_from_flags(Demo, vars(parser.parse_args(["--rate", "0.25"])))
Demo(rate=0.25, shape='round')
"""

from __future__ import annotations

import argparse
import ast
import copy
import dataclasses
import functools
import inspect
import re
import sys
import types
import typing
from collections.abc import Sequence
from typing import Any, Literal

from zephyr.config import BYTE_UNITS, ConfigProblems, build_flat, field_hints, flat_fields, parse_value
from zephyr.errors import ConfigError


@dataclasses.dataclass(frozen=True)
class FlagSpec:
    """One flag of a config: the key path it sets (``optim.lr``; embedded keys flat), its spelling on the
    command line (``--lr``, or the name of a positional), the field, its type hint and the declaring class."""

    dest: str
    flag: str
    field: dataclasses.Field
    hint: Any
    owner: type
    show_default: bool = True


@functools.cache
def _module_docs(module: str) -> dict[str, dict[str, str]]:
    """Class name → {field: the docstring under it} for every class in a module's source."""
    try:
        tree = ast.parse(inspect.getsource(sys.modules[module]))
    except (KeyError, OSError, TypeError, SyntaxError):
        return {}
    return {
        node.name: {
            stmt.target.id: inspect.cleandoc(after.value.value)
            for stmt, after in zip(node.body, node.body[1:])
            if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name)
            if isinstance(after, ast.Expr) and isinstance(after.value, ast.Constant)
            if isinstance(after.value.value, str)
        }
        for node in ast.walk(tree)
        if isinstance(node, ast.ClassDef)
    }


def field_docs(cls: type) -> dict[str, str]:
    """The attribute docstring under each field of ``cls``, from its module's source (parsed once per
    module); a field without one, or a class without source, is left out. A subclass's inherited fields keep
    the docstrings of the class that declares them (an option group narrowed by a command)."""
    docs: dict[str, str] = {}
    for owner in reversed(cls.__mro__):
        docs.update(_module_docs(owner.__module__).get(owner.__name__, {}))
    return docs


def _unwrap(hint: Any) -> Any:
    """``X`` of an optional ``X | None``; any other hint as it is."""
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        arms = [a for a in typing.get_args(hint) if a is not type(None)]
        return arms[0] if len(arms) == 1 else hint
    return hint


@functools.cache
def flag_specs(cls: type) -> tuple[FlagSpec, ...]:
    """Every flag of ``cls``, nested and embedded configs included, in declaration order."""
    specs: list[FlagSpec] = []

    def walk(config: type, path: str, show_default: bool) -> None:
        for name, (f, owner, _) in flat_fields(config).items():  # embedded keys flat, as a file writes them
            hint = field_hints(owner)[name]
            if "overrides" in f.metadata:
                walk(f.metadata["overrides"], f"{path}{name}.", False)
            elif isinstance(inner := _unwrap(hint), type) and dataclasses.is_dataclass(inner):
                walk(inner, f"{path}{name}.", show_default)
            elif f.metadata.get("flag", True) is not False:
                flag = f.metadata.get("flag") or "--" + name.replace("_", "-")
                specs.append(FlagSpec(path + name, flag, f, hint, owner, show_default))

    walk(cls, "", True)
    return tuple(specs)


def _argument(spec: FlagSpec) -> dict[str, Any]:
    """argparse's keyword arguments for one flag, from its metadata and type hint."""
    meta, hint = spec.field.metadata, _unwrap(spec.hint)
    kw: dict[str, Any] = {"metavar": meta["metavar"]} if "metavar" in meta else {}
    if meta.get("repeat"):
        kw["action"] = "append"
    elif "parse" in meta:
        pass  # the text goes to ``parse`` in config_from_flags
    elif hint is bool:
        kw["action"] = argparse.BooleanOptionalAction
    elif "choices" in meta:
        kw["choices"] = meta["choices"]
    elif typing.get_origin(hint) is Literal:
        kw["choices"] = typing.get_args(hint)
    elif hint in (int, float, str):
        kw["type"] = hint
    elif typing.get_origin(hint) is list:
        kw["action"] = "append"
        (item,) = typing.get_args(hint) or (str,)
        kw["type"] = item if item in (int, float, str) else parse_value
    else:
        kw["type"] = parse_value
    if meta.get("positional"):
        kw["nargs"] = "+" if kw.pop("action", None) == "append" else "?"
    return kw


def metavar(spec: FlagSpec) -> str:
    """What the help shows for the flag's value: its ``metavar``, else its name (``STEPS``, not ``OPTIM.LR``)."""
    return spec.field.metadata.get("metavar") or spec.flag[2:].replace("-", "_").upper()


def _help(spec: FlagSpec) -> str:
    """The flag's help: the first paragraph of the field's docstring, then its default."""
    doc = field_docs(spec.owner).get(spec.field.name, "")
    text = " ".join(doc.split("\n\n")[0].split()).replace("``", "")
    default, meta = spec.field.default, spec.field.metadata
    shown = spec.show_default and meta.get("show_default", True) and not meta.get("required")
    if shown and default not in (dataclasses.MISSING, None, "", False):
        text = f"{text} (default: {default})".strip()
    return text.replace("%", "%%")


def add_flags(
    parser: argparse.ArgumentParser,
    cls: type,
    *,
    skip: tuple[str, ...] = (),
    group: str | None = None,
    optional: bool = False,
) -> None:
    """One flag per field of ``cls`` (see the module docstring), on ``parser`` or on an argument group named
    ``group``; ``skip`` leaves out fields by key path or name; ``optional`` requires none of them."""
    target = parser.add_argument_group(group) if group else parser
    for spec in flag_specs(cls):
        if spec.dest in skip or spec.field.name in skip:
            continue
        kw = _argument(spec)
        if spec.field.metadata.get("positional"):
            target.add_argument(spec.dest, default=argparse.SUPPRESS, help=_help(spec), **kw)
            continue
        if "choices" not in kw and kw.get("action") is not argparse.BooleanOptionalAction:
            kw["metavar"] = metavar(spec)
        required = bool(spec.field.metadata.get("required")) and not optional
        target.add_argument(
            spec.flag, dest=spec.dest, default=argparse.SUPPRESS, required=required, help=_help(spec), **kw
        )


def config_from_flags(
    cls: type, given: dict[str, Any], *, base: dict[str, Any] | None = None, what: str = "command line"
) -> Any:
    """The ``cls`` the command line asks for: ``base`` (the raw mapping of a config file or preset, nested as
    a file writes it) with the given flags laid over it, built once (``cls.from_dict`` when it has one, else
    ``zephyr.config.build_flat``). ``given`` is the parsed namespace as a dict (``vars(args)``), or the same
    values nested by key path as a file writes them; keys that are not flags of ``cls`` are ignored, so one
    namespace serves several configs. Raises ``ConfigProblems``
    with every problem, each led by its flag when a flag gave the value (``what`` names the config when
    there are several)."""
    raw = copy.deepcopy(base) if base else {}
    problems: list[str] = []
    flags: dict[str, str] = {}  # key path → the flag that set it
    for spec in flag_specs(cls):
        *parents, key = spec.dest.split(".")
        nested = functools.reduce(
            lambda d, part: d.get(part) if isinstance(d, dict) else None, parents, given
        )
        if spec.dest not in given and not (isinstance(nested, dict) and key in nested):
            continue
        value = given[spec.dest] if spec.dest in given else nested[key]
        if (parse := spec.field.metadata.get("parse")) is not None:
            try:
                value = parse(value)
            except (ConfigError, ValueError) as exc:
                problems.append(f"{spec.flag}: {exc}")
                continue
        node = raw
        for i, part in enumerate(parents):
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                where = ".".join(parents[: i + 1])
                problems.append(f"{spec.flag}: {where} is {node!r} in the config, not a mapping to set it in")
                break
        else:
            node[key] = value
            flags[spec.dest] = spec.flag
    if problems:
        raise ConfigProblems(problems, what=what)
    try:
        if hasattr(cls, "from_dict"):
            return cls.from_dict(raw)
        errors: list[str] = []
        built = build_flat(cls, raw, "", errors)
        if built is not None:
            return built
        lines = [e.removeprefix(".").removeprefix(": ") for e in errors]
    except ConfigProblems as exc:
        lines = exc.problems
    except ConfigError as exc:  # a FieldError reads KEY: PROBLEM
        lines = [str(exc)]
    raise ConfigProblems([_by_flag(line, flags) for line in lines], what=what)


def _by_flag(problem: str, flags: dict[str, str]) -> str:
    """``problem`` led by the flag that gave its key's value (``optim.lr must ...`` → ``--lr must ...``)."""
    for dest in sorted(flags, key=len, reverse=True):
        if problem.startswith(dest) and problem[len(dest) : len(dest) + 1] in (" ", ":", ""):
            return flags[dest] + problem[len(dest) :]
    return problem


def comma_names(text: str) -> list[str]:
    """Names from comma-separated text (``"en, de"``), blanks left out: a list flag's ``parse``."""
    return [name.strip() for name in text.split(",") if name.strip()]


_NUMBER = re.compile(r"[0-9]*\.?[0-9]+")


def joined_sizes(argv: Sequence[str]) -> list[str]:
    """``argv`` with a byte size written with a space as one value: ``--memory-budget 1.5 GB`` (or
    ``--memory-budget=512 MiB``, which the shell splits in two) reads as ``--memory-budget '1.5 GB'``, for
    every size flag of every command, and ``zephyr.config.parse_bytes`` reads it like ``1.5GB``. Only a
    number given to a flag and followed by a unit alone (``GB``, ``MiB``: what ``parse_bytes`` reads as a
    unit) is joined; anything else is left to the parser.

    >>> joined_sizes(["sort", "in/", "--memory-budget", "1.5", "GB", "--by", "id"])
    ['sort', 'in/', '--memory-budget', '1.5 GB', '--by', 'id']
    """
    out: list[str] = []
    for token in argv:
        last = out[-1] if out else ""
        flag, _, value = last.partition("=") if last.startswith("--") else ("", "", last)
        given = flag.startswith("--") if flag else len(out) >= 2 and out[-2].startswith("--")
        if given and _NUMBER.fullmatch(value) and token.isalpha() and token.lower() in BYTE_UNITS:
            out[-1] = f"{last} {token}"
        else:
            out.append(token)
    return out
