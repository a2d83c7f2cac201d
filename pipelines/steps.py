"""Adapters from pipeline steps to the other packages' APIs — the one place that knows their call shapes.

Each step type (``zephyr.pipelines.config.STEP_TYPES``) has a ``run_<type>(ctx) -> StepOutcome`` here. A data
step reads the previous step's Parquet parts, runs its work on the engine with ``ctx.engine(...)`` (which
carries a work directory under the step folder, so a rerun skips finished tasks), and writes
``part-*.parquet`` into its step folder.

Accounting. Every data step ends its plan with operators of this module, named ``pipeline.<step>.*``:

- the step's *accounting ops* (``StepOutcome.accounting_ops``) are the ``map_batches`` ops that keep, drop
  (counted by reason) or quarantine documents; the runner sums their engine counters and checks
  ``rows_in = kept + dropped + quarantined`` against the row counts of the Parquet files themselves;
- ``CountValues`` adds counters ``pipeline/<role>/<column>=<value>`` (rows per source and per language) that
  the report turns into retention tables; ``RemoveDuplicates`` adds ``pipeline/cluster_size=<n>`` (kept
  documents whose duplicate cluster had n members: the cluster-size histogram).

The packages behind the adapters: ``zephyr.pipelines.quality`` (normalize, langid, heuristics, classifier),
``zephyr.dedup`` (exact and fuzzy dedup, engine stages in annotate mode), ``zephyr.tokenize``
(``write_token_shards``; ``train_tokenizer``, the function of ``zephyr tokenizer train``, makes the BPE of a
pipeline without a tokenizer) and ``zephyr.trainer`` (``train``).
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
from zephyr.pipelines.step_ops import (
    CountValues,
    MinScoreFilter,
    PrepareRows,
    RemoveDuplicates,
    StepContext,
    StepOutcome,
    dedup_inputs,
    finish_step,
    restore_dedup_columns,
)
from zephyr.pipelines.web.steps import run_extract, run_substring_dedup, run_url_dedup, run_url_filter

from zephyr.errors import ConfigError, InputError
from zephyr.io.layout import remove_folder
from zephyr.io.parquet import parquet_rows

if TYPE_CHECKING:
    from zephyr.pipelines.config import StepEntry

__all__ = ["RUNNERS", "preflight", "read_train_log"]
"""The adapters' shared context, outcome and operators are in ``zephyr.pipelines.step_ops``."""

log = logging.getLogger(__name__)


# -- step adapters --------------------------------------------------------------------------------------
def run_read(ctx: StepContext) -> StepOutcome:
    import zephyr
    from zephyr.io.paths import input_files
    from zephyr.io.sources import check_text_inputs

    cfg = ctx.entry.config
    p = ctx.pipeline
    files, fmt = input_files(cfg.paths, cfg.format)
    check_text_inputs(files, p.text_column, format=fmt)  # a non-text column: one line naming the input file
    ds = zephyr.read(
        files,
        format=fmt,
        approx_shard_bytes=cfg.approx_shard_bytes,
        on_error=cfg.on_error,
        unify_schemas=cfg.unify_schemas,  # files that disagree: zephyr.io.input_schema
        schema=cfg.schema,
    )
    prepare = f"pipeline.{ctx.entry.name}.prepare"
    ds = ds.map_batches(
        PrepareRows(p.text_column, p.id_column, p.source_column, cfg.source, p.lang_column), name=prepare
    )
    if cfg.num_shards:
        ds = ds.reshard(cfg.num_shards)
    return finish_step(ctx, ds, (prepare,))


def run_normalize(ctx: StepContext) -> StepOutcome:
    from zephyr.pipelines.quality.batch_ops import Normalize

    op = f"pipeline.{ctx.entry.name}.normalize"
    normalize = Normalize(ctx.entry.config.normalize, ctx.pipeline.text_column)
    return finish_step(ctx, ctx.read_inputs().map_batches(normalize, name=op), (op,))


