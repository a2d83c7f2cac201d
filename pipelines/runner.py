"""Runs a pipeline as a batch job: step by step, resumable, with exact row accounting.

Job directory layout::

    JOB/lock.json                   held while a run uses the folder (``zephyr.io.claim``): a second
                                    ``zephyr run`` on the same job folder is refused naming this one
    JOB/pipeline.yaml               the validated config, as run (paths resolved)
    JOB/stats.json                  the job: one record per step (below), in order, and totals
    JOB/report.md, report.html      the human report (``zephyr.pipelines.report``), plots/ beside them
    JOB/NN-NAME/                    one folder per step, NN = its position in the config: a data step's
        part-00000.parquet, ...     output rows and nothing else, numbered densely from 00000 (published
                                    whole, ``zephyr.io.claim``); tokenize and train steps hold their
        shards/, tokenizer.json, train.jsonl, checkpoints/   files (no Parquet)
    JOB/NN-NAME.zephyr/             the step's sidecar (``zephyr.io.layout``): everything else
        stats.json                  the step record (below)
        _SUCCESS.json               {"fingerprint": ...}: written last; the step is complete
        _STARTED.json               {"fingerprint": ...}: which config the step's files belong to
        work/ACTION/                engine work directories (task markers, spills); removed when the step
                                    completes, except work/*/quarantine/ (quarantined rows, Parquet)
        dropped/, classifier.bin    a heuristic filter's dropped rows, a quality step's trained model
        examples.json               the report's example rows (``zephyr.pipelines.examples``)
        manifest.json               the files the step published (``zephyr.io.claim``)

    So pyarrow, polars, duckdb and HF ``datasets`` read ``JOB/NN-NAME`` as exactly the step's kept rows, and
    ``JOB/NN-NAME.zephyr/dropped`` as exactly its dropped ones. A step folder of the older layout (its
    bookkeeping inside, under ``_`` names) does not resume: the step reruns into the layout above.

Resume. There is one driver: this module decides *which* step runs, and the engine's ``zephyr.resume``
says *how* resume works, for pipeline steps as for engine tasks. A step's fingerprint
(``resume.unit_fingerprint``) covers its config and the fingerprint of the step before it (the ``read`` step:
``resume.files_fingerprint`` of its input files' paths, sizes and version stamps: mtime, or ETag on object
stores). A rerun skips every step that is complete with the same fingerprint (``resume.is_complete``: its
``_SUCCESS.json`` holds it; and its record's files lie in its folder and still have the size and checksum
recorded as they were written, ``checksums``); the first unfinished step reruns with
the same engine work directories, so its finished tasks are skipped too (and ``train`` resumes from its last
checkpoint). A step whose folders belong to another fingerprint (the config changed, or a job folder written by
a zephyr whose fingerprints differ) is cleared first (``resume.begin`` on the sidecar, then the data folder). ``from_step`` reruns that step and
the ones after it from scratch (earlier ones must be complete); ``until_step`` stops after it.

Step record (``NN-NAME.zephyr/stats.json``, version 2): ``step`` (its name), ``type``, ``index``, ``dir``,
``fingerprint``, ``config`` (as fingerprinted), ``rows_in``, ``rows_kept``, ``rows_dropped``
(``dropped_by_reason``), ``rows_quarantined``, ``balanced``; ``bytes_in``/``bytes_out`` (Parquet bytes on
disk), ``seconds``, ``tasks``/``tasks_resumed``/``task_retries`` (over every engine job of the step, one
entry each in ``jobs``), ``per_source``/``per_lang`` (``{"in": {v: rows}, "out":
{...}}``), ``cluster_sizes`` (kept documents by duplicate-cluster size), ``files``, ``checksums`` (per file a
later step reads: ``{"bytes": N, "xxh3_128" | "sha256": hex}``), ``quarantine_files``,
``counters`` (every engine counter) and ``extra`` (tokens, training...). For every data step
``rows_in == rows_kept + rows_dropped + rows_quarantined`` is checked from the engine's per-operator counters
against the row counts of the Parquet files; a mismatch stops the job with ``AccountingError``
(``zephyr.pipelines.step``).

The job's ``stats.json`` (version 2) lists the step records under ``steps``.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from zephyr.pipelines.config import PipelineConfig, StepEntry, check_added_columns, check_inputs
from zephyr.pipelines.step import STEPS, StepContext

from zephyr import resume
from zephyr.errors import ConfigError
from zephyr.io.paths import atomic_write

log = logging.getLogger(__name__)

STEP_STATS = "stats.json"
"""The step record, in the step's sidecar."""
STATS_VERSION = 2
"""The format version of the step records and of the job's ``stats.json`` (both carry it as ``version``)."""


