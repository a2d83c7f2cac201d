"""The physical plan: how each wide op runs, how many partitions it gets, and the plan as text.

``zephyr.plan`` cuts a dataset's ops into segments; this module decides, for every wide op, what the driver
(``zephyr.job``) runs and how big it is. One table, ``EXCHANGES``, maps each wide op to its *exchange*: the
shuffle spec each upstream segment's map tasks write (hash, range or round-robin partitioning, an optional
map-side combine) and the reducer every partition's task runs. Beside it:

- partition counts: given by the op, or ``ceil(estimated input bytes / Budget.partition_target_bytes)``
  (``partitions_for``), from sizes estimated before any task runs (``zephyr.io.sources``), never from the
  worker count, so outputs are identical for any number of workers;
- pushdown: an aggregation over a Parquet source reads only the columns it needs (``pushdown_columns``);
- a client's read plan (``plan_read``): the estimated bytes, the read split and the small-job decision
  (``runs_in_process``) for a list of input paths, by the same sizes and rule the driver applies;
- the walk: ``walk`` yields every stage (a ``Step``) with these decisions, in the order the driver runs them;
  the driver (``zephyr.job.Job.run``) runs each step and sends back what it learns, and ``explain`` records
  the same steps and prints stages, shuffles, partition counts and the budget's shares without running anything
  (``Dataset.explain()``, ``zephyr explain``); ``explain_jobs`` prints the plan of a command of several engine
  jobs (``PlannedJob``s: the jobs a command's ``plans`` returns are the jobs its run executes).

The driver and ``explain`` consume one walk, so the printed plan is the plan that runs.
"""

from __future__ import annotations

import logging
import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any, NamedTuple

import pyarrow as pa

from zephyr.budget import EXPANSION, PARTITION_TARGET_CAP, Budget
from zephyr.config import format_bytes
from zephyr.errors import ConfigError
from zephyr.io.paths import FileStat, atomic_write, file_stat, public_path
from zephyr.io.sources import (
    FOOTER_ESTIMATE_MAX_FILES,
    RowWidth,
    Shard,
    estimated_bytes,
    list_shards,
    parquet_footer_sizes,
    plan_input_schema,
)
from zephyr.ops import (
    Deduplicate,
    FromTable,
    GroupAggregate,
    GroupApply,
    Join,
    Op,
    ReadFiles,
    Reshard,
    Sort,
    WithRowIndex,
)
from zephyr.options import ExecutionOptions
from zephyr.plan import Segment, fingerprint_of, table_digest
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
from zephyr.shuffle.writer import ShuffleSpec, boundary_array

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
    # The boundaries come from a sample of the keys at run time (``walk``); until then, none.
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
"""Wide op type → its exchange for a given partition count (every wide op has one)."""


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


def partition_count(op: Op, estimated: int, budget: Budget) -> tuple[int, str]:
    """Partitions of wide op ``op``, and the rule that decided them (``explain`` prints it): a reshard's shard
    count, given boundaries + 1, the op's ``num_partitions``, else sized from the estimated input
    (``partitions_for``)."""
    if isinstance(op, Reshard):
        return op.num_shards, "reshard(num_shards)"
    if isinstance(op, Sort) and op.boundaries is not None:
        return len(op.boundaries) + 1, "the given boundaries + 1"
    if op.num_partitions:
        return op.num_partitions, "num_partitions"
    target = format_bytes(budget.partition_target_bytes)
    rule = f"ceil(est. {format_bytes(estimated)} / {target} partition target)"
    return partitions_for(estimated, budget), rule


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
"""How a planner learns a source's size (``Sources.size_of``)."""