def run_langid(ctx: StepContext) -> StepOutcome:
    from zephyr.pipelines.columns import lang_columns
    from zephyr.pipelines.examples import ReasonGroups, filter_collector, filter_examples
    from zephyr.pipelines.quality.batch_ops import LanguageFilter
    from zephyr.pipelines.quality.langid import LangIdConfig, LanguageIdentifier
    from zephyr.pipelines.quality.lid_model import ensure_lid_model

    cfg = ctx.entry.config
    lang_column, score_column = lang_columns(ctx.entry, ctx.pipeline)
    model = cfg.model or str(ensure_lid_model())
    identify = f"pipeline.{ctx.entry.name}.identify"
    keep = f"pipeline.{ctx.entry.name}.filter"
    lid = LangIdConfig(
        model_path=model, max_chars=cfg.max_chars, lang_column=lang_column, score_column=score_column
    )
    verdict = LanguageFilter(
        tuple(cfg.languages) if cfg.languages else None, cfg.min_score, lang_column, score_column
    )
    ds = (
        ctx.read_inputs()
        .map_batches(LanguageIdentifier(lid, ctx.pipeline.text_column, cfg.replace_columns), name=identify)
        .map_batches(CountValues("in", (("lang", lang_column),)), name=f"pipeline.{ctx.entry.name}.count_in")
        .map_batches(
            filter_collector(ctx, ReasonGroups(verdict.reasons)), name=f"pipeline.{ctx.entry.name}.examples"
        )
        .map_batches(verdict, name=keep)
    )
    return filter_examples(ctx, finish_step(ctx, ds, (identify, keep)))


def run_heuristic_filter(ctx: StepContext) -> StepOutcome:
    from zephyr.pipelines.examples import ReasonGroups, filter_collector, filter_examples
    from zephyr.pipelines.quality.batch_ops import FilterAnnotator, RouteByReason, reason_aside
    from zephyr.pipelines.quality.filters import DROP_REASON, NULL_TEXT

    import zephyr
    from zephyr.removal import set_aside

    cfg = ctx.entry.config
    p = ctx.pipeline
    annotate = f"pipeline.{ctx.entry.name}.annotate"
    route = f"pipeline.{ctx.entry.name}.route"
    reason = cfg.output_column or DROP_REASON
    aside = reason_aside(reason)  # the data's own drop_reason passes unchanged
    annotator = FilterAnnotator(
        ",".join(cfg.filter.rules),
        cfg.filter.overrides,
        p.text_column,
        p.lang_column,
        cfg.filter.default_lang,
        cfg.replace_columns,
    )
    scratch = ctx.side_dir / "annotated"
    ds = ctx.read_inputs()
    if aside:
        ds = ds.map_batches(set_aside(aside), name=f"pipeline.{ctx.entry.name}.aside")
    annotated_result = ds.map_batches(annotator, name=annotate).write_parquet(
        str(scratch), overwrite=True, **ctx.engine("annotate")
    )
    annotated = zephyr.read_parquet(sorted(annotated_result.files))
    examples = filter_collector(ctx, ReasonGroups(DROP_REASON, skip=(NULL_TEXT,)))  # renamed at routing
    kept = annotated.map_batches(examples, name=f"pipeline.{ctx.entry.name}.examples")
    kept = kept.map_batches(RouteByReason("kept", reason, aside), name=route)
    outcome = finish_step(ctx, kept, (route,), action="kept")
    if cfg.keep_dropped:
        dropped = annotated.map_batches(
            RouteByReason("dropped", reason, aside), name=f"pipeline.{ctx.entry.name}.dropped"
        )
        result = dropped.write_parquet(str(ctx.side_dir / "dropped"), overwrite=True, **ctx.engine("dropped"))
        outcome.extra["dropped_files"] = sorted(result.files)
        outcome.extra["dropped_rows"] = parquet_rows(result.files)
        outcome.checksums.update(result.checksums)  # a quality step may train on them (train_from)
    remove_folder(str(scratch))
    return filter_examples(ctx, outcome)


def run_exact_dedup(ctx: StepContext) -> StepOutcome:
    from zephyr.dedup.exact import exact_dedup_dataset
    from zephyr.pipelines.examples import dedup_collector, dedup_examples

    cfg = ctx.entry.config
    p = ctx.pipeline
    remove = f"pipeline.{ctx.entry.name}.remove"
    annotated = exact_dedup_dataset(
        dedup_inputs(ctx),
        text_column=p.text_column,
        id_column=p.id_column,
        normalize=cfg.dedup.normalize,
        mode="annotate",
        priority_column=cfg.priority_column,
        execution=ctx.engine("hashes"),
    )
    annotated = annotated.map_batches(dedup_collector(ctx), name=f"pipeline.{ctx.entry.name}.examples")
    output = annotated.map_batches(RemoveDuplicates("exact"), name=remove)
    outcome = finish_step(ctx, restore_dedup_columns(ctx, output), (remove,))
    # exact duplicates share every shingle once normalized: the Jaccard shown is that of word 5-grams
    dedup_examples(ctx, outcome, "word", 5, cfg.dedup.normalize)
    return outcome


