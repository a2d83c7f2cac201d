"""Runs a pipeline as a batch job: stage by stage, resumable, with exact row accounting.

Job directory layout (format version 1)::

    JOB/pipeline.yaml               the validated config, as run (paths resolved)
    JOB/stats.json                  the job: one record per stage (below), in order, and totals
    JOB/report.md, report.html      the human report (``zephyr.pipelines.report``), plots/ beside them
    JOB/NN-NAME/                    one folder per stage, NN = its position in the config
        part-00000.parquet, ...     the stage's output rows (data stages), numbered densely from 00000
        _stats.json                 the stage record (below); ``stats.json`` of an older run is still read
        _SUCCESS.json               {"fingerprint": ...}: written last; the stage is complete
        _STARTED.json               {"fingerprint": ...}: which config the files in this folder belong to
        _work/STEP/                 engine work directories (task markers, spills); removed when the stage
                                    completes, except _work/*/quarantine/ (quarantined rows, Parquet)
        _dropped/, _classifier.bin  a heuristic filter's dropped rows, a quality stage's trained model
        shards/, tokenizer.json, train.jsonl, checkpoints/   (tokenize and train stages, which hold no Parquet)

    Everything in a data stage's folder but its part files starts with ``_``, so pyarrow, polars, duckdb and
    HF ``datasets`` read the folder as exactly the stage's kept rows.

Resume. A stage's fingerprint hashes its config and the fingerprint of the stage before it (the ``read``
stage hashes its input files' paths, sizes and version stamps: mtime, or ETag on object stores). A rerun
skips every stage whose ``_SUCCESS.json`` holds the same fingerprint; the first unfinished stage reruns with
the same engine work directories, so its finished tasks are skipped too (and ``train`` resumes from its last
checkpoint). A stage whose folder belongs to another fingerprint (the config changed) is cleared first.
``from_stage`` reruns that stage and the ones after it from scratch (earlier ones must be complete);
``until_stage`` stops after it.

Stage record (``_stats.json`` of a stage, version 1): ``rows_in``, ``rows_kept``, ``rows_dropped``
(``dropped_by_reason``), ``rows_quarantined``, ``balanced``; ``bytes_in``/``bytes_out`` (Parquet bytes on
disk), ``seconds``, ``tasks``/``tasks_resumed``/``task_retries`` (over every engine job of the stage, one
entry each in ``jobs``), ``per_source``/``per_lang`` (``{"in": {v: rows}, "out":
{...}}``), ``cluster_sizes`` (kept documents by duplicate-cluster size), ``files``, ``quarantine_files``,
``counters`` (every engine counter) and ``extra`` (tokens, training...). For every data stage
``rows_in == rows_kept + rows_dropped + rows_quarantined`` is checked from the engine's per-operator counters
against the row counts of the Parquet files; a mismatch stops the job with ``AccountingError``.
"""

from __future__ import annotations

import dataclasses
import glob
import hashlib
import json
import logging
import os
import shutil
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from zephyr.pipelines.config import DATA_STAGES, SOURCE_STAGES, PipelineConfig, StageEntry, check_inputs
from zephyr.pipelines.records import rows_rewritten

from zephyr.errors import ConfigError, ZephyrError

__all__ = ["AccountingError", "PipelineResult", "ProgressReporter", "run_pipeline", "stage_dir_name", "STATS_VERSION"]

log = logging.getLogger(__name__)

STATS_VERSION = 1
SUCCESS = "_SUCCESS.json"
STARTED = "_STARTED.json"
STAGE_STATS = "_stats.json"
OLD_STAGE_STATS = "stats.json"
"""The stage record's name in job folders made before the ``_`` rule: read, never written (for one release)."""
_OLD_RENAMES = (("classifier.bin", "_classifier.bin"), ("classifier.fingerprint", "_classifier.fingerprint"))


class AccountingError(ZephyrError):
    """A stage's rows do not balance: ``rows_in != kept + dropped + quarantined``. Names the stage and counts."""


@dataclass
class PipelineResult:
    """What ``run_pipeline`` did: the job folder, a record per stage that ran or was skipped, the report."""

    job_dir: Path
    stages: list[dict[str, Any]]
    report: Path | None = None
    html_report: Path | None = None
    stats_path: Path | None = None

    def stage(self, name: str) -> dict[str, Any]:
        return next(s for s in self.stages if s["stage"] == name)


