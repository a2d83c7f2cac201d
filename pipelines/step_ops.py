"""What every pipeline step adapter shares: its context and outcome, and the engine operators it ends with.

``StepContext`` carries one step's config, folders, input parts and engine options; ``StepOutcome`` is what it
produced. The operators (picklable; they run inside engine tasks) do the accounting described in
``zephyr.pipelines.steps``: ``PrepareRows`` (the read step's row check), ``CountValues``, ``RemoveDuplicates``
and ``MinScoreFilter``; ``finish_step`` counts and writes a step's output. The adapters of
``zephyr.pipelines.steps`` and of the web package (``zephyr.pipelines.web.steps``) both build on this module,
and ``steps`` registers the web ones, so these sit below both instead of in ``steps``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from zephyr import counters
from zephyr.errors import SchemaError
from zephyr.io.quarantine import REJECT_REASON

if TYPE_CHECKING:
    from zephyr.pipelines.config import PipelineConfig, StepEntry

    from zephyr.dataset import Dataset, WriteResult

__all__ = [
    "StepContext",
    "StepOutcome",
    "PrepareRows",
    "CountValues",
    "RemoveDuplicates",
    "MinScoreFilter",
    "finish_step",
    "dedup_inputs",
    "restore_dedup_columns",
]


@dataclass
class StepContext:
    """Everything a step adapter needs: its config, folders, input parts and the engine options."""

    entry: StepEntry
    pipeline: PipelineConfig
    fingerprint: str
    step_dir: Path
    inputs: list[str]
    """Parquet parts written by the previous data step (empty for ``read``)."""
    execution: dict[str, Any]
    """Engine action keywords without ``work_dir`` (``executor``, ``workers``, ``progress``...)."""
    earlier: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Stats of the steps that ran before, by step name."""
    tokenize_dir: Path | None = None
    """The token shards of the tokenize step (for ``train``)."""

    @property
    def side_dir(self) -> Path:
        """The step's sidecar ``JOB/NN-NAME.zephyr`` (``zephyr.io.layout``): its record, work directories and
        side outputs (dropped rows, a trained classifier, examples), never among its data."""
        from zephyr.io.layout import sidecar

        return Path(sidecar(str(self.step_dir)))

    def engine(self, action: str = "main") -> dict[str, Any]:
        """Engine keywords for one action of this step, with its own resumable work directory."""
        return {**self.execution, "work_dir": str(self.side_dir / "work" / action)}

    def read_inputs(self, columns: list[str] | None = None) -> Dataset:
        import zephyr

        if not self.inputs:  # the previous step kept no rows (or read none): empty input is valid input
            p = self.pipeline
            names = [
                c
                for c in (p.id_column, p.text_column, p.source_column)
                if c and (not columns or c in columns)
            ]
            return zephyr.from_arrow(pa.table({c: pa.array([], pa.string()) for c in names}))
        return zephyr.read_parquet(self.inputs, columns=columns)


@dataclass
class StepOutcome:
    """What a step produced: Parquet parts (data steps), the engine stats of the write and extras."""

    files: list[str] = field(default_factory=list)
    checksums: dict[str, dict] = field(default_factory=dict)
    """Every file a rerun that skips the step relies on (the parts; a tokenize step's shards and manifest),
    with its size and checksum as written (``zephyr.io.checksum``)."""
    engine_stats: dict[str, Any] | None = None
    accounting_ops: tuple[str, ...] = ()
    extra: dict[str, Any] = field(default_factory=dict)


# -- operators (picklable; they run inside engine tasks) ---------------------------------------------------
def _column(table: pa.Table, name: str) -> pa.Array:
    col = table.column(name)
    return col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col


def _value_counts(values: pa.Array) -> dict[str, int]:
    counts = pc.value_counts(values.cast(pa.string()) if not pa.types.is_string(values.type) else values)
    out: dict[str, int] = {}
    for item in counts.to_pylist():
        key = "null" if item["values"] is None else str(item["values"])
        out[key] = out.get(key, 0) + int(item["counts"])
    return out


@dataclass(frozen=True)
class CountValues:
    """Pass-through op: counts rows per value of some columns into ``pipeline/<role>/<key>=<value>``."""

    role: str
    """``in`` or ``out`` (or another label): which side of the step the counts describe."""
    columns: tuple[tuple[str, str], ...]
    """(key, column) pairs, e.g. (("source", "source"), ("lang", "lang")); missing columns are skipped."""

    def __call__(self, table: pa.Table) -> pa.Table:
        for key, column in self.columns:
            if column in table.column_names:
                for value, n in _value_counts(_column(table, column)).items():
                    counters.increment(f"pipeline/{self.role}/{key}={value}", n)
        return table


