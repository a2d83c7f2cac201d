"""Pipeline configs: a YAML file → a validated ``PipelineConfig`` (dataclasses), before any work starts.

File format (version 1)::

    version: 1                      # optional; 1 is the only version
    name: quickstart
    text_column: text               # columns every step works on
    id_column: id
    source_column: source
    steps:                         # run in this order; ``step`` is the type, ``name`` defaults to it
      - step: read
        paths: [../../data/sample/sample.parquet]   # relative paths: from the config file's folder
      - step: fuzzy_dedup
        threshold: 0.8
      - step: train
        enabled: false              # any step can be switched off

Step types and their keys are the ``Step`` classes of ``zephyr.pipelines.steps`` and ``web.steps`` (the
registry ``zephyr.pipelines.step.STEPS``), which embed the packages' own configs (a ``fuzzy_dedup`` step's keys are ``zephyr.dedup.FuzzyDedupConfig``'s); every
key is documented where it is declared.

Validation walks the whole file and raises one ``zephyr.config.ConfigProblems`` (a ``ConfigError``) listing
every problem, each naming its key path and what is allowed, e.g.::

    steps[5].threshold: must be within (0, 1], got 1.5
    steps[2].langauges is not a known key of a LangIdStep; allowed: enabled, languages, max_chars, ...

String values may use ``${VAR}`` or ``${VAR:-default}`` (environment variables). Overrides
(``--set steps.fuzzy_dedup.threshold=0.7``, ``--set steps.3.enabled=false``, ``--set seed=1``) are applied
to the raw mapping before validation; their values are read by ``zephyr.config.parse_value`` as in ``zephyr
train --set`` (JSON, else YAML such as ``[en, de]``, else text), and relative paths in them resolve from the
current directory. Checking, file reading and env expansion are the config base's (``zephyr.config``).

>>> cfg = parse_config({"name": "t", "steps": [{"step": "read", "paths": ["/"]}, {"step": "normalize"}]})
>>> [s.name for s in cfg.steps], cfg.steps[1].step.normalize.nfc
(['read', 'normalize'], True)
"""

from __future__ import annotations

import dataclasses
import glob
import os
import re
from pathlib import Path
from typing import Any

import zephyr.pipelines.steps  # noqa: F401  (registers the step types)
import zephyr.pipelines.web.steps  # noqa: F401  (registers the web step types)
from zephyr.pipelines.step import COMMON_KEYS, CONFIG_VERSION, STEPS, PipelineConfig, StepEntry

from zephyr.config import ConfigProblems, expand_env, flat_fields, parse_value, read_mapping, unknown_keys
from zephyr.errors import ColumnExistsError, ConfigError

_TOP_KEYS = ("version", *(f.name for f in dataclasses.fields(PipelineConfig) if f.name != "path"))


# -- loading ---------------------------------------------------------------------------------------------
def builtin_config(name: str) -> Path:
    """The path of a ready-made config shipped in ``zephyr.pipelines`` (``quickstart``, ``web``, ``code``)."""
    path = Path(__file__).with_name("configs") / f"{name}.yaml"
    if not path.is_file():
        names = sorted(p.stem for p in path.parent.glob("*.yaml"))
        raise ConfigError(f"no built-in pipeline {name!r}; built-ins: {', '.join(names)}")
    return path


def load_config(path: str | os.PathLike[str], overrides: list[str] | None = None) -> PipelineConfig:
    """Read, override and validate a pipeline file (or a built-in name such as ``quickstart``)."""
    path = Path(path)
    if not path.exists() and path.suffix == "" and "/" not in str(path):
        path = builtin_config(str(path))
    raw = read_mapping(path, "pipeline config")
    base = path.resolve().parent
    raw = expand_env(_resolve_paths(raw, base))  # path keys first: where a path came from decides its base
    if overrides:
        raw = apply_overrides(raw, overrides, base=Path.cwd())
    return parse_config(raw, path=str(path))


def _path_fields(step_type: str) -> set[str]:
    """The keys of a step type holding paths (``zephyr.config.path_field``): resolved from the config's folder."""
    known = flat_fields(STEPS[step_type]) if step_type in STEPS else {}
    return {key for key, (f, _, _) in known.items() if f.metadata.get("path")}


def _resolve_one(value: Any, base: Path, where: str = "") -> Any:
    """A path key's value with ``${VAR}`` expanded and a relative path made absolute: from ``base`` (the
    config's folder) when the file wrote it, a ``${VAR:-default}`` default included, and from the current
    directory when it starts with a variable set in the environment (``ZEPHYR_WARC='crawl/*.warc.gz' zephyr
    run web``: the person typed it where they stand, as they would a command-line path)."""
    if isinstance(value, list):
        return [_resolve_one(v, base, f"{where}[{i}]") for i, v in enumerate(value)]
    if not isinstance(value, str):
        return value
    name = value[2:].partition("}")[0].partition(":-")[0] if value.startswith("${") else None
    if name is not None and name in os.environ:
        base = Path.cwd()
    value = os.path.expanduser(expand_env(value, where))
    if value and "://" not in value and not os.path.isabs(value):
        return os.path.normpath(base / value)
    return value


