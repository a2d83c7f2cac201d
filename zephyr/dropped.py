"""``--dropped-output DIR``: keep the rows a command drops, with the reason, instead of only counting them.

Why: a drop is a decision about data (datatrove's ``exclusion_writer``); a person checking a filter, a
language cut or a dedup needs the removed rows themselves. ``zephyr filter`` routes its rows this way;
``langid``, ``decontaminate`` and ``dedup exact|fuzzy|url --mode remove`` share this helper.

How, in three engine jobs, so the verdict (a language model, an n-gram index, a dedup) runs once:

1. the command's dataset with a *verdict* column (``VERDICT``: the drop reason, null for a kept row) is
   written to a scratch folder in the output's sidecar (``OUT.zephyr/routed``, ``zephyr.io.layout``; removed
   after);
2. the kept rows, without the verdict column, go to ``OUTPUT`` — that job counts the others as dropped by
   reason, so its stats read like the command's own would;
3. the dropped rows, with the reason in a ``drop_reason`` column, go to ``DIR``.

Without ``--dropped-output`` a command keeps its one-job plan and writes the same bytes as before.
``DIR`` may not be the output, a folder inside it or one that contains it
(``zephyr.io.publish.check_side_dir``).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

import pyarrow as pa
import pyarrow.compute as pc

__all__ = [
    "DROP_REASON",
    "VERDICT",
    "Verdict",
    "Unless",
    "Route",
    "Routed",
    "check",
    "keep_all",
    "write_routed",
]

DROP_REASON = "drop_reason"
"""The one reason column of rows a rule removed (filters, langid, decontaminate, dedup ``--mode remove``): every
command that writes dropped rows names it so. Quarantined rows (bad input) carry ``reject_reason`` instead
(``zephyr.io.quarantine.REJECT_REASON``)."""

VERDICT = "__zephyr_verdict"
"""The scratch column holding each row's drop reason (null: kept) between the jobs."""


def check(args: argparse.Namespace, inputs: Any = None) -> None:
    """Before any work: ``--dropped-output`` may not be read as part of ``--output``, must be writable, and
    the inputs may not have a ``drop_reason`` column already (it would be replaced on the dropped rows)."""
    from zephyr.io.publish import check_side_dir

    check_side_dir(args.dropped_output, args.output, "--dropped-output")
    _check_reason_column(args.inputs if inputs is None else inputs)


def _check_reason_column(inputs: Any) -> None:
    from zephyr.errors import ConfigError
    from zephyr.io.schema_plan import peek_schemas
    from zephyr.io.sources import list_shards

    for path, schema in peek_schemas(list_shards(inputs, None)):
        if schema is not None and DROP_REASON in schema.names:
            raise ConfigError(
                f"{path}: the input already has a column {DROP_REASON!r}, which --dropped-output writes on the "
                "dropped rows; rename that column first, or leave out --dropped-output"
            )


@dataclass(frozen=True)
class Verdict:
    """Picklable op: append ``VERDICT`` = ``reasons(table)`` (a string per row, null: kept), then remove the
    ``working`` columns the verdict was read from (dedup's ``dup_keep``...), which neither output keeps."""

    reasons: Callable[[pa.Table], pa.Array]
    working: tuple[str, ...] = ()

    def __call__(self, table: pa.Table) -> pa.Table:
        reasons = self.reasons(table)
        if not isinstance(reasons, pa.Array | pa.ChunkedArray) or len(reasons) != table.num_rows:
            raise ValueError(
                f"a verdict must give one reason per row ({table.num_rows}), got {reasons!r:.80}"
            )
        table = table.drop_columns([c for c in self.working if c in table.column_names])
        return table.append_column(VERDICT, pc.cast(reasons, pa.string()))


@dataclass(frozen=True)
class Unless:
    """Picklable verdict: ``reason`` where the boolean column ``column`` is not true (null counts as false,
    as ``Table.filter`` drops it), else null; e.g. dedup's ``Unless("dup_keep", "duplicate")``."""

    column: str
    reason: str

    def __call__(self, table: pa.Table) -> pa.Array:
        keep = pc.fill_null(table.column(self.column), False)
        return pc.if_else(keep, pa.scalar(None, pa.string()), pa.scalar(self.reason))