@dataclass
class PipelineResult:
    """What ``run_pipeline`` did: the job folder, a record per step that ran or was skipped, the report."""

    job_dir: Path
    steps: list[dict[str, Any]]
    report: Path | None = None
    html_report: Path | None = None
    stats_path: Path | None = None

    def step(self, name: str) -> dict[str, Any]:
        """The record of the step named ``name``."""
        return next(s for s in self.steps if s["step"] == name)


class ProgressReporter:
    """One line per step on ``stream``: a start line and a result line (the engine draws task bars between
    them on a TTY). Not a TTY: the same lines, plain, and no bars."""

    def __init__(self, stream: TextIO | None = None, *, tty: bool | None = None):
        self.stream = stream if stream is not None else sys.stderr
        self.tty = self.stream.isatty() if tty is None else tty

    def write(self, where: str, entry: StepEntry, text: str) -> None:
        """``[position/total] NAME (TYPE): text``."""
        self.stream.write(f"{where} {entry.name} ({entry.type}): {text}\n")
        self.stream.flush()


def step_dir_name(index: int, entry: StepEntry) -> str:
    return f"{index:02d}-{entry.name}"


def _write_json(path: Path, payload: Any) -> None:
    """A step record or the job's stats, readable (keys in their order), whole or not at all."""
    with atomic_write(path, "w") as f:
        f.write(json.dumps(payload, indent=1, sort_keys=False, default=str) + "\n")


def _complete_record(ctx: StepContext) -> dict[str, Any] | None:
    """The record of a step complete with ``ctx.fingerprint`` whose files still hold the bytes written; None:
    it must run (with a warning naming the record when its files are what is wrong)."""
    stats = resume.read_marker(ctx.side_dir / STEP_STATS, ctx.fingerprint)  # None: torn, or another config's
    if not resume.is_complete(ctx.side_dir, ctx.fingerprint, stats.get("files", []) if stats else None):
        return None
    problem = _files_problem(ctx, stats)
    if problem is not None:
        log.warning("%s: %s; the step reruns", ctx.side_dir / STEP_STATS, problem)
        return None
    return stats


def _files_problem(ctx: StepContext, record: dict[str, Any]) -> str | None:
    """Why the files a complete step's record names cannot be used as they are, or None. Every file a later
    step reads (its parts, the dropped rows a quality step may train on, a tokenize step's shards) must lie in
    the step's folder or its sidecar and have the size and checksum recorded when it was written
    (``checksums``)."""
    checksums = record.get("checksums")
    extra = record.get("extra") if isinstance(record.get("extra"), dict) else {}
    named = [*record.get("files", []), *extra.get("dropped_files", [])]
    if not named and not checksums:
        return None
    if not isinstance(checksums, dict):
        return "it records no checksums of its files (written by an older zephyr)"
    owned = [(str(ctx.step_dir), None), (str(ctx.side_dir), None)]
    for path in [*named, *checksums]:
        if not isinstance(path, str) or not resume.inside(path, owned):
            return f"it names {path!r}, outside the step's folders"
    return resume.check_files({path: checksums.get(path) for path in [*named, *checksums]})


def _execution_dict(execution: Any) -> dict[str, Any]:
    if execution is None:
        return {"executor": "local"}
    out = dict(execution) if isinstance(execution, dict) else execution.as_kwargs()
    if out.get("work_dir"):
        raise ConfigError(
            "zephyr run keeps its engine work directories under the job directory; drop --work-dir "
            f"(got {out['work_dir']!r}) and pick the job folder with --job-dir"
        )
    out.pop("work_dir", None)
    return out


def pipeline_plans(
    config: PipelineConfig, job_dir: str | os.PathLike[str], *, execution: Any = None
) -> list[tuple[str, Any]]:
    """Every enabled step's engine jobs in the order they run (``Step.plans``: the plans ``run`` executes,
    built by the same code), each step's input planned over the lazy output of the step before (the run reads
    that step's files). Nothing runs and nothing is written; input files are listed and their footers read,
    as for any plan."""
    execution_kw = _execution_dict(execution)
    check_inputs(config)
    job = Path(job_dir).resolve()
    enabled = [(i, e) for i, e in enumerate(config.steps) if e.enabled]
    jobs: list[tuple[str, Any]] = []
    planned = None
    for position, (index, entry) in enumerate(enabled, start=1):
        step_dir = job / step_dir_name(index, entry)
        ctx = StepContext(entry, config, "", step_dir, [], execution_kw, planned=planned)
        plans = entry.step.plans(ctx)
        jobs += [
            (f"[{position}/{len(enabled)}] {entry.name} ({entry.type}): {title}", plan)
            for title, plan in plans
        ]
        planned = next((plan for _, plan in reversed(plans) if plan is not None), planned)
    return jobs


