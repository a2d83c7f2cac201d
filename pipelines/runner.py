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

Resume. There is one driver: this module decides *which* stage runs, and the engine's ``zephyr.resume``
says *how* resume works, for pipeline stages as for engine tasks. A stage's fingerprint
(``resume.unit_fingerprint``) covers its config and the fingerprint of the stage before it (the ``read`` stage:
``resume.files_fingerprint`` of its input files' paths, sizes and version stamps: mtime, or ETag on object
stores). A rerun skips every stage that is complete with the same fingerprint (``resume.is_complete``: its
``_SUCCESS.json`` holds it and the files its record names still exist); the first unfinished stage reruns with
the same engine work directories, so its finished tasks are skipped too (and ``train`` resumes from its last
checkpoint). A stage whose folder belongs to another fingerprint (the config changed, or a job folder written by
a zephyr whose fingerprints differ) is cleared first (``resume.begin``). ``from_stage`` reruns that stage and
the ones after it from scratch (earlier ones must be complete); ``until_stage`` stops after it.

Stage record (``_stats.json`` of a stage, version 1): ``rows_in``, ``rows_kept``, ``rows_dropped``
(``dropped_by_reason``), ``rows_quarantined``, ``balanced``; ``bytes_in``/``bytes_out`` (Parquet bytes on
disk), ``seconds``, ``tasks``/``tasks_resumed``/``task_retries`` (over every engine job of the stage, one
entry each in ``jobs``), ``per_source``/``per_lang`` (``{"in": {v: rows}, "out":
{...}}``), ``cluster_sizes`` (kept documents by duplicate-cluster size), ``files``, ``quarantine_files``,
``counters`` (every engine counter) and ``extra`` (tokens, training...). For every data stage
``rows_in == rows_kept + rows_dropped + rows_quarantined`` is checked from the engine's per-operator counters
against the row counts of the Parquet files; a mismatch stops the job with ``AccountingError``
(``zephyr.pipelines.accounting``).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import shutil
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from zephyr.pipelines.accounting import AccountingError, account, inherit_inputs, read_inputs
from zephyr.pipelines.config import DATA_STAGES, PipelineConfig, StageEntry, check_inputs
from zephyr.pipelines.records import rows_rewritten

from zephyr import resume
from zephyr.errors import ConfigError
from zephyr.io.paths import atomic_write
from zephyr.resume import STARTED, SUCCESS

__all__ = [
    "AccountingError",
    "PipelineResult",
    "ProgressReporter",
    "STARTED",
    "STATS_VERSION",
    "SUCCESS",
    "account",
    "run_pipeline",
    "stage_dir_name",
]

log = logging.getLogger(__name__)

STATS_VERSION = 1
STAGE_STATS = "_stats.json"
OLD_STAGE_STATS = "stats.json"
"""The stage record's name in job folders made before the ``_`` rule: read, never written (for one release)."""
_OLD_RENAMES = (("classifier.bin", "_classifier.bin"), ("classifier.fingerprint", "_classifier.fingerprint"))


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
    """A stage record or the job's stats, readable (keys in their order), whole or not at all."""
    with atomic_write(path, "w") as f:
        f.write(json.dumps(payload, indent=1, sort_keys=False, default=str) + "\n")


def _read_stage_stats(stage_dir: Path) -> dict[str, Any] | None:
    """A complete stage's record: ``_stats.json``, or ``stats.json`` written by an older zephyr (a job folder
    made before the rename resumes instead of rerunning its finished stages)."""
    stats = _read_json(stage_dir / STAGE_STATS)
    return stats if stats is not None else _read_json(stage_dir / OLD_STAGE_STATS)


def _complete_record(stage_dir: Path, fingerprint: str) -> dict[str, Any] | None:
    """The record of a stage complete with ``fingerprint`` whose files still exist; None: it must run."""
    stats = _read_stage_stats(stage_dir)
    return stats if resume.is_complete(stage_dir, fingerprint, stats.get("files", []) if stats else None) else None


