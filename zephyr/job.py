"""The job driver: turns a plan into stages of tasks, runs them on an executor, resumes, retries, accounts.

Stages run in the order ``zephyr.physical.walk`` yields them (depth-first: a wide op's upstream segment(s)
as the map side of a shuffle, then its reduce tasks, one or more adjacent partitions each); the driver sends
back what each teaches the walk (a sort sample's boundaries, a map side's results). Per stage the driver:

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
in ``zephyr.physical.runs_in_process``, which clients share (``zephyr.physical.plan_read``).
This module only runs those decisions, and never imports the ``Dataset`` facade.

The job's sources (``physical.Sources``, with its work directory) are listed once: the driver asks for a
source's shards and fingerprint when it runs the stage that reads it, and the planner for its size when it
sizes partitions or decides a small job; both answers come from one listing, so a file's size and version
stamp are read once per job.
"""

from __future__ import annotations

import contextlib
import json
import logging
import shutil
import signal
import tempfile
import time
import uuid
import weakref
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TypeVar

import cloudpickle
import fsspec
import pyarrow as pa
import pyarrow.parquet as pq

from zephyr import job_stats, physical, progress
from zephyr.budget import Budget
from zephyr.config import format_bytes
from zephyr.errors import ConfigError, TaskError
from zephyr.executors import make_executor
from zephyr.executors.base import Executor, InProcessExecutor, Outcome, Shared
from zephyr.io.paths import is_local
from zephyr.job_stats import WriteResult
from zephyr.ops import FromTable, Op, ReadFiles, Sort
from zephyr.options import ExecutionOptions
from zephyr.plan import build_plan, fingerprint_of
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
    marker_files,
    run_task,
    schema_from_text,
)

log = logging.getLogger(__name__)
T = TypeVar("T")


