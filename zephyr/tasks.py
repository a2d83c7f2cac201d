"""What one task does, wherever it runs: read its input, run the fused ops, write its output, leave a marker.

A task is (stage, input unit): a source shard, or adjacent partitions of a shuffle. Its stage description (ops,
reducer, output, the reducer's input runs) travels from the driver to each worker once per stage, through the
executor (``executors.base.Shared``: the worker's pipe, or the dask scheduler), never through the work
directory; a task carries only small metadata (paths and indices). Rows never travel in the task or its
result: they are read from and written to files.

Outputs are written under attempt-unique or temporary names and published by rename; the marker
(``_done/task-NNNNN.json``, holding the stage fingerprint, counters, output paths and each output file's size
and checksum) is written last, the same way. A task with a valid marker is finished: a rerun of the job skips
it. Valid (``finished_marker``): whole, of this fingerprint, naming only paths inside the folders the stage
owns (``owned_folders``: a forged marker cannot make the driver publish, move or read anyone else's file),
and every file it names still holds the bytes recorded (``zephyr.resume.check_files``). Anything else: the
task reruns, with a warning naming the marker.

Read-ahead (``read_ahead``, when the driver sets ``StageSpec.read_ahead``): a task's next input batch is
decoded on a thread while the current one is processed.

A task run in the driver process (the ``inprocess`` executor: small jobs, and the tokenize writer's single
process) has no other task beside it to keep a second core busy. Its input is Parquet or JSONL decoding,
which releases the GIL, so a thread can decode batch ``n + 1`` while the task's ops work on batch ``n``:
for the tokenize writer at 320 MB on 2 cores, 5.06 s → 4.24 s (median of 3, benchmarks/RESULTS.md). Worker
processes do not read ahead: the other workers already use the cores, and each would hold one more batch.

What it costs: one more decoded batch in memory (``Budget.read_batch_bytes``; ``zephyr.budget`` states it).
What it keeps: the order of batches, every exception (raised in the consumer at the batch where it
happened), and the task's context (``zephyr.counters``, the running budget and the quarantine callback run
inside a copy of the caller's ``contextvars`` context).
"""

from __future__ import annotations

import base64
import concurrent.futures as futures
import contextvars
import logging
import re
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import ExitStack, closing
from dataclasses import dataclass, field
from typing import Any, TypeVar

import fsspec
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from fsspec.core import url_to_fs

from zephyr import budget, counters, resume
from zephyr.budget import Budget
from zephyr.errors import ZephyrError
from zephyr.io.checksum import Checksummed, collecting_side_files
from zephyr.io.paths import atomic_write, write_json_atomic
from zephyr.io.quarantine import QUARANTINE_SCHEMA
from zephyr.io.sinks import ShardWriter
from zephyr.io.sources import Shard, read_shard
from zephyr.narrow import OpCounters, op_label, run_narrow
from zephyr.ops import MapBatches, Op
from zephyr.shuffle.reduce import partition_sources
from zephyr.shuffle.runs import Run, Written, coalesce_runs
from zephyr.shuffle.writer import ShuffleSpec, numpy_to_arrow, write_runs

log = logging.getLogger(__name__)

SAMPLE_ROWS_PER_TASK = 4096