def _migrate_old_names(stage_dir: Path) -> None:
    """Resuming a stage an older zephyr began: its files named without ``_`` would be read as data by readers
    of the folder. A trained classifier takes its new name (and is reused); a stale record and dropped rows
    go (the stage writes them again)."""
    for old, new in _OLD_RENAMES:
        if (stage_dir / old).is_file() and not (stage_dir / new).exists():
            os.replace(stage_dir / old, stage_dir / new)
    (stage_dir / OLD_STAGE_STATS).unlink(missing_ok=True)
    shutil.rmtree(stage_dir / "dropped", ignore_errors=True)


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


@dataclass
class _Run:
    """One run of a pipeline: its config, folder and options, and what flows from one stage to the next."""

    config: PipelineConfig
    job: Path
    execution: dict[str, Any]
    reporter: ProgressReporter
    total: int
    upstream: str
    """The fingerprint of the stage before (before the first: of the read stage's input files)."""
    records: list[dict[str, Any]] = field(default_factory=list)
    by_name: dict[str, dict[str, Any]] = field(default_factory=dict)
    inputs: list[str] = field(default_factory=list)
    """Parquet parts of the last data stage: the next stage's input."""
    input_rows: int | None = None
    tokenize_dir: Path | None = None

    def advance(self, entry: StageEntry, record: dict[str, Any]) -> None:
        """Record a stage that ran or was skipped; its outputs become the next stage's inputs."""
        self.records.append(record)
        self.by_name[entry.name] = record
        if entry.type in DATA_STAGES:
            self.inputs = list(record["files"])
            self.input_rows = record["rows_kept"]
        if entry.type == "tokenize":
            self.tokenize_dir = Path(record["extra"]["shards_dir"])


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
    execution_kw = _execution_dict(execution)
    reporter = reporter or ProgressReporter()
    if execution_kw.get("progress") is None:
        execution_kw["progress"] = reporter.tty  # progress lines only on a terminal
    enabled = [(i, e) for i, e in enumerate(config.stages) if e.enabled]
    start, stop = _stage_range([e.name for _, e in enabled], from_stage, until_stage)
    _check(config, [entry for _, entry in enabled[start : stop + 1]])

    job = Path(job_dir).resolve()
    job.mkdir(parents=True, exist_ok=True)
    _write_pipeline_yaml(config, job / "pipeline.yaml")
    run = _Run(config, job, execution_kw, reporter, len(enabled), resume.files_fingerprint(enabled[0][1].config.paths))
    for position, (index, entry) in enumerate(enabled[: stop + 1], start=1):
        fingerprint = entry.fingerprint(run.upstream)
        run.upstream = fingerprint
        stage_dir = job / stage_dir_name(index, entry)
        record = _skipped_record(run, position, entry, stage_dir, fingerprint, before_from=position - 1 < start,
                                 from_stage=from_stage)
        if record is None:
            record = _run_stage(run, position, index, entry, stage_dir, fingerprint, fresh=from_stage is not None)
        run.advance(entry, record)
        if on_stage_done is not None:
            on_stage_done(record)
    result = PipelineResult(job_dir=job, stages=run.records, stats_path=_write_summary(run))
    if report:
        from zephyr.pipelines.report import write_report

        paths = write_report(job)
        result.report, result.html_report = paths.markdown, paths.html
    return result


def _stage_range(names: list[str], from_stage: str | None, until_stage: str | None) -> tuple[int, int]:
    """Positions (among the enabled stages) of the first stage to run and the last: ``--from``/``--until``."""
    for flag, value in (("--from", from_stage), ("--until", until_stage)):
        if value is not None and value not in names:
            raise ConfigError(f"{flag} {value!r}: no enabled stage of that name; stages: {', '.join(names)}")
    start = names.index(from_stage) if from_stage else 0
    stop = names.index(until_stage) if until_stage else len(names) - 1
    if stop < start:
        raise ConfigError(f"--until {until_stage!r} comes before --from {from_stage!r}")
    return start, stop


