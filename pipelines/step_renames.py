"""The old vocabulary of ``zephyr run``, read for one release: a pipeline's entries were "stages".

They are *steps* now ("stage" means one engine stage only; see the Vocabulary of docs/architecture.md). Until
the next release each old spelling still works, with one ``ZephyrDeprecationWarning`` that names the new one:

- config keys: ``stages:`` → ``steps:``, and each entry's ``stage:`` → ``step:`` (``renamed_config_keys``);
  a config with both names of one key is a ``ConfigError`` naming both;
- overrides: ``--set stages.NAME.KEY=...`` → ``--set steps.NAME.KEY=...`` (``renamed_override``);
- Python names: ``StageEntry``, ``LangIdStage`` ... and the old module paths (``old_names_getattr``, and the
  shim modules ``zephyr.pipelines.stages``, ``stage_configs``, ``stage_ops`` and ``web.stages``).

>>> import warnings
>>> with warnings.catch_warnings():
...     warnings.simplefilter("ignore")
...     renamed_config_keys({"name": "t", "stages": [{"stage": "read"}, {"step": "normalize"}]})
{'name': 't', 'steps': [{'step': 'read'}, {'step': 'normalize'}]}
"""

from __future__ import annotations

import importlib
import warnings
from collections.abc import Callable
from typing import Any

from zephyr.config import ZephyrDeprecationWarning
from zephyr.errors import ConfigError

__all__ = [
    "OLD_NAMES",
    "deprecated_name",
    "old_names_getattr",
    "renamed_config_keys",
    "renamed_override",
    "warn_moved_module",
]

_UNTIL = "until the next release"

_STEP_CLASSES = (
    "Read",
    "Normalize",
    "LangId",
    "HeuristicFilter",
    "ExactDedup",
    "FuzzyDedup",
    "Quality",
    "Map",
    "Tokenize",
    "Train",
    "Extract",
    "UrlFilter",
    "UrlDedup",
    "SubstringDedup",
)
OLD_NAMES: dict[str, str] = {
    **{f"{kind}Stage": f"{kind}Step" for kind in _STEP_CLASSES},
    "StageEntry": "StepEntry",
    "STAGE_TYPES": "STEP_TYPES",
    "DATA_STAGES": "DATA_STEPS",
    "SOURCE_STAGES": "SOURCE_STEPS",
    "StageContext": "StepContext",
    "StageOutcome": "StepOutcome",
    "finish_stage": "finish_step",
    "stage_dir_name": "step_dir_name",
}
"""Old Python name → new, for every name of the pipeline's entries that said "stage"."""


def deprecated_name(old: str, new: str, *, stacklevel: int = 3) -> None:
    """Warn that ``old`` (a Python name or a config key) is renamed ``new``."""
    warnings.warn(
        f"{old} is renamed {new}; write {new} (the old name is read {_UNTIL})",
        ZephyrDeprecationWarning,
        stacklevel=stacklevel,
    )


def warn_moved_module(old: str, new: str) -> None:
    """The warning of a shim module left at an old path (called at its import)."""
    warnings.warn(
        f"{old} is renamed {new} (a pipeline's entries are steps, not stages); the old path goes away in the "
        "next release",
        ZephyrDeprecationWarning,
        stacklevel=3,
    )


def _renamed_key(mapping: dict[str, Any], old: str, new: str) -> dict[str, Any]:
    """``mapping`` with ``old`` renamed ``new`` in place (the order of its keys kept)."""
    return {(new if key == old else key): value for key, value in mapping.items()}


def renamed_config_keys(raw: dict[str, Any]) -> dict[str, Any]:
    """``raw`` (a pipeline config mapping) with ``stages:`` and every entry's ``stage:`` under their new names;
    one warning per old key however many entries use it. Both names of a key at once is a ``ConfigError``:
    which one was meant is unknown."""
    if "stages" in raw:
        if "steps" in raw:
            raise ConfigError("the config has both stages: (the old name) and steps:; keep only steps:")
        deprecated_name("the config key stages:", "steps:", stacklevel=4)
        raw = _renamed_key(raw, "stages", "steps")
    steps = raw.get("steps")
    if not isinstance(steps, list) or not any(isinstance(e, dict) and "stage" in e for e in steps):
        return raw
    for i, entry in enumerate(steps):
        if isinstance(entry, dict) and "stage" in entry and "step" in entry:
            raise ConfigError(f"steps[{i}] has both stage: (the old name) and step:; keep only step:")
    deprecated_name("an entry's stage: key", "step:", stacklevel=4)
    fixed = [_renamed_key(e, "stage", "step") if isinstance(e, dict) else e for e in steps]
    return {**raw, "steps": fixed}


def renamed_override(key: str, parts: list[str]) -> list[str]:
    """The parts of ``--set KEY=...`` (``key`` split on dots) with an old first part ``stages`` read as
    ``steps`` (warned)."""
    if parts[0] != "stages":
        return parts
    deprecated_name(f"--set {key}=", f"--set steps{key[len('stages') :]}=", stacklevel=4)
    return ["steps", *parts[1:]]


def old_names_getattr(module: str, target: str | None = None) -> Callable[[str], Any]:
    """A module ``__getattr__`` for ``module`` that serves the old names of ``OLD_NAMES`` whose new name
    ``target`` (default: ``module`` itself; imported on first use) has, each with a warning."""

    def __getattr__(name: str) -> Any:
        holder = importlib.import_module(target or module)
        new = OLD_NAMES.get(name)
        if new is None or not hasattr(holder, new):
            raise AttributeError(f"module {module!r} has no attribute {name!r}")
        deprecated_name(f"{module}.{name}", f"{target or module}.{new}")
        return getattr(holder, new)

    return __getattr__
