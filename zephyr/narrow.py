"""Runs a fused chain of narrow ops over a stream of tables, counting every row.

Each op keeps counters ``rows_in``, ``rows_out``, ``rows_dropped`` (filtered out, or dropped on purpose by a
batch function) and ``rows_quarantined`` (quarantined). For ``map``, ``filter`` and ``map_batches``
``rows_in = rows_out + rows_dropped + rows_quarantined``; ``flat_map`` may emit any number of rows per input.

Row functions see ``dict`` rows (the user boundary); everything else stays columnar. A row function that
raises either fails the task with an error naming the shard, the row and the op (``on_error="raise"``) or
sends the row to the quarantine output with the error as its reason (``on_error="quarantine"``).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field

import numpy as np
import orjson
import pyarrow as pa

from zephyr.errors import SchemaError, ZephyrError
from zephyr.io.quarantine import QUARANTINE_REASON, quarantine_table
from zephyr.io.schema import without_view_types
from zephyr.ops import ROW_INDEX_SHARD_SHIFT, BatchOutput, MapBatches, Op, RowOp, Select, WithRowIndex


@dataclass
class OpCounters:
    name: str
    rows_in: int = 0
    rows_out: int = 0
    rows_dropped: int = 0
    rows_quarantined: int = 0
    dropped_by_reason: dict[str, int] = field(default_factory=dict)

    def as_dict(self) -> dict:
        """The op's record in a task marker: its label under ``op``, then the counters."""
        counts = dataclasses.asdict(self)
        return {"op": counts.pop("name"), **counts}


def op_label(op: Op) -> str:
    """How stats, logs and errors name a narrow op: the ``Dataset`` method that made it and its function's
    name (or columns), e.g. ``map_batches(dedup.fuzzy.signatures)``, ``select(id, text)``."""
    fn = getattr(op, "fn", None)
    name = getattr(op, "name", None) or (
        getattr(fn, "__qualname__", None) or type(fn).__name__ if fn else None
    )
    # the method that made it: a row op's kind, else the class name (MapBatches: map_batches)
    kind = getattr(op, "kind", None) or re.sub(r"(?<!^)(?=[A-Z])", "_", type(op).__name__).lower()
    return f"{kind}({name or ', '.join(op.columns)})"


Quarantine = Callable[[pa.Table], None]


def run_narrow(
    tables: Iterable[pa.Table],
    ops: Sequence[Op],
    counters: Sequence[OpCounters],
    *,
    where: str,
    quarantine: Quarantine,
    shard_index: int = 0,
) -> Iterator[pa.Table]:
    """Apply ``ops`` in order to each table; ``where`` names the shard in error messages, ``shard_index``
    numbers it (the high bits of ``with_row_index``). View-typed columns are cast to plain ones as they come
    in, and as batch functions return them (``without_view_types``): no op can select rows of a view."""
    stream: Iterable[pa.Table] = map(without_view_types, tables)
    for op, count in zip(ops, counters):
        if isinstance(op, WithRowIndex):  # the one op that needs to know which shard it runs on
            stream = _apply_row_index(stream, op, count, shard_index)
        else:
            stream = _APPLY[type(op)](stream, op, count, where, quarantine)
    yield from stream  # empty tables pass too: they carry the schema to the sink


def _call_rows(
    table: pa.Table, op: RowOp, where: str, quarantine: Quarantine, base: int
) -> tuple[list[tuple[int, object]], int]:
    """Call ``op.fn`` on every row: (row index, result) for the calls that succeeded, and how many were
    quarantined (``on_error="quarantine"``) — or raise naming the row."""
    results: list[tuple[int, object]] = []
    failed: list[tuple[int, dict, BaseException]] = []
    for i, row in enumerate(table.to_pylist()):
        try:
            results.append((i, op.fn(row)))
        except Exception as exc:
            if op.on_error == "raise":
                raise ZephyrError(
                    f"{op_label(op)} failed on row {base + i} of {where}: {type(exc).__name__}: {exc} "
                    "(pass on_error='quarantine' to set such rows aside)"
                ) from exc
            failed.append((i, row, exc))
    if failed:
        reasons = [f"{op_label(op)}: {type(e).__name__}: {e}" for _, _, e in failed]
        lines = [base + i for i, _, _ in failed]
        raws = [orjson.dumps(row, default=str) for _, row, _ in failed]
        quarantine(quarantine_table(where, lines, reasons, raws))
    return results, len(failed)


def _apply_rows(stream, op: RowOp, count: OpCounters, where: str, quarantine: Quarantine):
    """Row functions: ``map`` returns one row per row, ``flat_map`` an iterable of rows per row, ``filter`` a
    truth value per row (the table keeps its rows, and their types, that pass)."""
    base = 0
    for table in stream:
        results, failed = _call_rows(table, op, where, quarantine, base)
        base += table.num_rows
        count.rows_in += table.num_rows
        count.rows_quarantined += failed
        if op.kind == "filter":
            keep = [False] * table.num_rows
            for i, result in results:
                keep[i] = bool(result)
            kept = table.filter(pa.array(keep, type=pa.bool_()))  # a list, not numpy: no pandas probe
            count.rows_out += kept.num_rows
            count.rows_dropped += table.num_rows - kept.num_rows - failed
            yield kept
            continue
        out = [result for _, result in results]
        if op.kind == "flat_map":
            out = [row for rows in out for row in rows]
        if out and not isinstance(out[0], dict):
            raise ZephyrError(f"{op_label(op)} must produce dict rows, got {type(out[0]).__name__}")
        count.rows_out += len(out)
        if out:
            yield pa.Table.from_pylist(out)


