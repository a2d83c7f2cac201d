"""What one task does, wherever it runs: read its input, run the fused ops, write its output, leave a marker.

A task is (stage, input unit): a source shard, or one partition of a shuffle. Its stage description (ops,
reducer, output) is cloudpickled once per stage into ``stage.pkl`` in the work directory; a task carries only
small metadata (paths and indices) and loads the stage from there, cached per worker process. Rows never travel
in the task or its result: they are read from and written to files.

Outputs are written under attempt-unique or temporary names and published by rename; the marker
(``_done/task-NNNNN.json``, holding the stage fingerprint, counters and output paths) is written last, the
same way. A task with a valid marker is finished: a rerun of the job skips it (``zephyr.resume`` reads markers
and checks their files, for tasks and for bigger units alike).
"""

from __future__ import annotations

import functools
import json
import time
import uuid
from collections.abc import Iterator
from contextlib import closing
from dataclasses import dataclass, field
from typing import Any

import cloudpickle
import fsspec
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from zephyr import budget, counters, read_ahead, resume
from zephyr.budget import Budget
from zephyr.errors import ZephyrError
from zephyr.io.paths import atomic_write, write_json_atomic
from zephyr.io.quarantine import QUARANTINE_SCHEMA
from zephyr.io.sinks import ShardWriter
from zephyr.io.sources import Shard, read_shard
from zephyr.job_stats import upgrade_counts
from zephyr.narrow import OpCounters, op_label, run_narrow
from zephyr.ops import Op
from zephyr.shuffle.partition import numpy_to_arrow
from zephyr.shuffle.read import partition_sources
from zephyr.shuffle.writer import ShuffleSpec, ShuffleWriter

__all__ = [
    "SinkOutput",
    "ShuffleOutput",
    "SampleOutput",
    "StageSpec",
    "TaskSpec",
    "run_task",
    "read_marker",
    "write_json_atomic",
]

SAMPLE_ROWS_PER_TASK = 4096


@dataclass(frozen=True)
class SinkOutput:
    """Files ``part-NNNNN.<ext>`` in ``directory``, NNNNN the task index (``format="count"`` writes nothing,
    counts rows). With ``staging`` (the output's ``OUT.zephyr/staging``, ``zephyr.io.layout``), a task writes
    ``staging/part-NNNNN.<ext>`` instead and the driver publishes the non-empty ones into ``directory`` under
    dense names in task order (``zephyr.io.publish``); a staged file is never a published one, so a task rerun
    on resume cannot overwrite another task's published file. A sink task's marker names files in
    ``staging`` or, once published, in ``directory``."""

    directory: str
    format: str
    compression: str | None = None
    staging: str | None = None


@dataclass(frozen=True)
class ShuffleOutput:
    """The map side of a shuffle: sorted, indexed runs under ``directory``/map-NNNNN/<attempt>/."""

    spec: ShuffleSpec
    directory: str


@dataclass(frozen=True)
class SampleOutput:
    """A systematic sample (at most ``SAMPLE_ROWS_PER_TASK`` rows) of the rows, for range boundaries."""

    directory: str


@dataclass(frozen=True)
class StageSpec:
    fingerprint: str
    name: str
    narrow: tuple[Op, ...]
    output: SinkOutput | ShuffleOutput | SampleOutput
    reducer: Any = None
    read_columns: tuple[str, ...] | None = None
    read_schema: pa.Schema | None = None
    on_error: str = "raise"
    input_schema: pa.Schema | None = None
    """The job's one schema for its input files (``zephyr.io.input_schema``); None: read each as it is."""


@dataclass(frozen=True)
class TaskSpec:
    stage_path: str
    """URL of the cloudpickled ``StageSpec``."""
    fingerprint: str
    index: int
    marker_path: str
    quarantine_path: str
    budget_bytes: int
    shard: Shard | None = None
    partition: int | None = None
    inputs_path: str | None = None
    """URL of a JSON list (one per upstream) of the run data paths a reduce task merges."""
    description: str = ""
    extra: dict = field(default_factory=dict)


def _fs(url: str) -> tuple[fsspec.AbstractFileSystem, str]:
    return fsspec.core.url_to_fs(url)