def _resolve_paths(raw: dict[str, Any], base: Path) -> dict[str, Any]:
    steps = raw.get("steps")
    if not isinstance(steps, list):
        return raw
    out = []
    for index, step in enumerate(steps):
        if isinstance(step, dict):  # the path keys resolved in place (the others as written)
            paths = _path_fields(str(step.get("step"))) & step.keys()
            step = {**step, **{key: _resolve_one(step[key], base, f"steps[{index}].{key}") for key in paths}}
        out.append(step)
    return {**raw, "steps": out}


def apply_overrides(raw: dict[str, Any], overrides: list[str], *, base: Path | None = None) -> dict[str, Any]:
    """Apply ``KEY=VALUE`` overrides to a raw config mapping (see the module docstring for the syntax)."""
    import copy

    raw = copy.deepcopy(raw)
    for item in overrides:
        key, sep, text = item.partition("=")
        parts = key.split(".")
        if not sep or not key:
            raise ConfigError(f"--set {item!r}: expected KEY=VALUE, e.g. steps.fuzzy_dedup.threshold=0.7")
        if (parts[0] == "steps") != (len(parts) >= 3):
            raise ConfigError(
                f"--set {item!r}: address a step key as steps.NAME.KEY or steps.INDEX.KEY; the other "
                f"top-level keys are not nested: {', '.join(_TOP_KEYS)}"
            )
        value, node = parse_value(text), raw
        if parts[0] == "steps":
            node, parts = _find_step(raw.get("steps"), parts[1], item), parts[2:]
            if base is not None and len(parts) == 1 and parts[0] in _path_fields(str(node.get("step"))):
                value = _resolve_one(value, base)
        for part in parts[:-1]:
            if not isinstance(node.get(part), dict):
                node[part] = {}
            node = node[part]
        node[parts[-1]] = value
    return raw


def _find_step(steps: Any, ref: str, item: str) -> dict[str, Any]:
    if not isinstance(steps, list):
        raise ConfigError(f"--set {item!r}: the config has no steps list")
    if ref.isdigit():
        index = int(ref)
        if index >= len(steps) or not isinstance(steps[index], dict):
            raise ConfigError(f"--set {item!r}: no step at index {index} (the pipeline has {len(steps)})")
        return steps[index]
    named = {str(s.get("name") or s.get("step")): s for s in steps if isinstance(s, dict)}
    if ref not in named:
        raise ConfigError(f"--set {item!r}: no step named {ref!r}; steps: {', '.join(named)}")
    return named[ref]


# -- validation ------------------------------------------------------------------------------------------
def parse_config(raw: dict[str, Any], *, path: str | None = None) -> PipelineConfig:
    """Validate a raw mapping into a ``PipelineConfig``; every problem is reported, each with its key path."""
    errors = unknown_keys(raw, _TOP_KEYS, "")
    version = raw.get("version", CONFIG_VERSION)
    if version != CONFIG_VERSION:
        errors.append(f"version: this zephyr reads version {CONFIG_VERSION}, got {version!r}")
    top: dict[str, str] = {}
    for key in _TOP_KEYS[1:]:
        if key in raw and key != "steps":
            if not isinstance(raw[key], str) or (key != "description" and not raw[key]):
                errors.append(f"{key}: must be a non-empty string, got {raw[key]!r}")
            else:
                top[key] = raw[key]
    steps_raw = raw.get("steps")
    entries: list[StepEntry] = []
    if not isinstance(steps_raw, list) or not steps_raw:
        errors.append("steps: must be a non-empty list of steps, each a mapping with a 'step' key")
        steps_raw = []
    for i, item in enumerate(steps_raw):
        entry = _parse_step(item, f"steps[{i}]", errors)
        if entry is not None:
            entries.append(entry)
            _check_output_column(entry, top, f"steps[{i}]", errors)
    if len(entries) == len(steps_raw):
        _check_order(entries, errors)
    if errors:
        raise ConfigProblems(errors, what="pipeline config", path=path)
    name = top.pop("name", None) or (Path(path).stem if path else "pipeline")
    return PipelineConfig(name=name, steps=tuple(entries), path=path, **top)