@dataclass(frozen=True)
class SinkOutput:
    """Files ``part-NNNNN.<ext>`` in ``directory``, NNNNN the task index (``format="count"`` writes nothing,
    counts rows). With ``staging`` (the output's ``OUT.zephyr/staging``, ``zephyr.io.layout``), a task writes
    ``staging/part-NNNNN.<ext>`` instead and the driver publishes the non-empty ones into ``directory`` under
    dense names in task order (``zephyr.io.claim``); a staged file is never a published one, so a task rerun
    on resume cannot overwrite another task's published file. A sink task's marker names files in
    ``staging`` or, once published, in ``directory``.

    Every output (this, ``ShuffleOutput``, ``CoalesceOutput``, ``SampleOutput``) has ``write``, which writes a
    task's tables and returns its marker's output fields, and ``owned``, the folders those fields may name
    (``owned_folders``)."""

    directory: str
    format: str
    compression: str | None = None
    staging: str | None = None

    @property
    def write_folder(self) -> str:
        """Where a task writes its part: the staging folder of a staged output, else the output itself."""
        return (self.staging or self.directory).rstrip("/")

    def owned(self, task: TaskSpec) -> dict[str, tuple]:
        """The task's own part in ``write_folder`` or, once published, a dense part name of the same format
        in ``directory`` (task i is part-k, k <= i)."""
        from zephyr.io.sinks import output_name

        if self.format == "count":
            return {}
        own = output_name(task.index, self.format, self.compression)
        folders = [(self.write_folder, re.escape(own))]
        if self.staging is not None:
            folders.append((self.directory.rstrip("/"), r"part-\d{5}\." + re.escape(own.split(".", 1)[1])))
        return {"files": tuple(folders)}

    def write(self, tables: Iterator[pa.Table], task: TaskSpec) -> dict:
        from zephyr.io.sinks import output_name

        if self.format == "count":
            return {"rows_out": sum(table.num_rows for table in tables), "bytes_out": 0, "files": []}
        rows = 0
        path = f"{self.write_folder}/{output_name(task.index, self.format, self.compression)}"
        writer: ShardWriter | None = None
        schema: pa.Schema | None = None
        try:
            for table in tables:
                schema = table.schema
                if table.num_rows == 0:
                    continue
                # row groups sized from the budget: the writer buffers one before flushing it
                if writer is None:
                    writer = ShardWriter(
                        path,
                        self.format,
                        compression=self.compression,
                        row_group_bytes=Budget(task.budget_bytes).row_group_bytes,
                    )
                writer.write(table)
                rows += table.num_rows
        except BaseException:
            if writer is not None:
                writer.abort()
            raise
        if writer is None:  # nothing to write: no file, and any stale file from an older plan goes
            fs, local = url_to_fs(path)
            if fs.exists(local):
                fs.rm(local)
            return {"rows_out": 0, "bytes_out": 0, "files": [], "schema": _schema_text(schema)}
        written = writer.close()
        checksums = {path: written.checksum}
        return {"rows_out": rows, "bytes_out": written.bytes, "files": [path], "checksums": checksums}


def _runs_fields(fs: fsspec.AbstractFileSystem, directory: str, written: list[Written]) -> dict:
    """The marker fields of runs written under ``directory``: their data paths and both files' checksums."""
    return {
        "runs": [_url(fs, w.run.path, directory) for w in written],
        "checksums": {_url(fs, p, directory): r for w in written for p, r in w.checksums.items()},
    }


@dataclass(frozen=True)
class ShuffleOutput:
    """The map side of a shuffle: sorted, indexed runs under ``directory``/map-NNNNN/<attempt>/."""

    spec: ShuffleSpec
    directory: str

    def owned(self, task: TaskSpec) -> dict[str, tuple]:
        return {"runs": ((f"{self.directory.rstrip('/')}/map-{task.index:05d}", None),)}

    def write(self, tables: Iterator[pa.Table], task: TaskSpec) -> dict:
        fs, base = url_to_fs(self.directory)
        attempt = f"{base}/map-{task.index:05d}/{uuid.uuid4().hex[:12]}"
        runs, rows, schema = write_runs(
            tables, self.spec, fs, attempt, budget_bytes=task.budget_bytes, task_index=task.index
        )
        bytes_out = sum(run.bytes for run in runs)
        fields = {"rows_out": rows, "bytes_out": bytes_out, "schema": _schema_text(schema)}
        return {**fields, **_runs_fields(fs, self.directory, runs)}


