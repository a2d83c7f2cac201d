"""The job driver: turns a plan into stages of tasks, runs them on an executor, resumes, retries, accounts.

Stages run depth-first: a wide op first runs its upstream segment(s) as the map side of a shuffle, then its
own reduce tasks (one per partition). Per stage the driver:

1. computes the stage fingerprint (input + ops + output layout) and its directory ``stage-<fp16>``;
2. skips every task whose marker exists with that fingerprint (resume after a crash or a kill);
3. runs the others, retrying failures up to ``max_retries`` extra times; a task that still fails stops the
   job with a ``TaskError`` naming the stage, the input shard and the last error;
4. sums the task markers into the stage's stats (rows in/out/dropped/rejected, bytes, seconds, counters).

Partition counts, when not given, follow from the estimated input bytes and the per-worker byte budget
(``_partitions_for``), never from the worker count, so outputs are identical for any number of workers.
"""

from __future__ import annotations

import json
import logging
import math
import os
import shutil
import tempfile
import time
import uuid
import weakref
from collections.abc import Callable
from dataclasses import dataclass

import cloudpickle
import fsspec
import pyarrow as pa
import pyarrow.parquet as pq

from zephyr import job_stats, progress
from zephyr.budget import PARTITION_TARGET_CAP, Budget
from zephyr.errors import ConfigError, TaskError
from zephyr.executors.base import Executor, explain_worker_death
from zephyr.io.estimate import FOOTER_ESTIMATE_MAX_FILES, estimated_bytes, parquet_column_bytes
from zephyr.io.paths import atomic_write, file_stat, public_path
from zephyr.io.schema_plan import plan_input_schema
from zephyr.io.sources import Shard, list_shards
from zephyr.ops import Deduplicate, FromTable, GroupAggregate, GroupApply, Join, Op, ReadFiles, Reshard, Sort
from zephyr.options import ExecutionOptions
from zephyr.plan import Segment, build_plan, fingerprint_of, table_digest
from zephyr.results import WriteResult
from zephyr.shuffle.aggregate import PartialAggregate, is_decomposable
from zephyr.shuffle.partition import range_boundaries
from zephyr.shuffle.reduce import (
    ConcatReducer,
    DeduplicateReducer,
    FirstOccurrence,
    GroupAggregateReducer,
    GroupApplyReducer,
    JoinReducer,
    SortReducer,
)
from zephyr.shuffle.writer import ShuffleSpec
from zephyr.tasks import (
    SampleOutput,
    ShuffleOutput,
    SinkOutput,
    StageSpec,
    TaskSpec,
    read_marker,
    run_task,
    schema_from_text,
)

__all__ = ["Job", "run_to_arrow", "run_count", "run_write", "run_materialize", "make_executor"]

log = logging.getLogger(__name__)

MAX_PARTITIONS = 4096


def make_executor(options: ExecutionOptions) -> Executor:
    executor = options.executor
    if isinstance(executor, Executor):
        return executor
    if executor == "inprocess":
        from zephyr.executors.inprocess import InProcessExecutor

        return InProcessExecutor()
    if executor == "threads":
        from zephyr.executors.threads import ThreadExecutor

        return ThreadExecutor(options.num_workers)
    if executor == "local":
        from zephyr.executors.local import LocalExecutor

        return LocalExecutor(options.num_workers)
    if executor == "dask" or type(executor).__name__ == "Client":
        from zephyr.executors.dask import DaskExecutor

        return DaskExecutor.from_options(options)
    raise ConfigError(f"unknown executor {executor!r}")


@dataclass
class StageResult:
    fingerprint: str
    markers: list[dict]
    estimated_bytes: int
    marker_paths: tuple[str, ...] = ()
    """One per task, in task order (``markers[i]`` was read from ``marker_paths[i]``)."""


