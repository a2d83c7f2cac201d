"""Parse and format byte sizes such as ``"512MB"``, ``"4GiB"`` or ``1_000_000``.

Decimal units (kB, MB, GB, TB) are powers of 1000; binary units (KiB, MiB, GiB, TiB) powers of 1024.
A bare number is bytes.

>>> parse_bytes("512MB")
512000000
>>> parse_bytes("1.5GiB")
1610612736
>>> format_bytes(1536)
'1.5 KiB'
"""

from __future__ import annotations

import re

from zephyr.errors import ConfigError

__all__ = ["parse_bytes", "format_bytes"]

_UNITS = {
    "": 1,
    "b": 1,
    "k": 1000,
    "kb": 1000,
    "m": 1000**2,
    "mb": 1000**2,
    "g": 1000**3,
    "gb": 1000**3,
    "t": 1000**4,
    "tb": 1000**4,
    "kib": 1024,
    "mib": 1024**2,
    "gib": 1024**3,
    "tib": 1024**4,
}
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
    if not match or match.group(2).lower() not in _UNITS:
        raise ConfigError(f"not a byte size: {value!r} (examples: 512MB, 4GiB, 1000000)")
    return int(float(match.group(1)) * _UNITS[match.group(2).lower()])


def format_bytes(num_bytes: float) -> str:
    """Human-readable binary size, for logs and reports."""
    size = float(num_bytes)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(size) < 1024 or unit == "TiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    raise AssertionError("unreachable")