@dataclass(frozen=True)
class CoalesceOutput:
    """The runs of a group of map tasks concatenated into one run (``zephyr.shuffle.runs.coalesce_runs``) under
    ``directory``/group-NNNNN/<attempt>/, so that a reducer reads one run per group instead of one per map
    task's spill. A task's input is ``TaskSpec.runs``, not tables: ``write`` copies their bytes."""

    directory: str
    num_partitions: int

    def owned(self, task: TaskSpec) -> dict[str, tuple]:
        return {"runs": ((f"{self.directory.rstrip('/')}/group-{task.index:05d}", None),)}

    def write(self, tables: Iterator[pa.Table], task: TaskSpec) -> dict:
        fs, base = url_to_fs(self.directory)
        attempt = f"{base}/group-{task.index:05d}/{uuid.uuid4().hex[:12]}"
        fs.makedirs(attempt, exist_ok=True)
        shares = Budget(task.budget_bytes)
        done = coalesce_runs(
            fs,
            [Run(url_to_fs(run.path)[1], run.slots) for run in task.runs],
            f"{attempt}/run-00000",
            self.num_partitions,
            window_bytes=shares.coalesce_window_bytes,
            upload_bytes=shares.upload_part_bytes,
            expected={url_to_fs(path)[1]: record for path, record in task.checksums.items()},
        )
        rows, stored = task.rows, done.bytes  # a copy: what it reads is what it writes
        counts = {"rows_in": rows, "bytes_in": stored, "rows_out": rows, "bytes_out": stored}
        inputs = {"inputs": [run.path for run in task.runs], "slots": done.run.slots}
        return {**counts, **inputs, **_runs_fields(fs, self.directory, [done])}


@dataclass(frozen=True)
class SampleOutput:
    """A systematic sample (at most ``SAMPLE_ROWS_PER_TASK`` rows) of the rows, for range boundaries."""

    directory: str

    def owned(self, task: TaskSpec) -> dict[str, tuple]:
        return {"sample": ((self.directory.rstrip("/"), rf"sample-{task.index:05d}\.parquet"),)}

    def write(self, tables: Iterator[pa.Table], task: TaskSpec) -> dict:
        """Keep every ``stride``-th row; when the sample doubles its cap, halve it and double the stride."""
        kept: list[pa.Table] = []
        kept_rows, stride, offset, rows = 0, 1, 0, 0
        for table in tables:
            rows += table.num_rows
            start = (-offset) % stride
            indices = numpy_to_arrow(np.arange(start, table.num_rows, stride, dtype=np.int64))
            offset += table.num_rows
            if len(indices):
                piece = table.take(indices)
                kept.append(piece)
                kept_rows += piece.num_rows
            if kept_rows >= 2 * SAMPLE_ROWS_PER_TASK:
                merged = pa.concat_tables(kept)
                merged = merged.take(numpy_to_arrow(np.arange(0, merged.num_rows, 2, dtype=np.int64)))
                kept, kept_rows, stride = [merged], merged.num_rows, stride * 2
        if not kept:
            return {"rows_out": rows, "bytes_out": 0, "sample": None}
        fs, base = url_to_fs(self.directory)
        url = _url(fs, f"{base}/sample-{task.index:05d}.parquet", self.directory)
        return {"rows_out": rows, "bytes_out": 0, "sample": url, "checksums": _write_parquet(url, kept)}


Output = SinkOutput | ShuffleOutput | CoalesceOutput | SampleOutput


@dataclass(frozen=True)
class StageSpec:
    """What every task of a stage runs, sent to the workers by the driver (``executors.base.Shared``).
    ``input_schema``: the job's one schema for its input files (``zephyr.io.schema``; None: read each as it
    is). ``inputs``, reduce stages: ``runs`` (per upstream, the run data paths its map tasks wrote) and
    ``schemas`` (per upstream, its output schema as text), as the driver found them in the map tasks'
    markers."""

    fingerprint: str
    name: str
    narrow: tuple[Op, ...]
    output: Output
    reducer: Any = None
    read_columns: tuple[str, ...] | None = None
    read_schema: pa.Schema | None = None
    on_error: str = "raise"
    input_schema: pa.Schema | None = None
    inputs: dict | None = None
    read_ahead: bool = False

    @property
    def side_folders(self) -> tuple[str, ...]:
        """Folders where this stage's ``map_batches`` functions write files of their own (their
        ``side_folder``; ``zephyr.io.checksum.record_side_file``)."""
        folders = (getattr(op.fn, "side_folder", None) for op in self.narrow if isinstance(op, MapBatches))
        return tuple(f for f in folders if isinstance(f, str))