class Job:
    """One run of a plan: owns the executor, the work directory and the stats."""

    def __init__(self, options: ExecutionOptions):
        self.options = options
        self.temporary = options.work_dir is None
        work_dir = options.work_dir or tempfile.mkdtemp(prefix="zephyr-work-")
        self.fs, root = fsspec.core.url_to_fs(work_dir)
        self.root = work_dir.rstrip("/") if "://" in work_dir else root.rstrip("/")
        protocol = self.fs.protocol if isinstance(self.fs.protocol, str) else self.fs.protocol[0]
        if (
            protocol == "memory"
            and options.executor not in ("inprocess",)
            and not isinstance(options.executor, Executor)
        ):
            raise ConfigError(
                f"work_dir {work_dir!r} is in this process's memory; worker processes cannot see it. "
                "Use executor='inprocess' or a shared work_dir (local path, s3://, gs://)."
            )
        if options.quarantine_dir is not None:
            self.quarantine_root = options.quarantine_dir.rstrip("/")
        elif self.temporary:
            self.quarantine_root = os.path.join(
                tempfile.gettempdir(), f"zephyr-quarantine-{uuid.uuid4().hex[:12]}"
            )
        else:
            self.quarantine_root = f"{self.root}/quarantine"
        # Created on first use (``executor``), after ``prepare`` may have picked in-process for a small job. If
        # creating it fails (an unreachable dask scheduler), ``close`` still removes the temporary directory.
        self._executor: Executor | None = None
        self.stages: list[dict] = []
        self._sources: dict[int, tuple[list[Shard], str, int]] = {}
        self._column_bytes: dict[int, dict[str, int]] = {}
        self._input_schemas: dict[int, pa.Schema | None] = {}  # per source: what every task casts to
        self.started = time.time()
        self._progress = progress.enabled(options.progress)

    def __enter__(self) -> Job:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self._executor is not None and self._executor is not self.options.executor:
            self._executor.close()
        if self.temporary:
            shutil.rmtree(self.root, ignore_errors=True)

    # -- stats ------------------------------------------------------------------------------------------
    def stats(self) -> dict:
        quarantined = sum(s["rows_rejected"] for s in self.stages)
        return {
            "seconds": round(time.time() - self.started, 3),
            "executor": type(self._executor).__name__
            if self._executor is not None
            else str(self.options.executor),
            "workers": self.options.num_workers,
            "memory_budget_bytes": self.options.memory_budget_bytes,
            "rows_quarantined": quarantined,
            "quarantine_dir": self.quarantine_root if quarantined else None,
            **job_stats.task_totals(self.stages),
            "stages": self.stages,
        }

    def write_stats(self) -> dict:
        """Write ``stats.json`` into the work directory and hand the stats to ``zephyr.job_stats`` (a command
        that runs several jobs reports the retries and resumed tasks of all of them)."""
        stats = self.stats()
        job_stats.record(stats)
        if not self.temporary:
            with self.fs.open(f"{self.root}/stats.json", "w") as f:
                json.dump(stats, f, indent=1)
        if stats["rows_quarantined"]:
            log.warning("%d rows quarantined under %s", stats["rows_quarantined"], stats["quarantine_dir"])
        return stats

    # -- segments ---------------------------------------------------------------------------------------
    def run_segment(
        self,
        segment: Segment,
        output_key: object,
        output_for: Callable[[str], SinkOutput | ShuffleOutput | SampleOutput],
        *,
        read_columns: tuple[str, ...] | None = None,
    ) -> StageResult:
        """Run ``segment`` with the output ``output_for(stage_dir)``; ``output_key`` describes that output's
        layout for the fingerprint (everything but its directory)."""
        if segment.source is not None:
            shards, source_fp, estimate = self._source(segment.source)
            base_fp = fingerprint_of("source", source_fp, read_columns, *segment.narrow)
            reducer, inputs, map_rows = None, [("shard", s) for s in shards], None
            source = segment.source
            read = dict(
                read_columns=read_columns or (source.columns if isinstance(source, ReadFiles) else None),
                read_schema=source.schema if isinstance(source, ReadFiles) else None,
                input_schema=self._input_schemas.get(id(source)),
                on_error=source.on_error if isinstance(source, ReadFiles) else "raise",
            )
        else:
            reducer, upstream_runs, partitions, up_fp, estimate, map_rows = self._map_side(segment)
            base_fp = fingerprint_of("reduce", up_fp, cloudpickle.dumps(reducer), *segment.narrow)
            inputs = [("partition", p) for p in range(partitions)]
            read = {}
        fingerprint = fingerprint_of(base_fp, output_key)
        stage_dir = f"{self.root}/stage-{fingerprint[:16]}"
        output = output_for(stage_dir)
        stage = StageSpec(fingerprint, segment.name, tuple(segment.narrow), output, reducer=reducer, **read)
        self.fs.makedirs(stage_dir, exist_ok=True)
        stage_path = f"{stage_dir}/stage.pkl"
        with self.fs.open(stage_path, "wb") as f:
            f.write(cloudpickle.dumps(stage))
        inputs_path = None
        if reducer is not None:
            inputs_path = f"{stage_dir}/inputs.json"
            with self.fs.open(inputs_path, "w") as f:
                json.dump(upstream_runs, f)
        tasks = [
            TaskSpec(
                stage_path=stage_path,
                fingerprint=fingerprint,
                index=i,
                marker_path=f"{stage_dir}/_done/task-{i:05d}.json",
                quarantine_path=f"{self.quarantine_root}/stage-{fingerprint[:16]}/task-{i:05d}.parquet",
                budget_bytes=self.options.memory_budget_bytes,
                shard=value if kind == "shard" else None,
                partition=value if kind == "partition" else None,
                inputs_path=inputs_path,
                description=value.describe() if kind == "shard" else f"partition {value} of {segment.name}",
            )
            for i, (kind, value) in enumerate(inputs)
        ]
        self.fs.makedirs(f"{stage_dir}/_done", exist_ok=True)
        markers = self._run_tasks(segment.name, fingerprint, tasks, output)
        self._record(
            segment.name, fingerprint, markers, tasks, wide=(segment.wide, map_rows) if reducer else None
        )
        return StageResult(fingerprint, markers, estimate, tuple(t.marker_path for t in tasks))

    def _run_tasks(self, name: str, fingerprint: str, tasks: list[TaskSpec], output) -> list[dict]:
        started = time.perf_counter()
        markers: dict[int, dict] = {}
        for task in tasks:
            marker = read_marker(task.marker_path, fingerprint)
            if marker is not None and all(self._exists(p) for p in marker.get("files", [])):
                markers[task.index] = marker
        todo = [t for t in tasks if t.index not in markers]
        skipped = len(tasks) - len(todo)
        if skipped:
            log.info("stage %s: %d of %d tasks already done (resumed)", name, skipped, len(tasks))
        display = progress.current()
        own = None
        if display is None and self._progress and todo:  # from Python, no command display installed
            own = progress.command("zephyr", True)
            display = own.__enter__()
        if display is not None and todo:
            display.step(name, len(todo))
        tries: dict[int, int] = {}
        retried = 0
        try:
            while todo:
                failed: list[TaskSpec] = []
                for position, outcome in self.executor.run(run_task, todo):
                    task = todo[position]
                    if outcome.ok:
                        markers[task.index] = outcome.value
                        if display is not None:
                            display.advance(outcome.value.get("rows_in", 0), outcome.value.get("bytes_in", 0))
                        continue
                    outcome = explain_worker_death(
                        outcome,
                        memory_budget_bytes=self.options.memory_budget_bytes,
                        workers=self.options.num_workers,
                    )
                    tries[task.index] = tries.get(task.index, 0) + 1
                    if tries[task.index] > self.options.max_retries or not outcome.retryable:
                        how = f"after {tries[task.index]} tries" if outcome.retryable else "(not retried)"
                        raise TaskError(
                            f"{outcome.summary or _last_line(outcome.error)} "
                            f"[stage {name!r}, task {task.index} ({task.description}) failed {how}]",
                            stage=name,
                            shard=task.description,
                            worker_traceback=outcome.error,
                        )
                    log.warning(
                        "stage %s: task %d (%s) failed (try %d), retrying: %s",
                        name,
                        task.index,
                        task.description,
                        tries[task.index],
                        outcome.error.splitlines()[-1],
                    )
                    retried += 1
                    failed.append(task)
                todo = failed
        finally:
            if own is not None:
                own.__exit__(None, None, None)
        self._timing = (time.perf_counter() - started, skipped, retried)
        return [markers[t.index] for t in tasks]

    def _exists(self, url: str) -> bool:
        fs, path = fsspec.core.url_to_fs(url)
        fs.invalidate_cache(path)  # a cached object-store listing may predate another process's change
        return fs.exists(path)

    def _record(
        self,
        name: str,
        fingerprint: str,
        markers: list[dict],
        tasks: list[TaskSpec],
        wide: tuple | None = None,
    ) -> None:
        """Append the stage's record. Every stage balances ``rows_in = rows_out + rows_dropped +
        rows_rejected``, with two kinds of exception named in its ``wide`` entry: an aggregation turns rows
        into groups (``rows_in`` rows, ``groups`` out) and a join's output is its matches. For a reduce stage,
        ``rows_in`` is what its map side wrote (before any map-side combine), so the rows a ``deduplicate``
        removes — in the map-side combiner or in the reducer — are dropped with reason ``duplicate``."""
        wall, skipped, retried = self._timing
        ops: list[dict] = []
        user: dict[str, int] = {}
        for marker in markers:
            for i, op in enumerate(marker["ops"]):
                if i == len(ops):
                    ops.append({**op, "dropped_by_reason": dict(op["dropped_by_reason"])})
                    continue
                total = ops[i]
                for key in ("rows_in", "rows_out", "rows_dropped", "rows_rejected"):
                    total[key] += op[key]
                for reason, n in op["dropped_by_reason"].items():
                    total["dropped_by_reason"][reason] = total["dropped_by_reason"].get(reason, 0) + n
            for key, value in marker["counters"].items():
                user[key] = user.get(key, 0) + value
        rows_in = sum(m["rows_in"] for m in markers)
        read_rejected = sum(m.get("rows_read_rejected", 0) for m in markers)
        wide_entry = None
        duplicates = 0
        if wide is not None:
            op, map_rows = wide
            reduced, rows_in = rows_in, map_rows
            wide_entry = {"op": type(op).__name__, "rows_in": map_rows, "rows_out": reduced}
            if isinstance(op, Deduplicate):
                duplicates = map_rows - reduced
                wide_entry.update(rows_dropped=duplicates, dropped_by_reason={"duplicate": duplicates})
            elif isinstance(op, GroupAggregate | GroupApply):
                wide_entry["groups"] = reduced
        stage = {
            "stage": name,
            "fingerprint": fingerprint[:16],
            "tasks": len(tasks),
            "tasks_resumed": skipped,
            "task_retries": retried,
            "rows_in": rows_in,
            "rows_out": sum(m["rows_out"] for m in markers),
            "rows_dropped": duplicates + sum(op["rows_dropped"] for op in ops),
            "rows_rejected": read_rejected + sum(op["rows_rejected"] for op in ops),
            "rows_read_rejected": read_rejected,
            "bytes_out": sum(m["bytes_out"] for m in markers),
            "task_seconds": round(sum(m["seconds"] for m in markers), 3),
            "wall_seconds": round(wall, 3),
            "ops": ops,
            **({"wide": wide_entry} if wide_entry else {}),
            "counters": user,
            "quarantine_files": [m["quarantine"]["path"] for m in markers if m.get("quarantine")],
        }
        self.stages.append(stage)
        log.info(
            "stage %s: %d tasks (%d resumed), rows in %d → out %d, dropped %d, rejected %d, %.2fs",
            name,
            len(tasks),
            skipped,
            stage["rows_in"],
            stage["rows_out"],
            stage["rows_dropped"],
            stage["rows_rejected"],
            wall,
        )

    # -- inputs -----------------------------------------------------------------------------------------
    def _source(self, source: ReadFiles | FromTable) -> tuple[list[Shard], str, int]:
        """Shards of a source, its fingerprint and its estimated in-memory bytes (listed once per job)."""
        if id(source) not in self._sources:
            self._sources[id(source)] = self._list_source(source)
        return self._sources[id(source)]

    def _list_source(self, source: ReadFiles | FromTable) -> tuple[list[Shard], str, int]:
        if isinstance(source, FromTable):
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
            shards = list_shards(files, "parquet")
            return shards, digest, source.table.nbytes
        shards = list_shards(list(source.paths), source.format, approx_shard_bytes=source.approx_shard_bytes)
        stats = {}
        for shard in shards:
            if shard.path not in stats:
                stats[shard.path] = file_stat(shard.path)
        estimate = sum(estimated_bytes(path, size, source.format) for path, (size, _) in stats.items())
        if source.format == "parquet" and len(stats) <= FOOTER_ESTIMATE_MAX_FILES:
            self._column_bytes[id(source)] = parquet_column_bytes(list(stats))
        # one schema for all files, decided from footers/first blocks before any task (zephyr.io.input_schema)
        planned = (
            None
            if source.schema is not None
            else plan_input_schema(shards, unify=source.unify_schemas, columns=source.columns)
        )
        self._input_schemas[id(source)] = planned
        # size and version stamp (mtime / ETag): a same-size edit in place must not resume the old output
        source_fp = fingerprint_of(
            source, [(s, *stats[s.path]) for s in shards], None if planned is None else planned.to_string()
        )
        return shards, source_fp, estimate

    def _estimate(self, segment: Segment, columns: tuple[str, ...] | None = None) -> int:
        """Estimated in-memory bytes a segment reads: from Parquet footers (only ``columns``, or the source's
        own projection) when available, else file sizes × a per-format expansion factor."""
        if segment.source is not None:
            shards, _, estimate = self._source(segment.source)
            per_column = self._column_bytes.get(id(segment.source))
            if per_column is not None:
                wanted = columns or getattr(segment.source, "columns", None)
                return sum(v for k, v in per_column.items() if wanted is None or k in wanted)
            return estimate
        return sum(self._estimate(up) for up in segment.upstream)

    def plan_estimate(self, segment: Segment, consumer=None) -> int:
        """Bytes the whole plan reads from its sources (decides whether a job is small)."""
        if segment.source is not None:
            return self._estimate(segment, _pushdown_columns(segment, consumer))
        return sum(self.plan_estimate(up, segment.wide) for up in segment.upstream)

    def prepare(self, segment: Segment) -> None:
        """Pick the executor for this plan: a ``local`` job whose inputs are estimated below
        ``small_job_bytes`` runs in this process, where starting worker processes would cost more than the
        work (outputs are identical either way)."""
        options = self.options
        if options.executor == "local" and options.small_job_bytes_value > 0:
            estimate = self.plan_estimate(segment)
            if estimate < options.small_job_bytes_value:
                from zephyr.executors.inprocess import InProcessExecutor

                log.info(
                    "small job: estimated %d input bytes < small_job_bytes %d: running in-process",
                    estimate,
                    options.small_job_bytes_value,
                )
                self._executor = InProcessExecutor()

    @property
    def executor(self) -> Executor:
        if self._executor is None:
            self._executor = make_executor(self.options)
        return self._executor

    def _partitions_for(self, estimated_bytes: int) -> int:
        target = Budget(self.options.memory_budget_bytes).partition_target_bytes
        partitions = max(1, min(MAX_PARTITIONS, math.ceil(estimated_bytes / target)))
        log.info(
            "partitions: %d = ceil(estimated %d bytes / target %d bytes per partition "
            "(min(budget/4, %d MiB)))",
            partitions,
            estimated_bytes,
            target,
            PARTITION_TARGET_CAP >> 20,
        )
        return partitions

    def _map_side(self, segment: Segment):
        """Run the upstream segment(s) as shuffle map stages; return what the reduce stage needs."""
        op = segment.wide
        if isinstance(op, Sort):
            return self._sort_map_side(segment, op)
        estimate = sum(self._estimate(up, _pushdown_columns(up, op)) for up in segment.upstream)
        if isinstance(op, Reshard):
            partitions = op.num_shards
        else:
            partitions = op.num_partitions or self._partitions_for(estimate)
        if isinstance(op, GroupAggregate):
            decomposable = is_decomposable(op.aggs)
            combine = PartialAggregate(op.keys, op.aggs) if decomposable else None
            specs = [ShuffleSpec("hash", partitions, op.keys, combine=combine)]
            reducer = GroupAggregateReducer(op.keys, op.aggs, partial=decomposable)
        elif isinstance(op, GroupApply):
            specs = [ShuffleSpec("hash", partitions, op.keys, sort_by=op.sort_by)]
            reducer = GroupApplyReducer(op.keys, op.sort_by, op.fn)
        elif isinstance(op, Deduplicate):
            specs = [ShuffleSpec("hash", partitions, op.keys, combine=FirstOccurrence(op.keys))]
            reducer = DeduplicateReducer(op.keys)
        elif isinstance(op, Join):
            specs = [
                ShuffleSpec("hash", partitions, op.left_on),
                ShuffleSpec("hash", partitions, op.right_on),
            ]
            reducer = JoinReducer(op.left_on, op.right_on, op.how, op.suffix)
        elif isinstance(op, Reshard):
            specs = [ShuffleSpec("round_robin", partitions)]
            reducer = ConcatReducer()
        else:
            raise ConfigError(f"no shuffle for {type(op).__name__}")
        runs, schemas, fingerprints = [], [], []
        map_rows = 0  # what the wide op receives: rows written to the shuffle before any map-side combine
        for upstream, spec in zip(segment.upstream, specs):
            result = self.run_segment(
                upstream,
                ("shuffle", cloudpickle.dumps(spec)),
                lambda d, spec=spec: ShuffleOutput(spec, f"{d}/runs"),
                read_columns=_pushdown_columns(upstream, op),
            )
            runs.append([run for m in result.markers for run in m["runs"]])
            map_rows += sum(m["rows_out"] for m in result.markers)
            schemas.append(next((m["schema"] for m in result.markers if m.get("schema")), None))
            fingerprints.append(result.fingerprint)
        inputs = {"runs": runs, "schemas": schemas}
        return reducer, inputs, partitions, fingerprint_of(*fingerprints), estimate, map_rows

    def _sort_map_side(self, segment: Segment, op: Sort):
        upstream = segment.upstream[0]
        if upstream.source is None or upstream.narrow:
            # Computed rows: materialize them once, then sample and partition the files (no recompute).
            result = self.run_segment(
                upstream, ("materialize",), lambda d: SinkOutput(f"{d}/data", "parquet")
            )
            files = [f for m in result.markers for f in m["files"]]
            if not files:
                empty = {"runs": [[]], "schemas": [None]}
                return SortReducer(tuple(zip(op.by, op.descending))), empty, 1, result.fingerprint, 0, 0
            upstream = Segment(source=ReadFiles(tuple(files), "parquet"))
        sample = self.run_segment(
            upstream, ("sample", op.by), lambda d: SampleOutput(f"{d}/sample"), read_columns=op.by
        )
        estimate = self._estimate(upstream)
        partitions = op.num_partitions or self._partitions_for(estimate)
        sample_files = [m["sample"] for m in sample.markers if m.get("sample")]
        if sample_files:
            table = pa.concat_tables([_read_url(f) for f in sample_files])
            boundaries = range_boundaries(table, op.by[0], partitions, descending=op.descending[0])
        else:
            boundaries = pa.array([])
        spec = ShuffleSpec("range", partitions, op.by, op.descending, boundaries=boundaries)
        result = self.run_segment(
            upstream, ("shuffle", cloudpickle.dumps(spec)), lambda d: ShuffleOutput(spec, f"{d}/runs")
        )
        inputs = {"runs": [[run for m in result.markers for run in m["runs"]]], "schemas": [None]}
        reducer = SortReducer(tuple(zip(op.by, op.descending)))
        map_rows = sum(m["rows_out"] for m in result.markers)
        return reducer, inputs, partitions, result.fingerprint, estimate, map_rows