def _apply_select(stream, op: Select, count: OpCounters, where: str, quarantine: Quarantine):
    for table in stream:
        missing = [c for c in op.columns if c not in table.column_names]
        if missing:
            raise SchemaError(f"select: column(s) {missing} not in {where}; available: {table.column_names}")
        count.rows_in += table.num_rows
        count.rows_out += table.num_rows
        yield table.select(list(op.columns))


def _apply_row_index(stream, op: WithRowIndex, count: OpCounters, shard_index: int):
    if not 0 <= shard_index < 1 << (63 - ROW_INDEX_SHARD_SHIFT):
        raise ZephyrError(f"with_row_index: shard index {shard_index} does not fit the row index")
    position = shard_index << ROW_INDEX_SHARD_SHIFT
    for table in stream:
        n = table.num_rows
        if op.name in table.column_names:
            raise SchemaError(f"with_row_index: column {op.name!r} already exists; pick another name")
        count.rows_in += n
        count.rows_out += n
        index = pa.array(np.arange(position, position + n, dtype=np.int64))
        position += n
        yield table.append_column(op.name, index)


def _rebatch(stream: Iterable[pa.Table], rows: int | None) -> Iterator[pa.Table]:
    if not rows:
        yield from stream
        return
    pending: list[pa.Table] = []
    size = 0
    for table in stream:
        pending.append(table)
        size += table.num_rows
        while size >= rows:
            joined = pa.concat_tables(pending)
            yield joined.slice(0, rows)
            rest = joined.slice(rows)
            pending, size = ([rest] if rest.num_rows else []), rest.num_rows
    if size:
        yield pa.concat_tables(pending)


def _apply_map_batches(stream, op: MapBatches, count: OpCounters, where: str, quarantine: Quarantine):
    """``map_batches``. A function that holds batches back (it has a ``finish`` method, see
    ``Dataset.map_batches``) gets a shallow copy per task, so what it holds belongs to this task; a call may
    return nothing yet (``None``) or the output of earlier batches; ``finish()`` returns the rest, once, after
    the task's last batch. Its rows are accounted over the task, a plain function's per batch: those neither
    kept, quarantined nor dropped by name were dropped unnamed."""
    import copy

    holding = callable(getattr(op.fn, "finish", None))
    fn = copy.copy(op.fn) if holding else op.fn
    unaccounted = 0
    for table in _rebatch(stream, op.batch_rows):
        count.rows_in += table.num_rows
        out, accounted = _batch_output(_call(op, where, fn, table), op, count, where, quarantine)
        unaccounted += table.num_rows - accounted
        if not holding:  # a plain function's None keeps no rows (and its empty batch, the schema)
            _count_unnamed(count, unaccounted)
            out, unaccounted = table.slice(0, 0) if out is None else out, 0
        if out is not None:
            yield out
    if holding:
        out, accounted = _batch_output(_call(op, where, fn.finish), op, count, where, quarantine)
        unaccounted -= accounted
        if out is not None:
            yield out
    _count_unnamed(count, unaccounted)


def _call(op: MapBatches, where: str, fn: Callable[..., object], *args: object) -> object:
    """``fn(*args)``; an error that is not the engine's own fails the task naming the op and the shard."""
    try:
        return fn(*args)
    except ZephyrError:
        raise
    except Exception as exc:
        raise ZephyrError(f"{op_label(op)} failed on {where}: {type(exc).__name__}: {exc}") from exc


def _batch_output(
    result: object, op: MapBatches, count: OpCounters, where: str, quarantine: Quarantine
) -> tuple[pa.Table | None, int]:
    """(the kept rows as a table, or None for a ``None`` result; rows accounted: kept + quarantined + dropped
    by name), after counting them and setting the quarantined rows aside."""
    accounted = 0
    if isinstance(result, BatchOutput):
        for reason, n in result.dropped.items():
            count.dropped_by_reason[reason] = count.dropped_by_reason.get(reason, 0) + int(n)
            count.rows_dropped += int(n)
            accounted += int(n)
        if result.quarantined is not None and result.quarantined.num_rows:
            quarantine(_as_quarantine(result.quarantined, result.quarantine_reason, op, where))
            count.rows_quarantined += result.quarantined.num_rows
            accounted += result.quarantined.num_rows
        result = result.kept
    if result is None:
        return None, accounted
    if isinstance(result, pa.RecordBatch):
        result = pa.Table.from_batches([result])
    elif not isinstance(result, pa.Table):
        raise ZephyrError(
            f"{op_label(op)} returned {type(result).__name__}; return a pyarrow Table, RecordBatch, "
            "BatchOutput or None"
        )
    count.rows_out += result.num_rows
    return without_view_types(result), accounted + result.num_rows


def _count_unnamed(count: OpCounters, rows: int) -> None:
    """Rows a batch function neither kept, quarantined nor dropped by name: dropped, reason "unspecified"."""
    if rows > 0:
        count.dropped_by_reason["unspecified"] = count.dropped_by_reason.get("unspecified", 0) + rows
        count.rows_dropped += rows


def _as_quarantine(quarantined: pa.Table, reason: str | None, op: Op, where: str) -> pa.Table:
    n = quarantined.num_rows
    if QUARANTINE_REASON in quarantined.column_names:
        reasons = quarantined.column(QUARANTINE_REASON).to_pylist()
        quarantined = quarantined.drop_columns([QUARANTINE_REASON])
    else:
        reasons = [reason or op_label(op)] * n
    raws = [orjson.dumps(row, default=str) for row in quarantined.to_pylist()]
    return quarantine_table(where, [None] * n, reasons, raws)


_APPLY = {RowOp: _apply_rows, MapBatches: _apply_map_batches, Select: _apply_select}