@dataclass(frozen=True)
class TaskSpec:
    """One task of a stage: a source task's ``shard``; a reduce task's ``partitions``, ``range(*partitions)``
    (``zephyr.physical.reduce_groups``); a coalesce task's input ``runs`` (its group's map runs, in (map
    task, run) order), their ``checksums`` (from their map tasks' markers) and the ``rows`` its group's map
    tasks wrote (its marker passes them on, for the accounting)."""

    fingerprint: str
    index: int
    marker_path: str
    quarantine_path: str
    budget_bytes: int
    shard: Shard | None = None
    partitions: tuple[int, int] | None = None
    description: str = ""
    runs: tuple[Run, ...] = ()
    checksums: dict = field(default_factory=dict)
    rows: int = 0


def _url(fs: fsspec.AbstractFileSystem, path: str, like: str) -> str:
    """``path`` of ``fs`` as a URL when ``like`` (the folder it was made from) is one, else as it is."""
    return fs.unstrip_protocol(path) if "://" in like else path


def owned_folders(stage: StageSpec, task: TaskSpec) -> dict[str, tuple]:
    """The one rule of where a task's marker may point: per marker key, the folders its paths must lie in.

    A value ``(folder, pattern)`` admits a file directly in ``folder`` whose name matches ``pattern``; ``(folder,
    None)`` admits any file below ``folder``. The output's own files follow its ``owned`` (a sink's part, a map
    task's runs below its ``map-NNNNN/``, a coalesce group's below its ``group-NNNNN/``, the task's sample
    file); the quarantine file is the task's own; the files its functions write on the side lie below the
    folders they declare (``StageSpec.side_folders``). Whoever changes where a stage writes changes it here
    or in the output's ``owned``."""
    quarantine = task.quarantine_path.rsplit("/", 1)
    return {
        "quarantine": ((quarantine[0], re.escape(quarantine[1])),),
        "side_files": tuple((folder, None) for folder in stage.side_folders),
        **stage.output.owned(task),
    }


def marker_files(marker: dict) -> dict[str, list[str]]:
    """Every file a marker names, by its key: ``files``, ``runs`` (each run's data and index file),
    ``sample``, ``quarantine``, ``side_files``."""
    runs = [p for run in marker.get("runs") or [] for p in (run, run[: -len(".data")] + ".index")]
    sample = [marker["sample"]] if marker.get("sample") else []
    quarantine = [(marker.get("quarantine") or {}).get("path")] if marker.get("quarantine") else []
    return {
        "files": list(marker.get("files") or []),
        "runs": runs,
        "sample": sample,
        "quarantine": quarantine,
        "side_files": list(marker.get("side_files") or []),
    }


def finished_marker(task: TaskSpec, stage: StageSpec) -> dict | None:
    """The task's marker when the task is finished and can be skipped: of this fingerprint
    (``zephyr.resume.read_marker``), naming only paths this stage owns (``owned_folders``), and every file it names
    holding the size and checksum recorded when it was written (``zephyr.resume.check_files``). Otherwise
    None, with a warning naming the marker when one was there: the task reruns."""
    marker = resume.read_marker(task.marker_path, task.fingerprint)
    problem = None if marker is None else _marker_problem(marker, task, stage)
    if problem is not None:
        log.warning("%s: %s; the task reruns", task.marker_path, problem)
    return marker if problem is None else None


