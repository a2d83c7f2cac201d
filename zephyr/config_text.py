"""Config text: one ``--set KEY=VALUE`` value (``parse_value``), ``${VAR}`` in a raw config
(``expand_env``) and a YAML or JSON config file read as a raw mapping (``read_mapping``); validation against
the dataclasses is ``zephyr.config``'s.

Split out of ``zephyr.config`` (which re-exports every name). Standard library at module level; PyYAML is
imported where YAML text is parsed.

>>> parse_value("0.7"), parse_value("[en, de]"), parse_value("1e-3"), parse_value("flex"), parse_value(" ")
(0.7, ['en', 'de'], 0.001, 'flex', '')
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

from zephyr.errors import ConfigError

__all__ = ["parse_value", "expand_env", "read_mapping"]


def parse_value(text: str) -> Any:
    """The value of a ``--set KEY=VALUE`` override, the same in ``zephyr run`` and ``zephyr train``.

    JSON first (so ``1e-3`` is a number, as JSON and YAML 1.2 read it, where PyYAML's YAML 1.1 reads text),
    then YAML (``[en, de]``, ``yes``, unquoted strings), then the text itself; empty text is ``""``. Without
    PyYAML (a training node with torch, numpy and fsspec only) the YAML step is skipped: JSON values and plain
    text still read the same, and only YAML-only forms such as ``[en, de]`` stay text."""
    if not text.strip():
        return ""
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        pass
    try:
        import yaml
    except ImportError:
        return text
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError:
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
