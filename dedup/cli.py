"""``zephyr dedup exact|fuzzy|url|paragraph|substring`` and their ``zephyr explain`` twins, declared as
``zephyr.cli.Command``s: the flags are the fields of the method's config (``zephyr.dedup.config``), of the
columns it reads (``DedupColumns``) and of the shared groups (inputs, output, ``DedupRemoval``, execution).

Each command reads its inputs (checked before any work, the input's own ``dup_*`` columns set aside), runs
its method's Dataset function in one worker pool and writes Parquet parts and ``DIR.zephyr/stats.json``
(``zephyr.removal``): the write's stages, the task totals of every engine job, and a ``dedup`` section (the
method's settings, which path ran, the ``dedup/*`` counters, the cluster-size histogram, the row balance).
Its plans are the jobs the Dataset function lists (``_rows.Jobs``), so ``zephyr explain dedup KIND`` prints
the jobs the command runs.
"""

from __future__ import annotations

import dataclasses
import functools
import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from zephyr.dedup.config import (
    DEDUP_APPROX_SHARD_BYTES,
    DUP_COLUMNS,
    DedupColumns,
    ExactDedupConfig,
    FuzzyDedupConfig,
    IndexConfig,
    ParagraphDedupConfig,
    SubstringConfig,
    UrlDedupConfig,
)

from zephyr.cli import Command, Inputs, Output
from zephyr.errors import ConfigError
from zephyr.removal import Removal

if TYPE_CHECKING:
    from zephyr.dataset import Dataset
    from zephyr.options import ExecutionOptions
    from zephyr.physical import PlannedJob
    from zephyr.summary import Summary

GROUPS = {"dedup": "deduplication: exact, url, paragraph, substring, fuzzy (MinHash-LSH)"}

DUP_COLUMNS = {
    "document": DUP_COLUMNS,
    "paragraph": ("dup_paragraphs", "dup_paragraph_bytes"),
    "none": (),
}
"""The columns dedup computes, by level: written in ``annotate`` mode, removed in ``remove`` mode."""


@dataclass(frozen=True)
class DedupRemoval(Removal):
    """What a dedup does with the duplicates it finds (``zephyr.removal.Removal``; its columns are ``dup_*``)."""

    mode: Literal["remove", "annotate"] = "remove"
    """remove: drop duplicates (the default); annotate: add dup_cluster/dup_cluster_size/dup_keep
    (paragraphs: dup_paragraphs/dup_paragraph_bytes)."""
    output_column: str = field(default="dup", metadata={"metavar": "NAME"})
    """--mode annotate: write NAME_cluster, NAME_cluster_size, NAME_keep (paragraphs: NAME_paragraphs,
    NAME_paragraph_bytes); an input's own dup_* columns then pass unchanged, as they always do in --mode
    remove."""

    def rows(self, inputs: Inputs, level: str, output: str | None = None) -> Dataset:
        """The inputs, checked before any work (``output`` None: a plan, with no dropped rows to place),
        with their own ``dup_*`` columns of this ``level`` set aside where dedup's would clash with them."""
        if self.dropped_output and level != "document":
            raise ConfigError(
                "--dropped-output applies to dedup exact, fuzzy and url: paragraph and substring dedup rewrite "
                "rows (leave it out)"
            )
        checked = self if output is not None else dataclasses.replace(self, dropped_output=None)
        format = None if inputs.format == "auto" else inputs.format
        checked.check(inputs.inputs, output or "", DUP_COLUMNS[level], format=format)
        return self.aside(inputs.read(approx_shard_bytes=DEDUP_APPROX_SHARD_BYTES), DUP_COLUMNS[level])

    def finished(self, out: Dataset, level: str = "document") -> Dataset:
        """The dedup's output as written: its columns under their names, the input's own restored."""
        return self.finish(out, DUP_COLUMNS[level])


def _counters(result: Any, prefix: str = "dedup/") -> dict[str, int]:
    from zephyr import job_stats

    totals = job_stats.counter_totals(result.stats.get("stages", []))
    return {k: v for k, v in totals.items() if k.startswith(prefix)}


