"""The physical plan: how each wide op runs, how many partitions it gets, and the plan as text.

``zephyr.plan`` cuts a dataset's ops into segments; this module decides, for every wide op, what the driver
(``zephyr.job``) runs and how big it is. One table, ``EXCHANGES``, maps each wide op to its *exchange*: the
shuffle spec each upstream segment's map tasks write (hash, range or round-robin partitioning, an optional
map-side combine) and the reducer every partition's task runs. Beside it:

- partition counts: given by the op, or ``ceil(estimated input bytes / Budget.partition_target_bytes)``
  (``partitions_for``), from sizes estimated before any task runs (``zephyr.io.sources``), never from the
  worker count, so outputs are identical for any number of workers;
- pushdown: an aggregation over a Parquet source reads only the columns it needs (``pushdown_columns``);
- the printable plan: ``explain`` walks the same table, in the order the driver runs
  stages, and prints stages, shuffles, partition counts and the budget's shares without running anything
  (``Dataset.explain()``, ``zephyr explain``); ``explain_jobs`` prints the plan of a command of several engine
  jobs (``PlannedJob``s: the jobs a command's ``plans`` returns are the jobs its run executes).

The driver and ``explain`` share every decision here, so the printed plan is the plan that runs.
"""

from __future__ import annotations

import logging
import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any, NamedTuple

import pyarrow as pa

from zephyr.budget import PARTITION_TARGET_CAP, Budget
from zephyr.config import format_bytes
from zephyr.errors import ConfigError
from zephyr.io.paths import FileStat, file_stat
from zephyr.io.sources import (
    FOOTER_ESTIMATE_MAX_FILES,
    RowWidth,
    Shard,
    estimated_bytes,
    list_shards,
    parquet_footer_sizes,
)
from zephyr.ops import Deduplicate, FromTable, GroupAggregate, GroupApply, Join, Op, ReadFiles, Reshard, Sort
from zephyr.options import ExecutionOptions
from zephyr.plan import Segment
from zephyr.shuffle.reduce import (
    ConcatReducer,
    DeduplicateReducer,
    FirstOccurrence,
    GroupAggregateReducer,
    GroupApplyReducer,
    JoinReducer,
    PartialAggregate,
    SortReducer,
    is_decomposable,
)
from zephyr.shuffle.writer import ShuffleSpec

log = logging.getLogger(__name__)

MAX_PARTITIONS = 4096
"""Shuffle partitions of one wide op, at most: each is one reduce task and one index entry per spill."""


# -- the table: wide op → shuffle specs + reducer ---------------------------------------------------------
@dataclass(frozen=True)
class Exchange:
    """How one wide op runs: ``specs[i]`` is what the map tasks of upstream segment ``i`` write (one per
    upstream: two for a join), ``reducer`` what each of the ``partitions`` reduce tasks runs."""

    specs: tuple[ShuffleSpec, ...]
    reducer: Any
    partitions: int


def _group_aggregate(op: GroupAggregate, partitions: int) -> Exchange:
    # Decomposable aggregations (count, sum, min, ...) combine on the map side, so a reducer reads one partial
    # row per key and map task instead of every row.
    decomposable = is_decomposable(op.aggs)
    combine = PartialAggregate(op.keys, op.aggs) if decomposable else None
    spec = ShuffleSpec("hash", partitions, op.keys, combine=combine)
    return Exchange((spec,), GroupAggregateReducer(op.keys, op.aggs, partial=decomposable), partitions)


def _group_apply(op: GroupApply, partitions: int) -> Exchange:
    spec = ShuffleSpec("hash", partitions, op.keys, sort_by=op.sort_by)
    return Exchange((spec,), GroupApplyReducer(op.keys, op.sort_by, op.fn), partitions)


def _deduplicate(op: Deduplicate, partitions: int) -> Exchange:
    spec = ShuffleSpec("hash", partitions, op.keys, combine=FirstOccurrence(op.keys))
    return Exchange((spec,), DeduplicateReducer(op.keys), partitions)