@dataclass
class StageResult:
    """A finished stage: its tasks' markers and, in task order, where each was read from; a shuffle's map
    stage also has the ``runs`` its reducers read (its tasks', or coalesced: ``Job._coalesce``)."""

    fingerprint: str
    markers: list[dict]
    marker_paths: tuple[str, ...] = ()
    runs: list[Run] | None = None


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
            self.quarantine_root = f"{tempfile.gettempdir()}/zephyr-quarantine-{uuid.uuid4().hex[:12]}"
        else:
            self.quarantine_root = f"{self.root}/quarantine"
        # Created on first use (``executor``), after ``run`` may have picked in-process for a small job. If
        # creating it fails (an unreachable dask scheduler), ``__exit__`` still removes the temporary directory.
        self._executor: Executor | None = None
        self.stages: list[dict] = []
        self.inputs = physical.Sources(self.fs, self.root)
        self.started = time.time()
        self._budget = Budget(options.memory_budget_bytes)
        self._held = contextlib.ExitStack()  # the work dir's lock and the job's own progress bar

    def __enter__(self) -> Job:
        if not self.temporary:  # two runs in one work dir would rewrite each other's markers and spills
            from zephyr.io import claim

            self._held.enter_context(claim.held(f"{self.root}/lock.json", "the work dir", self.root))
        # from Python, no command's bar: one for the job
        if progress.current() is None and progress.enabled(self.options.progress):
            self._held.enter_context(progress.command("zephyr", True))
        return self

    def __exit__(self, *exc: object) -> None:
        if self._executor is not None and self._executor is not self.options.executor:
            self._executor.close()
        self._held.__exit__(*exc)
        if self.temporary:
            shutil.rmtree(self.root, ignore_errors=True)

    def write_stats(self) -> dict:
        """Write ``stats.json`` into the work directory and hand the stats to ``zephyr.job_stats`` (a command
        that runs several jobs reports the retries and resumed tasks of all of them)."""
        # the rows in the quarantine files: a row two stages set aside (a sort's sample and map passes read the
        # same input) is stored, and counted, once
        quarantined = sum(s["quarantine_rows"] for s in self.stages)
        executor = self.options.executor if self._executor is None else type(self._executor).__name__
        stats = {
            "seconds": round(time.time() - self.started, 3),
            "executor": str(executor),
            "workers": self.options.num_workers,
            "memory_budget_bytes": self.options.memory_budget_bytes,
            "rows_quarantined": quarantined,
            "quarantine_dir": self.quarantine_root if quarantined else None,
            **job_stats.task_totals(self.stages),
            "stages": self.stages,
        }
        job_stats.record(stats)
        if not self.temporary:
            with self.fs.open(f"{self.root}/stats.json", "w") as f:
                json.dump(stats, f, indent=1)
        if quarantined:
            log.warning("%d rows quarantined under %s", quarantined, self.quarantine_root)
        return stats

    # -- segments ---------------------------------------------------------------------------------------
    def run(self, ops: tuple[Op, ...], output: SinkOutput, *, coalesce: bool = False) -> StageResult:
        """Run the plan ``ops`` into ``output``, stage by stage as ``zephyr.physical.walk`` yields them (a small
        ``local`` job in this process: ``zephyr.physical.runs_in_process``). An output whose directory is a
        bare name (``"output"``) is a folder of the last stage's own. ``coalesce``: its reduce tasks may take
        adjacent partitions (``physical.reduce_groups``), for outputs whose file layout is the engine's own
        (``to_arrow``, ``count``, ``materialize``)."""
        segment, limit = build_plan(ops), self.options.small_job_bytes_value
        estimated = physical.plan_bytes(segment, self.inputs.size_of)
        if physical.runs_in_process(self.options, estimated):  # outputs are identical either way
            log.info("small job: estimated %d input bytes < small_job_bytes %d: in-process", estimated, limit)
            self._executor = InProcessExecutor()
        for step in physical.walk(segment, self._budget, self.inputs.size_of, coalesce=coalesce):
            step.sent = self._run_step(step, output)
        return step.sent

    def _run_step(self, step: physical.Step, output: SinkOutput):
        """Run the stage of ``step`` into ``output`` (a bare directory name: a folder of the stage's own; the
        output, folder names and all, is part of the stage's fingerprint) or into the output the step names (a
        shuffle's runs, a sort's sample, materialized Parquet): a source's shards, or the partitions of a
        reduce (over the results its map sides sent back, ``step.inputs``). Returns what the walk gets back:
        a sample's range boundaries, else the stage's result (a shuffle's with the runs its reducers read)."""
        spec = step.output
        if isinstance(spec, ShuffleSpec):
            output = ShuffleOutput(spec, "runs")
        elif spec == physical.SAMPLE:
            output = SampleOutput("sample")
        elif spec == physical.MATERIALIZE:
            output = SinkOutput("data", "parquet")
        segment, reducer, map_rows = step.segment, None, None
        name = segment.name
        if segment.source is not None:
            shards, source_fp, schema = self.inputs.listing(segment.source)
            base_fp = fingerprint_of("source", source_fp, step.read_columns, *segment.narrow)
            source, reads = segment.source, ()
            read = {"read_columns": step.read_columns, "input_schema": schema}
            if isinstance(source, ReadFiles):  # (an in-memory table is staged as Parquet of its own columns)
                columns = step.read_columns or source.columns
                read.update(read_columns=columns, read_schema=source.schema, on_error=source.on_error)
                reads = tuple(s.path for s in shards)
                # rows wider than a read batch: refused
                physical.check_row_width(self.inputs.size_of(source), columns, self._budget)
            units = [{"shard": s, "description": s.describe()} for s in shards]
        else:
            results, reducer, partitions = step.inputs, step.plan.reducer, step.plan.partitions
            markers = [m for r in results for m in r.markers]
            map_rows, stored = sum(m["rows_out"] for m in markers), sum(m["bytes_out"] for m in markers)
            if isinstance(segment.wide, Sort):  # one map side: its own fingerprint, as work dirs have it
                side_fp, schemas = results[0].fingerprint, [None]
            else:
                side_fp = fingerprint_of(*(r.fingerprint for r in results))
                schemas = [next((m["schema"] for m in r.markers if m.get("schema")), None) for r in results]
            base_fp = fingerprint_of("reduce", side_fp, cloudpickle.dumps(reducer), *segment.narrow)
            read, reads = {"inputs": {"runs": [r.runs or [] for r in results], "schemas": schemas}}, None
            groups = physical.reduce_groups(partitions, stored, self._budget, step.coalesce)
            if len(groups) < partitions:
                base_fp = fingerprint_of(base_fp, *groups)
            which = [f"partitions {lo}-{hi - 1}" if hi - lo > 1 else f"partition {lo}" for lo, hi in groups]
            units = [{"partitions": g, "description": f"{w} of {name}"} for g, w in zip(groups, which)]
        fingerprint = fingerprint_of(base_fp, INDEX_VERSION, cloudpickle.dumps(output))
        if "/" not in output.directory:
            output = replace(output, directory=f"{self.root}/stage-{fingerprint[:16]}/{output.directory}")
        stage = StageSpec(fingerprint, name, tuple(segment.narrow), output, reducer=reducer, **read)
        result = self._run_stage(
            stage, units, (step.estimate, reads), (segment.wide, map_rows) if reducer else None
        )
        if isinstance(spec, ShuffleSpec):
            result.runs = self._coalesce(result, spec.num_partitions, name)
        elif spec == physical.SAMPLE:
            files = [m["sample"] for m in result.markers if m.get("sample")]
            if not files:  # no row: one partition (``pa.array([])`` would import pandas)
                return boundary_array(())
            table, by = pa.concat_tables([_read_url(f) for f in files]), step.plan.specs[0]
            return range_boundaries(table, by.keys[0], by.num_partitions, descending=by.descending[0])
        return result

    def _run_stage(
        self,
        stage: StageSpec,
        units: list[dict],
        work: tuple[int, tuple[str, ...] | None],
        wide: tuple | None = None,
    ) -> StageResult:
        """Run one task of ``stage`` per entry of ``units`` (the ``TaskSpec`` fields that differ between its
        tasks; its marker and quarantine file are the task's own under the stage's folders): skip those with
        a finished marker, run the others, retrying failures. ``work`` is what the progress bar shows of the
        stage (``zephyr.progress.Display.stage``): its estimated bytes and the files it reads. Appends the
        stage's record (``zephyr.job_stats.stage_record``) and logs its one-line summary."""
        started = time.perf_counter()
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
        markers = {t.index: m for t in tasks if (m := finished_marker(t, stage)) is not None}
        todo = [t for t in tasks if t.index not in markers]
        # tasks in this process read ahead (``zephyr.tasks.read_ahead``): no other task keeps a core busy
        if todo:
            stage = replace(stage, read_ahead=isinstance(self.executor, InProcessExecutor))
        skipped, retried, tries = len(tasks) - len(todo), 0, dict.fromkeys(range(len(tasks)), 0)
        if skipped:
            log.info("stage %s: %d of %d tasks already done (resumed)", name, skipped, len(tasks))
        display = progress.current()
        if display is not None and todo:
            display.stage(name, len(todo), work[0] * len(todo) // len(tasks), work[1])
        # a key of its own: a stage of the same fingerprint in another work directory writes elsewhere
        shared = Shared(f"{fingerprint[:16]}-{uuid.uuid4().hex[:12]}", stage)
        while todo:
            failed: list[TaskSpec] = []
            for position, outcome in self.executor.run(run_task, todo, shared):
                task = todo[position]
                if outcome.ok:
                    markers[task.index] = outcome.value
                    if display is not None:
                        display.advance(outcome.value.get("rows_in", 0))
                    continue
                options = self.options
                outcome = _explain_worker_death(outcome, options)
                tries[task.index] += 1
                # the exception line of the traceback: what a user reads first
                last = next((line for line in reversed(outcome.error.splitlines()) if line.strip()), "")
                if tries[task.index] > options.max_retries or not outcome.retryable:
                    how = f"after {tries[task.index]} tries" if outcome.retryable else "(not retried)"
                    raise TaskError(
                        f"{outcome.summary or last} "
                        f"[stage {name!r}, task {task.index} ({task.description}) failed {how}]",
                        stage=name,
                        shard=task.description,
                        worker_traceback=outcome.error,
                    )
                retrying = "stage %s: task %d (%s) failed (try %d), retrying: %s"
                log.warning(retrying, name, task.index, task.description, tries[task.index], last)
                retried += 1
                failed.append(task)
            todo = failed
        timing = (time.perf_counter() - started, skipped, retried)
        done = [markers[t.index] for t in tasks]
        record = job_stats.stage_record(name, fingerprint, done, len(tasks), timing, wide)
        self.stages.append(record)
        rows = [record[f"rows_{k}"] for k in ("in", "out", "dropped", "quarantined")]
        summary = "stage %s: %d tasks (%d resumed), rows in %d → out %d, dropped %d, quarantined %d, %.2fs"
        log.info(summary, name, len(tasks), skipped, *rows, timing[0])
        return StageResult(fingerprint, done, tuple(t.marker_path for t in tasks))

    # -- inputs -----------------------------------------------------------------------------------------
    @property
    def executor(self) -> Executor:
        if self._executor is None:
            self._executor = make_executor(self.options)
        return self._executor

    # -- the map side of a shuffle ----------------------------------------------------------------------
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
            description = f"runs of map tasks {group.start}-{group.stop - 1} of {name}"
            runs = tuple(Run(run) for marker in mine for run in marker["runs"])
            checksums = {p: m["checksums"][p] for m in mine for p in marker_files(m)["runs"]}
            rows = sum(marker["rows_out"] for marker in mine)
            units.append({"description": description, "runs": runs, "checksums": checksums, "rows": rows})
        done = self._run_stage(stage, units, (0, None)).markers  # not in the plan: no bar bytes
        return [Run(marker["runs"][0], marker["slots"]) for marker in done if marker["slots"]]


def _explain_worker_death(outcome: Outcome, options: ExecutionOptions) -> Outcome:
    """``outcome``, with the memory settings in force and how to change them when its worker got SIGKILL.

    SIGKILL with nobody asking for it is what the kernel's out-of-memory killer sends; the executor cannot
    know the budget (a pool of workers serves jobs with different budgets), the driver can, so it adds this.
    """
    if not outcome.worker_died or outcome.signal != signal.SIGKILL:
        return outcome
    hint = (
        f"the memory budget in force is {format_bytes(options.memory_budget_bytes)} per task (--memory-budget) "
        f"with {options.num_workers} worker(s) (--workers); if memory ran out, lower --memory-budget, or give "
        "the workers more memory or run fewer --workers"
    )
    return replace(outcome, error=f"{outcome.error}; {hint}")


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
    ``OUT.zephyr/quarantine`` when ``options`` names no folder for them; ``coalesce``: ``Job.run``'s
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
            check_output_dir(out)  # the parts move into it: it must be writable too
        if side_quarantine and options.quarantine_dir is None:
            options = options.replace(quarantine_dir=layout.quarantine_dir(out))
        with Job(options) as job:
            output = SinkOutput(out, fmt, compression, staging=layout.staging_dir(out))
            result = job.run(ops, output, coalesce=coalesce)
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
    with Job(options) as job:
        result = job.run(ops, SinkOutput("output", fmt), coalesce=True)
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
    scratch, chosen = None, directory is not None
    if not chosen and options.work_dir is None:
        scratch = tempfile.mkdtemp(prefix="zephyr-materialized-")
        directory = f"{scratch}/data"  # its sidecar data.zephyr goes with the scratch folder
    elif not chosen:
        directory = f"{options.work_dir.rstrip('/')}/materialized/{fingerprint_of(*ops)[:16]}"
    result = None
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
    finally:
        if scratch is not None and not (result and result.files):
            shutil.rmtree(scratch, ignore_errors=True)
    if not result.files:
        return (FromTable(pa.table({}), 1),)
    source = ReadFiles(tuple(result.files), "parquet")
    if scratch is not None:  # a scratch copy lives as long as some Dataset still reads it (or the process)
        weakref.finalize(source, shutil.rmtree, scratch, True)
    return (source,)