def _dedup(
    inputs, removal, execution, output, level, extra, dedup, preload=False, reason="duplicate", after=None
):
    """A dedup command: ``dedup(rows, mode=, jobs=)`` (its method's Dataset function, settings bound) on the
    checked inputs of this ``level``. Without ``output``, the jobs it lists (``_rows.Jobs.plans``); else it
    runs in one worker pool with a scratch folder, its figures in ``extra``, and is written (removed rows to
    ``--dropped-output`` with ``reason``); then ``after(execution kwargs, result)`` in the same pool gives
    what a dedup that rewrites rows changed (``rows_changed``, ``bytes_removed``...: in the stats, the
    summary's ``details`` and its human table). ``OUTPUT.zephyr/stats.json``'s ``dedup`` section: ``extra``,
    the write's ``dedup/*`` counters and cluster-size histogram. With ``preload`` the pool's workers load the
    numba kernels at start, while the driver does its own imports."""
    import zephyr.dedup._compiled as compiled
    from zephyr.dedup._rows import Jobs, budget_of, finished, scratch_folder

    from zephyr import job_stats
    from zephyr.executors import reuse_workers
    from zephyr.removal import Unless
    from zephyr.summary import write_summary

    mode = removal.internal_mode
    if output is None:
        finish = functools.partial(removal.finished, level=level)
        budget = budget_of(execution.as_kwargs())
        return Jobs.plans(dedup, removal.rows(inputs, level), mode=mode, budget=budget, finish=finish)
    warm = ("zephyr.dedup._compiled:warm_up",) if preload and compiled.NUMBA_ENABLED else ()
    workers = reuse_workers(execution.as_kwargs(), preload=warm)
    with job_stats.recording() as jobs, workers as kwargs, scratch_folder(kwargs) as tmp:
        rows = removal.rows(inputs, level, output.output)  # while the workers start
        out = dedup(rows, mode=mode, jobs=Jobs(kwargs, extra, scratch=tmp))
        result, stages = removal.write(
            out, output.output, kwargs, Unless("dup_keep", reason), DUP_COLUMNS[level]
        )
        changed = (after(kwargs, result) if after is not None else None) or {}
    counters = _counters(result)
    histogram = finished(counters)["cluster_size_histogram"]
    extra = {**extra, **changed, "counters": counters, "cluster_size_histogram": histogram}
    details = {"kind": extra["kind"], "files": len(result.files), **changed}
    if extra.get("warnings"):
        details["warnings"] = extra["warnings"]
    return write_summary(
        result,
        output.output,
        "dedup",
        extra,
        jobs=jobs,
        stages=stages,
        dropped_output=removal.dropped_output,
        next=f"zephyr tokenize {output.output} --tokenizer tokenizer.json --output tokens/",
        details=details,
        shown=tuple(changed),
    )


# -- the commands: each one function; without ``output`` it returns the plans ``zephyr explain`` prints -------
def exact(
    inputs: Inputs,
    removal: DedupRemoval,
    columns: DedupColumns,
    config: ExactDedupConfig,
    execution: ExecutionOptions,
    output: Output | None = None,
) -> Summary | list[PlannedJob]:
    """Exact dedup of documents. Equal normalized texts (128-bit xxh3) form a cluster; its kept
    row has the largest priority, then the smallest id, then comes first in input order. Its plans: the
    hashes, then the driver's path or the shuffle path."""
    from zephyr.dedup.exact import exact_dedup_dataset

    extra = {"kind": "exact", "normalize": config.normalize, "mode": removal.mode}
    dedup = functools.partial(exact_dedup_dataset, columns=columns, normalize=config.normalize)
    return _dedup(inputs, removal, execution, output, "document", extra, dedup, config.normalize != "none")


def paragraph(
    inputs: Inputs,
    removal: DedupRemoval,
    columns: DedupColumns,
    config: ParagraphDedupConfig,
    execution: ExecutionOptions,
    output: Output | None = None,
) -> Summary | list[PlannedJob]:
    """Remove paragraphs (lines) seen earlier: exact, or one Bloom-filter pass. Exact holds every paragraph
    hash in memory and goes in id order; bloom makes one pass in input order in fixed memory, with false
    positives at most --fp-rate: the filter is finished after the write (``bloom.finished_filter``), its
    figures in the stats."""
    import uuid

    from zephyr.dedup.bloom import bloom_paragraph_dedup_dataset, finished_filter
    from zephyr.dedup.exact import paragraph_dedup_dataset

    extra = dict(kind="paragraph", method=config.method, normalize=config.normalize, mode=removal.mode)
    bloom, partial = config.method == "bloom", None
    if bloom and output is not None and config.save_filter:  # where the task saves its filter
        partial = f"{config.save_filter}.tmp-{uuid.uuid4().hex[:8]}"

    def dedup(rows: Dataset, mode: str, jobs: Any) -> Dataset:
        if bloom:
            text = columns.text_column
            return bloom_paragraph_dedup_dataset(
                rows, config, text_column=text, mode=mode, save_path=partial, jobs=jobs
            )
        return paragraph_dedup_dataset(rows, columns, normalize=config.normalize, mode=mode, jobs=jobs)

    def after(kwargs: dict, result: Any) -> dict[str, int]:
        counters = _counters(result)
        changed = {k: counters.get(f"dedup/{k}", 0) for k in ("rows_changed", "paragraphs_removed")}
        changed["bytes_removed"] = counters.get("dedup/paragraph_bytes_removed", 0)
        if bloom:
            extra.update(finished_filter(config, partial, counters.get("dedup/paragraphs_inserted", 0)))
        return changed

    return _dedup(inputs, removal, execution, output, "paragraph", extra, dedup, after=after)


