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

Step types and their keys are the dataclasses of ``zephyr.pipelines.step_configs`` (``STEP_TYPES``), which
embed the packages' own configs (a ``fuzzy_dedup`` step's keys are ``zephyr.dedup.FuzzyDedupConfig``'s); every
key is documented where it is declared.

Validation walks the whole file and raises one ``zephyr.config.ConfigProblems`` (a ``ConfigError``) listing
every problem, each naming its key path and what is allowed, e.g.::

    steps[5].threshold: must be within (0, 1], got 1.5
    steps[2].langauges: unknown key for a LangIdStep; allowed: enabled, languages, max_chars, ...

String values may use ``${VAR}`` or ``${VAR:-default}`` (environment variables). Overrides
(``--set steps.fuzzy_dedup.threshold=0.7``, ``--set steps.3.enabled=false``, ``--set seed=1``) are applied
to the raw mapping before validation; their values are read by ``zephyr.config.parse_value`` as in ``zephyr
train --set`` (JSON, else YAML such as ``[en, de]``, else text), and relative paths in them resolve from the
current directory. Checking, file reading and env expansion are the config base's (``zephyr.config``).

>>> cfg = parse_config({"name": "t", "steps": [{"step": "read", "paths": ["/"]}, {"step": "normalize"}]})
>>> [s.name for s in cfg.steps], cfg.steps[1].config.normalize.nfc
(['read', 'normalize'], True)
"""

from __future__ import annotations

import dataclasses
import glob
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from zephyr.pipelines.step_configs import (
    DATA_STEPS,
    SOURCE_STEPS,
    STEP_TYPES,
    ExactDedupStep,
    FuzzyDedupStep,
    HeuristicFilterStep,
    LangIdStep,
    MapStep,
    NormalizeStep,
    QualityStep,
    ReadStep,
    TokenizeStep,
    TrainStep,
)

from zephyr.config import (
    ConfigProblems,
    build_flat,
    expand_env,
    flat_dict,
    flat_fields,
    parse_value,
    read_mapping,
)
from zephyr.errors import ConfigError

__all__ = [
    "CONFIG_VERSION",
    "STEP_TYPES",
    "DATA_STEPS",
    "SOURCE_STEPS",
    "PipelineConfig",
    "StepEntry",
    "ReadStep",
    "NormalizeStep",
    "LangIdStep",
    "HeuristicFilterStep",
    "ExactDedupStep",
    "FuzzyDedupStep",
    "QualityStep",
    "MapStep",
    "TokenizeStep",
    "TrainStep",
    "load_config",
    "parse_config",
    "apply_overrides",
    "builtin_config",
]

CONFIG_VERSION = 1


_COMMON_KEYS = ("step", "name", "enabled")
_DISPLAY_ONLY = {"train": ("log_every",)}
"""Keys that change only what a person sees, not the outputs: changing one never reruns (or clears) a step."""


@dataclass(frozen=True)
class StepEntry:
    """One step of a pipeline: its type, unique name, whether it runs, and its typed config."""

    type: str
    name: str
    config: Any
    enabled: bool = True

    def to_dict(self) -> dict[str, Any]:
        """The entry as a config file writes it (``pipeline.yaml`` in a job folder)."""
        return {"step": self.type, **self._body()}

    def record_dict(self) -> dict[str, Any]:
        """The entry as fingerprints and step records (``config`` in a step's ``stats.json``) hold it."""
        return {"step": self.type, **self._body()}

    def _body(self) -> dict[str, Any]:
        body = dict(self.config.settings) if isinstance(self.config, TrainStep) else flat_dict(self.config)
        return {"name": self.name, "enabled": self.enabled, **body}

    def fingerprint(self, upstream: str) -> str:
        """Hash of this step's config and its upstream fingerprint: a changed config never reuses outputs."""
        from zephyr.resume import unit_fingerprint

        hashed = {k: v for k, v in self.record_dict().items() if k not in _DISPLAY_ONLY.get(self.type, ())}
        return unit_fingerprint({"step": hashed, "version": CONFIG_VERSION}, upstream)


@dataclass(frozen=True)
class PipelineConfig:
    """A whole pipeline. Plain data: change it with ``dataclasses.replace``."""

    name: str
    steps: tuple[StepEntry, ...]
    text_column: str = "text"
    """The document text."""
    id_column: str = "id"
    """Document ids (dedup keeps the smallest id of a cluster, and tells rows that share an id apart by their
    position; the token shuffle keys on it)."""
    source_column: str = "source"
    """Where each document comes from (per-source retention in the report, source mix in the manifest)."""
    lang_column: str = "lang"
    """Language code column (written by ``langid``; per-language retention in the report)."""
    description: str = ""
    path: str | None = None
    """The file this config was loaded from (informational)."""

    def step(self, name: str) -> StepEntry:
        for entry in self.steps:
            if entry.name == name:
                return entry
        raise ConfigError(f"no step named {name!r}; steps: {', '.join(s.name for s in self.steps)}")

    def to_dict(self) -> dict[str, Any]:
        return {
            "version": CONFIG_VERSION,
            "name": self.name,
            "description": self.description,
            "text_column": self.text_column,
            "id_column": self.id_column,
            "source_column": self.source_column,
            "lang_column": self.lang_column,
            "steps": [s.to_dict() for s in self.steps],
        }


_TOP_KEYS = (
    "version",
    "name",
    "description",
    "text_column",
    "id_column",
    "source_column",
    "lang_column",
    "steps",
)


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
    raw = _resolve_paths(expand_env(raw), base)
    if overrides:
        raw = apply_overrides(raw, overrides, base=Path.cwd())
    return parse_config(raw, path=str(path))


def _path_fields(step_type: str) -> set[str]:
    cls = STEP_TYPES.get(step_type)
    if cls is None:
        return set()
    return {key for key, (f, _, _) in flat_fields(cls).items() if f.metadata.get("path")}


def _resolve_one(value: Any, base: Path) -> Any:
    if isinstance(value, list):
        return [_resolve_one(v, base) for v in value]
    if (
        isinstance(value, str)
        and value
        and "://" not in value
        and not os.path.isabs(os.path.expanduser(value))
    ):
        return os.path.normpath(base / value)
    if isinstance(value, str):
        return os.path.expanduser(value)
    return value


def _resolve_paths(raw: dict[str, Any], base: Path) -> dict[str, Any]:
    steps = raw.get("steps")
    if not isinstance(steps, list):
        return raw
    out = []
    for step in steps:
        if isinstance(step, dict):
            step = dict(step)
            for key in _path_fields(str(step.get("step"))):
                if key in step:
                    step[key] = _resolve_one(step[key], base)
        out.append(step)
    return {**raw, "steps": out}


def apply_overrides(raw: dict[str, Any], overrides: list[str], *, base: Path | None = None) -> dict[str, Any]:
    """Apply ``KEY=VALUE`` overrides to a raw config mapping (see the module docstring for the syntax)."""
    import copy

    raw = copy.deepcopy(raw)
    for item in overrides:
        key, sep, text = item.partition("=")
        if not sep or not key:
            raise ConfigError(f"--set {item!r}: expected KEY=VALUE, e.g. steps.fuzzy_dedup.threshold=0.7")
        value = parse_value(text)
        parts = key.split(".")
        if parts[0] != "steps":
            if len(parts) != 1:
                raise ConfigError(
                    f"--set {item!r}: top-level keys are not nested; allowed: {', '.join(_TOP_KEYS)}"
                )
            raw[parts[0]] = value
            continue
        if len(parts) < 3:
            raise ConfigError(f"--set {item!r}: address a step key as steps.NAME.KEY or steps.INDEX.KEY")
        steps = raw.get("steps")
        if not isinstance(steps, list):
            raise ConfigError(f"--set {item!r}: the config has no steps list")
        target = _find_step(steps, parts[1], item)
        if base is not None and parts[2] in _path_fields(str(target.get("step"))) and len(parts) == 3:
            value = _resolve_one(value, base)
        node = target
        for part in parts[2:-1]:
            child = node.get(part)
            if not isinstance(child, dict):
                child = {}
                node[part] = child
            node = child
        node[parts[-1]] = value
    return raw


def _find_step(steps: list[Any], ref: str, item: str) -> dict[str, Any]:
    if ref.isdigit():
        index = int(ref)
        if index >= len(steps) or not isinstance(steps[index], dict):
            raise ConfigError(f"--set {item!r}: no step at index {index} (the pipeline has {len(steps)})")
        return steps[index]
    names = []
    for step in steps:
        if isinstance(step, dict):
            name = step.get("name") or step.get("step")
            names.append(str(name))
            if name == ref:
                return step
    raise ConfigError(f"--set {item!r}: no step named {ref!r}; steps: {', '.join(names)}")


# -- validation ------------------------------------------------------------------------------------------
def parse_config(raw: dict[str, Any], *, path: str | None = None) -> PipelineConfig:
    """Validate a raw mapping into a ``PipelineConfig``; every problem is reported, each with its key path."""
    errors: list[str] = []
    unknown = sorted(set(raw) - set(_TOP_KEYS))
    for key in unknown:
        errors.append(f"{key}: unknown key; allowed: {', '.join(_TOP_KEYS)}")
    version = raw.get("version", CONFIG_VERSION)
    if version != CONFIG_VERSION:
        errors.append(f"version: this zephyr reads version {CONFIG_VERSION}, got {version!r}")
    top: dict[str, str] = {}
    for key in ("name", "description", "text_column", "id_column", "source_column", "lang_column"):
        if key in raw:
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
    if kind not in STEP_TYPES:
        errors.append(f"{where}.step: must be one of {', '.join(STEP_TYPES)}, got {kind!r}")
        return None
    cls = STEP_TYPES[kind]
    name = item.get("name", kind)
    if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z0-9_\-]+", name):
        errors.append(f"{where}.name: must be letters, digits, '_' or '-', got {name!r}")
        return None
    enabled = item.get("enabled", True)
    if not isinstance(enabled, bool):
        errors.append(f"{where}.enabled: must be true or false, got {enabled!r}")
        return None
    body = {k: v for k, v in item.items() if k not in _COMMON_KEYS}
    if cls is TrainStep:
        config = build_flat(cls, {"settings": body}, where, errors)
    else:
        config = build_flat(cls, body, where, errors, also=_COMMON_KEYS)
    if config is None:
        return None
    return StepEntry(kind, name, config, enabled)