class Sources:
    """The sources of a plan, each listed and sized once (by identity): the one listing the driver
    (``zephyr.job``), ``explain`` and ``plan_read`` share. The driver's (with its work directory ``root`` on
    ``fs``) also plans each source as it sizes it (``listing``): its fingerprint and the schema every task
    casts to, so a mismatch fails while planning, not in a task; in-memory tables are staged under
    ``inputs/`` of ``root``."""

    def __init__(self, fs: Any = None, root: str | None = None) -> None:
        self.fs, self.root = fs, root
        self._listed: dict[int, tuple[list[Shard], dict[str, FileStat], SourceSize]] = {}
        self._planned: dict[int, tuple[list[Shard], str, pa.Schema | None]] = {}

    def files(self, source: ReadFiles | FromTable) -> tuple[list[Shard], dict[str, FileStat], SourceSize]:
        """A file source's shards, the size and version stamp of each file (one stat per file) and its estimated
        size: Parquet footers for up to ``FOOTER_ESTIMATE_MAX_FILES`` files, else file sizes × the format's
        expansion (``zephyr.io.sources``). An in-memory table has its bytes and no files."""
        if id(source) in self._listed:
            return self._listed[id(source)]
        shards, stats = [], {}
        if isinstance(source, FromTable):
            size = SourceSize(source.table.nbytes, None, source.num_shards, source.num_shards)
        else:
            shards = list_shards(
                list(source.paths), source.format, approx_shard_bytes=source.approx_shard_bytes
            )
            stats = {path: file_stat(path) for path in dict.fromkeys(s.path for s in shards)}
            total = sum(estimated_bytes(path, size, source.format) for path, (size, _) in stats.items())
            size = SourceSize(total, None, shards=len(shards), files=len(stats))
            if source.format == "parquet" and len(stats) <= FOOTER_ESTIMATE_MAX_FILES:
                footers = parquet_footer_sizes(list(stats))
                size = replace(size, column_bytes=footers.column_bytes, widest=footers.widest)
        self._listed[id(source)] = shards, stats, size
        return shards, stats, size

    def size_of(self, source: ReadFiles | FromTable) -> SourceSize:
        """A source's estimated size (``SizeOf``, ``files``), planned first by the driver's (``listing``)."""
        if self.root is not None:
            self.listing(source)
        return self.files(source)[2]

    def listing(self, source: ReadFiles | FromTable) -> tuple[list[Shard], str, pa.Schema | None]:
        """Shards of a source, its fingerprint and the schema planned for all its files before any task (None:
        the files' own), listed on first use."""
        if id(source) not in self._planned:
            listed = self._stage_table(source) if isinstance(source, FromTable) else self._list_files(source)
            self._planned[id(source)] = listed
        return self._planned[id(source)]

    def _list_files(self, source: ReadFiles) -> tuple[list[Shard], str, pa.Schema | None]:
        shards, stats, _ = self.files(source)
        # one schema for all files, decided from footers/first blocks before any task (zephyr.io.schema)
        planned = None
        if source.schema is None:
            planned = plan_input_schema(shards, unify=source.unify_schemas, columns=source.columns)
        # size and version stamp (mtime / ETag): a same-size edit in place must not resume the old output
        stamps = [(s, *stats[s.path]) for s in shards]
        source_fp = fingerprint_of(source, stamps, None if planned is None else planned.to_string())
        return shards, source_fp, planned

    def _stage_table(self, source: FromTable) -> tuple[list[Shard], str, None]:
        """Write an in-memory table as ``num_shards`` Parquet files in the work directory (once per content)."""
        import pyarrow.parquet as pq

        digest = table_digest(source.table)
        directory = f"{self.root}/inputs/{digest[:16]}-{source.num_shards}"
        rows = source.table.num_rows
        files = []
        for i in range(source.num_shards):
            start, stop = rows * i // source.num_shards, rows * (i + 1) // source.num_shards
            path = f"{directory}/part-{i:05d}.parquet"
            if not self.fs.exists(path):
                with atomic_write(public_path(self.fs, path)) as f:
                    pq.write_table(source.table.slice(start, stop - start), f, compression="zstd")
            files.append(path if "://" not in self.root else self.fs.unstrip_protocol(path))
        return list_shards(files, "parquet"), digest, None


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