def _pushdown_columns(segment: Segment, consumer=None) -> tuple[str, ...] | None:
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


def _last_line(error: str) -> str:
    """The exception line of a formatted traceback: what a user reads first."""
    lines = [line for line in error.strip().splitlines() if line.strip()]
    return lines[-1] if lines else error


def _read_url(url: str) -> pa.Table:
    fs, path = fsspec.core.url_to_fs(url)
    with fs.open(path, "rb") as f:
        return pq.ParquetFile(f).read()  # not read_table: it imports pyarrow.dataset (+ pandas), ~0.5 s


# -- actions ------------------------------------------------------------------------------------------------
def _read_parts(files: list[str]) -> pa.Table | None:
    tables = [_read_url(f) for f in files]
    tables = [t for t in tables if t.num_rows]
    if not tables:
        return None
    return pa.concat_tables(tables, promote_options="permissive")


def run_write(
    ops: tuple[Op, ...], directory: str, fmt: str, compression: str | None, options: ExecutionOptions
) -> WriteResult:
    from zephyr.io.paths import check_output_dir
    from zephyr.io.publish import publish_dense, remove_stale_parts

    check_output_dir(directory)  # a read-only or blocked output fails here, not in every task
    segment = build_plan(ops)
    with Job(options) as job:
        job.prepare(segment)
        output = SinkOutput(directory.rstrip("/"), fmt, compression, staged=True)
        result = job.run_segment(segment, ("sink", directory, fmt, compression), lambda d: output)
        files = publish_dense(directory, result.markers, result.marker_paths, fmt, compression)
        remove_stale_parts(directory, files)
        return WriteResult(files=files, stats=job.write_stats())


