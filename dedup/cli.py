"""``zephyr dedup exact|fuzzy|url|paragraph|substring`` and their ``zephyr explain`` twins, declared as
``zephyr.cli.Command``s: the flags are the fields of the method's config (``zephyr.dedup.config``), of the
columns it reads (``DedupColumns``) and of the shared groups (inputs, output, ``DedupRemoval``, execution).

Each command reads its inputs (checked before any work, the input's own ``dup_*`` columns set aside), runs
its method's Dataset function in one worker pool and writes Parquet parts and ``DIR.zephyr/stats.json``
(``zephyr.removal``): the write's stages, the task totals of every engine job, and a ``dedup`` section (the
method's settings, which path ran, the ``dedup/*`` counters, the cluster-size histogram, the row balance).
Its plans are the method's ``*_plans``, so ``zephyr explain dedup KIND`` prints the jobs the command runs.
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

GROUPS = {
    "dedup": "deduplication: exact (documents, paragraphs), url, paragraph, substring, fuzzy (MinHash-LSH)"
}

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
                "--dropped-output needs --level document (dedup exact, fuzzy or url): paragraph and substring "
                "dedup rewrite rows"
            )
        checked = self if output is not None else dataclasses.replace(self, dropped_output=None)
        format = None if inputs.format == "auto" else inputs.format
        checked.check(inputs.inputs, output or "", DUP_COLUMNS[level], format=format)
        return self.aside(inputs.read(approx_shard_bytes=DEDUP_APPROX_SHARD_BYTES), DUP_COLUMNS[level])

    def finished(self, out: Dataset, level: str = "document") -> Dataset:
        """The dedup's output as written: its columns under their names, the input's own restored."""
        return self.finish(out, DUP_COLUMNS[level])


def _workers(execution: ExecutionOptions, preload: bool = False):
    """One worker pool for every engine job of a command; with ``preload`` workers load the numba kernels at
    start, while the driver does its own imports."""
    import zephyr.dedup._compiled as compiled

    from zephyr.executors import reuse_workers

    warm = ("zephyr.dedup._compiled:warm_up",) if preload and compiled.NUMBA_ENABLED else ()
    return reuse_workers(execution.as_kwargs(), preload=warm)


def _counters(result: Any, prefix: str = "dedup/") -> dict[str, int]:
    from zephyr import job_stats

    totals = job_stats.counter_totals(result.stats.get("stages", []))
    return {k: v for k, v in totals.items() if k.startswith(prefix)}


def _summary(
    result: Any, output: Output, removal: DedupRemoval, jobs: list, extra: dict, routed=None, changed=None
) -> Summary:
    """Write ``OUTPUT.zephyr/stats.json`` (its ``dedup`` section: ``extra``, the write's ``dedup/*`` counters
    and cluster-size histogram) and return the command's ``Summary``. ``changed``: what a dedup that rewrites
    rows changed in them (``rows_changed``, ``bytes_removed``...), in the stats, the summary's ``details``
    and its human table."""
    counters = _counters(result)
    sizes = {k.split("=", 1)[1]: v for k, v in counters.items() if k.startswith("dedup/cluster_size=")}
    histogram = dict(sorted(sizes.items(), key=lambda kv: int(kv[0])))
    changed = changed or {}
    extra = {**extra, **changed, "counters": counters, "cluster_size_histogram": histogram}
    if routed is not None:
        extra["dropped_output"] = removal.dropped_output
    details = {"kind": extra["kind"], "files": len(result.files), **changed}
    if extra.get("warnings"):
        details["warnings"] = extra["warnings"]
    return removal.summary(
        result,
        output.output,
        jobs,
        section="dedup",
        extra=extra,
        routed=routed,
        next=f"zephyr tokenize {output.output} --tokenizer tokenizer.json --output tokens/",
        details=details,
        shown=tuple(changed),
    )


def _documents(
    inputs, removal, execution, output, extra, run, plans, preload=False, reason="duplicate", after=None
):
    """A document dedup. Without ``output``, its ``plans(rows, budget=, mode=, finish=)``; else ``run(rows,
    mode=, execution=, stats=extra)`` (its Dataset function, which puts its figures in ``extra``) in one
    worker pool, written (removed rows to ``--dropped-output`` with ``reason``), then ``after(execution
    kwargs)`` in the same pool."""
    from zephyr.dedup._rows import budget_of

    from zephyr import job_stats
    from zephyr.removal import Unless

    mode = removal.internal_mode
    if output is None:
        budget = budget_of(execution.as_kwargs())
        return plans(removal.rows(inputs, "document"), budget=budget, mode=mode, finish=removal.finished)
    with job_stats.recording() as jobs, _workers(execution, preload) as kwargs:
        rows = removal.rows(inputs, "document", output.output)  # while the workers start
        out = run(rows, mode=mode, execution=kwargs, stats=extra)
        result, routed = removal.write(
            out, output.output, kwargs, Unless("dup_keep", reason), DUP_COLUMNS["document"]
        )
        if after is not None:
            after(kwargs)
    return _summary(result, output, removal, jobs, extra, routed)


def _paragraph(inputs, removal, columns, config: ParagraphDedupConfig, execution, output, extra):
    """``zephyr dedup paragraph`` (and ``exact --level paragraph``): exact (``paragraph_dedup_dataset``) or
    with a Bloom filter (``bloom_paragraph_dedup_dataset``), the output written, the filter finished
    (``bloom.finished_filter``) and its figures in ``extra``; without ``output`` the one job (bloom: and its
    filter's size)."""
    import uuid

    from zephyr.dedup.bloom import BloomFilter, bloom_paragraph_dedup_dataset, finished_filter
    from zephyr.dedup.exact import paragraph_dedup_dataset

    from zephyr import job_stats

    bloom, partial = config.method == "bloom", None
    if bloom and config.load_filter is None and config.expected is not None:  # sized, not made: no work yet
        bits, hashes = BloomFilter.sizing(config.expected, config.fp_rate)
        sized = f"sized for --expected {config.expected:,} at --fp-rate {config.fp_rate:g}"
    elif bloom:  # flags that cannot load a filter (or size one) are refused before any work
        loaded = BloomFilter.of(config)
        bits, hashes, sized = loaded.num_bits, loaded.num_hashes, f"loaded from {config.load_filter}"
    if bloom and output is not None and config.save_filter:  # where the task saves its filter
        partial = f"{config.save_filter}.tmp-{uuid.uuid4().hex[:8]}"
    rows = removal.rows(inputs, "paragraph", None if output is None else output.output)
    if bloom:
        text, mode = columns.text_column, removal.mode
        out = bloom_paragraph_dedup_dataset(rows, config, text_column=text, mode=mode, save_path=partial)
    else:
        out = paragraph_dedup_dataset(rows, columns, normalize=config.normalize, mode=removal.mode)
    out = removal.finished(out, "paragraph")
    if output is None and not bloom:
        return [("job 1: the output (rows in one partition, paragraphs seen earlier removed)", out)]
    if output is None:
        saved = f"; saved to {config.save_filter} after the run" if config.save_filter else ""
        held = f"the filter ({(bits + 7) // 8:,} bytes, {hashes} probes a paragraph, {sized}) is held by the one task"
        title = (
            "job 1: the output, one task in input order (reshard(1)), paragraphs the filter has seen removed"
        )
        return [(title, out), (f"{held}, outside the budget's shares{saved}", None)]
    with job_stats.recording() as jobs, _workers(execution) as kwargs:
        result = out.write_parquet(output.output, **kwargs)
    counters = _counters(result)
    changed = {k: counters.get(f"dedup/{k}", 0) for k in ("rows_changed", "paragraphs_removed")}
    changed["bytes_removed"] = counters.get("dedup/paragraph_bytes_removed", 0)
    if bloom:
        extra.update(finished_filter(config, partial, counters.get("dedup/paragraphs_inserted", 0)))
    return _summary(result, output, removal, jobs, extra, changed=changed)


# -- the commands: each one function; without ``output`` it returns the plans ``zephyr explain`` prints -------
def exact(
    inputs: Inputs,
    removal: DedupRemoval,
    columns: DedupColumns,
    config: ExactDedupConfig,
    execution: ExecutionOptions,
    output: Output | None = None,
) -> Summary | list[PlannedJob]:
    """Exact dedup of documents or paragraphs. Equal normalized texts (128-bit xxh3) form a cluster; its kept
    row has the largest priority, then the smallest id, then comes first in input order. Its plans: the
    hashes, then the driver's path or the shuffle path."""
    from zephyr.dedup.exact import exact_dedup_dataset, exact_plans

    extra = {"kind": "exact", "level": config.level, "normalize": config.normalize, "mode": removal.mode}
    if config.level == "paragraph":
        paragraphs = ParagraphDedupConfig(normalize=config.normalize)
        return _paragraph(inputs, removal, columns, paragraphs, execution, output, extra)
    run = functools.partial(exact_dedup_dataset, columns=columns, normalize=config.normalize)
    plans = functools.partial(exact_plans, columns=columns, normalize=config.normalize)
    return _documents(
        inputs, removal, execution, output, extra, run, plans, preload=config.normalize != "none"
    )


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
    positives at most --fp-rate."""
    extra = dict(kind="paragraph", method=config.method, normalize=config.normalize, mode=removal.mode)
    return _paragraph(inputs, removal, columns, config, execution, output, extra)


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
    from zephyr.dedup.exact import URL_DUPLICATE, url_dedup_dataset, url_plans

    extra = {"kind": "url", "url_column": config.url_column, "mode": removal.mode}
    run = functools.partial(url_dedup_dataset, columns=columns, url_column=config.url_column)
    plans = functools.partial(url_plans, columns=columns, url_column=config.url_column)
    return _documents(inputs, removal, execution, output, extra, run, plans, reason=URL_DUPLICATE)


def substring(
    inputs: Inputs,
    removal: DedupRemoval,
    config: SubstringConfig,
    execution: ExecutionOptions,
    output: Output | None = None,
) -> Summary | list[PlannedJob]:
    """Remove repeats of byte spans of at least --min-bytes (exact substrings). A span is kept at its first
    occurrence in corpus order; the stats hold the bytes removed per source and the most repeated spans."""
    from zephyr.dedup._rows import budget_of, scratch_folder
    from zephyr.dedup.substring import SHORT_DOC, removed_bytes, substring_dedup_dataset, substring_plans

    from zephyr import job_stats

    # substring dedup cuts spans out of the text and adds no column: flags about added columns are refused
    if removal.mode != "remove" or removal.replace_columns or removal.output_column != "dup":
        raise ConfigError(
            "zephyr dedup substring removes the repeated spans from the text and adds no column: it has no --mode "
            "annotate, and --replace-columns and --output-column do not apply (leave them out)"
        )
    if config.tokenizer and not os.path.exists(config.tokenizer):
        raise ConfigError(f"--tokenizer {config.tokenizer}: no such file")
    if output is None:
        return substring_plans(removal.rows(inputs, "none"), config, budget=budget_of(execution.as_kwargs()))
    info: dict[str, Any] = {}
    with job_stats.recording() as jobs, _workers(execution) as kwargs, scratch_folder(kwargs) as scratch:
        rows = removal.rows(inputs, "none", output.output)  # while the workers start
        out = substring_dedup_dataset(rows, config, execution=kwargs, scratch=scratch, stats=info)
        result = out.write_parquet(output.output, **kwargs)
    stages = result.stats.get("stages", [])
    removed = removed_bytes(stages)
    info.update(
        kind="substring",
        min_doc_bytes=config.min_doc_bytes,
        **removed,
        docs_dropped_short=sum(
            op.get("dropped_by_reason", {}).get(SHORT_DOC, 0) for st in stages for op in st["ops"]
        ),
    )
    changed = {"rows_changed": removed["docs_changed"], "bytes_removed": removed["bytes_removed"]}
    return _summary(result, output, removal, jobs, info, changed=changed)


def _opened_index(index: IndexConfig, config: FuzzyDedupConfig):
    """The opened ``--index`` (checked against ``config`` before any work), after checking the flags agree."""
    from zephyr.dedup.index import open_index

    if index.update_index and index.index is None:
        raise ConfigError("--update-index needs --index DIR (the index to add to)")
    if index.index is not None and index.write_index is not None:
        raise ConfigError(
            "--write-index starts a new index; to add to --index DIR, pass --update-index instead"
        )
    if index.write_index is not None and open_index(index.write_index, config, missing_ok=True) is not None:
        raise ConfigError(
            f"a signature index already exists at {index.write_index}; "
            f"add to it with --index {index.write_index} --update-index"
        )
    return open_index(index.index, config) if index.index is not None else None


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
    from zephyr.dedup._rows import StripRowNumbers
    from zephyr.dedup.fuzzy import fuzzy_dedup_dataset, fuzzy_plans
    from zephyr.dedup.index import write_generation

    bands, rows_per_band = config.bands_rows()
    extra = {"kind": "fuzzy", "config": config.to_dict(), "bands": bands, "rows": rows_per_band}
    extra.update(lsh_threshold=config.lsh_threshold, mode=removal.mode)
    indexing, annotated = index.write_index is not None or index.update_index, []

    def run(rows: Dataset, mode: str, **kwargs: Any) -> Dataset:
        opened, annotating = _opened_index(index, config), "annotate" if indexing else mode
        out = fuzzy_dedup_dataset(
            rows, config, columns, mode=annotating, index=opened, row_numbers=indexing, **kwargs
        )
        annotated.append(out)
        return out.map_batches(StripRowNumbers(mode), name="dedup.fuzzy.output") if indexing else out

    def written(kwargs: dict) -> None:
        """This run's rows (the removed ones tied to their kept row) into the index, after the output."""
        target = index.write_index or index.index
        create = index.write_index is not None
        entry = write_generation(target, annotated[0], config, columns, create=create, execution=kwargs)
        extra["index_written"] = {"path": target, **entry}

    plans = functools.partial(fuzzy_plans, config=config, columns=columns, index=bool(index.index))
    after = written if indexing else None
    return _documents(inputs, removal, execution, output, extra, run, plans, preload=True, after=after)


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