class ProgressReporter:
    """One line per stage on ``stream``: a start line and a result line (the engine draws task bars between
    them on a TTY). Not a TTY: the same lines, plain, and no bars."""

    def __init__(self, stream: TextIO | None = None, *, tty: bool | None = None):
        self.stream = stream if stream is not None else sys.stderr
        self.tty = self.stream.isatty() if tty is None else tty

    def _write(self, text: str) -> None:
        self.stream.write(text + "\n")
        self.stream.flush()

    def started(self, position: int, total: int, entry: StageEntry) -> None:
        self._write(f"[{position}/{total}] {entry.name} ({entry.type}): running")

    def skipped(self, position: int, total: int, entry: StageEntry, why: str) -> None:
        self._write(f"[{position}/{total}] {entry.name} ({entry.type}): skipped, {why}")

    def finished(self, position: int, total: int, record: dict[str, Any]) -> None:
        if record["type"] in DATA_STAGES or record["type"] == "tokenize":
            body = (
                f"in {record['rows_in']:,}, kept {record['rows_kept']:,}, dropped {record['rows_dropped']:,}, "
                f"quarantined {record['rows_quarantined']:,}"
            )
            rewritten = rows_rewritten(record)
            if rewritten:
                body += f", rewritten {rewritten:,}"
            if record["type"] == "tokenize":
                body += f", {record['extra'].get('num_tokens', 0):,} tokens"
        else:
            extra = record["extra"]
            loss = extra.get("final_loss")
            body = f"{extra.get('steps', 0)} steps" + (f", final loss {loss:.4f}" if loss is not None else "")
            if extra.get("mean_tokens_per_s"):
                body += f", {extra['mean_tokens_per_s']:,.0f} tokens/s"
        resumed = f", {record['tasks_resumed']} of {record['tasks']} tasks resumed" if record.get("tasks_resumed") else ""
        if record.get("task_retries"):
            resumed += f", {record['task_retries']} task retries"
        self._write(f"[{position}/{total}] {record['stage']} ({record['type']}): done in {record['seconds']:.1f}s: {body}{resumed}")