def run_to_arrow(ops: tuple[Op, ...], options: ExecutionOptions) -> pa.Table:
    segment = build_plan(ops)
    with Job(options) as job:
        job.prepare(segment)
        result = job.run_segment(segment, ("to_arrow",), lambda d: SinkOutput(f"{d}/output", "parquet"))
        job.write_stats()
        table = _read_parts([f for m in result.markers for f in m["files"]])
    if table is not None:
        return table
    schemas = [m["schema"] for m in result.markers if m.get("schema")]
    return schema_from_text(schemas[0]).empty_table() if schemas else pa.table({})


def run_count(ops: tuple[Op, ...], options: ExecutionOptions) -> int:
    segment = build_plan(ops)
    with Job(options) as job:
        job.prepare(segment)
        result = job.run_segment(segment, ("count",), lambda d: SinkOutput(f"{d}/count", "count"))
        job.write_stats()
        return sum(m["rows_out"] for m in result.markers)


def run_materialize(ops: tuple[Op, ...], directory: str | None, options: ExecutionOptions) -> tuple[Op, ...]:
    """Runs ``ops`` once into Parquet and returns the plan that reads it back (the facade wraps it)."""
    scratch = None
    if directory is None:
        if options.work_dir is None:
            directory = scratch = tempfile.mkdtemp(prefix="zephyr-materialized-")
        else:
            plan_fp = fingerprint_of(*ops)[:16]
            directory = f"{options.work_dir.rstrip('/')}/materialized/{plan_fp}"
    try:
        result = run_write(ops, directory, "parquet", None, options)
    except BaseException:
        if scratch is not None:
            shutil.rmtree(scratch, ignore_errors=True)
        raise
    if not result.files:
        if scratch is not None:
            shutil.rmtree(scratch, ignore_errors=True)
        return (FromTable(pa.table({}), 1),)
    source = ReadFiles(tuple(result.files), "parquet")
    if scratch is not None:  # a scratch copy lives as long as some Dataset still reads it (or the process)
        weakref.finalize(source, shutil.rmtree, scratch, True)
    return (source,)