def _join(op: Join, partitions: int) -> Exchange:
    specs = (ShuffleSpec("hash", partitions, op.left_on), ShuffleSpec("hash", partitions, op.right_on))
    return Exchange(specs, JoinReducer(op.left_on, op.right_on, op.how, op.suffix), partitions)


def _reshard(op: Reshard, partitions: int) -> Exchange:
    return Exchange((ShuffleSpec("round_robin", partitions),), ConcatReducer(), partitions)


def _sort(op: Sort, partitions: int) -> Exchange:
    # The boundaries come from a sample of the keys at run time (``with_boundaries``); until then, none.
    spec = ShuffleSpec("range", partitions, op.by, op.descending, boundaries=None)
    return Exchange((spec,), SortReducer(tuple(zip(op.by, op.descending))), partitions)


EXCHANGES: dict[type[Op], Callable[[Any, int], Exchange]] = {
    GroupAggregate: _group_aggregate,
    GroupApply: _group_apply,
    Deduplicate: _deduplicate,
    Join: _join,
    Reshard: _reshard,
    Sort: _sort,
}
"""Wide op type → its exchange for a given partition count."""


def exchange(op: Op, partitions: int) -> Exchange:
    """The exchange of wide op ``op`` over ``partitions`` partitions (``EXCHANGES``)."""
    try:
        build = EXCHANGES[type(op)]
    except KeyError:
        from zephyr.errors import ConfigError

        raise ConfigError(f"no shuffle for {type(op).__name__}") from None
    return build(op, partitions)


def with_boundaries(spec: ShuffleSpec, boundaries: pa.Array) -> ShuffleSpec:
    """A sort's range spec once its split points are known (from the key sample)."""
    return replace(spec, boundaries=boundaries)


def materializes_before_sort(upstream: Segment) -> bool:
    """A sort reads its input twice (key sample, then range shuffle): computed rows (a reduce or narrow ops)
    are written to Parquet once first, so nothing is computed twice."""
    return upstream.source is None or bool(upstream.narrow)


# -- partition counts -------------------------------------------------------------------------------------
def partitions_for(estimated: int, budget: Budget) -> int:
    """``ceil(estimated input bytes / partition target)``, 1–``MAX_PARTITIONS`` (the arithmetic is logged)."""
    target = budget.partition_target_bytes
    partitions = max(1, min(MAX_PARTITIONS, math.ceil(estimated / target)))
    log.info(
        "partitions: %d = ceil(estimated %d bytes / target %d bytes per partition (min(budget/4, %d MiB)))",
        partitions,
        estimated,
        target,
        PARTITION_TARGET_CAP >> 20,
    )
    return partitions


def partition_count(op: Op, estimated: int, budget: Budget) -> int:
    """Partitions of wide op ``op``: a reshard's shard count, else the op's ``num_partitions``, else sized
    from the estimated input (``partitions_for``)."""
    if isinstance(op, Reshard):
        return op.num_shards
    if isinstance(op, Sort) and op.boundaries is not None:
        return len(op.boundaries) + 1
    return op.num_partitions or partitions_for(estimated, budget)


# -- sizes ------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class SourceSize:
    """A source's estimated in-memory bytes, and per column when Parquet footers told them."""

    bytes: int
    column_bytes: dict[str, int] | None = None
    shards: int = 1
    files: int = 1
    widest: dict[str, RowWidth] | None = None
    """Per column, the row group whose rows are widest on average (Parquet footers; None: not known)."""


SizeOf = Callable[[ReadFiles | FromTable], SourceSize]
"""How a planner learns a source's size: the driver answers from its one listing per job, ``explain`` from
its own (``list_source_files``)."""


def list_source_files(source: ReadFiles) -> tuple[list[Shard], dict[str, FileStat]]:
    """The shards of a file source and the size and version stamp of each file (one stat per file)."""
    shards = list_shards(list(source.paths), source.format, approx_shard_bytes=source.approx_shard_bytes)
    stats: dict[str, FileStat] = {}
    for shard in shards:
        if shard.path not in stats:
            stats[shard.path] = file_stat(shard.path)
    return shards, stats


