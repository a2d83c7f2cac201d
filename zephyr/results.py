"""What an action returns: shared by the driver (``zephyr.job``) and the facade (``zephyr.dataset``)."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["WriteResult"]


@dataclass(frozen=True)
class WriteResult:
    """What a ``write_*`` action produced: the files in shard order and the job's stats."""

    files: list[str]
    stats: dict