@dataclass(frozen=True)
class PrepareRows:
    """The read step's row check: a string source column, and no row without id or text goes on.

    Rows with a null id or null text are quarantined with reason ``null_id``/``null_text``; later steps
    (dedup keys on ids, tokenize on texts) can rely on both being present."""

    text_column: str
    id_column: str
    source_column: str
    source: str | None = None
    lang_column: str = "lang"

    def __call__(self, table: pa.Table) -> Any:
        from zephyr.ops import BatchOutput

        for role, name in (("text", self.text_column), ("id", self.id_column)):
            if name not in table.column_names:
                raise SchemaError(
                    f"the input has no {role} column {name!r} (columns: {', '.join(table.column_names)}); "
                    f"set {role}_column: in the pipeline config"
                )
        n = table.num_rows
        if self.source is not None or self.source_column not in table.column_names:
            value = self.source if self.source is not None else "unknown"
            sources = pa.array([value] * n, pa.string())
        else:
            sources = _column(table, self.source_column).cast(pa.string())
        if self.source_column in table.column_names:
            table = table.set_column(
                table.schema.get_field_index(self.source_column), self.source_column, sources
            )
        else:
            table = table.append_column(self.source_column, sources)
        CountValues("in", (("source", self.source_column), ("lang", self.lang_column)))(table)
        null_id = pc.is_null(_column(table, self.id_column))
        null_text = pc.is_null(_column(table, self.text_column))
        bad = pc.or_(null_id, null_text)
        if not pc.any(bad).as_py():
            return table
        reasons = pc.if_else(null_id, pa.scalar("null_id"), pa.scalar("null_text"))
        rejected = table.filter(bad).append_column(REJECT_REASON, reasons.filter(bad))
        return BatchOutput(kept=table.filter(pc.invert(bad)), rejected=rejected)


@dataclass(frozen=True)
class RemoveDuplicates:
    """After dedup in annotate mode: drop rows with ``dup_keep = false`` (reason ``<kind>_duplicate``),
    count kept documents by cluster size, and drop the dup columns."""

    kind: str

    def __call__(self, table: pa.Table) -> Any:
        from zephyr.ops import BatchOutput

        keep = pc.fill_null(_column(table, "dup_keep"), True)
        sizes = np.asarray(pc.fill_null(_column(table, "dup_cluster_size"), 1), dtype=np.int64)
        values, per = np.unique(sizes[np.asarray(keep, dtype=bool)], return_counts=True)
        for size, n in zip(values.tolist(), per.tolist()):
            counters.increment(f"pipeline/cluster_size={size}", n)
        kept = table.filter(keep).drop_columns(["dup_cluster", "dup_cluster_size", "dup_keep"])
        removed = table.num_rows - kept.num_rows
        return BatchOutput(kept=kept, dropped={f"{self.kind}_duplicate": removed} if removed else {})


@dataclass(frozen=True)
class MinScoreFilter:
    """Keep rows whose ``score_column`` reaches ``min_score``; others are dropped as ``quality_below_<min>``."""

    score_column: str
    min_score: float

    @property
    def reason(self) -> str:
        return f"quality_below_{self.min_score:g}"

    def reasons(self, table: pa.Table) -> pa.Array:
        """Per-row drop reason (null: kept); the report's examples use the same verdict."""
        keep = pc.fill_null(pc.greater_equal(_column(table, self.score_column), self.min_score), False)
        return pc.if_else(keep, pa.scalar(None, pa.string()), pa.scalar(self.reason))

    def __call__(self, table: pa.Table) -> Any:
        from zephyr.ops import BatchOutput

        keep = pc.fill_null(pc.greater_equal(_column(table, self.score_column), self.min_score), False)
        kept = table.filter(keep)
        removed = table.num_rows - kept.num_rows
        return BatchOutput(kept=kept, dropped={self.reason: removed} if removed else {})


def _label(name: str) -> str:
    """The engine's label of a ``map_batches(..., name=name)`` op in its stats."""
    return f"map_batches({name})"


def _out_counter(ctx: StepContext) -> CountValues:
    p = ctx.pipeline
    return CountValues("out", (("source", p.source_column), ("lang", p.lang_column)))


def finish_step(
    ctx: StepContext, ds: Dataset, accounting: tuple[str, ...], action: str = "main"
) -> StepOutcome:
    """Count the output, write ``part-*.parquet`` into the step folder, return the outcome. The job folder is
    the run's (locked, and cleared by the runner when a step's fingerprint changes), so the write replaces
    whatever the folder held (``overwrite``)."""
    name = f"pipeline.{ctx.entry.name}.count"
    result: WriteResult = ds.map_batches(_out_counter(ctx), name=name).write_parquet(
        str(ctx.step_dir), overwrite=True, **ctx.engine(action)
    )
    return StepOutcome(
        files=sorted(result.files),
        checksums=result.checksums,
        engine_stats=result.stats,
        accounting_ops=tuple(map(_label, accounting)),
    )


def dedup_inputs(ctx: StepContext) -> Dataset:
    """The step input with the data's own ``dup_*`` columns (if any) set aside: dedup's helper columns of those
    names are removed with the duplicates, and would take the data's with them (``zephyr.pipelines.columns``)."""
    from zephyr.pipelines.columns import DEDUP_COLUMNS

    from zephyr.removal import set_aside

    return ctx.read_inputs().map_batches(set_aside(DEDUP_COLUMNS), name=f"pipeline.{ctx.entry.name}.aside")


def restore_dedup_columns(ctx: StepContext, ds: Dataset) -> Dataset:
    """Put back the data's own ``dup_*`` columns that ``dedup_inputs`` set aside."""
    from zephyr.pipelines.columns import DEDUP_COLUMNS

    from zephyr.removal import set_aside

    return ds.map_batches(set_aside(DEDUP_COLUMNS, restore=True), name=f"pipeline.{ctx.entry.name}.restore")