def pushdown_columns(segment: Segment, consumer: Op | None = None) -> tuple[str, ...] | None:
    """Columns an aggregation needs when it reads a Parquet source directly (no ops in between), so the
    map side decodes only those; None means all columns."""
    source = segment.source
    if not isinstance(consumer, GroupAggregate) or segment.narrow or not isinstance(source, ReadFiles):
        return None
    if source.format != "parquet" or source.columns is not None:
        return None
    return tuple(dict.fromkeys([*consumer.keys, *(a.column for a in consumer.aggs if a.column is not None)]))


# -- small jobs -------------------------------------------------------------------------------------------
def runs_in_process(options: ExecutionOptions, estimated: int, *, one_split_task: bool = False) -> bool:
    """A ``local`` job runs in the driver's process when its inputs are estimated below ``small_job_bytes``,
    or when the engine's read split leaves it one task (``plan_read``: under about 64 MiB): starting worker
    processes would cost more than the work. ``small_job_bytes=0`` turns both off; outputs are identical."""
    limit = options.small_job_bytes_value
    return options.executor == "local" and limit > 0 and (estimated < limit or one_split_task)


# -- a client's read plan ----------------------------------------------------------------------------------
SPLIT_MIN_BYTES = 64 << 20
"""Inputs under twice this are read in shards of this size, not split further: a worker's start-up, imports and
a client's set-up (loading and proving a tokenizer: ~1-2 CPU-s) cost more than their work."""
TASK_MIN_BYTES = 16 << 20
"""Split read tasks hold at least this: a started worker pays ~10 ms of bookkeeping per task, so small tasks
keep every worker busy to the end (5 tasks of 64 MB on 2 workers left one idle a fifth of the step)."""
TASKS_PER_WORKER = 8
"""A split aims at this many read tasks per worker, so that the last ones are short."""


@dataclass(frozen=True)
class ReadPlan:
    """How a job reads its inputs (``plan_read``): what clients take instead of re-deriving sizes."""

    estimated_bytes: int
    """In-memory bytes read (Parquet footers, else file sizes × the format's factor: ``zephyr.io.sources``)."""
    approx_shard_bytes: int | None
    """The read split the engine chose; None: the sources' own shards. ``tasks``: the first stage's shards."""
    tasks: int
    small: bool
    """The job runs in the driver's process (``runs_in_process``)."""


