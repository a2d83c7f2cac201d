"""What two dedup runs must agree on: their stats without the timings (``*_s``, ``seconds``), which differ run
to run. Shared by the tests that run one dedup on two encodings of the same table."""

from __future__ import annotations


def dedup_counts(stats: dict) -> dict:
    """``stats`` without its timings."""
    return {k: v for k, v in stats.items() if not k.endswith("_s") and k != "seconds"}