def run_pipeline(
    config: PipelineConfig,
    job_dir: str | os.PathLike[str],
    *,
    execution: Any = None,
    from_step: str | None = None,
    until_step: str | None = None,
    reporter: ProgressReporter | None = None,
    report: bool = True,
) -> PipelineResult:
    """Run (or resume) ``config`` in ``job_dir``; see the module docstring for layout and resume rules.

    ``execution``: ``zephyr.ExecutionOptions`` or action keywords (``executor``, ``workers``, ``cluster``,
    ``memory_budget``, ``max_retries``, ``progress``); ``work_dir`` is not allowed (the job dir holds them).
    With the local executor, one pool of worker processes serves every engine job of every step: a pipeline
    runs dozens of short jobs, and starting workers for each would cost seconds apiece.
    """
    import yaml

    from zephyr.executors import reuse_workers
    from zephyr.io import claim

    options = _execution_dict(execution)
    reporter = reporter or ProgressReporter()
    enabled = [(i, e) for i, e in enumerate(config.steps) if e.enabled]
    names = [e.name for _, e in enabled]
    for flag, value in (("--from", from_step), ("--until", until_step)):
        if value is not None and value not in names:
            raise ConfigError(f"{flag} {value!r}: no enabled step of that name; steps: {', '.join(names)}")
    start = names.index(from_step) if from_step else 0
    stop = names.index(until_step) if until_step else len(names) - 1
    if stop < start:
        raise ConfigError(f"--until {until_step!r} comes before --from {from_step!r}")
    # refuse before anything runs: missing inputs, a column a step would replace, a step that cannot run
    check_inputs(config)
    check_added_columns(config)
    for _, entry in enabled[start : stop + 1]:
        entry.step.preflight()
    job = Path(job_dir).resolve()
    # the job folder holds the steps' outputs: never an input's folder, and one run at a time
    claim.check_not_inputs(str(job), enabled[0][1].step.paths, flag="the job folder")
    job.mkdir(parents=True, exist_ok=True)
    with (
        reuse_workers(options) as execution_kw,
        claim.held(str(job / "lock.json"), "the job folder", str(job)),
    ):
        if execution_kw.get("progress") is None:
            execution_kw["progress"] = reporter.tty  # progress lines only on a terminal
        with atomic_write(job / "pipeline.yaml", "w") as f:
            f.write(yaml.safe_dump(config.to_dict(), sort_keys=False))
        records: list[dict[str, Any]] = []
        fingerprint = resume.files_fingerprint(enabled[0][1].step.paths)  # the input files' for the first
        for position, (index, entry) in enumerate(enabled[: stop + 1], start=1):
            fingerprint = entry.fingerprint(fingerprint)
            rows = next((r for r in reversed(records) if STEPS[r["type"]].output == "rows"), None)
            inputs = list(rows["files"]) if rows else []
            step_dir = job / step_dir_name(index, entry)
            earlier = {r["step"]: r for r in records}
            ctx = StepContext(entry, config, fingerprint, step_dir, inputs, execution_kw, earlier)
            where = f"[{position}/{len(enabled)}]"
            done = _complete_record(ctx)
            if position - 1 < start and done is None:  # a step before --from must be complete
                raise ConfigError(
                    f"--from {from_step!r}: step {entry.name!r} before it is not complete with this config "
                    f"(in {step_dir}); run without --from first"
                )
            if done is not None and (position - 1 < start or from_step is None):
                why = "before --from" if position - 1 < start else "complete with the same config"
                reporter.write(where, entry, f"skipped, {why}")
                record = {**done, "status": "skipped"}
            else:
                record = _run_step(ctx, where, index, reporter, rows, fresh=from_step is not None)
            records.append(record)
        stats_path = _write_summary(config, job, records, execution_kw)
        result = PipelineResult(job_dir=job, steps=records, stats_path=stats_path)
        if report:
            from zephyr.pipelines.report import write_report

            result.report, result.html_report = write_report(job)
        return result