@dataclass(frozen=True)
class Route:
    """Picklable op: one side of the rows a ``Verdict`` split. ``kept`` reports the other rows to the engine
    as dropped by reason; ``dropped`` keeps those rows with the reason in ``drop_reason``."""

    side: Literal["kept", "dropped"]

    def __call__(self, table: pa.Table) -> Any:
        from zephyr.ops import BatchOutput

        verdict = table.column(VERDICT)
        if self.side == "kept":
            counts = (
                pc.value_counts(verdict.drop_null()).to_pylist() if verdict.null_count < len(verdict) else []
            )
            kept = table.filter(pc.is_null(verdict)).drop_columns([VERDICT])
            return BatchOutput(kept=kept, dropped={str(c["values"]): int(c["counts"]) for c in counts})
        dropped = table.filter(pc.is_valid(verdict))
        names = [DROP_REASON if name == VERDICT else name for name in dropped.column_names]
        return dropped.rename_columns(names)


@dataclass(frozen=True)
class Routed:
    """What ``write_routed`` wrote: the three jobs' stats and the accounting they add up to."""

    verdict: Any
    kept: Any
    dropped: Any

    def summary(self, **fields: Any):
        """The command's ``Summary``: rows read by the verdict job (unreadable ones included), kept by the
        kept job, dropped by reason as the kept job counted them (the dropped job wrote exactly those)."""
        from zephyr.summary import Summary, from_stages

        first = from_stages(self.verdict.stats.get("stages", []))
        routed = from_stages(self.kept.stats.get("stages", [])) if self.kept is not None else first
        reasons = dict(first.dropped_by_reason)
        for reason, n in routed.dropped_by_reason.items():
            reasons[reason] = reasons.get(reason, 0) + n
        dropped = first.rows_dropped + (routed.rows_dropped if self.kept is not None else 0)
        quarantined = first.rows_quarantined + (routed.rows_quarantined if self.kept is not None else 0)
        return Summary(
            rows_in=first.rows_in,
            rows_kept=routed.rows_kept,
            rows_dropped=dropped,
            rows_quarantined=quarantined,
            dropped_by_reason=reasons,
            **fields,
        )


def write_routed(
    ds: Any,
    reasons: Callable[[pa.Table], pa.Array],
    output: str,
    dropped_output: str,
    opts: dict[str, Any],
    finish: Callable[[Any], Any] = lambda d: d,
    working: tuple[str, ...] = (),
) -> Routed:
    """Write the rows of ``ds`` that ``reasons`` keeps (null) to ``output`` and the others, with their reason,
    to ``dropped_output`` (see the module docstring), without the ``working`` columns. ``finish`` is applied
    to both sides before writing (e.g. restoring columns a command set aside)."""
    from zephyr.executors import reuse_workers
    from zephyr.io import layout

    scratch = layout.scratch_dir(output, "routed")
    try:
        # one worker pool for the three jobs: each would otherwise start its own worker processes, which
        # import the engine and load the step's model or index again
        with reuse_workers(opts) as execution:
            return _route(ds, reasons, output, dropped_output, execution, finish, working, scratch)
    finally:
        layout.remove_folder(scratch)


def _route(
    ds: Any,
    reasons: Callable[[pa.Table], pa.Array],
    output: str,
    dropped_output: str,
    opts: dict[str, Any],
    finish: Callable[[Any], Any],
    working: tuple[str, ...],
    scratch: str,
) -> Routed:
    import zephyr

    verdict = ds.map_batches(Verdict(reasons, working), name="verdict").write_parquet(
        scratch, overwrite=True, **opts
    )
    if not verdict.files:  # no row came through: nothing to route, and both outputs are empty folders
        from zephyr.io.paths import filesystem

        fs, root = filesystem(dropped_output)
        fs.makedirs(root, exist_ok=True)
        return Routed(verdict, None, None)
    annotated = zephyr.read_parquet(list(verdict.files))
    kept = finish(annotated.map_batches(Route("kept"), name="route_kept")).write_parquet(output, **opts)
    dropped = finish(annotated.map_batches(Route("dropped"), name="route_dropped")).write_parquet(
        dropped_output, **opts
    )
    return Routed(verdict, kept, dropped)


def keep_all(table: pa.Table) -> pa.Array:
    """The verdict of a step that drops nothing (``langid`` without ``--languages``/``--min-score``)."""
    return pa.nulls(table.num_rows, pa.string())