def _check_order(entries: list[StepEntry], errors: list[str]) -> None:
    seen: dict[str, int] = {}
    for i, entry in enumerate(entries):
        if entry.name in seen:
            errors.append(f"steps[{i}].name: {entry.name!r} is already the name of steps[{seen[entry.name]}]")
        seen[entry.name] = i
    active = [(i, e) for i, e in enumerate(entries) if e.enabled]
    if not active or active[0][1].type not in SOURCE_STEPS:
        errors.append("steps[0].step: the first (enabled) step must be 'read' or 'extract'")
    for i, entry in active[1:]:
        if entry.type in SOURCE_STEPS:
            errors.append(f"steps[{i}].step: only the first step may be {entry.type!r}")
    tokenize_at = next((i for i, e in active if e.type == "tokenize"), None)
    for i, entry in active:
        if entry.type in DATA_STEPS and tokenize_at is not None and i > tokenize_at:
            errors.append(f"steps[{i}].step: {entry.type!r} cannot come after the tokenize step")
        if entry.type == "train" and (tokenize_at is None or i < tokenize_at):
            errors.append(f"steps[{i}].step: 'train' needs an enabled tokenize step before it")
        if entry.type == "tokenize" and i != tokenize_at:
            errors.append(f"steps[{i}].step: only one tokenize step is allowed")
        if entry.type == "quality" and entry.config.train_from:
            ref = entry.config.train_from
            prior = {e.name: e for j, e in active if j < i}
            if ref not in prior or prior[ref].type != "heuristic_filter":
                errors.append(
                    f"steps[{i}].train_from: must name an enabled heuristic_filter step before it, got {ref!r}"
                )
            elif not prior[ref].config.keep_dropped:
                errors.append(f"steps[{i}].train_from: step {ref!r} must have keep_dropped: true")


