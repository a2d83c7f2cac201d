"""What a finished step's record (its ``stats.json``) says, read the same way by the runner's lines and the
report."""

from __future__ import annotations

from typing import Any

__all__ = ["rows_rewritten"]


def rows_rewritten(record: dict[str, Any]) -> int:
    """Rows a step kept but changed (its ``<op>/rows_rewritten`` counters, e.g. normalization's)."""
    return sum(int(n) for name, n in record.get("counters", {}).items() if name.endswith("/rows_rewritten"))
