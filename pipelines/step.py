"""A pipeline step type: the ``Step`` base class and its registry ``STEPS``, and what every step shares.

One class per step type (``zephyr.pipelines.steps``, ``zephyr.pipelines.web.steps``) is at once the step's
config (a frozen dataclass: its fields are the step's keys in a config file, documented where declared; a
package's own config is embedded, ``zephyr.config.embedded_field``) and its behaviour: ``run``, the columns it
adds, its order rules, its row accounting, its line in the run's progress and its part of the report.
Subclassing ``Step`` with ``type="name"`` registers the class in ``STEPS``; the config loader, the runner and
the report iterate that registry, never a ``type == "..."`` switch.

Accounting. Every data step (``output = "rows"``) ends its plan with operators of this module, named
``pipeline.<step>.*``:

- the step's *accounting ops* (``StepOutcome.accounting_ops``) are the ``map_batches`` ops that keep, drop
  (counted by reason) or quarantine documents; ``Step.account`` sums their engine counters and checks
  ``rows_in = kept + dropped + quarantined`` against the row counts of the Parquet files themselves, and a
  mismatch stops the job with ``AccountingError``;
- ``CountValues`` adds counters ``pipeline/<role>/<column>=<value>`` (rows per source and per language) that
  the report turns into retention tables; ``RemoveDuplicates`` adds ``pipeline/cluster_size=<n>`` (kept
  documents whose duplicate cluster had n members: the cluster-size histogram).

Columns. Before any work the config walks the enabled steps (``zephyr.pipelines.config.check_added_columns``):
each step says what it adds (``adds``) and what the rows hold after it (``columns_after``), so a step that
would replace a column the data already has fails in one line naming the key that fixes it. A dedup step's
``dup_*`` helper columns are removed with the duplicates, and the data's own ``dup_*`` columns are set aside
around it (``DUP_COLUMNS``), so they pass unchanged.

The module level imports the standard library only: loading a pipeline config (``zephyr run --check``) stays
light; the operators import pyarrow when they run.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from zephyr.dedup.config import DUP_COLUMNS

from zephyr import counters
from zephyr.config import build_flat, check_field_values, flat_dict
from zephyr.errors import ConfigError, SchemaError, ZephyrError

if TYPE_CHECKING:
    import pyarrow as pa

    from zephyr.budget import Budget
    from zephyr.dataset import Dataset

CONFIG_VERSION = 1
"""The version of the pipeline config file format (``zephyr.pipelines.config``)."""
COMMON_KEYS = ("step", "name", "enabled")
"""Keys every step entry may have besides its type's own."""

STEPS: dict[str, type[Step]] = {}
"""Step type name (the ``step:`` value of a config entry) → its class, in registration order."""


class AccountingError(ZephyrError):
    """A step's rows do not balance: ``rows_in != kept + dropped + quarantined``. Names the step and counts."""