def size_of_files(source: ReadFiles, shards: list[Shard], stats: dict[str, FileStat]) -> SourceSize:
    """Estimated bytes of a file source: Parquet footers for up to ``FOOTER_ESTIMATE_MAX_FILES`` files, else
    file sizes × the format's expansion (``zephyr.io.sources``)."""
    total = sum(estimated_bytes(path, size, source.format) for path, (size, _) in stats.items())
    if source.format == "parquet" and len(stats) <= FOOTER_ESTIMATE_MAX_FILES:
        footers = parquet_footer_sizes(list(stats))
        return SourceSize(total, footers.column_bytes, len(shards), len(stats), footers.widest)
    return SourceSize(total, None, shards=len(shards), files=len(stats))


def check_row_width(size: SourceSize, columns: tuple[str, ...] | None, budget: Budget) -> None:
    """Refuse, before any task, a budget too small for the input's rows, naming the smallest that works.

    A reader streams a row group in batches of ``budget.read_batch_bytes`` (budget/8), however large the row
    group; what it cannot split is a row. Rows wider than a batch are read alone, and every share sized from
    the batch (the kernels' scratch, the shuffle buffer) then holds a multiple of a row the budget never
    counted. So the smallest budget that works holds one average row of the widest row group in a batch:
    8 × its footer bytes per row (uncompressed, post-encoding: dictionary-encoded text decodes larger, so
    this refuses no budget that would have held). Columns not read are not counted."""
    if not size.widest:
        return
    wanted = {c: w for c, w in size.widest.items() if columns is None or c in columns}
    width = sum(w.bytes_per_row for w in wanted.values())
    if width <= budget.read_batch_bytes:
        return
    column, widest = max(wanted.items(), key=lambda item: item[1].bytes_per_row)
    smallest = budget.smallest_for_row(width)
    raise ConfigError(
        f"{widest.path}: row group {widest.row_group} holds rows of {format_bytes(width)} on average "
        f"(column {column!r}: {format_bytes(widest.bytes_per_row)}), more than the read batch of "
        f"{format_bytes(budget.read_batch_bytes)} a memory budget of {format_bytes(budget.bytes)} allows "
        f"(budget/8); the smallest budget that works for this input is {smallest >> 20}MiB: pass "
        f"--memory-budget {smallest >> 20}MiB (memory_budget=) or more, or write smaller rows"
    )


def read_bytes(segment: Segment, size_of: SizeOf, columns: tuple[str, ...] | None = None) -> int:
    """Estimated in-memory bytes a segment reads: only ``columns`` (or the source's own projection) when
    footers give per-column sizes; a reduce segment reads what its upstream segments read."""
    if segment.source is not None:
        size = size_of(segment.source)
        if size.column_bytes is not None:
            wanted = columns or getattr(segment.source, "columns", None)
            return sum(v for k, v in size.column_bytes.items() if wanted is None or k in wanted)
        return size.bytes
    return sum(read_bytes(up, size_of) for up in segment.upstream)


def plan_bytes(segment: Segment, size_of: SizeOf, consumer: Op | None = None) -> int:
    """Bytes the whole plan reads from its sources (decides whether a job is small)."""
    if segment.source is not None:
        return read_bytes(segment, size_of, pushdown_columns(segment, consumer))
    return sum(plan_bytes(up, size_of, segment.wide) for up in segment.upstream)


def wide_input_bytes(segment: Segment, size_of: SizeOf) -> int:
    """Estimated bytes the map side of a (non-sort) wide op reads: what sizes its partitions."""
    return sum(read_bytes(up, size_of, pushdown_columns(up, segment.wide)) for up in segment.upstream)


def pushdown_columns(segment: Segment, consumer: Op | None = None) -> tuple[str, ...] | None:
    """Columns an aggregation needs when it reads a Parquet source directly (no ops in between), so the
    map side decodes only those; None means all columns."""
    if (
        not isinstance(consumer, GroupAggregate)
        or segment.narrow
        or not isinstance(segment.source, ReadFiles)
    ):
        return None
    if segment.source.format != "parquet" or segment.source.columns is not None:
        return None
    needed = list(consumer.keys)
    for agg in consumer.aggs:
        if agg.column is not None and agg.column not in needed:
            needed.append(agg.column)
    return tuple(needed)