@functools.lru_cache(maxsize=8)
def _load_stage(stage_path: str, fingerprint: str) -> StageSpec:
    fs, path = _fs(stage_path)
    stage = cloudpickle.loads(fs.cat_file(path))
    if stage.fingerprint != fingerprint:
        raise ZephyrError(f"stage file {stage_path} holds another plan ({stage.fingerprint[:12]})")
    return stage


def read_marker(url: str, fingerprint: str) -> dict | None:
    """The task's marker if it exists, is whole and belongs to this stage fingerprint (``zephyr.resume``), with
    the count keys of older markers under their new names."""
    marker = resume.read_marker(url, fingerprint)
    return upgrade_counts(marker) if marker is not None else None


class _Counted:
    """Counts rows and (decoded Arrow) bytes passing through an iterator of tables."""

    def __init__(self, tables: Iterator[pa.Table]):
        self.tables = tables
        self.rows = 0
        self.bytes = 0

    def __iter__(self) -> Iterator[pa.Table]:
        for table in self.tables:
            self.rows += table.num_rows
            self.bytes += table.nbytes
            yield table


def run_task(task: TaskSpec) -> dict:
    """Run one task to completion and return its marker (also written to ``task.marker_path``)."""
    stage = _load_stage(task.stage_path, task.fingerprint)
    started = time.perf_counter()
    quarantined: list[pa.Table] = []
    op_counters = [OpCounters(op_label(op)) for op in stage.narrow]
    reading = _task_input(task, stage, quarantined.append)
    with counters.collecting() as user_counters, budget.running(Budget(task.budget_bytes)), closing(reading):
        # closed here, not when garbage-collected: a failed task's traceback would keep a read-ahead thread
        source = _Counted(reading)
        tables = run_narrow(
            source,
            stage.narrow,
            op_counters,
            where=task.description,
            quarantine=quarantined.append,
            shard_index=task.index,
        )
        outputs = _write_output(tables, stage.output, task)
    read_quarantined = 0
    quarantine = None
    if quarantined:
        table = pa.concat_tables([t.cast(QUARANTINE_SCHEMA) for t in quarantined])
        read_quarantined = table.num_rows - sum(c.rows_quarantined for c in op_counters)
        with atomic_write(task.quarantine_path) as f:  # creates the folder; readers never see a partial file
            pq.write_table(table, f, compression="zstd")
        quarantine = {"path": task.quarantine_path, "rows": table.num_rows}
    marker = {
        "fingerprint": task.fingerprint,
        "index": task.index,
        "input": task.description,
        "rows_in": source.rows + read_quarantined,
        "rows_read_quarantined": read_quarantined,
        "bytes_in": source.bytes,
        "ops": [c.as_dict() for c in op_counters],
        "counters": dict(user_counters),
        "quarantine": quarantine,
        "seconds": round(time.perf_counter() - started, 4),
        **outputs,
    }
    write_json_atomic(task.marker_path, marker)
    return marker


def _task_input(task: TaskSpec, stage: StageSpec, quarantine) -> Iterator[pa.Table]:
    """The task's input tables; a shard's are decoded one batch ahead when ``read_ahead.enabled()`` (tasks in
    the driver process). Rows quarantined while reading reach ``quarantine`` in the same order either way:
    they travel with the batch they were read with, not from the reading thread."""
    if task.shard is None or not read_ahead.enabled():
        yield from _input_tables(task, stage, quarantine)
        return

    def batches_with_quarantined() -> Iterator[tuple[list[pa.Table], pa.Table | None]]:
        pending: list[pa.Table] = []
        for table in _input_tables(task, stage, pending.append):  # the reader keeps this list's append
            aside = pending.copy()
            pending.clear()
            yield aside, table
        yield pending, None

    for aside, table in read_ahead.read_ahead(batches_with_quarantined()):
        for rows in aside:
            quarantine(rows)
        if table is not None:
            yield table