def _run_step(
    ctx: StepContext,
    where: str,
    index: int,
    reporter: ProgressReporter,
    previous: dict[str, Any] | None,
    *,
    fresh: bool,
) -> dict[str, Any]:
    """Run one step in its folder, account its rows, write its record, drop its engine scratch and mark it
    done. ``previous``: the record of the last data step before it (its kept rows are this step's input).

    The step's folders are claimed for this fingerprint first (``resume.begin`` on the sidecar); the data
    folder is cleared with them (or when ``fresh``), and whenever the sidecar says nothing about it (a folder
    of the older layout, its bookkeeping inside, or one whose sidecar was removed: its files belong to no
    known run)."""
    from zephyr.pipelines.examples import merge_filter_examples
    from zephyr.pipelines.step import file_bytes

    from zephyr import job_stats, progress
    from zephyr.cli import expect_planned
    from zephyr.io.paths import expand_paths

    entry, step = ctx.entry, ctx.entry.step
    known = (ctx.side_dir / resume.STARTED).is_file()
    if resume.begin(ctx.side_dir, ctx.fingerprint, fresh=fresh) or not known:
        shutil.rmtree(ctx.step_dir, ignore_errors=True)
    reporter.write(where, entry, "running")
    began = time.perf_counter()
    label = f"{where} {entry.name}"  # one progress line per step, left when it ends
    with job_stats.recording() as jobs, progress.command(label, ctx.execution.get("progress")):
        expect_planned(lambda: step.plans(ctx), ctx.execution, f"{entry.name}: ")
        outcome = step.run(ctx)  # a step may run several engine jobs (dedup, tokenize)
    seconds = time.perf_counter() - began
    stages = (outcome.engine_stats or {"stages": []}).get("stages", [])
    totals = job_stats.counter_totals(stages)
    # pipeline/<role>/<key>=<value> → {key: {role: {value: n}}}; pipeline/cluster_size=<n> → sizes
    grouped: dict[str, dict[str, dict[str, int]]] = {}
    sizes: dict[str, int] = {}
    for name, n in totals.items():
        if found := re.fullmatch(r"pipeline/cluster_size=(.*)", name, re.S):
            sizes[found[1]] = n
        elif found := re.fullmatch(r"pipeline/([^/]*)/([^=]*)=(.*)", name, re.S):
            grouped.setdefault(found[2], {}).setdefault(found[1], {})[found[3]] = n
    local = [p for p in getattr(step, "paths", []) if "://" not in p] if step.starts else []
    record = {
        "version": STATS_VERSION,
        "step": entry.name,
        "type": entry.type,
        "index": index,
        "dir": str(ctx.step_dir),
        "fingerprint": ctx.fingerprint,
        "config": entry.to_dict(),  # the config as fingerprinted
        "counters": dict(sorted(totals.items())),
        "per_source": grouped.get("source", {}),
        "per_lang": grouped.get("lang", {}),
        "cluster_sizes": dict(sorted(sizes.items(), key=lambda kv: int(kv[0]))),
        "quarantine_files": job_stats.quarantine_files(stages),
        "bytes_in": file_bytes(ctx.inputs or (expand_paths(local) if local else [])),
        **step.account(entry.name, outcome, previous["rows_kept"] if previous else None),
        **job_stats.summarize(jobs),  # tasks, tasks_resumed, task_retries: every engine job of the step
        "seconds": round(seconds, 3),
        "files": outcome.files,
        "checksums": outcome.checksums,
        "extra": outcome.extra,
    }
    if step.filter_examples:
        outcome.extra["examples"] = str(merge_filter_examples(ctx.side_dir, record["dropped_by_reason"]))
    if previous is not None and step.output != "model":  # rows per source/language coming in, unless counted
        for key in ("per_source", "per_lang"):
            table = record.setdefault(key, {})
            if "in" not in table and previous.get(key, {}).get("out"):
                table["in"] = dict(previous[key]["out"])
    _write_json(ctx.side_dir / STEP_STATS, record)
    resume.drop_scratch(ctx.side_dir / "work")  # quarantined rows stay: they are data
    resume.mark_done(ctx.side_dir, ctx.fingerprint)
    record = {**record, "status": "ran"}
    resumed = (
        f", {record['tasks_resumed']} of {record['tasks']} tasks resumed"
        if record.get("tasks_resumed")
        else ""
    )
    if record.get("task_retries"):
        resumed += f", {record['task_retries']} task retries"
    body = STEPS[entry.type].done_line(record)
    reporter.write(where, entry, f"done in {seconds:.1f}s: {body}{resumed}")
    return record


def _write_summary(
    config: PipelineConfig, job: Path, records: list[dict[str, Any]], execution: dict[str, Any]
) -> Path:
    """The job's ``stats.json``: every step's record in order, and totals over the steps that ran."""
    from zephyr import job_stats

    ran = [r for r in records if r["status"] == "ran"]
    summary = {
        "version": STATS_VERSION,
        "pipeline": config.name,
        "config": config.path,
        "job_dir": str(job),
        "execution": {
            k: v if isinstance(v, str | int | float | bool | None) else type(v).__name__
            for k, v in execution.items()
            if k != "progress"
        },
        "balanced": all(r.get("balanced", True) for r in records),
        **job_stats.task_totals(ran),
        "seconds": round(sum(r["seconds"] for r in ran), 3),
        "steps": records,
    }
    _write_json(job / "stats.json", summary)
    return job / "stats.json"
