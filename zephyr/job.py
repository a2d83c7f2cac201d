"""The job driver: turns a plan into stages of tasks, runs them on an executor, resumes, retries, accounts.

Stages run depth-first: a wide op first runs its upstream segment(s) as the map side of a shuffle, then its
own reduce tasks (one per partition). Per stage the driver:

1. computes the stage fingerprint (input + ops + output layout) and its directory ``stage-<fp16>``;
2. skips every task whose marker exists with that fingerprint, names only the stage's own folders and whose
   files still hold the bytes it records (``tasks.finished_marker``: resume after a crash or a kill);
3. runs the others, retrying failures up to ``max_retries`` extra times; a task that still fails stops the
   job with a ``TaskError`` naming the stage, the input shard and the last error. The stage itself (ops,
   reducer, output) goes to the workers through the executor (``executors.base.Shared``), never through the
   work directory, which holds fingerprints and data only;
4. sums the task markers into the stage's stats (rows in/out/dropped/quarantined, bytes, seconds, counters).

What runs is decided in ``zephyr.physical``: each wide op's shuffle specs and reducer (its table
``EXCHANGES``), partition counts (from the estimated input bytes and the per-task ``Budget``, never from the
worker count, so outputs are identical for any number of workers) and column pushdown; the small-job rule
in ``zephyr.physical.runs_in_process``, which clients share (``zephyr.read_plan``).
This module only runs those decisions, and never imports the ``Dataset`` facade.

``_JobInputs``: the sources of one job, each listed once: shards, fingerprint, planned schema and estimated size.

The driver (``zephyr.job``) asks for a source's shards and fingerprint when it runs the stage that reads it,
and the planner (``zephyr.physical``) asks for its size when it sizes partitions or decides a small job; both
answers come from one listing, so a file's size and version stamp are read once per job.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import tempfile
import time
import uuid
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

import cloudpickle
import fsspec
import pyarrow as pa
import pyarrow.parquet as pq

from zephyr import job_stats, physical, progress
from zephyr.budget import EXPANSION, Budget
from zephyr.errors import ConfigError, TaskError
from zephyr.executors import make_executor
from zephyr.executors.base import Executor, Shared, explain_worker_death
from zephyr.io.paths import atomic_write, is_local, public_path
from zephyr.io.sources import Shard, list_shards, plan_input_schema
from zephyr.job_stats import WriteResult
from zephyr.ops import FromTable, Op, ReadFiles, Sort, WithRowIndex
from zephyr.options import ExecutionOptions
from zephyr.physical import MAX_PARTITIONS as MAX_PARTITIONS
from zephyr.physical import SourceSize
from zephyr.plan import Segment, build_plan, fingerprint_of, table_digest
from zephyr.shuffle.runs import INDEX_VERSION, Run, coalesce_plan
from zephyr.shuffle.writer import ShuffleSpec, boundary_array, range_boundaries
from zephyr.tasks import (
    CoalesceOutput,
    SampleOutput,
    ShuffleOutput,
    SinkOutput,
    StageSpec,
    TaskSpec,
    finished_marker,
    run_task,
    schema_from_text,
)

log = logging.getLogger(__name__)
T = TypeVar("T")


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
        protocols = self.fs.protocol if isinstance(self.fs.protocol, tuple) else (self.fs.protocol,)
        self._in_memory = "memory" in protocols  # this process's memory: no worker process sees it
        if self._in_memory and options.executor != "inprocess" and not isinstance(options.executor, Executor):
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
        self.inputs = _JobInputs(self.fs, self.root)
        self._size_of = self.inputs.size_of
        self.started = time.time()
        self._budget = Budget(options.memory_budget_bytes)
        self._progress = progress.enabled(options.progress)
        self._lock = contextlib.ExitStack()
        self._bar: contextlib.AbstractContextManager | None = None

    def __enter__(self) -> Job:
        if not self.temporary:  # two runs in one work dir would rewrite each other's markers and spills
            from zephyr.io import claim

            self._lock.enter_context(claim.held(f"{self.root}/lock.json", "the work dir", self.root))
        if progress.current() is None and self._progress:  # from Python, no command's bar: one for the job
            self._bar = progress.command("zephyr", True)
            self._bar.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
        if self._bar is not None:
            self._bar.__exit__(*exc)

    def close(self) -> None:
        if self._executor is not None and self._executor is not self.options.executor:
            self._executor.close()
        self._lock.close()
        if self.temporary:
            shutil.rmtree(self.root, ignore_errors=True)

    # -- stats ------------------------------------------------------------------------------------------
    def stats(self) -> dict:
        # the rows in the quarantine files: a row two stages set aside (a sort's sample and map passes read the
        # same input) is stored, and counted, once
        quarantined = sum(s["quarantine_rows"] for s in self.stages)
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
        coalesce: bool = False,
    ) -> StageResult:
        """Run ``segment`` with the output ``output_for(stage_dir)``; ``output_key`` describes that output's
        layout for the fingerprint (everything but its directory). ``coalesce``: a reduce side may run
        adjacent partitions in one task (``reduce_groups``), for outputs whose file layout is the engine's
        own (a shuffle, ``to_arrow``, ``count``, ``materialize``), never a with_row_index after it (its row
        numbers are per task)."""
        if segment.source is not None:
            shards, source_fp = self.inputs.shards(segment.source)
            estimate = self._size_of(segment.source).bytes
            base_fp = fingerprint_of("source", source_fp, read_columns, *segment.narrow)
            reducer, map_rows = None, None
            source = segment.source
            reads = tuple(s.path for s in shards) if isinstance(source, ReadFiles) else ()
            read = dict(
                read_columns=read_columns or (source.columns if isinstance(source, ReadFiles) else None),
                read_schema=source.schema if isinstance(source, ReadFiles) else None,
                input_schema=self.inputs.schema(source),
                on_error=source.on_error if isinstance(source, ReadFiles) else "raise",
            )
            if isinstance(source, ReadFiles):  # rows wider than a read batch: refused before any task
                physical.check_row_width(self._size_of(source), read["read_columns"], self._budget)
            units = [{"shard": s, "description": s.describe()} for s in shards]
        else:
            side = self._map_side(segment)
            reducer, map_rows, estimate = side.reducer, side.map_rows, side.estimate
            base_fp = fingerprint_of("reduce", side.fingerprint, cloudpickle.dumps(reducer), *segment.narrow)
            read, reads = {"inputs": side.inputs}, None
            numbered = any(isinstance(op, WithRowIndex) for op in segment.narrow)
            groups = reduce_groups(side.partitions, side.stored, self._budget, coalesce and not numbered)
            if len(groups) < side.partitions:
                base_fp = fingerprint_of(base_fp, *groups)
            units = [
                {"partitions": (lo, hi), "description": f"partitions {lo}-{hi - 1} of {segment.name}"}
                if hi - lo > 1
                else {"partitions": (lo, hi), "description": f"partition {lo} of {segment.name}"}
                for lo, hi in groups
            ]
        fingerprint = fingerprint_of(base_fp, output_key)
        output = output_for(f"{self.root}/stage-{fingerprint[:16]}")
        stage = StageSpec(fingerprint, segment.name, tuple(segment.narrow), output, reducer=reducer, **read)
        wide = (segment.wide, map_rows) if reducer else None
        markers, tasks = self._run_stage(stage, units, (estimate, reads), wide)
        return StageResult(fingerprint, markers, estimate, tuple(t.marker_path for t in tasks))

    def _run_stage(
        self,
        stage: StageSpec,
        units: list[dict],
        work: tuple[int, tuple[str, ...] | None],
        wide: tuple | None = None,
    ) -> tuple[list[dict], list[TaskSpec]]:
        """Run one task of ``stage`` per entry of ``units`` (the ``TaskSpec`` fields that differ between its
        tasks; its marker and quarantine file are the task's own under the stage's folders), append the
        stage's record (``zephyr.job_stats.stage_record``) and log its one-line summary. Returns the
        markers and the tasks, in task order."""
        fingerprint, name = stage.fingerprint, stage.name
        stage_dir = f"{self.root}/stage-{fingerprint[:16]}"
        tasks = [
            TaskSpec(
                fingerprint=fingerprint,
                index=i,
                marker_path=f"{stage_dir}/_done/task-{i:05d}.json",
                quarantine_path=f"{self.quarantine_root}/stage-{fingerprint[:16]}/task-{i:05d}.parquet",
                budget_bytes=self.options.memory_budget_bytes,
                **unit,
            )
            for i, unit in enumerate(units)
        ]
        self.fs.makedirs(f"{stage_dir}/_done", exist_ok=True)
        # a key of its own: a stage of the same fingerprint in another work directory writes elsewhere
        shared = Shared(f"{fingerprint[:16]}-{uuid.uuid4().hex[:12]}", stage)
        markers, timing = self._run_tasks(name, shared, tasks, work)
        record = job_stats.stage_record(name, fingerprint, markers, len(tasks), timing, wide)
        self.stages.append(record)
        log.info(
            "stage %s: %d tasks (%d resumed), rows in %d → out %d, dropped %d, quarantined %d, %.2fs",
            name,
            len(tasks),
            timing[1],
            record["rows_in"],
            record["rows_out"],
            record["rows_dropped"],
            record["rows_quarantined"],
            timing[0],
        )
        return markers, tasks

    def _run_tasks(
        self, name: str, shared: Shared, tasks: list[TaskSpec], work: tuple[int, tuple[str, ...] | None]
    ) -> tuple[list[dict], tuple[float, int, int]]:
        """Run the tasks without a finished marker, retrying failures; ``work`` is what the progress bar
        shows of the stage (``zephyr.progress.Display.stage``): its estimated bytes and the files it reads.
        Returns the markers in task order and (seconds, tasks resumed, tries retried)."""
        started = time.perf_counter()
        markers: dict[int, dict] = {}
        for task in tasks:
            marker = finished_marker(task, shared.value)
            if marker is not None:
                markers[task.index] = marker
        todo = [t for t in tasks if t.index not in markers]
        skipped = len(tasks) - len(todo)
        if skipped:
            log.info("stage %s: %d of %d tasks already done (resumed)", name, skipped, len(tasks))
        display = progress.current()
        if display is not None and todo:
            display.stage(name, len(todo), work[0] * len(todo) // len(tasks), work[1])
        tries: dict[int, int] = {}
        retried = 0
        while todo:
            failed: list[TaskSpec] = []
            for position, outcome in self.executor.run(run_task, todo, shared):
                task = todo[position]
                if outcome.ok:
                    markers[task.index] = outcome.value
                    if display is not None:
                        display.advance(outcome.value.get("rows_in", 0))
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
        return [markers[t.index] for t in tasks], (time.perf_counter() - started, skipped, retried)

    # -- inputs -----------------------------------------------------------------------------------------
    def prepare(self, segment: Segment) -> None:
        """Pick the executor for this plan: a small ``local`` job runs in this process (``zephyr.read_plan``
        decides; outputs are identical either way). Other executors skip the sizing."""
        options = self.options
        if options.executor == "local" and options.small_job_bytes_value > 0:
            estimated = physical.plan_bytes(segment, self._size_of)
            if physical.runs_in_process(options, estimated):
                from zephyr.executors.base import InProcessExecutor

                log.info(
                    "small job: estimated %d input bytes < small_job_bytes %d: running in-process",
                    estimated,
                    options.small_job_bytes_value,
                )
                self._executor = InProcessExecutor()

    @property
    def executor(self) -> Executor:
        if self._executor is None:
            self._executor = make_executor(self.options)
        return self._executor

    # -- the map side of a shuffle ----------------------------------------------------------------------
    def _map_side(self, segment: Segment) -> MapSide:
        """Run the upstream segment(s) as shuffle map stages, as ``zephyr.physical`` plans them."""
        op = segment.wide
        if isinstance(op, Sort):
            return self._sort_map_side(segment, op)
        estimate = physical.wide_input_bytes(segment, self._size_of)
        plan = physical.exchange(op, physical.partition_count(op, estimate, self._budget))
        results = [
            self._run_shuffle(upstream, spec, physical.pushdown_columns(upstream, op))
            for upstream, spec in zip(segment.upstream, plan.specs)
        ]
        runs = [
            self._coalesce(result, plan.partitions, up.name) for up, result in zip(segment.upstream, results)
        ]
        return MapSide.of(plan, results, estimate, runs)

    def _run_shuffle(
        self, upstream: Segment, spec: ShuffleSpec, read_columns: tuple[str, ...] | None = None
    ) -> StageResult:
        """Run ``upstream`` as map tasks writing the shuffle ``spec``."""
        return self.run_segment(
            upstream,
            ("shuffle", INDEX_VERSION, cloudpickle.dumps(spec)),
            lambda d: ShuffleOutput(spec, f"{d}/runs"),
            read_columns=read_columns,
            coalesce=spec.kind != "round_robin",  # round robin deals rows by task: keep the tasks
        )

    def _coalesce(self, result: StageResult, partitions: int, name: str) -> list[Run]:
        """The runs a shuffle's reducers read: its map tasks' runs, or, when ``shuffle.runs.coalesce_plan``
        says so, those of each group of map tasks coalesced into one (a stage of its own: a task per group,
        with markers and checksums like any task; a group whose map tasks' runs changed reruns)."""
        markers = result.markers
        runs = [Run(run) for marker in markers for run in marker["runs"]]
        remote = not is_local(self.fs) and not self._in_memory
        groups = coalesce_plan(
            [len(marker["runs"]) for marker in markers],
            sum(marker["bytes_out"] for marker in markers),
            partitions,
            self.options.num_workers,
            self._budget,
            mode=self.options.coalesce_runs,
            remote=remote,
        )
        if not groups:
            return runs
        fingerprint = fingerprint_of("coalesce", result.fingerprint, *((g.start, g.stop) for g in groups))
        output = CoalesceOutput(f"{self.root}/stage-{fingerprint[:16]}/runs", partitions)
        stage = StageSpec(fingerprint, f"{name} → coalesce runs", (), output)
        units = []
        for group in groups:
            mine = [markers[t] for t in group]
            units.append(
                {
                    "description": f"runs of map tasks {group.start}-{group.stop - 1} of {name}",
                    "runs": tuple(Run(run) for marker in mine for run in marker["runs"]),
                    "checksums": {
                        path: marker["checksums"][path]
                        for marker in mine
                        for run in marker["runs"]
                        for path in (run, run[: -len(".data")] + ".index")
                    },
                    "rows": sum(marker["rows_out"] for marker in mine),
                }
            )
        done, _ = self._run_stage(stage, units, (0, None))  # not in the plan: no bar bytes
        return [Run(marker["runs"][0], marker["slots"]) for marker in done if marker["slots"]]

    def _sort_map_side(self, segment: Segment, op: Sort) -> MapSide:
        """Sample the keys, cut range boundaries, then range-partition (computed rows are written once
        first, ``zephyr.physical.materializes_before_sort``)."""
        upstream = segment.upstream[0]
        if physical.materializes_before_sort(upstream):
            result = self.run_segment(
                upstream, ("materialize",), lambda d: SinkOutput(f"{d}/data", "parquet")
            )
            files = [f for m in result.markers for f in m["files"]]
            if not files:
                empty = physical.exchange(op, 1)
                return MapSide(empty.reducer, {"runs": [[]], "schemas": [None]}, 1, result.fingerprint, 0, 0)
            upstream = Segment(source=ReadFiles(tuple(files), "parquet"))
        estimate = physical.read_bytes(upstream, self._size_of)
        plan = physical.exchange(op, physical.partition_count(op, estimate, self._budget))
        if op.boundaries is not None:  # the caller's split points: no sample, cuts whatever the input layout
            boundaries = boundary_array(op.boundaries)
        else:
            sample = self.run_segment(
                upstream, ("sample", op.by), lambda d: SampleOutput(f"{d}/sample"), read_columns=op.by
            )
            sample_files = [m["sample"] for m in sample.markers if m.get("sample")]
            if sample_files:
                table = pa.concat_tables([_read_url(f) for f in sample_files])
                boundaries = range_boundaries(table, op.by[0], plan.partitions, descending=op.descending[0])
            else:
                boundaries = boundary_array(
                    ()
                )  # no row: one partition (``pa.array([])`` would import pandas)
        result = self._run_shuffle(upstream, physical.with_boundaries(plan.specs[0], boundaries))
        runs = self._coalesce(result, plan.partitions, upstream.name)
        side = MapSide.of(plan, [result], estimate, [runs])
        side.inputs["schemas"] = [None]
        # a sort's one map side keeps its own fingerprint, unwrapped, as existing work directories have it
        side.fingerprint = result.fingerprint
        return side


@dataclass
class MapSide:
    """What a reduce stage needs from its finished map side(s)."""

    reducer: object
    inputs: dict
    """``runs``: per upstream, the runs its reducers read (``shuffle.runs.Run``: its map tasks', or coalesced);
    ``schemas``: per upstream, its output schema."""
    partitions: int
    fingerprint: str
    estimate: int
    map_rows: int
    """What the wide op receives: rows written to the shuffle before any map-side combine."""
    stored: int = 0
    """Bytes the map side wrote (its runs): what ``reduce_groups`` sizes the reduce tasks from."""

    @classmethod
    def of(
        cls, plan: physical.Exchange, results: list[StageResult], estimate: int, runs: list[list[Run]]
    ) -> MapSide:
        schemas = [next((m["schema"] for m in r.markers if m.get("schema")), None) for r in results]
        map_rows = sum(m["rows_out"] for r in results for m in r.markers)
        fingerprint = fingerprint_of(*(r.fingerprint for r in results))
        inputs = {"runs": runs, "schemas": schemas}
        stored = sum(m["bytes_out"] for r in results for m in r.markers)
        return cls(plan.reducer, inputs, plan.partitions, fingerprint, estimate, map_rows, stored)


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


def _last_line(error: str) -> str:
    """The exception line of a formatted traceback: what a user reads first."""
    lines = [line for line in error.strip().splitlines() if line.strip()]
    return lines[-1] if lines else error


def _read_url(url: str) -> pa.Table:
    fs, path = fsspec.core.url_to_fs(url)
    with fs.open(path, "rb") as f:
        return pq.ParquetFile(f).read()  # not read_table: it imports pyarrow.dataset (+ pandas), ~0.5 s


# -- actions ------------------------------------------------------------------------------------------------
def run_write(
    ops: tuple[Op, ...],
    directory: str,
    fmt: str,
    compression: str | None,
    options: ExecutionOptions,
    *,
    overwrite: bool = False,
    side_quarantine: bool = True,
    coalesce: bool = False,
) -> WriteResult:
    """Write the plan ``ops`` into the folder ``directory`` (layout: ``zephyr.io.layout``): claimed first
    (``zephyr.io.claim``: not an input, locked, no file zephyr did not write unless ``overwrite``), staged in
    its sidecar, published whole (``zephyr.io.claim``). ``side_quarantine``: quarantined rows go to
    ``OUT.zephyr/quarantine`` when ``options`` names no folder for them; ``coalesce``: ``Job.run_segment``'s
    (a user's write keeps a file per partition)."""
    from zephyr.io import claim, layout
    from zephyr.io.claim import publish
    from zephyr.io.paths import absolute, check_output_dir

    out = absolute(directory).rstrip("/")  # tasks write it, maybe on workers in another working directory
    inputs = claim.input_paths_of(ops)
    with claim.claimed(out, inputs=inputs, overwrite=overwrite, work_dir=options.work_dir):
        check_output_dir(layout.staging_dir(out))  # a read-only or blocked location fails here, not in tasks
        fs, root = fsspec.core.url_to_fs(out)
        if fs.isdir(root):
            check_output_dir(out)  # the swap moves it: it must be writable too
        if side_quarantine and options.quarantine_dir is None:
            options = options.replace(quarantine_dir=layout.quarantine_dir(out))
        segment = build_plan(ops)
        with Job(options) as job:
            job.prepare(segment)
            output = SinkOutput(out, fmt, compression, staging=layout.staging_dir(out))
            result = job.run_segment(
                segment, ("sink", absolute(directory), fmt, compression), lambda d: output, coalesce=coalesce
            )
            files = publish(out, result.markers, result.marker_paths, fmt, compression)
            if (display := progress.current()) is not None:
                display.wrote(files)
            staged = [(f, m.get("checksums") or {}) for m in result.markers for f in m.get("files", [])]
            checksums = {new: records[old] for new, (old, records) in zip(files, staged) if old in records}
            return WriteResult(files=files, stats=job.write_stats(), checksums=checksums)


def _run_action(
    ops: tuple[Op, ...], options: ExecutionOptions, fmt: str, collect: Callable[[list[dict]], T]
) -> T:
    """Run the plan ``ops`` into Parquet parts in the work directory (``fmt="count"``: counting rows, writing
    nothing), write the job's stats and return ``collect(markers)``, called before a temporary work
    directory goes."""
    segment = build_plan(ops)
    with Job(options) as job:
        job.prepare(segment)
        key = "count" if fmt == "count" else "to_arrow"
        result = job.run_segment(segment, (key,), lambda d: SinkOutput(f"{d}/output", fmt), coalesce=True)
        job.write_stats()
        return collect(result.markers)


def _table_of(markers: list[dict]) -> pa.Table:
    """The rows of a job's Parquet parts (``to_arrow``), or an empty table of the planned schema."""
    tables = [t for t in (_read_url(f) for m in markers for f in m["files"]) if t.num_rows]
    if tables:
        return pa.concat_tables(tables, promote_options="permissive")
    schemas = [m["schema"] for m in markers if m.get("schema")]
    return schema_from_text(schemas[0]).empty_table() if schemas else pa.table({})


def run_to_arrow(ops: tuple[Op, ...], options: ExecutionOptions) -> pa.Table:
    return _run_action(ops, options, "parquet", _table_of)


def run_count(ops: tuple[Op, ...], options: ExecutionOptions) -> int:
    return _run_action(ops, options, "count", lambda markers: sum(m["rows_out"] for m in markers))


def run_materialize(ops: tuple[Op, ...], directory: str | None, options: ExecutionOptions) -> tuple[Op, ...]:
    """Runs ``ops`` once into Parquet and returns the plan that reads it back (the facade wraps it)."""
    scratch = None
    chosen = directory is not None
    if directory is None:
        if options.work_dir is None:
            scratch = tempfile.mkdtemp(prefix="zephyr-materialized-")
            directory = f"{scratch}/data"  # its sidecar data.zephyr goes with the scratch folder
        else:
            plan_fp = fingerprint_of(*ops)[:16]
            directory = f"{options.work_dir.rstrip('/')}/materialized/{plan_fp}"
    try:
        # a folder the engine picked is its own: a rerun of the same plan in the same work dir replaces it
        result = run_write(
            ops,
            directory,
            "parquet",
            None,
            options,
            overwrite=not chosen,
            side_quarantine=False,
            coalesce=True,
        )
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


Source = ReadFiles | FromTable


class _JobInputs:
    """Per source (by identity): its shards and fingerprint, the schema every task casts to, its size."""

    def __init__(self, fs, root: str):
        self.fs = fs
        self.root = root
        """The job's work directory: in-memory tables are staged under ``inputs/``."""
        self._listed: dict[int, tuple[list[Shard], str]] = {}
        self._sizes: dict[int, SourceSize] = {}
        self._schemas: dict[int, pa.Schema | None] = {}

    def shards(self, source: Source) -> tuple[list[Shard], str]:
        """Shards of a source and its fingerprint (listed on first use)."""
        if id(source) not in self._listed:
            listed = self._stage_table(source) if isinstance(source, FromTable) else self._list_files(source)
            self._listed[id(source)] = listed
        return self._listed[id(source)]

    def size_of(self, source: Source) -> SourceSize:
        """The source's estimated size (``zephyr.physical.SizeOf``)."""
        self.shards(source)
        return self._sizes[id(source)]

    def schema(self, source: Source) -> pa.Schema | None:
        """The schema planned for all files of a source before any task (None: the files' own)."""
        return self._schemas.get(id(source))

    def _list_files(self, source: ReadFiles) -> tuple[list[Shard], str]:
        shards, stats = physical.list_source_files(source)
        self._sizes[id(source)] = physical.size_of_files(source, shards, stats)
        # one schema for all files, decided from footers/first blocks before any task (zephyr.io.schema)
        planned = (
            None
            if source.schema is not None
            else plan_input_schema(shards, unify=source.unify_schemas, columns=source.columns)
        )
        self._schemas[id(source)] = planned
        # size and version stamp (mtime / ETag): a same-size edit in place must not resume the old output
        source_fp = fingerprint_of(
            source, [(s, *stats[s.path]) for s in shards], None if planned is None else planned.to_string()
        )
        return shards, source_fp

    def _stage_table(self, source: FromTable) -> tuple[list[Shard], str]:
        """Write an in-memory table as ``num_shards`` Parquet files in the work directory (once per content)."""
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
        self._sizes[id(source)] = SourceSize(source.table.nbytes, None, source.num_shards, source.num_shards)
        return list_shards(files, "parquet"), digest