# -- small jobs -------------------------------------------------------------------------------------------
def runs_in_process(options: ExecutionOptions, estimated: int, *, one_split_task: bool = False) -> bool:
    """A ``local`` job runs in the driver's process when its inputs are estimated below ``small_job_bytes``,
    or when the engine's read split leaves it one task (``zephyr.read_plan``: under about 64 MiB): starting worker
    processes would cost more than the work. ``small_job_bytes=0`` turns both off; outputs are identical."""
    limit = options.small_job_bytes_value
    return options.executor == "local" and limit > 0 and (estimated < limit or one_split_task)


# -- the printable plan -----------------------------------------------------------------------------------
ACTION_OUTPUT = "the job's result (its output files, or the rows or count asked for)"

_WORDS = {
    ConcatReducer: "each task concatenates its partition's rows",
    DeduplicateReducer: "each task keeps the first row of each key",
    GroupAggregateReducer: "each task aggregates the rows of each key",
    GroupApplyReducer: "each task runs the function on the rows of each key",
    JoinReducer: "each task joins the two sides' rows of each key",
    SortReducer: "each task merges its sorted runs",
    PartialAggregate: "partial aggregates",
    FirstOccurrence: "the first row of each key",
}
"""What a reducer or a map-side combine does, in words (the plan names no class)."""


@dataclass(frozen=True)
class PlannedStage:
    """One stage as the driver will run it (``PhysicalPlan.text`` prints it)."""

    name: str
    """As the driver names it in logs and stats (``Segment.name``)."""
    role: str
    """``map`` (reads a source), ``reduce`` (one task per shuffle partition) or ``sample`` (a sort's key
    sample)."""
    tasks: str
    reads: str
    writes: str
    reducer: str = ""
    """Reduce stages: what each task does, and how the partition count was decided."""
    bytes: int = 0
    """The estimated bytes it reads, as the driver estimates them: its share of the progress bar."""


@dataclass(frozen=True)
class PhysicalPlan:
    """The stages of a plan in the order the driver runs them, with the budget that sizes them."""

    stages: tuple[PlannedStage, ...]
    budget: Budget
    estimated_bytes: int
    executor: str

    @property
    def work_bytes(self) -> int:
        """The bytes its stages are estimated to read, all together (``zephyr.progress``)."""
        return sum(stage.bytes for stage in self.stages)

    @property
    def shuffles(self) -> int:
        return sum(stage.writes.startswith("shuffle #") for stage in self.stages)

    def text(self) -> str:
        """The plan as lines: a header, one block per stage, the budget's shares in bytes."""
        lines = [
            f"physical plan: {_count(len(self.stages), 'stage')}, {_count(self.shuffles, 'shuffle')}; "
            f"estimated input {format_bytes(self.estimated_bytes)}; "
            f"memory budget {format_bytes(self.budget.bytes)} per task; executor {self.executor}"
        ]
        for number, stage in enumerate(self.stages, 1):
            lines.append(f"stage {number} {stage.role}: {stage.name}")
            lines.append(f"  tasks {stage.tasks} · reads {stage.reads}")
            if stage.reducer:
                lines.append(f"  {stage.reducer}")
            lines.append(f"  writes {stage.writes}")
        lines.append(f"budget shares (bytes per task, of {self.budget.bytes:,}):")
        lines.extend("  " + line for line in self.budget.describe().splitlines())
        return "\n".join(lines)


def explain(ops: tuple[Op, ...], options: ExecutionOptions, output: str = ACTION_OUTPUT) -> PhysicalPlan:
    """The physical plan of ``ops`` under ``options`` without running it: sources are listed and their
    footers read (to size partitions as the driver will), nothing else."""
    from zephyr.plan import build_plan

    segment = build_plan(ops)
    sizes: dict[int, SourceSize] = {}

    def size_of(source: ReadFiles | FromTable) -> SourceSize:
        if id(source) not in sizes:
            if isinstance(source, FromTable):
                sizes[id(source)] = SourceSize(
                    source.table.nbytes, None, source.num_shards, source.num_shards
                )
            else:
                sizes[id(source)] = size_of_files(source, *list_source_files(source))
        return sizes[id(source)]

    budget = Budget(options.memory_budget_bytes)
    walker = _Explainer(budget, size_of)
    walker.walk(segment, output)
    estimated = plan_bytes(segment, size_of)
    executor = options.executor if isinstance(options.executor, str) else type(options.executor).__name__
    if runs_in_process(options, estimated):
        small = format_bytes(options.small_job_bytes_value)
        executor = f"in this process (small job: input under --small-job-bytes {small})"
    elif executor != "inprocess":
        executor = f"{executor}, {options.num_workers} workers"
    return PhysicalPlan(tuple(walker.stages), budget, estimated, executor)