class Step:
    """One pipeline step type: its keys (the dataclass fields of the subclass, documented where declared), what
    it runs, the columns it adds, its accounting, and its part of the run's lines and of the report."""

    type: ClassVar[str]
    """The ``step:`` value in a config file; set by ``__init_subclass__``."""
    output: ClassVar[Literal["rows", "tokens", "model"]] = "rows"
    """What the step leaves for the next: Parquet parts, token shards, or a trained model."""
    starts: ClassVar[bool] = False
    """Starts a pipeline from files (exactly one such step, the first)."""
    unique: ClassVar[bool] = False
    """At most one per pipeline."""
    section: ClassVar[str | None] = None
    """The report section its ``report`` blocks go to (``zephyr.pipelines.report.SECTIONS``)."""
    display_only: ClassVar[tuple[str, ...]] = ()
    """Keys that change only what a person sees, not the outputs: changing one never reruns the step."""
    filter_examples: ClassVar[bool] = False
    """It saves a filter's example rows while it runs (``examples.filter_collector``); the runner merges them
    after accounting, for the reasons that dropped the most rows."""

    def __init_subclass__(cls, type: str = "", **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if type:
            cls.type = type
            STEPS[type] = cls

    def __post_init__(self) -> None:
        """Every key's type and declared range (``zephyr.config.check_field_values``); a step type with rules
        of its own checks them after these."""
        check_field_values(self)

    # -- config file <-> object --------------------------------------------------------------------------
    @classmethod
    def from_keys(cls, body: dict[str, Any], where: str, errors: list[str]) -> Step | None:
        """The step from its entry's own keys, or None with every problem appended to ``errors``."""
        return build_flat(cls, body, where, errors, also=COMMON_KEYS)

    def keys(self) -> dict[str, Any]:
        """The step's keys as a config file writes them (the inverse of ``from_keys``)."""
        return flat_dict(self)

    # -- checks before any work --------------------------------------------------------------------------
    def check(self, index: int, earlier: list[StepEntry]) -> list[str]:
        """Problems with this step's place in the pipeline beyond the class rules (``starts``, ``unique``,
        ``output``), as ``steps[INDEX].KEY: ...`` lines; ``earlier``: the enabled steps before it."""
        return []

    def preflight(self) -> None:
        """Checks that need the environment (a model present, a module importable), before any step runs."""

    def adds(self, pipeline: PipelineConfig) -> tuple[str, ...]:
        """The columns this step adds to its rows (checked against the data's before any work)."""
        return ()

    def columns_after(
        self, origin: dict[str, str], pipeline: PipelineConfig, name: str
    ) -> dict[str, str] | None:
        """Column → where it came from, after this step; None: unknown until it runs (the walk stops)."""
        return {**{column: f"step {name!r}" for column in self.adds(pipeline)}, **origin}

    # -- work --------------------------------------------------------------------------------------------
    def plan(self, ctx: StepContext) -> tuple[Dataset, tuple[str, ...]]:
        """A one-job step's lazy output and the names of the ops that account its rows (``run`` writes it,
        ``plans`` shows it); a step of several jobs overrides ``run`` and ``plans`` instead."""
        raise NotImplementedError

    def run(self, ctx: StepContext) -> StepOutcome:
        """Run the step on ``ctx``'s input; a data step writes ``part-*.parquet`` into ``ctx.step_dir``."""
        return ctx.finish(*self.plan(ctx))

    def plans(self, ctx: StepContext) -> list[tuple[str, Dataset | None]]:
        """The engine jobs ``run`` executes, in order, as lazy plans built by the same code, with the rules
        between them (``None``): what ``zephyr run --explain`` prints. The last plan is the step's output."""
        return [("the output, written to the step folder", ctx.counted(self.plan(ctx)[0]))]

    def account(self, name: str, outcome: StepOutcome, input_rows: int | None) -> dict[str, Any]:
        """The record's rows in, kept, dropped and quarantined, from the engine's op records of the step's
        accounting ops, checked against the Parquet files it wrote."""
        from zephyr import job_stats
        from zephyr.io.parquet import parquet_rows

        stages = (outcome.engine_stats or {}).get("stages", [])
        wanted = outcome.accounting_ops
        ops = job_stats.ops_named(stages, wanted)
        missing = sorted(set(wanted) - {op["op"] for op in ops})
        if missing:
            raise AccountingError(
                f"step {name!r}: the engine stats lack the counters of {missing}; cannot account its rows"
            )
        seen_in = sum(op["rows_in"] for op in ops if op["op"] == wanted[0])
        read_quarantined = sum(st.get("rows_read_quarantined", 0) for st in stages)
        dropped_by_reason: dict[str, int] = {}
        for op in ops:
            job_stats.add_counts(dropped_by_reason, op.get("dropped_by_reason", {}))
        dropped = sum(op["rows_dropped"] for op in ops)
        quarantined = sum(op["rows_quarantined"] for op in ops) + read_quarantined
        kept = parquet_rows(outcome.files)
        if self.starts:
            rows_in = seen_in + read_quarantined
        else:
            rows_in = int(input_rows or 0)
            if seen_in != rows_in:
                raise AccountingError(
                    f"step {name!r}: the previous step wrote {rows_in} rows but {wanted[0]} saw {seen_in}"
                )
        if sum(dropped_by_reason.values()) != dropped:  # a row filter drops without a reason
            raise AccountingError(
                f"step {name!r}: drops by reason sum to {sum(dropped_by_reason.values())}, not {dropped}"
            )
        if rows_in != kept + dropped + quarantined:
            raise AccountingError(
                f"step {name!r}: rows do not balance: in {rows_in} != kept {kept} (rows in "
                f"{len(outcome.files)} part files) + dropped {dropped} + quarantined {quarantined}"
            )
        by_reason = dict(sorted(dropped_by_reason.items(), key=lambda kv: -kv[1]))  # the most dropped first
        return rows_record(rows_in, kept, dropped, by_reason, quarantined, outcome.files)

    # -- the run's lines and the report (records are dicts read back from stats.json) ---------------------
    @classmethod
    def done_line(cls, record: dict[str, Any]) -> str:
        """What the step did, for its line in the run's progress (after ``done in Ns:``)."""
        body = (
            f"in {record['rows_in']:,}, kept {record['rows_kept']:,}, dropped {record['rows_dropped']:,}, "
            f"quarantined {record['rows_quarantined']:,}"
        )
        rewritten = rows_rewritten(record)
        return body + (f", rewritten {rewritten:,}" if rewritten else "")

    @classmethod
    def report(cls, record: dict[str, Any], plots: dict[str, str]) -> list[tuple]:
        """The step's blocks in its report ``section`` (``zephyr.pipelines.report``'s block format)."""
        return []

    @classmethod
    def plots(cls, record: dict[str, Any], plt: Any, save: Any) -> None:
        """Draw the step's own plots with matplotlib's ``plt``; ``save(fig, name)`` writes each."""


def rows_record(
    rows_in: int, kept: int, dropped: int, by_reason: dict[str, int], quarantined: int, files: list[str]
) -> dict[str, Any]:
    """The rows part of a step record (it balances: the caller checked)."""
    return {
        "rows_in": rows_in,
        "rows_kept": kept,
        "rows_dropped": dropped,
        "dropped_by_reason": by_reason,
        "rows_quarantined": quarantined,
        "bytes_out": file_bytes(files),
        "balanced": True,
    }


def file_bytes(files: list[str]) -> int:
    return sum(os.path.getsize(f) for f in files if os.path.exists(f))


def rows_rewritten(record: dict[str, Any]) -> int:
    """Rows a step kept but changed (its ``<op>/rows_rewritten`` counters, e.g. normalization's)."""
    return sum(int(n) for name, n in record.get("counters", {}).items() if name.endswith("/rows_rewritten"))


# -- a pipeline: its steps in order -------------------------------------------------------------------
@dataclass(frozen=True)
class StepEntry:
    """One step of a pipeline: its unique name, its step (type and keys: ``zephyr.pipelines.step.Step``) and
    whether it runs."""

    name: str
    step: Step
    enabled: bool = True

    @property
    def type(self) -> str:
        return self.step.type

    def to_dict(self) -> dict[str, Any]:
        """The entry as a config file writes it (``pipeline.yaml`` in a job folder), and as fingerprints and
        step records (``config`` in a step's ``stats.json``) hold it."""
        return {"step": self.type, "name": self.name, "enabled": self.enabled, **self.step.keys()}

    def fingerprint(self, upstream: str) -> str:
        """Hash of this step's config and its upstream fingerprint: a changed config never reuses outputs."""
        from zephyr.resume import unit_fingerprint

        hashed = {k: v for k, v in self.to_dict().items() if k not in self.step.display_only}
        return unit_fingerprint({"step": hashed, "version": CONFIG_VERSION}, upstream)


@dataclass(frozen=True)
class PipelineConfig:
    """A whole pipeline. Plain data: change it with ``dataclasses.replace``."""

    name: str
    steps: tuple[StepEntry, ...]
    text_column: str = "text"
    """The document text."""
    id_column: str = "id"
    """Document ids (dedup keeps the smallest id of a cluster, and tells rows that share an id apart by their
    position; the token shuffle keys on it)."""
    source_column: str = "source"
    """Where each document comes from (per-source retention in the report, source mix in the manifest)."""
    lang_column: str = "lang"
    """Language code column (written by ``langid``; per-language retention in the report)."""
    description: str = ""
    path: str | None = None
    """The file this config was loaded from (informational)."""

    def step(self, name: str) -> StepEntry:
        for entry in self.steps:
            if entry.name == name:
                return entry
        raise ConfigError(f"no step named {name!r}; steps: {', '.join(s.name for s in self.steps)}")

    def to_dict(self) -> dict[str, Any]:
        """The config as a file writes it (``pipeline.yaml`` in a job folder)."""
        top = {f.name: getattr(self, f.name) for f in fields(self) if f.name not in ("steps", "path")}
        return {"version": CONFIG_VERSION, **top, "steps": [s.to_dict() for s in self.steps]}


# -- a step's run: its context and outcome ----------------------------------------------------------------
@dataclass
class StepContext:
    """Everything a step's ``run`` needs besides its keys: its name, folders, input parts and engine options."""

    entry: StepEntry
    pipeline: PipelineConfig
    fingerprint: str
    step_dir: Path
    inputs: list[str]
    """Parquet parts written by the previous data step (empty for the first step)."""
    execution: dict[str, Any]
    """Engine action keywords without ``work_dir`` (``executor``, ``workers``, ``progress``...)."""
    earlier: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Records of the steps that ran before, by step name."""
    planned: Dataset | None = None
    """``zephyr run --explain``: the previous step's lazy output, planned over instead of reading its files."""

    @property
    def side_dir(self) -> Path:
        """The step's sidecar ``JOB/NN-NAME.zephyr`` (``zephyr.io.layout``): its record, work directories and
        side outputs (dropped rows, a trained classifier, examples), never among its data."""
        from zephyr.io.layout import sidecar

        return Path(sidecar(str(self.step_dir)))

    def op(self, action: str) -> str:
        """The name of one of the step's engine ops: ``pipeline.<step>.<action>``."""
        return f"pipeline.{self.entry.name}.{action}"

    def engine(self, action: str = "main") -> dict[str, Any]:
        """Engine keywords for one action of this step, with its own resumable work directory."""
        return {**self.execution, "work_dir": str(self.side_dir / "work" / action)}

    @property
    def budget(self) -> Budget:
        """The memory budget whose shares the step's jobs decide by (what ``--explain`` prints)."""
        from zephyr.dedup._rows import budget_of

        return budget_of(self.execution)

    def read_inputs(self, columns: list[str] | None = None) -> Dataset:
        import pyarrow as pa

        import zephyr

        if self.planned is not None:
            return self.planned.select(columns) if columns else self.planned
        if not self.inputs:  # the previous step kept no rows (or read none): empty input is valid input
            p = self.pipeline
            own = [c for c in (p.id_column, p.text_column, p.source_column) if c]
            names = [c for c in own if not columns or c in columns]
            return zephyr.from_arrow(pa.table({c: pa.array([], pa.string()) for c in names}))
        return zephyr.read_parquet(self.inputs, columns=columns)

    def dedup_inputs(self) -> Dataset:
        """The step input with the data's own ``dup_*`` columns (if any) set aside: dedup's helper columns of
        those names are removed with the duplicates, and would take the data's with them."""
        from zephyr.removal import set_aside

        return self.read_inputs().map_batches(set_aside(DUP_COLUMNS), name=self.op("aside"))

    def prepared(self, ds: Dataset, source: str | None, num_shards: int | None) -> Dataset:
        """A first step's documents checked (``PrepareRows``, op ``prepare``: a string source column, no row
        without id or text goes on), then redistributed into ``num_shards`` shards when given."""
        p = self.pipeline
        prepare = PrepareRows(p.text_column, p.id_column, p.source_column, source, p.lang_column)
        ds = ds.map_batches(prepare, name=self.op("prepare"))
        return ds.reshard(num_shards) if num_shards else ds

    def counted(self, ds: Dataset) -> Dataset:
        """``ds`` with the step's output counted per source and language (what ``finish`` writes)."""
        p = self.pipeline
        counts = CountValues("out", (("source", p.source_column), ("lang", p.lang_column)))
        return ds.map_batches(counts, name=self.op("count"))

    def finish(self, ds: Dataset, accounting: tuple[str, ...], action: str = "main") -> StepOutcome:
        """Count the output, write ``part-*.parquet`` into the step folder, return the outcome. The job folder
        is the run's (locked, and cleared by the runner when a step's fingerprint changes), so the write
        replaces whatever the folder held (``overwrite``). ``accounting``: the op names (``op(action)``)
        whose counters account the step's rows."""
        result = self.counted(ds).write_parquet(str(self.step_dir), overwrite=True, **self.engine(action))
        ops = tuple(f"map_batches({name})" for name in accounting)
        return StepOutcome(sorted(result.files), result.checksums, result.stats, ops)


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
@dataclass(frozen=True)
class CountValues:
    """Pass-through op: counts rows per value of some columns into ``pipeline/<role>/<key>=<value>``."""

    role: str
    """``in`` or ``out`` (or another label): which side of the step the counts describe."""
    columns: tuple[tuple[str, str], ...]
    """(key, column) pairs, e.g. (("source", "source"), ("lang", "lang")); missing columns are skipped."""

    def __call__(self, table: pa.Table) -> pa.Table:
        import pyarrow as pa
        import pyarrow.compute as pc

        for key, name in self.columns:
            if name in table.column_names:
                for item in pc.value_counts(table[name].cast(pa.string())).to_pylist():
                    value = "null" if item["values"] is None else item["values"]
                    counters.increment(f"pipeline/{self.role}/{key}={value}", item["counts"])
        return table


@dataclass(frozen=True)
class PrepareRows:
    """The first step's row check: a string source column, and no row without id or text goes on.

    Rows with a null id or null text are quarantined with reason ``null_id``/``null_text``; later steps
    (dedup keys on ids, tokenize on texts) can rely on both being present."""

    text_column: str
    id_column: str
    source_column: str
    source: str | None = None
    lang_column: str = "lang"

    def __call__(self, table: pa.Table) -> Any:
        import pyarrow as pa
        import pyarrow.compute as pc
        from zephyr.pipelines.quality._text import put_column

        from zephyr.io.quarantine import QUARANTINE_REASON
        from zephyr.ops import BatchOutput

        for role, name in (("text", self.text_column), ("id", self.id_column)):
            if name not in table.column_names:
                raise SchemaError(
                    f"the input has no {role} column {name!r} (columns: {', '.join(table.column_names)}); "
                    f"set {role}_column: in the pipeline config"
                )
        if self.source is not None or self.source_column not in table.column_names:
            value = self.source if self.source is not None else "unknown"
            sources = pa.array([value] * table.num_rows, pa.string())
        else:
            sources = table[self.source_column].cast(pa.string())
        table = put_column(table, self.source_column, sources)
        CountValues("in", (("source", self.source_column), ("lang", self.lang_column)))(table)
        null_id = pc.is_null(table[self.id_column])
        null_text = pc.is_null(table[self.text_column])
        bad = pc.or_(null_id, null_text)
        if not pc.any(bad).as_py():
            return table
        reasons = pc.if_else(null_id, pa.scalar("null_id"), pa.scalar("null_text"))
        quarantined = table.filter(bad).append_column(QUARANTINE_REASON, reasons.filter(bad))
        return BatchOutput(kept=table.filter(pc.invert(bad)), quarantined=quarantined)


@dataclass(frozen=True)
class RemoveDuplicates:
    """After dedup in annotate mode: drop rows with ``dup_keep = false`` (reason ``<kind>_duplicate``),
    count kept documents by cluster size, and drop the dup columns."""

    kind: str

    def __call__(self, table: pa.Table) -> Any:
        import numpy as np
        import pyarrow.compute as pc

        from zephyr.ops import BatchOutput

        keep = pc.fill_null(table["dup_keep"], True)
        sizes = np.asarray(pc.fill_null(table["dup_cluster_size"], 1), dtype=np.int64)
        values, per = np.unique(sizes[np.asarray(keep, dtype=bool)], return_counts=True)
        for size, n in zip(values.tolist(), per.tolist()):
            counters.increment(f"pipeline/cluster_size={size}", n)
        kept = table.filter(keep).drop_columns(list(DUP_COLUMNS))
        removed = table.num_rows - kept.num_rows
        return BatchOutput(kept=kept, dropped={f"{self.kind}_duplicate": removed} if removed else {})


@dataclass(frozen=True)
class MinScoreFilter:
    """Keep rows whose ``score_column`` reaches ``min_score``; others are dropped as ``quality_below_<min>``."""

    score_column: str
    min_score: float

    def reasons(self, table: pa.Table) -> pa.Array:
        """Per-row drop reason (null: kept); the report's examples use the same verdict."""
        import pyarrow as pa
        import pyarrow.compute as pc

        keep = pc.fill_null(pc.greater_equal(table[self.score_column], self.min_score), False)
        return pc.if_else(keep, pa.scalar(None, pa.string()), pa.scalar(f"quality_below_{self.min_score:g}"))

    def __call__(self, table: pa.Table) -> Any:
        from zephyr.removal import keep_by

        return keep_by(table, self.reasons(table))