def _input_tables(task: TaskSpec, stage: StageSpec, quarantine) -> Iterator[pa.Table]:
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
                fs, path = _fs(task.shard.path)
                with fs.open(path, "rb") as f:
                    schema = pq.read_schema(f)
            if stage.read_columns:
                schema = pa.schema([schema.field(c) for c in stage.read_columns if c in schema.names])
            yield schema.empty_table()
        return
    fs, inputs_path = _fs(task.inputs_path)
    inputs = json.loads(fs.cat_file(inputs_path))
    reducer = stage.reducer
    merge_columns = getattr(reducer, "merge_columns", None)
    scratches = []
    try:
        sides = []
        for runs in inputs["runs"]:
            sources, scratch = partition_sources(runs, task.partition, merge_columns, task.budget_bytes)
            sides.append(sources)
            scratches.append(scratch)
        if len(sides) == 2:
            schemas = [schema_from_text(s) if s else None for s in inputs["schemas"]]
            yield from reducer.join(*sides, schemas=schemas)
        else:
            yield from reducer.reduce(sides[0])
    finally:
        for scratch in scratches:
            scratch.cleanup()


def _write_output(tables: Iterator[pa.Table], output, task: TaskSpec) -> dict:
    if isinstance(output, SinkOutput):
        return _write_sink(tables, output, task)
    if isinstance(output, ShuffleOutput):
        fs, base = _fs(output.directory)
        attempt = f"{base}/map-{task.index:05d}/{uuid.uuid4().hex[:12]}"
        writer = ShuffleWriter(
            output.spec, fs, attempt, budget_bytes=task.budget_bytes, task_index=task.index
        )
        rows = 0
        schema = None
        for table in tables:
            rows += table.num_rows
            schema = table.schema
            writer.write(table)
        runs = [fs.unstrip_protocol(p) if "://" in output.directory else p for p in writer.close()]
        return {
            "rows_out": rows,
            "bytes_out": writer.bytes_written,
            "runs": runs,
            "schema": _schema_text(schema),
        }
    if isinstance(output, SampleOutput):
        return _write_sample(tables, output, task)
    raise ZephyrError(f"unknown output {type(output).__name__}")


def _write_sink(tables: Iterator[pa.Table], output: SinkOutput, task: TaskSpec) -> dict:
    from zephyr.io.sinks import output_name

    rows = 0
    if output.format == "count":
        for table in tables:
            rows += table.num_rows
        return {"rows_out": rows, "bytes_out": 0, "files": []}
    folder = (output.staging or output.directory).rstrip("/")
    path = f"{folder}/{output_name(task.index, output.format, output.compression)}"
    writer: ShardWriter | None = None
    schema: pa.Schema | None = None
    try:
        for table in tables:
            schema = table.schema
            if table.num_rows == 0:
                continue
            if writer is None:  # row groups sized from the budget: the writer buffers one before flushing it
                writer = ShardWriter(
                    path,
                    output.format,
                    compression=output.compression,
                    row_group_bytes=Budget(task.budget_bytes).row_group_bytes,
                )
            writer.write(table)
            rows += table.num_rows
    except BaseException:
        if writer is not None:
            writer.abort()
        raise
    if writer is None:  # nothing to write: no file, and any stale file from an older plan goes
        fs, local = _fs(path)
        if fs.exists(local):
            fs.rm(local)
        return {"rows_out": 0, "bytes_out": 0, "files": [], "schema": _schema_text(schema)}
    written = writer.close()
    return {"rows_out": rows, "bytes_out": written.bytes, "files": [path]}


def _schema_text(schema: pa.Schema | None) -> str | None:
    """A schema as base64 Arrow IPC, so an empty result can still say what its columns are."""
    if schema is None:
        return None
    import base64

    return base64.b64encode(schema.serialize().to_pybytes()).decode()


def schema_from_text(text: str) -> pa.Schema:
    import base64

    return pa.ipc.read_schema(pa.py_buffer(base64.b64decode(text)))


def _write_sample(tables: Iterator[pa.Table], output: SampleOutput, task: TaskSpec) -> dict:
    """Keep every ``stride``-th row; when the sample doubles its cap, halve it and double the stride."""
    kept: list[pa.Table] = []
    kept_rows = 0
    stride = 1
    offset = 0
    rows = 0
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
    fs, base = _fs(output.directory)
    fs.makedirs(base, exist_ok=True)
    path = f"{base}/sample-{task.index:05d}.parquet"
    url = fs.unstrip_protocol(path) if "://" in output.directory else path
    if kept:
        with atomic_write(url) as f:
            pq.write_table(pa.concat_tables(kept), f)
    return {"rows_out": rows, "bytes_out": 0, "sample": url if kept else None}