def run_fuzzy_dedup(ctx: StepContext) -> StepOutcome:
    from zephyr.dedup._rows import StripRowNumbers
    from zephyr.dedup.fuzzy import fuzzy_dedup_dataset
    from zephyr.dedup.index import open_index, write_generation
    from zephyr.pipelines.examples import dedup_collector, dedup_examples

    cfg = ctx.entry.config
    p = ctx.pipeline
    remove = f"pipeline.{ctx.entry.name}.remove"
    dedup_config = cfg.dedup
    # generations this step wrote before it was interrupted are not "earlier runs": left out, then replaced
    index = (
        open_index(cfg.index, dedup_config, missing_ok=cfg.update_index, run=ctx.fingerprint)
        if cfg.index
        else None
    )
    graph: dict[str, Any] = {}
    annotated = fuzzy_dedup_dataset(
        dedup_inputs(ctx),
        dedup_config,
        text_column=p.text_column,
        id_column=p.id_column,
        mode="annotate",
        priority_column=cfg.priority_column,
        execution=ctx.engine("candidates"),
        stats=graph,
        index=index,
        row_numbers=cfg.update_index,
    )
    output = annotated.map_batches(StripRowNumbers("annotate"), name=f"pipeline.{ctx.entry.name}.rows")
    output = output.map_batches(dedup_collector(ctx), name=f"pipeline.{ctx.entry.name}.examples")
    output = restore_dedup_columns(ctx, output.map_batches(RemoveDuplicates("fuzzy"), name=remove))
    outcome = finish_step(ctx, output, (remove,))
    dedup_examples(ctx, outcome, dedup_config.shingle, dedup_config.ngram, dedup_config.normalize)
    if index is not None:
        outcome.extra["index"] = {
            "path": cfg.index,
            "docs": index.docs,
            "matched": graph.get("matched_index", 0),
        }
    if cfg.update_index:  # every row, the removed ones tied to their kept row (zephyr.dedup.index)
        entry = write_generation(
            cfg.index,
            annotated,
            dedup_config,
            text_column=p.text_column,
            id_column=p.id_column,
            create=open_index(cfg.index, dedup_config, missing_ok=True) is None,
            run=ctx.fingerprint,
            execution=ctx.engine("index"),
        )
        outcome.extra["index_written"] = entry
    bands, rows = dedup_config.bands_rows()
    outcome.extra["lsh"] = {
        "bands": bands,
        "rows": rows,
        "threshold": dedup_config.threshold,
        "lsh_threshold": round(dedup_config.lsh_threshold, 4),
    }
    return outcome


def _first_texts(files: list[str], column: str, max_rows: int) -> list[str]:
    """The first non-null texts of some Parquet parts, in file order, up to ``max_rows``."""
    import pyarrow.parquet as pq

    texts: list[str] = []
    for path in files:
        for batch in pq.ParquetFile(path).iter_batches(batch_size=1024, columns=[column]):
            for text in batch.column(0).drop_null().to_pylist():
                texts.append(text)
                if len(texts) >= max_rows:
                    return texts
    return texts


def _train_quality_classifier(ctx: StepContext, output: Path) -> Path:
    from zephyr.pipelines.quality.classifier import train_classifier

    cfg = ctx.entry.config
    p = ctx.pipeline
    classifier_cfg = cfg.classifier_config()
    stamp = output.with_suffix(".fingerprint")
    if _reusable(output, stamp, ctx.fingerprint):
        log.info("quality: reusing the classifier trained by the interrupted run at %s", output)
        return output
    if cfg.train_from:
        source = ctx.earlier[cfg.train_from]
        positive = _first_texts(source["files"], p.text_column, cfg.train_max_rows)
        negative = _first_texts(source["extra"].get("dropped_files", []), p.text_column, cfg.train_max_rows)
        if not positive or not negative:
            raise InputError(
                f"step {ctx.entry.name!r}: train_from {cfg.train_from!r} gives {len(positive)} kept and "
                f"{len(negative)} dropped rows; the classifier needs both (give model: or train: instead)"
            )
        texts = positive + negative
        labels = [cfg.positive_label] * len(positive) + [cfg.negative_label] * len(negative)
        table = pa.table({"text": pa.array(texts, pa.large_string()), "label": labels})
        label_column = "label"
    else:
        import pyarrow.parquet as pq

        parts = [pq.read_table(path, columns=[p.text_column, cfg.label_column]) for path in cfg.train]
        table = pa.concat_tables(parts, promote_options="permissive").rename_columns(
            ["text", cfg.label_column]
        )
        labels_np = np.asarray(table[cfg.label_column].to_pylist(), dtype=object)
        picked = np.concatenate(
            [
                np.flatnonzero(labels_np == lab)[: cfg.train_max_rows]
                for lab in (cfg.positive_label, cfg.negative_label)
            ]
        )
        table = table.take(pa.array(np.sort(picked)))
        label_column = cfg.label_column
    log.info("quality: training the classifier on %d rows", table.num_rows)
    train_classifier(table, output, classifier_cfg, text_column="text", label_column=label_column)
    from zephyr.io.checksum import checksum_record, file_checksum

    stamp.write_text(
        json.dumps({"fingerprint": ctx.fingerprint, **checksum_record(*file_checksum(str(output)))})
    )
    return output