class _Explainer:
    """Walks the segment tree depth-first, as ``zephyr.job.Job.run_segment`` runs it, taking every decision
    from the functions above."""

    def __init__(self, budget: Budget, size_of: SizeOf):
        self.budget = budget
        self.size_of = size_of
        self.stages: list[PlannedStage] = []
        self.shuffle_count = 0

    def walk(self, segment: Segment, writes: str, columns: tuple[str, ...] | None = None) -> str:
        """Append the stages that produce ``segment`` (its map sides first); return its task count."""
        if segment.source is not None:
            tasks, reads = self._source(segment, columns)
            size = self.size_of(segment.source).bytes
            self.stages.append(PlannedStage(segment.name, "map", tasks, reads, writes, bytes=size))
            return tasks
        op = segment.wide
        if isinstance(op, Sort):
            return self._sort(segment, op, writes)
        estimated = wide_input_bytes(segment, self.size_of)
        plan = exchange(op, partition_count(op, estimated, self.budget))
        numbers = []
        for upstream, spec in zip(segment.upstream, plan.specs):
            self.walk(upstream, "", pushdown_columns(upstream, op))
            numbers.append(self._shuffle_written(spec))
        self._reduce(segment, op, plan, numbers, estimated, writes)
        return str(plan.partitions)

    def _shuffle_written(self, spec: ShuffleSpec) -> int:
        """Number the shuffle the last stage writes (in the order stages run) and say so on that stage."""
        self.shuffle_count += 1
        self.stages[-1] = replace(self.stages[-1], writes=_describe_spec(self.shuffle_count, spec))
        return self.shuffle_count

    def _source(self, segment: Segment, columns: tuple[str, ...] | None) -> tuple[str, str]:
        source = segment.source
        size = self.size_of(source)
        if isinstance(source, FromTable):
            what = f"an in-memory table ({source.table.num_rows} rows)"
        else:
            what = f"{source.format} ({_count(size.files, 'file')}, {_count(size.shards, 'shard')})"
        projected = f", columns {', '.join(columns)}" if columns else ""
        estimate = format_bytes(read_bytes(segment, self.size_of, columns))
        return str(size.shards), f"{what}, est. {estimate}{projected}"

    def _sort(self, segment: Segment, op: Sort, writes: str) -> str:
        upstream = segment.upstream[0]
        estimated = read_bytes(upstream, self.size_of)
        if materializes_before_sort(upstream):
            produced = self.walk(upstream, "Parquet files in the work directory (materialized: read twice)")
            name, tasks, size = "ReadFiles", f"≤ {produced}", estimated
            reads = f"the materialized files, est. {format_bytes(estimated)} before materializing"
        else:
            name, size = upstream.name, self.size_of(upstream.source).bytes
            tasks, reads = self._source(upstream, None)
        plan = exchange(op, partition_count(op, estimated, self.budget))
        by = ", ".join(op.by)
        boundaries = f"{plan.partitions - 1} range boundaries on {op.by[0]}"
        if op.boundaries is None:  # given boundaries need no sample
            sample = PlannedStage(
                name, "sample", tasks, f"{reads}, columns {by}", f"a key sample → {boundaries}"
            )
            self.stages.append(replace(sample, bytes=size))
        self.stages.append(PlannedStage(name, "map", tasks, reads, "", bytes=size))
        self._reduce(segment, op, plan, [self._shuffle_written(plan.specs[0])], estimated, writes)
        return str(plan.partitions)

    def _reduce(
        self, segment: Segment, op: Op, plan: Exchange, numbers: list[int], estimated: int, writes: str
    ):
        if isinstance(op, Reshard):
            rule = "reshard(num_shards)"
        elif isinstance(op, Sort) and op.boundaries is not None:
            rule = "the given boundaries + 1"
        elif op.num_partitions:
            rule = "num_partitions"
        else:
            target = self.budget.partition_target_bytes
            rule = f"ceil(est. {format_bytes(estimated)} / {format_bytes(target)} partition target)"
        shuffles = " + ".join(f"#{n}" for n in numbers)
        reads = f"shuffle {shuffles}, one partition per task"
        reducer = f"{_WORDS[type(plan.reducer)]}; {_count(plan.partitions, 'partition')} = {rule}"
        self.stages.append(
            PlannedStage(segment.name, "reduce", str(plan.partitions), reads, writes, reducer, estimated)
        )


