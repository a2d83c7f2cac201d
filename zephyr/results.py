"""What an action returns: shared by the driver (``zephyr.job``) and the facade (``zephyr.dataset``)."""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["WriteResult"]


@dataclass(frozen=True)
class WriteResult:
    """What a ``write_*`` action produced: the files in shard order and the job's stats."""

    files: list[str]
    stats: dict
    checksums: dict[str, dict] = field(default_factory=dict)
    """Per file, its size and checksum as written (``zephyr.io.checksum``): a caller that resumes from these
    files later (``zephyr run``'s steps) checks them with ``zephyr.resume.check_files``."""