def url(
    inputs: Inputs,
    removal: DedupRemoval,
    columns: DedupColumns,
    config: UrlDedupConfig,
    execution: ExecutionOptions,
    output: Output | None = None,
) -> Summary | list[PlannedJob]:
    """One row per normalized URL (lower-case host, no default port/fragment/utm_*). The row kept is the
    one exact dedup's keep rule picks; the plans are exact dedup's, on the normalized URL."""
    from zephyr.dedup.exact import URL_DUPLICATE, url_dedup_dataset

    extra = {"kind": "url", "url_column": config.url_column, "mode": removal.mode}
    dedup = functools.partial(url_dedup_dataset, columns=columns, url_column=config.url_column)
    return _dedup(inputs, removal, execution, output, "document", extra, dedup, reason=URL_DUPLICATE)


def substring(
    inputs: Inputs,
    removal: DedupRemoval,
    config: SubstringConfig,
    execution: ExecutionOptions,
    output: Output | None = None,
) -> Summary | list[PlannedJob]:
    """Remove repeats of byte spans of at least --min-bytes (exact substrings). A span is kept at its first
    occurrence in corpus order; the stats hold the bytes removed per source and the most repeated spans."""
    from zephyr.dedup.substring import removed_bytes, substring_dedup_dataset

    # substring dedup cuts spans out of the text and adds no column: flags about added columns are refused
    if removal.mode != "remove" or removal.replace_columns or removal.output_column != "dup":
        raise ConfigError(
            "zephyr dedup substring removes the repeated spans from the text and adds no column: it has no --mode "
            "annotate, and --replace-columns and --output-column do not apply (leave them out)"
        )
    if config.tokenizer and not os.path.exists(config.tokenizer):
        raise ConfigError(f"--tokenizer {config.tokenizer}: no such file")
    extra: dict[str, Any] = {"kind": "substring", "min_doc_bytes": config.min_doc_bytes}

    def after(kwargs: dict, result: Any) -> dict[str, int]:
        extra.update(removed_bytes(result.stats.get("stages", [])))
        return {"rows_changed": extra["docs_changed"], "bytes_removed": extra["bytes_removed"]}

    def dedup(rows: Dataset, mode: str, jobs: Any) -> Dataset:
        return substring_dedup_dataset(rows, config, jobs=jobs)

    return _dedup(inputs, removal, execution, output, "none", extra, dedup, after=after)


def fuzzy(
    inputs: Inputs,
    removal: DedupRemoval,
    columns: DedupColumns,
    config: FuzzyDedupConfig,
    index: IndexConfig,
    execution: ExecutionOptions,
    output: Output | None = None,
) -> Summary | list[PlannedJob]:
    """Near-duplicate dedup with MinHash-LSH, verified. Candidate pairs from LSH buckets are kept when the
    true Jaccard of their shingle sets reaches --threshold, then clustered (anchored by default). The plans
    hold the rules that choose where verification and clusters run."""
    from zephyr.dedup.fuzzy import IndexedDedup

    extra = {"kind": "fuzzy", "config": dataclasses.asdict(config), "mode": removal.mode}
    indexed = IndexedDedup(config, columns, index)

    def written(kwargs: dict, result: Any) -> None:
        """This run's rows (the removed ones tied to their kept row) into the index, after the output."""
        extra["index_written"] = {"path": index.writes, **indexed.write(kwargs)}

    after = written if index.writes is not None else None
    return _dedup(inputs, removal, execution, output, "document", extra, indexed.dedup, True, after=after)


def _command(kind: str, run: Any, config: type, **options: type) -> Command:
    """``zephyr dedup KIND``: run on the threads executor by default (the dedup kernels release the GIL);
    ``run`` without ``output`` gives the plans ``zephyr explain dedup KIND`` prints."""
    groups = {"inputs": Inputs, "output": Output, "removal": DedupRemoval, **options, "config": config}
    then = "the rules" if kind == "paragraph" else "the budget shares"  # bloom's filter is no budget share
    return Command(f"dedup {kind}", run, groups, plans=run, default_executor="threads", then=then)


COMMANDS = [
    _command("exact", exact, ExactDedupConfig, columns=DedupColumns),
    _command("fuzzy", fuzzy, FuzzyDedupConfig, columns=DedupColumns, index=IndexConfig),
    _command("url", url, UrlDedupConfig, columns=DedupColumns),
    _command("paragraph", paragraph, ParagraphDedupConfig, columns=DedupColumns),
    _command("substring", substring, SubstringConfig),
]
"""Dedup's work is Arrow, Parquet and numba ``nogil`` kernels: threads of one process use the cores without
each worker process importing pyarrow, polars and numba first, hence the default executor ``threads`` (the
output is the same bytes on every executor; ``--executor local`` isolates tasks in processes)."""