def _describe_spec(number: int, spec: ShuffleSpec) -> str:
    """``shuffle #2: hash(word) into 4 partitions, map-side combine PartialAggregate``."""

    def order(pairs: Sequence[tuple[str, bool]]) -> str:
        return ", ".join(f"{c}{' desc' if d else ''}" for c, d in pairs)

    if spec.kind == "hash":
        how = f"hash({', '.join(spec.keys)})"
    elif spec.kind == "range":
        how = f"range({order(zip(spec.keys, spec.descending))})"
    else:
        how = "round-robin"
    extra = f", map-side combine: {_WORDS[type(spec.combine)]}" if spec.combine is not None else ""
    if spec.sort_by:
        extra += ", rows in a key ordered by " + order(spec.sort_by)
    return f"shuffle #{number}: {how} into {_count(spec.num_partitions, 'partition')}{extra}"


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


class PlannedJob(NamedTuple):
    """One entry of a multi-job command's plan: an engine job (its ``title`` and the lazily built ``dataset``
    it runs) or, with ``dataset=None``, the rule that chooses between jobs (a ``then:`` line)."""

    title: str
    dataset: Any = None


def explain_jobs(
    command: str,
    jobs: list[PlannedJob],
    budget: Budget,
    execution: dict[str, Any],
    *,
    then: str = "the budget shares",
) -> str:
    """The plan of a command that runs several engine jobs (``zephyr explain dedup ...``, ``filter``,
    ``tokenize``): a header, each job's plan (``Dataset.explain`` without its budget lines) or decision
    (a ``then:`` line: ``then`` says what they hold), then the budget's shares once."""
    lines = [
        f"{command}: nothing ran. The physical plans of its engine jobs in the order they run; "
        f"'then:' lines are {then} that choose between them"
    ]
    for title, dataset in jobs:
        if dataset is None:
            lines.append(f"then: {title}")
            continue
        lines.append(title)
        text = dataset.explain(**execution).split("\nbudget shares", 1)[0]
        lines.extend("  " + line for line in text.splitlines())
    lines.append(f"budget shares (bytes per task, of {budget.bytes:,}):")
    lines.extend("  " + line for line in budget.describe().splitlines())
    return "\n".join(lines)


def planned_bytes(planned: list[PlannedJob] | Any, execution: dict[str, Any]) -> int:
    """The bytes the engine jobs of a command's plan (``PlannedJob``s, or one ``Dataset``) are estimated to
    read, all stages together: the total of its progress bar (``zephyr.progress.Display.expect``). Jobs of
    one number with letters (``job 2a``, ``job 2b``) are alternatives a ``then:`` rule picks between: the
    first counts."""
    if not isinstance(planned, list) and not hasattr(planned, "_ops"):
        return 0  # a plan given as text only (its own ``explain``): no estimates to add up
    jobs = planned if isinstance(planned, list) else [PlannedJob("", planned)]
    options = ExecutionOptions.from_kwargs(**execution)
    total, alternatives = 0, set()
    for title, dataset in jobs:
        letter = re.match(r"job (\d+)[a-z]\b", title)
        if dataset is None or (letter and letter.group(1) in alternatives):
            continue
        if letter:
            alternatives.add(letter.group(1))
        total += explain(dataset._ops, options).work_bytes
    return total