def _check(config: PipelineConfig, to_run: list[StageEntry]) -> None:
    """Refuse before anything runs: missing inputs, a column a stage would replace, a stage that cannot run."""
    from zephyr.pipelines.columns import check_added_columns
    from zephyr.pipelines.stages import preflight

    check_inputs(config)
    check_added_columns(config)  # no stage replaces a column the data has, unless told to
    for entry in to_run:
        preflight(entry)


def _skipped_record(
    run: _Run, position: int, entry: StageEntry, stage_dir: Path, fingerprint: str, *, before_from: bool,
    from_stage: str | None,
) -> dict[str, Any] | None:
    """The record of a stage that need not run (complete with this fingerprint, or before ``--from``); None:
    it runs. A stage before ``--from`` must be complete."""
    done = _complete_record(stage_dir, fingerprint)
    if before_from:
        if done is None:
            raise ConfigError(
                f"--from {from_stage!r}: stage {entry.name!r} before it is not complete with this config "
                f"(in {stage_dir}); run without --from first"
            )
        run.reporter.skipped(position, run.total, entry, "before --from")
        return {**done, "status": "skipped"}
    if done is not None and from_stage is None:
        run.reporter.skipped(position, run.total, entry, "complete with the same config")
        return {**done, "status": "skipped"}
    return None


def _run_stage(
    run: _Run, position: int, index: int, entry: StageEntry, stage_dir: Path, fingerprint: str, *, fresh: bool
) -> dict[str, Any]:
    """Run one stage in its folder (cleared first if it holds another fingerprint's files, or ``fresh``),
    account its rows, write its record, drop its engine scratch and mark it done."""
    from zephyr.pipelines.stage_ops import StageContext
    from zephyr.pipelines.stages import RUNNERS

    from zephyr import job_stats, progress

    resume.begin(stage_dir, fingerprint, fresh=fresh)
    _migrate_old_names(stage_dir)
    run.reporter.started(position, run.total, entry)
    ctx = StageContext(
        entry=entry, pipeline=run.config, fingerprint=fingerprint, stage_dir=stage_dir, inputs=run.inputs,
        execution=run.execution, earlier=run.by_name, tokenize_dir=run.tokenize_dir,
    )
    began = time.perf_counter()
    label = f"[{position}/{run.total}] {entry.name}"  # one progress line per stage, left when it ends
    with job_stats.recording() as jobs, progress.command(label, run.execution.get("progress")):
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
        **account(entry, outcome, run.input_rows, run.inputs if run.inputs else read_inputs(entry)),
        **job_stats.summarize(jobs),  # tasks, tasks_resumed, task_retries: every engine job of the stage
        "seconds": round(seconds, 3),
        "files": outcome.files,
        "extra": outcome.extra,
    }
    inherit_inputs(record, run.records)
    _write_json(stage_dir / STAGE_STATS, record)
    resume.drop_scratch(stage_dir / "_work")  # quarantined rows stay: they are data
    resume.mark_done(stage_dir, fingerprint)
    record = {**record, "status": "ran"}
    run.reporter.finished(position, run.total, record)
    return record


def _write_summary(run: _Run) -> Path:
    """The job's ``stats.json``: every stage's record in order, and totals over the stages that ran."""
    from zephyr import job_stats

    ran = [r for r in run.records if r["status"] == "ran"]
    summary = {
        "version": STATS_VERSION,
        "pipeline": run.config.name,
        "config": run.config.path,
        "job_dir": str(run.job),
        "execution": {
            k: v if isinstance(v, str | int | float | bool | None) else type(v).__name__
            for k, v in run.execution.items()
            if k != "progress"
        },
        "balanced": all(r.get("balanced", True) for r in run.records),
        **job_stats.task_totals(ran),
        "seconds": round(sum(r["seconds"] for r in ran), 3),
        "stages": run.records,
    }
    _write_json(run.job / "stats.json", summary)
    return run.job / "stats.json"


def _write_pipeline_yaml(config: PipelineConfig, path: Path) -> None:
    import yaml

    with atomic_write(path, "w") as f:
        f.write(yaml.safe_dump(config.to_dict(), sort_keys=False))