def _reusable(model: Path, stamp: Path, fingerprint: str) -> bool:
    """Whether an interrupted run's classifier can be loaded instead of trained again: its stamp holds this
    step's fingerprint and the model file still has the size and checksum it had when trained (the job
    folder may be writable by others; a model is a file a native parser reads)."""
    from zephyr import resume

    try:
        recorded = json.loads(stamp.read_text())
    except (OSError, ValueError):
        return False
    if not isinstance(recorded, dict) or recorded.get("fingerprint") != fingerprint:
        return False
    problem = resume.check_files({str(model): {k: v for k, v in recorded.items() if k != "fingerprint"}})
    if problem is not None:
        log.warning("quality: not reusing the classifier: %s", problem)
        return False
    return True


def run_quality(ctx: StepContext) -> StepOutcome:
    from zephyr.pipelines.examples import ReasonGroups, filter_collector, filter_examples
    from zephyr.pipelines.quality.classifier import QualityScorer

    cfg = ctx.entry.config
    model = Path(cfg.model) if cfg.model else _train_quality_classifier(ctx, ctx.side_dir / "classifier.bin")
    score = f"pipeline.{ctx.entry.name}.score"
    keep = f"pipeline.{ctx.entry.name}.filter"
    column = cfg.output_column or "quality_score"
    verdict = MinScoreFilter(column, cfg.min_score)
    scorer = QualityScorer(
        str(model),
        cfg.classifier_config(),
        ctx.pipeline.text_column,
        replace_columns=cfg.replace_columns,
        score_column=column,
    )
    ds = (
        ctx.read_inputs()
        .map_batches(scorer, name=score)
        .map_batches(
            filter_collector(ctx, ReasonGroups(verdict.reasons)), name=f"pipeline.{ctx.entry.name}.examples"
        )
        .map_batches(verdict, name=keep)
    )
    outcome = filter_examples(ctx, finish_step(ctx, ds, (score, keep)))
    outcome.extra["classifier"] = str(model)
    return outcome


def run_tokenize(ctx: StepContext) -> StepOutcome:
    from zephyr.tokenize.train_tokenizer import train_tokenizer
    from zephyr.tokenize.writer import write_token_shards

    from zephyr.options import DEFAULT_MEMORY_BUDGET

    cfg = ctx.entry.config
    p = ctx.pipeline
    if not ctx.inputs:
        raise InputError(f"step {ctx.entry.name!r}: the previous step kept no rows; nothing to tokenize")
    extra: dict[str, Any] = {}
    if cfg.tokenizer:
        tokenizer = Path(cfg.tokenizer)
    else:  # what `zephyr tokenizer train STEP_INPUT --vocab-size N --output tokenizer.json` does
        trained = train_tokenizer(
            ctx.inputs,
            vocab_size=cfg.vocab_size,
            output=str(ctx.step_dir / "tokenizer.json"),
            text_column=p.text_column,
            sample_bytes=cfg.tokenizer_train_bytes,
            memory_budget=ctx.execution.get("memory_budget", DEFAULT_MEMORY_BUDGET),
            format="parquet",
        )
        tokenizer = Path(trained.output)
        extra["tokenizer_trained_on"] = trained.to_dict()
        log.info(
            "tokenize: trained a %d-token BPE on %d documents -> %s",
            trained.vocab_size,
            trained.documents,
            tokenizer,
        )
    columns = [p.text_column, p.id_column, p.source_column]
    result = write_token_shards(
        ctx.read_inputs(columns),
        tokenizer=str(tokenizer),
        output=str(ctx.step_dir / "shards"),
        text_column=p.text_column,
        id_column=p.id_column,
        source_column=p.source_column,
        **cfg.shards.writer_kwargs(),
        **ctx.engine(),
    )
    manifest = result.manifest
    extra.update(
        tokenizer=str(tokenizer),
        shards_dir=str(ctx.step_dir / "shards"),
        num_tokens=result.num_tokens,
        num_documents=result.num_documents,
        num_shards=len(manifest["shards"]),
        vocab_size=manifest.get("vocab_size"),
        dtype=manifest.get("dtype"),
        per_source=manifest.get("sources", {}).get("per_source", {}),
    )
    return StepOutcome(engine_stats=result.stats, extra=extra, checksums=_set_checksums(result.output))