def stage_dir_name(index: int, entry: StageEntry) -> str:
    return f"{index:02d}-{entry.name}"


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        return json.loads(path.read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return None


def _write_json(path: Path, payload: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(payload, indent=1, sort_keys=False, default=str) + "\n")
    os.replace(tmp, path)


def _read_stage_stats(stage_dir: Path) -> dict[str, Any] | None:
    """A complete stage's record: ``_stats.json``, or ``stats.json`` written by an older zephyr (a job folder
    made before the rename resumes instead of rerunning its finished stages)."""
    stats = _read_json(stage_dir / STAGE_STATS)
    return stats if stats is not None else _read_json(stage_dir / OLD_STAGE_STATS)


def _migrate_old_names(stage_dir: Path) -> None:
    """Resuming a stage an older zephyr began: its files named without ``_`` would be read as data by readers
    of the folder. A trained classifier takes its new name (and is reused); a stale record and dropped rows
    go (the stage writes them again)."""
    for old, new in _OLD_RENAMES:
        if (stage_dir / old).is_file() and not (stage_dir / new).exists():
            os.replace(stage_dir / old, stage_dir / new)
    (stage_dir / OLD_STAGE_STATS).unlink(missing_ok=True)
    shutil.rmtree(stage_dir / "dropped", ignore_errors=True)


def _input_fingerprint(paths: list[str]) -> str:
    """Paths, sizes and version stamps (mtime, ETag: ``zephyr.io.paths.file_stat``, the engine's own rule) of
    the files a read stage reads: new, removed or changed files, same-size edits in place included, invalidate
    the pipeline."""
    from zephyr.io.paths import expand_paths, file_stat

    items = [[f, *file_stat(f)] for f in expand_paths(list(paths))]
    return hashlib.sha256(json.dumps(items).encode()).hexdigest()


def _read_inputs(entry: StageEntry) -> list[str]:
    """The local files a read stage reads (for its bytes-in figure)."""
    if entry.type not in SOURCE_STAGES:
        return []
    found: list[str] = []
    for p in entry.config.paths:
        if "://" in p:
            continue
        for m in sorted(glob.glob(p, recursive=True)) if glob.has_magic(p) else [p]:
            found += sorted(str(f) for f in Path(m).rglob("*") if f.is_file()) if os.path.isdir(m) else [m]
    return found


def _file_bytes(files: list[str]) -> int:
    return sum(os.path.getsize(f) for f in files if os.path.exists(f))


def _merge(into: dict[str, int], more: dict[str, int]) -> None:
    for key, value in more.items():
        into[key] = into.get(key, 0) + int(value)


def _split_counters(counters: dict[str, int]) -> tuple[dict[str, dict[str, dict[str, int]]], dict[str, int]]:
    """``pipeline/<role>/<key>=<value>`` → {key: {role: {value: n}}}; ``pipeline/cluster_size=<n>`` → sizes."""
    grouped: dict[str, dict[str, dict[str, int]]] = {}
    sizes: dict[str, int] = {}
    for name, n in counters.items():
        if name.startswith("pipeline/cluster_size="):
            sizes[name.split("=", 1)[1]] = sizes.get(name.split("=", 1)[1], 0) + n
            continue
        parts = name.split("/", 2)
        if len(parts) != 3 or parts[0] != "pipeline" or "=" not in parts[2]:
            continue
        key, value = parts[2].split("=", 1)
        grouped.setdefault(key, {}).setdefault(parts[1], {})[value] = n
    sizes = dict(sorted(sizes.items(), key=lambda kv: int(kv[0])))
    return grouped, sizes


def account(entry: StageEntry, outcome: Any, input_rows: int | None, input_files: list[str]) -> dict[str, Any]:
    """The stage record's row accounting, checked: the engine's operator counters against the files."""
    from zephyr.io.parquet_source import parquet_rows

    stats = outcome.engine_stats or {"stages": []}
    engine_stages = stats.get("stages", [])
    counters: dict[str, int] = {}
    for st in engine_stages:
        _merge(counters, st.get("counters", {}))
    grouped, sizes = _split_counters(counters)
    quarantine_files = [f for st in engine_stages for f in st.get("quarantine_files", [])]
    record: dict[str, Any] = {
        "tasks": sum(st.get("tasks", 0) for st in engine_stages),
        "tasks_resumed": sum(st.get("tasks_resumed", 0) for st in engine_stages),
        "counters": dict(sorted(counters.items())),
        "per_source": grouped.get("source", {}),
        "per_lang": grouped.get("lang", {}),
        "cluster_sizes": sizes,
        "quarantine_files": quarantine_files,
        "bytes_in": _file_bytes(input_files),
    }
    if entry.type == "tokenize":
        kept = int(outcome.extra["num_documents"])
        if input_rows != kept:
            raise AccountingError(
                f"stage {entry.name!r}: {input_rows} documents came in but the token shards hold {kept}; "
                "every document must be tokenized (the read stage quarantines null texts)"
            )
        per_source = outcome.extra.get("per_source", {})
        record["per_source"] = {"out": {k: int(v["documents"]) for k, v in per_source.items()}}
        record.update(rows_in=input_rows, rows_kept=kept, rows_dropped=0, dropped_by_reason={}, rows_quarantined=0,
                      bytes_out=_file_bytes([str(p) for p in Path(outcome.extra["shards_dir"]).glob("shard-*")]),
                      balanced=True)
        return record
    if entry.type not in DATA_STAGES:
        record.update(rows_in=0, rows_kept=0, rows_dropped=0, dropped_by_reason={}, rows_quarantined=0,
                      bytes_out=0, balanced=True)
        return record
    wanted = outcome.accounting_ops
    ops = [op for st in engine_stages for op in st.get("ops", []) if op["op"] in wanted]
    missing = sorted(set(wanted) - {op["op"] for op in ops})
    if missing:
        raise AccountingError(
            f"stage {entry.name!r}: the engine stats lack the counters of {missing}; cannot account its rows"
        )
    seen_in = sum(op["rows_in"] for op in ops if op["op"] == wanted[0])
    read_quarantined = sum(st.get("rows_read_quarantined", 0) for st in engine_stages)
    dropped_by_reason: dict[str, int] = {}
    for op in ops:
        _merge(dropped_by_reason, op.get("dropped_by_reason", {}))
    dropped = sum(op["rows_dropped"] for op in ops)
    quarantined = sum(op["rows_quarantined"] for op in ops) + read_quarantined
    kept = parquet_rows(outcome.files)
    if entry.type in SOURCE_STAGES:
        rows_in = seen_in + read_quarantined
    else:
        rows_in = int(input_rows or 0)
        if seen_in != rows_in:
            raise AccountingError(
                f"stage {entry.name!r}: the previous stage wrote {rows_in} rows but {wanted[0]} saw {seen_in}"
            )
    if sum(dropped_by_reason.values()) != dropped:
        raise AccountingError(
            f"stage {entry.name!r}: drops by reason sum to {sum(dropped_by_reason.values())}, not {dropped}"
        )
    if rows_in != kept + dropped + quarantined:
        raise AccountingError(
            f"stage {entry.name!r}: rows do not balance: in {rows_in} != kept {kept} (rows in "
            f"{len(outcome.files)} part files) + dropped {dropped} + quarantined {quarantined}"
        )
    record.update(
        rows_in=rows_in,
        rows_kept=kept,
        rows_dropped=dropped,
        dropped_by_reason=dict(sorted(dropped_by_reason.items(), key=lambda kv: -kv[1])),
        rows_quarantined=quarantined,
        bytes_out=_file_bytes(outcome.files),
        balanced=True,
    )
    return record


def _clean_work(stage_dir: Path) -> None:
    """Drop engine scratch of a completed stage; keep quarantined rows (they are data)."""
    work = stage_dir / "_work"
    if not work.is_dir():
        return
    for step in work.iterdir():
        if not step.is_dir():
            continue
        for entry in step.iterdir():
            if entry.name != "quarantine":
                shutil.rmtree(entry) if entry.is_dir() else entry.unlink()


def _execution_dict(execution: Any) -> dict[str, Any]:
    if execution is None:
        return {"executor": "local"}
    if isinstance(execution, dict):
        out = dict(execution)
    else:
        out = {f.name: getattr(execution, f.name) for f in dataclasses.fields(execution)}
    if out.get("work_dir"):
        raise ConfigError(
            "zephyr run keeps its engine work directories under the job directory; drop --work-dir "
            f"(got {out['work_dir']!r}) and pick the job folder with --job-dir"
        )
    out.pop("work_dir", None)
    return out


def run_pipeline(config: PipelineConfig, job_dir: str | os.PathLike[str], *, execution: Any = None, **kwargs: Any):
    """Run (or resume) ``config`` in ``job_dir`` (see ``_run_pipeline``).

    With the local executor, one pool of worker processes serves every engine job of every stage: a pipeline
    runs dozens of short jobs, and starting workers for each would cost seconds apiece.
    """
    from zephyr.executors import reuse_workers

    with reuse_workers(_execution_dict(execution)) as execution_kw:
        return _run_pipeline(config, job_dir, execution=execution_kw, **kwargs)


def _run_pipeline(
    config: PipelineConfig,
    job_dir: str | os.PathLike[str],
    *,
    execution: Any = None,
    from_stage: str | None = None,
    until_stage: str | None = None,
    reporter: ProgressReporter | None = None,
    report: bool = True,
    on_stage_done: Callable[[dict[str, Any]], None] | None = None,
) -> PipelineResult:
    """Run (or resume) ``config`` in ``job_dir``; see the module docstring for layout and resume rules.

    ``execution``: ``zephyr.ExecutionOptions`` or action keywords (``executor``, ``workers``, ``cluster``,
    ``memory_budget``, ``max_retries``, ``progress``); ``work_dir`` is not allowed (the job dir holds them).
    """
    from zephyr.pipelines.columns import check_added_columns
    from zephyr.pipelines.stage_ops import StageContext
    from zephyr.pipelines.stages import RUNNERS, preflight

    from zephyr import job_stats, progress

    execution_kw = _execution_dict(execution)
    reporter = reporter or ProgressReporter()
    if execution_kw.get("progress") is None:
        execution_kw["progress"] = reporter.tty  # progress lines only on a terminal
    enabled = [(i, e) for i, e in enumerate(config.stages) if e.enabled]
    names = [e.name for _, e in enabled]
    for flag, value in (("--from", from_stage), ("--until", until_stage)):
        if value is not None and value not in names:
            raise ConfigError(f"{flag} {value!r}: no enabled stage of that name; stages: {', '.join(names)}")
    start = names.index(from_stage) if from_stage else 0
    stop = names.index(until_stage) if until_stage else len(names) - 1
    if stop < start:
        raise ConfigError(f"--until {until_stage!r} comes before --from {from_stage!r}")
    check_inputs(config)
    check_added_columns(config)  # no stage replaces a column the data has, unless told to
    for _, entry in enabled[start : stop + 1]:
        preflight(entry)

    job = Path(job_dir).resolve()
    job.mkdir(parents=True, exist_ok=True)
    _write_pipeline_yaml(config, job / "pipeline.yaml")
    records: list[dict[str, Any]] = []
    by_name: dict[str, dict[str, Any]] = {}
    upstream = _input_fingerprint(enabled[0][1].config.paths)
    inputs: list[str] = []
    input_rows: int | None = None
    tokenize_dir: Path | None = None
    total = len(enabled)
    for position, (index, entry) in enumerate(enabled, start=1):
        if position - 1 > stop:
            break
        fingerprint = entry.fingerprint(upstream)
        upstream = fingerprint
        stage_dir = job / stage_dir_name(index, entry)
        done = _read_json(stage_dir / SUCCESS)
        complete = done is not None and done.get("fingerprint") == fingerprint
        stats = _read_stage_stats(stage_dir) if complete else None
        if complete and stats is not None and not all(os.path.exists(f) for f in stats.get("files", [])):
            complete = False
        if position - 1 < start:
            if not complete or stats is None:
                raise ConfigError(
                    f"--from {from_stage!r}: stage {entry.name!r} before it is not complete with this config "
                    f"(in {stage_dir}); run without --from first"
                )
            record = {**stats, "status": "skipped"}
            reporter.skipped(position, total, entry, "before --from")
        elif complete and stats is not None and from_stage is None:
            record = {**stats, "status": "skipped"}
            reporter.skipped(position, total, entry, "complete with the same config")
        else:
            started = _read_json(stage_dir / STARTED)
            if from_stage is not None or (started is not None and started.get("fingerprint") != fingerprint) or (
                done is not None and not complete
            ):
                shutil.rmtree(stage_dir, ignore_errors=True)  # outputs of another config, or a forced rerun
            stage_dir.mkdir(parents=True, exist_ok=True)
            _migrate_old_names(stage_dir)
            _write_json(stage_dir / STARTED, {"fingerprint": fingerprint})
            reporter.started(position, total, entry)
            ctx = StageContext(
                entry=entry, pipeline=config, fingerprint=fingerprint, stage_dir=stage_dir, inputs=inputs,
                execution=execution_kw, earlier=by_name, tokenize_dir=tokenize_dir,
            )
            began = time.perf_counter()
            label = f"[{position}/{total}] {entry.name}"  # one progress line per stage, left when it ends
            with job_stats.recording() as jobs, progress.command(label, execution_kw.get("progress")):
                outcome = RUNNERS[entry.type](ctx)  # a stage may run several engine jobs (dedup, tokenize)
            seconds = time.perf_counter() - began
            record = {
                "version": STATS_VERSION,
                "stage": entry.name,
                "type": entry.type,
                "index": index,
                "dir": str(stage_dir),
                "fingerprint": fingerprint,
                "config": entry.to_dict(),
                **account(entry, outcome, input_rows, inputs if inputs else _read_inputs(entry)),
                **job_stats.summarize(jobs),  # tasks, tasks_resumed, task_retries: every engine job of the stage
                "seconds": round(seconds, 3),
                "files": outcome.files,
                "extra": outcome.extra,
            }
            _inherit_inputs(record, records)
            _write_json(stage_dir / STAGE_STATS, record)
            _clean_work(stage_dir)
            _write_json(stage_dir / SUCCESS, {"fingerprint": fingerprint, "finished": time.time()})
            record = {**record, "status": "ran"}
            reporter.finished(position, total, record)
        records.append(record)
        by_name[entry.name] = record
        if on_stage_done is not None:
            on_stage_done(record)
        if entry.type in DATA_STAGES:
            inputs = list(record["files"])
            input_rows = record["rows_kept"]
        if entry.type == "tokenize":
            tokenize_dir = Path(record["extra"]["shards_dir"])
    summary = {
        "version": STATS_VERSION,
        "pipeline": config.name,
        "config": config.path,
        "job_dir": str(job),
        "execution": {
            k: v if isinstance(v, str | int | float | bool | None) else type(v).__name__
            for k, v in execution_kw.items()
            if k != "progress"
        },
        "balanced": all(r.get("balanced", True) for r in records),
        **job_stats.task_totals(r for r in records if r["status"] == "ran"),
        "seconds": round(sum(r["seconds"] for r in records if r["status"] == "ran"), 3),
        "stages": records,
    }
    _write_json(job / "stats.json", summary)
    result = PipelineResult(job_dir=job, stages=records, stats_path=job / "stats.json")
    if report:
        from zephyr.pipelines.report import write_report

        paths = write_report(job)
        result.report, result.html_report = paths.markdown, paths.html
    return result


def _inherit_inputs(record: dict[str, Any], earlier: list[dict[str, Any]]) -> None:
    """Rows per source/language coming into a stage = what the previous data stage wrote (unless counted)."""
    previous = next((r for r in reversed(earlier) if r["type"] in DATA_STAGES), None)
    if previous is None or record["type"] not in (*DATA_STAGES, "tokenize"):
        return
    for key in ("per_source", "per_lang"):
        table = record.setdefault(key, {})
        if "in" not in table and previous.get(key, {}).get("out"):
            table["in"] = dict(previous[key]["out"])


def _write_pipeline_yaml(config: PipelineConfig, path: Path) -> None:
    import yaml

    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(yaml.safe_dump(config.to_dict(), sort_keys=False))
    os.replace(tmp, path)
