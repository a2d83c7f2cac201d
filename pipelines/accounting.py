"""A pipeline step's row accounting: what it read, kept, dropped and quarantined, checked to balance.

The counts come from the engine's stage records (``zephyr.job_stats``: per-op rows, user counters, quarantine
files); what is pipeline-specific lives here: which ops a step accounts (``StepOutcome.accounting_ops``), the
``pipeline/<role>/<key>=<value>`` counters that become ``per_source``/``per_lang`` tables, kept documents by
duplicate-cluster size, and the check ``rows_in == rows_kept + rows_dropped + rows_quarantined`` against the
row counts of the Parquet files the step wrote.
"""

from __future__ import annotations

import glob
import os
from pathlib import Path
from typing import Any

from zephyr.pipelines.config import DATA_STEPS, SOURCE_STEPS, StepEntry

from zephyr import job_stats
from zephyr.errors import ZephyrError

__all__ = ["AccountingError", "account", "file_bytes", "inherit_inputs", "read_inputs", "split_counters"]


class AccountingError(ZephyrError):
    """A step's rows do not balance: ``rows_in != kept + dropped + quarantined``. Names the step and counts."""


def read_inputs(entry: StepEntry) -> list[str]:
    """The local files a read step reads (for its bytes-in figure)."""
    if entry.type not in SOURCE_STEPS:
        return []
    found: list[str] = []
    for p in entry.config.paths:
        if "://" in p:
            continue
        for m in sorted(glob.glob(p, recursive=True)) if glob.has_magic(p) else [p]:
            found += sorted(str(f) for f in Path(m).rglob("*") if f.is_file()) if os.path.isdir(m) else [m]
    return found


def file_bytes(files: list[str]) -> int:
    return sum(os.path.getsize(f) for f in files if os.path.exists(f))


def split_counters(counters: dict[str, int]) -> tuple[dict[str, dict[str, dict[str, int]]], dict[str, int]]:
    """``pipeline/<role>/<key>=<value>`` → {key: {role: {value: n}}}; ``pipeline/cluster_size=<n>`` → sizes."""
    grouped: dict[str, dict[str, dict[str, int]]] = {}
    sizes: dict[str, int] = {}
    for name, n in counters.items():
        if name.startswith("pipeline/cluster_size="):
            job_stats.add_counts(sizes, {name.split("=", 1)[1]: n})
            continue
        parts = name.split("/", 2)
        if len(parts) != 3 or parts[0] != "pipeline" or "=" not in parts[2]:
            continue
        key, value = parts[2].split("=", 1)
        grouped.setdefault(key, {}).setdefault(parts[1], {})[value] = n
    sizes = dict(sorted(sizes.items(), key=lambda kv: int(kv[0])))
    return grouped, sizes


def account(entry: StepEntry, outcome: Any, input_rows: int | None, input_files: list[str]) -> dict[str, Any]:
    """The step record's row accounting, checked: the engine's operator counters against the files."""
    engine_stages = (outcome.engine_stats or {"stages": []}).get("stages", [])
    counters = job_stats.counter_totals(engine_stages)
    grouped, sizes = split_counters(counters)
    record: dict[str, Any] = {
        "counters": dict(sorted(counters.items())),
        "per_source": grouped.get("source", {}),
        "per_lang": grouped.get("lang", {}),
        "cluster_sizes": sizes,
        "quarantine_files": job_stats.quarantine_files(engine_stages),
        "bytes_in": file_bytes(input_files),
    }
    if entry.type == "tokenize":
        record.update(_tokenize_rows(entry, outcome, input_rows))
    elif entry.type in DATA_STEPS:
        record.update(_data_rows(entry, outcome, input_rows, engine_stages))
    else:
        record.update(
            rows_in=0,
            rows_kept=0,
            rows_dropped=0,
            dropped_by_reason={},
            rows_quarantined=0,
            bytes_out=0,
            balanced=True,
        )
    return record


def _tokenize_rows(entry: StepEntry, outcome: Any, input_rows: int | None) -> dict[str, Any]:
    """A tokenize step keeps every document: the shards must hold as many as came in."""
    kept = int(outcome.extra["num_documents"])
    if input_rows != kept:
        raise AccountingError(
            f"step {entry.name!r}: {input_rows} documents came in but the token shards hold {kept}; "
            "every document must be tokenized (the read step quarantines null texts)"
        )
    per_source = outcome.extra.get("per_source", {})
    return {
        "per_source": {"out": {k: int(v["documents"]) for k, v in per_source.items()}},
        "rows_in": input_rows,
        "rows_kept": kept,
        "rows_dropped": 0,
        "dropped_by_reason": {},
        "rows_quarantined": 0,
        "bytes_out": file_bytes([str(p) for p in Path(outcome.extra["shards_dir"]).glob("shard-*")]),
        "balanced": True,
    }


def _data_rows(entry: StepEntry, outcome: Any, input_rows: int | None, engine_stages: list[dict]) -> dict:
    """A data step's rows from the engine's op records of its accounting ops, checked against its files."""
    from zephyr.io.parquet import parquet_rows

    wanted = outcome.accounting_ops
    ops = job_stats.ops_named(engine_stages, wanted)
    missing = sorted(set(wanted) - {op["op"] for op in ops})
    if missing:
        raise AccountingError(
            f"step {entry.name!r}: the engine stats lack the counters of {missing}; cannot account its rows"
        )
    seen_in = sum(op["rows_in"] for op in ops if op["op"] == wanted[0])
    read_quarantined = sum(st.get("rows_read_quarantined", 0) for st in engine_stages)
    dropped_by_reason: dict[str, int] = {}
    for op in ops:
        job_stats.add_counts(dropped_by_reason, op.get("dropped_by_reason", {}))
    dropped = sum(op["rows_dropped"] for op in ops)
    quarantined = sum(op["rows_quarantined"] for op in ops) + read_quarantined
    kept = parquet_rows(outcome.files)
    if entry.type in SOURCE_STEPS:
        rows_in = seen_in + read_quarantined
    else:
        rows_in = int(input_rows or 0)
        if seen_in != rows_in:
            raise AccountingError(
                f"step {entry.name!r}: the previous step wrote {rows_in} rows but {wanted[0]} saw {seen_in}"
            )
    if sum(dropped_by_reason.values()) != dropped:
        raise AccountingError(
            f"step {entry.name!r}: drops by reason sum to {sum(dropped_by_reason.values())}, not {dropped}"
        )
    if rows_in != kept + dropped + quarantined:
        raise AccountingError(
            f"step {entry.name!r}: rows do not balance: in {rows_in} != kept {kept} (rows in "
            f"{len(outcome.files)} part files) + dropped {dropped} + quarantined {quarantined}"
        )
    return {
        "rows_in": rows_in,
        "rows_kept": kept,
        "rows_dropped": dropped,
        "dropped_by_reason": dict(sorted(dropped_by_reason.items(), key=lambda kv: -kv[1])),
        "rows_quarantined": quarantined,
        "bytes_out": file_bytes(outcome.files),
        "balanced": True,
    }


def inherit_inputs(record: dict[str, Any], earlier: list[dict[str, Any]]) -> None:
    """Rows per source/language coming into a step = what the previous data step wrote (unless counted)."""
    previous = next((r for r in reversed(earlier) if r["type"] in DATA_STEPS), None)
    if previous is None or record["type"] not in (*DATA_STEPS, "tokenize"):
        return
    for key in ("per_source", "per_lang"):
        table = record.setdefault(key, {})
        if "in" not in table and previous.get(key, {}).get("out"):
            table["in"] = dict(previous[key]["out"])