def plan_read(inputs: str | Sequence[str], options: ExecutionOptions, *, split: bool = False) -> ReadPlan:
    """The one read-planning rule for the input paths ``inputs`` (listed and sized here): clients call it before
    building a ``Dataset`` (the tokenize writer: how to split its inputs, how many tasks run at once, whether
    its jobs run in this process), so that none re-sizes inputs or repeats the small-job rule; the driver
    applies the same sizes and rule to a plan (``Job.run``). With ``split``, fewer shards than
    ``TASKS_PER_WORKER`` per worker are split into runs of row groups (Parquet) or byte ranges (plain JSONL)
    of ``max(TASK_MIN_BYTES, estimated / (TASKS_PER_WORKER × workers))``, or of ``SPLIT_MIN_BYTES`` for an
    input under twice that; in-process (one task at a time) nothing is split. Outputs never depend on it: a
    split changes which task reads a row, never the rows' order.

    >>> import pyarrow as pa, pyarrow.parquet as pq, tempfile, os
    >>> path = os.path.join(tempfile.mkdtemp(), "a.parquet")
    >>> pq.write_table(pa.table({"text": ["a b c"] * 100}), path)
    >>> plan = plan_read([path], ExecutionOptions(executor="local", workers=2), split=True)
    >>> (plan.approx_shard_bytes == SPLIT_MIN_BYTES, plan.tasks, plan.small)
    (True, 1, True)
    """
    from zephyr.io.paths import input_files

    files, fmt = input_files(inputs)
    source, sources = ReadFiles(tuple(files), fmt), Sources()
    shards = sources.files(source)[0]
    estimated = read_bytes(Segment(source=source), sources.size_of)
    approx = None
    workers = options.num_workers
    if split and options.executor != "inprocess" and len(shards) < TASKS_PER_WORKER * workers:
        whole = estimated < 2 * SPLIT_MIN_BYTES
        approx = SPLIT_MIN_BYTES if whole else max(TASK_MIN_BYTES, estimated // (TASKS_PER_WORKER * workers))
        shards = list_shards(files, fmt, approx_shard_bytes=approx)
    one_task = approx is not None and len(shards) == 1
    return ReadPlan(
        estimated, approx, len(shards), runs_in_process(options, estimated, one_split_task=one_task)
    )


# -- the walk: every stage of a plan, in the order the driver runs them ------------------------------------
SAMPLE = "sample"
"""A step's output: a sort's key sample (the driver sends back the range boundaries it cuts from it)."""
MATERIALIZE = "materialize"
"""A step's output: Parquet files in the work directory, which a sort then reads twice."""


@dataclass
class Step:
    """One stage as ``walk`` decides it: the driver runs it (``zephyr.job.Job.run``), ``explain`` prints it.

    ``output``: a shuffle's spec, ``SAMPLE``, ``MATERIALIZE``, or None (the output the walk's caller asked
    for). ``estimate``: the bytes it is estimated to read (its share of the progress bar; a reduce's partition
    count). ``plan``: a reduce's (and a sort sample's) exchange. ``inputs``: a reduce's map sides, what each
    sent back. ``rule``: how a reduce's partition count was decided. ``coalesce``: a reduce's tasks may take adjacent partitions (``reduce_groups``): its output's
    file layout is the engine's own (a shuffle, ``to_arrow``, ``count``, ``materialize``) and no
    with_row_index numbers its rows per task. ``materialized``: it reads what the ``MATERIALIZE`` step before
    it wrote (only ``explain`` sees this: the driver gets a segment over the files). ``sent``: what its
    consumer sets after running (or planning) it, which the walk reads on: a sample's boundaries, a stage's
    result."""

    segment: Segment
    output: ShuffleSpec | str | None
    estimate: int
    read_columns: tuple[str, ...] | None = None
    plan: Exchange | None = None
    inputs: tuple = ()
    coalesce: bool = False
    rule: str = ""
    materialized: bool = False
    sent: Any = None

    @property
    def reduces(self) -> bool:
        return self.segment.source is None and not self.materialized


def walk(
    segment: Segment,
    budget: Budget,
    size_of: SizeOf,
    output: ShuffleSpec | str | None = None,
    columns: tuple[str, ...] | None = None,
    coalesce: bool = False,
):
    """Yield the ``Step``s that produce ``segment`` into ``output``, depth-first (a wide op's map sides, then
    its reduce), taking every decision of this module; the consumer sets each step's ``sent`` (None when
    only planning). Returns the last step's ``sent``."""
    if segment.source is not None:
        yield (step := Step(segment, output, size_of(segment.source).bytes, columns))
        return step.sent
    op = segment.wide
    if isinstance(op, Sort):
        estimate, plan, rule, inputs = yield from _sort(segment.upstream[0], op, budget, size_of)
    else:  # the map side of a (non-sort) wide op reads what its upstreams read, pushdown applied
        estimate = sum(read_bytes(up, size_of, pushdown_columns(up, op)) for up in segment.upstream)
        (partitions, rule), inputs = partition_count(op, estimate, budget), []
        plan = EXCHANGES[type(op)](op, partitions)
        for upstream, spec in zip(segment.upstream, plan.specs):
            # round robin deals rows by task: its map side keeps one task per partition
            up = walk(
                upstream, budget, size_of, spec, pushdown_columns(upstream, op), spec.kind != "round_robin"
            )
            inputs.append((yield from up))
    coalesce = coalesce and not any(isinstance(n, WithRowIndex) for n in segment.narrow)
    yield (step := Step(segment, output, estimate, None, plan, tuple(inputs), coalesce, rule))
    return step.sent


def _sort(upstream: Segment, op: Sort, budget: Budget, size_of: SizeOf):
    """A sort's map side: sample the keys (unless boundaries are given), then range-partition. A sort reads
    its input twice, so computed rows (a reduce or narrow ops) are written to Parquet once first and
    nothing is computed twice. Returns (estimate, exchange, partition rule, map results)."""
    materialized = upstream.source is None or bool(upstream.narrow)
    estimate = read_bytes(upstream, size_of)
    if materialized:
        result = yield from walk(upstream, budget, size_of, MATERIALIZE)
        if result is not None:  # ran: the sort reads the files it wrote
            files = tuple(f for m in result.markers for f in m["files"])
            if not files:
                return 0, EXCHANGES[type(op)](op, 1), "", [result]
            upstream, materialized = Segment(source=ReadFiles(files, "parquet")), False
            estimate = read_bytes(upstream, size_of)
    size = estimate if materialized else size_of(upstream.source).bytes
    partitions, rule = partition_count(op, estimate, budget)
    plan = EXCHANGES[type(op)](op, partitions)
    boundaries = None if op.boundaries is None else boundary_array(op.boundaries)
    if op.boundaries is None:  # the caller's split points need no sample, whatever the input layout
        yield (sample := Step(upstream, SAMPLE, size, op.by, plan, materialized=materialized))
        boundaries = sample.sent
    spec = replace(plan.specs[0], boundaries=boundaries)
    yield (step := Step(upstream, spec, size, materialized=materialized))
    return estimate, plan, rule, [step.sent]


MIN_REDUCE_TASKS = 8
"""``reduce_groups`` never coalesces below this many tasks (nor fewer than there are partitions)."""


def reduce_groups(partitions: int, stored: int, budget: Budget, coalesce: bool) -> list[tuple[int, int]]:
    """The reduce tasks of a shuffle as ranges of adjacent partitions. Partition counts are planned from the
    estimated input before any task runs; a map side that wrote far less (a filter, a projection, a
    combine) would leave many near-empty reduce tasks, each paying its fixed cost and a read of every
    map run. When ``coalesce``, tasks are sized from the bytes the map side really wrote instead (Spark's
    adaptive coalescing): ``stored × EXPANSION`` per ``partition_target_bytes``, at least
    ``MIN_REDUCE_TASKS``. Each partition is still reduced on its own (``zephyr.tasks``), in order, so the
    rows and their order are those of one task per partition; the grouping depends on the data only."""
    tasks = partitions
    if coalesce:
        by_bytes = -(-stored * EXPANSION // budget.partition_target_bytes)
        tasks = min(partitions, max(MIN_REDUCE_TASKS, by_bytes))
    return [(partitions * i // tasks, partitions * (i + 1) // tasks) for i in range(tasks)]


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


class PhysicalPlan(NamedTuple):
    """A plan's stages in the order the driver runs them, as text (a header, one block per stage, the budget's
    shares in bytes), and the bytes they are estimated to read, all together (``zephyr.progress``)."""

    text: str
    work_bytes: int


def explain(ops: tuple[Op, ...], options: ExecutionOptions, output: str = ACTION_OUTPUT) -> PhysicalPlan:
    """The physical plan of ``ops`` under ``options`` without running it: the steps of ``walk``, each as a
    block naming its role (``map`` reads a source, ``reduce`` shuffle partitions, ``sample`` a sort's key
    sample), its name as the driver names it in logs and stats (``Segment.name``), its tasks, what it reads
    and writes and, for a reduce, what each task does and how the partition count was decided. Sources are
    listed and their footers read (to size partitions as the driver will), nothing else."""
    from zephyr.plan import build_plan

    segment, size_of = build_plan(ops), Sources().size_of
    budget = Budget(options.memory_budget_bytes)
    blocks: list[str] = []
    shuffles, produced, work = 0, "", 0
    for step in walk(segment, budget, size_of):
        tasks, reads, reducer = _reads(step, size_of, produced)
        if isinstance(step.output, ShuffleSpec):
            shuffles = step.sent = shuffles + 1
            writes = _describe_spec(shuffles, step.output)
        elif step.output == SAMPLE:
            reads += f", columns {', '.join(step.read_columns)}"
            writes = f"a key sample → {step.plan.partitions - 1} range boundaries on {step.read_columns[0]}"
        elif step.output == MATERIALIZE:
            produced, writes = tasks, "Parquet files in the work directory (materialized: read twice)"
        else:
            writes = output
        role = "sample" if step.output == SAMPLE else "reduce" if step.reduces else "map"
        name = "ReadFiles" if step.materialized else step.segment.name
        lines = [f"stage {len(blocks) + 1} {role}: {name}", f"  tasks {tasks} · reads {reads}"]
        blocks.append("\n".join([*lines, *([f"  {reducer}"] if reducer else []), f"  writes {writes}"]))
        work += step.estimate
    estimated = plan_bytes(segment, size_of)
    executor = options.executor if isinstance(options.executor, str) else type(options.executor).__name__
    if runs_in_process(options, estimated):
        small = format_bytes(options.small_job_bytes_value)
        executor = f"in this process (small job: input under --small-job-bytes {small})"
    elif executor != "inprocess":
        executor = f"{executor}, {options.num_workers} workers"
    header = (
        f"physical plan: {_count(len(blocks), 'stage')}, {_count(shuffles, 'shuffle')}; estimated input "
        f"{format_bytes(estimated)}; memory budget {format_bytes(budget.bytes)} per task; executor {executor}"
    )
    return PhysicalPlan("\n".join([header, *blocks, _shares(budget)]), work)


def _reads(step: Step, size_of: SizeOf, produced: str) -> tuple[str, str, str]:
    """A planned stage's task count, what it reads, and for a reduce what each task does, in words."""
    if step.materialized:
        estimate = format_bytes(step.estimate)
        return f"≤ {produced}", f"the materialized files, est. {estimate} before materializing", ""
    if step.reduces:
        partitions, shuffles = step.plan.partitions, " + ".join(f"#{n}" for n in step.inputs)
        reducer = f"{_WORDS[type(step.plan.reducer)]}; {_count(partitions, 'partition')} = {step.rule}"
        if step.coalesce and partitions > MIN_REDUCE_TASKS:
            grouped = "adjacent partitions per task, sized from the map side's stored bytes (reduce_groups)"
            return f"≤ {partitions}", f"shuffle {shuffles}, {grouped}", reducer
        return str(partitions), f"shuffle {shuffles}, one partition per task", reducer
    source, size = step.segment.source, size_of(step.segment.source)
    if isinstance(source, FromTable):
        what = f"an in-memory table ({source.table.num_rows} rows)"
    else:
        what = f"{source.format} ({_count(size.files, 'file')}, {_count(size.shards, 'shard')})"
    columns = step.read_columns if step.output != SAMPLE else None
    projected = f", columns {', '.join(columns)}" if columns else ""
    estimate = format_bytes(read_bytes(step.segment, size_of, columns))
    return str(size.shards), f"{what}, est. {estimate}{projected}", ""


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


def _shares(budget: Budget) -> str:
    """The budget's shares (``Budget.describe``) under the line that names it: how every plan ends."""
    lines = ("  " + line for line in budget.describe().splitlines())
    return "\n".join([f"budget shares (bytes per task, of {budget.bytes:,}):", *lines])


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
    return "\n".join([*lines, _shares(budget)])


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