def _set_checksums(output: str) -> dict[str, dict]:
    """What a rerun that skips a tokenize step checks: the manifest (its bytes now) and every shard file
    (size and sha256 as the manifest records them, hashed when written)."""
    from zephyr.tokenize.shards import MANIFEST_NAME, join_path, read_manifest

    from zephyr.io.checksum import checksum_record, file_checksum

    manifest = join_path(output, MANIFEST_NAME)
    return {manifest: checksum_record(*file_checksum(manifest)), **read_manifest(output).checksum_records()}


def run_train(ctx: StepContext) -> StepOutcome:
    from zephyr.trainer.train import train

    if ctx.tokenize_dir is None:
        raise ConfigError(f"pipeline step {ctx.entry.name!r} needs the token shards of a tokenize step")
    log_path = ctx.step_dir / "train.jsonl"
    cfg = ctx.entry.config.build(
        data=str(ctx.tokenize_dir), log=str(log_path), checkpoint_dir=str(ctx.step_dir / "checkpoints")
    )
    result = train(cfg)
    records = read_train_log(log_path)
    losses = [r["loss"] for r in records]
    extra = {
        "steps": result.step,
        "resumed_from": result.resumed_from,
        "log": str(log_path),
        "checkpoints": str(ctx.step_dir / "checkpoints"),
        "final_loss": losses[-1] if losses else None,
        "first_loss": losses[0] if losses else None,
        "tokens_trained": int(sum(r.get("tokens", 0) for r in records)),
        "mean_tokens_per_s": float(np.mean([r["tokens_per_s"] for r in records[1:]]))
        if len(records) > 1
        else None,
        "config": cfg.to_dict(),
        "packing": cfg.packing,
        "instances_filtered": records[-1].get("instances_filtered_total") if records else None,
        "mix_tokens": records[-1].get("mix_tokens") if records else None,
        "mix_share": records[-1].get("mix_share") if records else None,
    }
    return StepOutcome(extra=extra)


def read_train_log(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """The trainer's JSONL records, one per step; a resumed run's repeated steps keep their last record."""
    by_step: dict[int, dict[str, Any]] = {}
    try:
        lines = Path(path).read_text().splitlines()
    except FileNotFoundError:
        return []
    for line in lines:
        if line.strip():
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                continue  # a line torn by a kill mid-write
            by_step[int(record["step"])] = record
    return [by_step[s] for s in sorted(by_step)]


RUNNERS: dict[str, Callable[[StepContext], StepOutcome]] = {
    "read": run_read,
    "normalize": run_normalize,
    "langid": run_langid,
    "heuristic_filter": run_heuristic_filter,
    "exact_dedup": run_exact_dedup,
    "fuzzy_dedup": run_fuzzy_dedup,
    "quality": run_quality,
    "tokenize": run_tokenize,
    "train": run_train,
}
"""Step type → adapter."""


def preflight(entry: StepEntry) -> None:
    """Checks that need the environment (models present...), run for every step before any work starts."""
    if entry.type == "langid" and entry.config.model is None:
        from zephyr.pipelines.quality.lid_model import ensure_lid_model

        ensure_lid_model()
    if entry.type == "map":
        entry.config.load()  # the module runs here, before any work; --check only found it


def run_map(ctx: StepContext) -> StepOutcome:
    cfg = ctx.entry.config
    op = f"pipeline.{ctx.entry.name}.map"
    ds = ctx.read_inputs().map_batches(cfg.load(), batch_rows=cfg.batch_rows, name=op)
    return finish_step(ctx, ds, (op,))


RUNNERS["map"] = run_map

RUNNERS.update(
    extract=run_extract,
    url_filter=run_url_filter,
    url_dedup=run_url_dedup,
    substring_dedup=run_substring_dedup,
)