def _parse_step(item: Any, where: str, errors: list[str]) -> StepEntry | None:
    if not isinstance(item, dict):
        errors.append(f"{where}: must be a mapping with a 'step' key, got {item!r}")
        return None
    kind = item.get("step")
    if kind not in STEPS:
        errors.append(f"{where}.step: must be one of {', '.join(STEPS)}, got {kind!r}")
        return None
    name = item.get("name", kind)
    if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z0-9_\-]+", name):
        errors.append(f"{where}.name: must be letters, digits, '_' or '-', got {name!r}")
        return None
    enabled = item.get("enabled", True)
    if not isinstance(enabled, bool):
        errors.append(f"{where}.enabled: must be true or false, got {enabled!r}")
        return None
    step = STEPS[kind].from_keys({k: v for k, v in item.items() if k not in COMMON_KEYS}, where, errors)
    return None if step is None else StepEntry(name, step, enabled)


def _check_order(entries: list[StepEntry], errors: list[str]) -> None:
    seen: dict[str, int] = {}
    for i, entry in enumerate(entries):
        if entry.name in seen:
            errors.append(f"steps[{i}].name: {entry.name!r} is already the name of steps[{seen[entry.name]}]")
        seen[entry.name] = i
    active = [(i, e) for i, e in enumerate(entries) if e.enabled]
    if not active or not active[0][1].step.starts:
        first = " or ".join(repr(t) for t, cls in STEPS.items() if cls.starts)
        errors.append(f"steps[0].step: the first (enabled) step must be {first}")
    after: StepEntry | None = None  # the step that ends the rows (tokenize)
    for position, (i, entry) in enumerate(active):
        step = entry.step
        if position and step.starts:
            errors.append(f"steps[{i}].step: only the first step may be {entry.type!r}")
        if step.output == "rows" and after is not None:
            errors.append(f"steps[{i}].step: {entry.type!r} cannot come after the {after.type} step")
        if step.unique and any(isinstance(e.step, type(step)) for _, e in active[:position]):
            errors.append(f"steps[{i}].step: only one {entry.type} step is allowed")
        if step.output == "tokens" and after is None:
            after = entry
        errors += step.check(i, [e for _, e in active[:position]])


def _check_output_column(entry: StepEntry, top: dict[str, str], where: str, errors: list[str]) -> None:
    """A step's ``output_column`` may not be one of the columns every step works on: replacing the text or
    the ids is never what a person meant, whatever ``replace_columns`` says."""
    name = getattr(entry.step, "output_column", None)
    for key in ("text_column", "id_column", "source_column"):
        if name is not None and name == top.get(key, PipelineConfig.__dataclass_fields__[key].default):
            errors.append(f"{where}.output_column: {name!r} is the pipeline's {key}; choose another name")


def check_added_columns(config: PipelineConfig) -> None:
    """Raise ``ColumnExistsError`` (one line, key paths) when an enabled step would replace a column the data
    has at that point without ``replace_columns: true``.

    The walk starts at the first step's columns (the read step's input files: their footers or first blocks,
    plus the source column it fills in; an ``extract`` step's fixed columns) and adds what each step writes
    (``Step.adds``, ``Step.columns_after``). A step whose columns are already there fails naming the step, the
    column, where it came from (an input file or an earlier step) and the two keys that fix it:
    ``replace_columns: true`` or ``output_column: NAME``. A ``map`` step's output columns are unknown before
    it runs: the walk stops there, and the steps after it still refuse a clash per batch (each step checks its
    own input, ``zephyr.removal``)."""
    if not any(entry.step.adds(config) for entry in config.steps if entry.enabled):
        return  # nothing to check: no input file is opened
    origin: dict[str, str] | None = {}
    for i, entry in enumerate(config.steps):
        if not entry.enabled:
            continue
        added = entry.step.adds(config)
        clash = [name for name in added if name in origin]
        if clash and not entry.step.replace_columns:
            what = ", ".join(repr(name) for name in clash)
            it = "it" if len(clash) == 1 else "them"
            raise ColumnExistsError(
                f"steps[{i}] ({entry.name}): the data already has {what} (from {origin[clash[0]]}); "
                f"set steps[{i}].replace_columns: true to replace {it}, or steps[{i}].output_column: NAME to write "
                "under another name"
            )
        origin = entry.step.columns_after(origin, config, entry.name)
        if origin is None:
            return


def check_inputs(config: PipelineConfig) -> None:
    """Fail before any work when local input paths match no file (globs, files and directories)."""
    problems: list[str] = []
    for i, entry in enumerate(config.steps):
        if not entry.enabled:
            continue
        keys = entry.step.keys()
        for name in _path_fields(entry.type):
            value = keys.get(name)
            for j, p in enumerate(value if isinstance(value, list) else [value]):
                if p is None or "://" in p:
                    continue
                key = f"steps[{i}].{name}" + (f"[{j}]" if isinstance(value, list) else "")
                if glob.has_magic(p):
                    if not glob.glob(p, recursive=True):
                        problems.append(f"{key}: the pattern {p!r} matches no file")
                elif not os.path.exists(p):
                    problems.append(f"{key}: no such file or directory: {p}")
    if problems:
        raise ConfigError("input paths not found:\n  " + "\n  ".join(problems))