def _marker_problem(marker: dict, task: TaskSpec, stage: StageSpec) -> str | None:
    """Why ``marker`` cannot be trusted, or None."""
    try:
        named = marker_files(marker)
    except (TypeError, AttributeError, KeyError):
        return "malformed file list"
    if any(not isinstance(run, str) or not run.endswith(".data") for run in marker.get("runs") or []):
        return "malformed run list"
    if isinstance(stage.output, CoalesceOutput):
        if marker.get("inputs") != [run.path for run in task.runs]:
            return "it coalesced other map runs than its map tasks wrote now (one of them reran)"
        if not isinstance(marker.get("slots"), int) or len(marker.get("runs") or []) != 1:
            return "malformed run list"
    rules = owned_folders(stage, task)
    for key, paths in named.items():
        for path in paths:
            if not isinstance(path, str) or not resume.inside(path, rules.get(key, ())):
                return f"it names {path!r} under {key!r}, outside the folders this stage writes"
    checksums = marker.get("checksums")
    listed = [p for paths in named.values() for p in paths]
    if listed and not isinstance(checksums, dict):
        return "it records no checksums (written by an older zephyr)"
    return resume.check_files({p: checksums.get(p) for p in listed}) if listed else None


def _counted(tables: Iterator[pa.Table], read: dict[str, int]) -> Iterator[pa.Table]:
    """``tables``, adding the rows and (decoded Arrow) bytes passing through to ``read``."""
    for table in tables:
        read["rows"] += table.num_rows
        read["bytes"] += table.nbytes
        yield table


def run_task(stage: StageSpec, task: TaskSpec) -> dict:
    """Run one task of ``stage`` to completion and return its marker (also written to ``task.marker_path``,
    last): its input through the stage's ops into its output (``Output.write``), counting every row."""
    if stage.fingerprint != task.fingerprint:
        raise ZephyrError(f"task {task.index} of stage {task.fingerprint[:12]} was sent another stage")
    started = time.perf_counter()
    quarantined: list[pa.Table] = []
    op_counters = [OpCounters(op_label(op)) for op in stage.narrow]
    reading, read = _task_input(task, stage, quarantined.append), {"rows": 0, "bytes": 0}
    with (
        counters.collecting() as user_counters,
        collecting_side_files() as side_files,
        budget.running(Budget(task.budget_bytes)),
        closing(reading),
    ):
        # closed here, not when garbage-collected: a failed task's traceback would keep a read-ahead thread
        tables = run_narrow(
            _counted(reading, read),
            stage.narrow,
            op_counters,
            where=task.description,
            quarantine=quarantined.append,
            shard_index=task.index,
        )
        outputs = stage.output.write(tables, task)
    read_quarantined, quarantine = 0, None
    if quarantined:
        table = pa.concat_tables([t.cast(QUARANTINE_SCHEMA) for t in quarantined])
        read_quarantined = table.num_rows - sum(c.rows_quarantined for c in op_counters)
    # A sort's sample pass reads the rows its map pass reads again: that pass stores (and the job counts) the
    # rows both set aside, once. The sample stage's own record still accounts for them.
    if quarantined and not isinstance(stage.output, SampleOutput):
        outputs.setdefault("checksums", {}).update(_write_parquet(task.quarantine_path, [table]))
        quarantine = {"path": task.quarantine_path, "rows": table.num_rows}
    if side_files:
        outputs["side_files"] = sorted(side_files)
        outputs.setdefault("checksums", {}).update(side_files)
    marker = {
        "fingerprint": task.fingerprint,
        "index": task.index,
        "input": task.description,
        "rows_in": read["rows"] + read_quarantined,
        "rows_read_quarantined": read_quarantined,
        "bytes_in": read["bytes"],
        "ops": [c.as_dict() for c in op_counters],
        "counters": dict(user_counters),
        "quarantine": quarantine,
        **outputs,
        "seconds": round(time.perf_counter() - started, 4),
    }
    write_json_atomic(task.marker_path, marker)
    return marker


def _write_parquet(url: str, tables: list[pa.Table]) -> dict[str, dict]:
    """``tables`` as one zstd Parquet file at ``url``, whole or not at all (its folder created); its checksum
    record, by ``url``."""
    with atomic_write(url) as f:
        hashed = Checksummed(f)
        pq.write_table(pa.concat_tables(tables), hashed, compression="zstd")
    return {url: hashed.record()}