def _check_output_column(entry: StepEntry, top: dict[str, str], where: str, errors: list[str]) -> None:
    """A step's ``output_column`` may not be one of the columns every step works on: replacing the text or
    the ids is never what a person meant, whatever ``replace_columns`` says."""
    name = getattr(entry.config, "output_column", None)
    for key in ("text_column", "id_column", "source_column"):
        if name is not None and name == top.get(key, PipelineConfig.__dataclass_fields__[key].default):
            errors.append(f"{where}.output_column: {name!r} is the pipeline's {key}; choose another name")


def check_inputs(config: PipelineConfig) -> None:
    """Fail before any work when local input paths match no file (globs, files and directories)."""
    problems: list[str] = []
    for i, entry in enumerate(config.steps):
        if not entry.enabled:
            continue
        cls = type(entry.config)
        for f in dataclasses.fields(cls):
            if not f.metadata.get("path"):
                continue
            value = getattr(entry.config, f.name)
            for j, p in enumerate(value if isinstance(value, list) else [value]):
                if p is None or "://" in p:
                    continue
                key = f"steps[{i}].{f.name}" + (f"[{j}]" if isinstance(value, list) else "")
                if glob.has_magic(p):
                    if not glob.glob(p, recursive=True):
                        problems.append(f"{key}: the pattern {p!r} matches no file")
                elif not os.path.exists(p):
                    problems.append(f"{key}: no such file or directory: {p}")
    if problems:
        raise ConfigError("input paths not found:\n  " + "\n  ".join(problems))