def _task_input(task: TaskSpec, stage: StageSpec, quarantine) -> Iterator[pa.Table]:
    """The task's input tables; a shard's are decoded one batch ahead when ``stage.read_ahead`` (tasks in
    the driver process). Rows quarantined while reading reach ``quarantine`` in the same order either way:
    they travel with the batch they were read with, not from the reading thread."""
    if task.shard is None or not stage.read_ahead:
        yield from _input_tables(task, stage, quarantine)
        return

    def batches_with_quarantined() -> Iterator[tuple[list[pa.Table], pa.Table | None]]:
        pending: list[pa.Table] = []
        for table in _input_tables(task, stage, pending.append):  # the reader keeps this list's append
            aside = pending.copy()
            pending.clear()
            yield aside, table
        yield pending, None

    for aside, table in read_ahead(batches_with_quarantined()):
        for rows in aside:
            quarantine(rows)
        if table is not None:
            yield table


def _input_tables(task: TaskSpec, stage: StageSpec, quarantine) -> Iterator[pa.Table]:
    """A source task's shard, or a reduce task's partitions, each reduced on its own, in order (a coalesce
    task reads runs, not tables: ``CoalesceOutput``)."""
    if task.shard is not None:
        empty = True
        for batch in read_shard(
            task.shard,
            columns=stage.read_columns,
            schema=stage.read_schema,
            input_schema=stage.input_schema,
            on_error=stage.on_error,
            quarantine=quarantine,
            batch_bytes=Budget(task.budget_bytes).read_batch_bytes,
            buffer_bytes=Budget(task.budget_bytes).read_buffer_bytes,
        ):
            empty = False
            yield pa.Table.from_batches([batch])
        if empty and task.shard.format == "parquet":  # no rows, but the schema still flows downstream
            schema = stage.input_schema or stage.read_schema
            if schema is None:
                fs, path = url_to_fs(task.shard.path)
                with fs.open(path, "rb") as f:
                    schema = pq.read_schema(f)
            if stage.read_columns:
                schema = pa.schema([schema.field(c) for c in stage.read_columns if c in schema.names])
            yield schema.empty_table()
        return
    for partition in range(*(task.partitions or (0, 0))):
        yield from _reduce_partition(stage, partition, task.budget_bytes)


def _reduce_partition(stage: StageSpec, partition: int, budget_bytes: int) -> Iterator[pa.Table]:
    inputs = stage.inputs
    reducer = stage.reducer
    merge_columns = getattr(reducer, "merge_columns", None)
    with ExitStack() as scratch:
        sides = [
            scratch.enter_context(partition_sources(runs, partition, merge_columns, budget_bytes))
            for runs in inputs["runs"]
        ]
        if len(sides) == 2:
            schemas = [schema_from_text(s) if s else None for s in inputs["schemas"]]
            yield from reducer.join(*sides, schemas=schemas)
        else:
            yield from reducer.reduce(sides[0])


def _schema_text(schema: pa.Schema | None) -> str | None:
    """A schema as base64 Arrow IPC, so an empty result can still say what its columns are."""
    return None if schema is None else base64.b64encode(schema.serialize().to_pybytes()).decode()


def schema_from_text(text: str) -> pa.Schema:
    return pa.ipc.read_schema(pa.py_buffer(base64.b64decode(text)))


T = TypeVar("T")
_END = object()


def read_ahead(items: Iterator[T]) -> Iterator[T]:
    """``items``, produced one item ahead on a thread of its own (``zephyr-read-ahead``), in a copy of the
    caller's context. Closing the returned generator early (an op that stops reading, an error downstream)
    waits for the item being produced, then closes ``items``."""
    context = contextvars.copy_context()
    name = threading.current_thread  # the pool names its thread after its prefix and a number: one name here
    pool = futures.ThreadPoolExecutor(1, initializer=lambda: setattr(name(), "name", "zephyr-read-ahead"))
    try:
        ahead = pool.submit(context.run, next, items, _END)
        while (item := ahead.result()) is not _END:  # a producer's error is raised here, at its batch
            ahead = pool.submit(context.run, next, items, _END)
            yield item
    finally:
        pool.shutdown(wait=True)
        close = getattr(items, "close", None)
        if close is not None:
            close()
