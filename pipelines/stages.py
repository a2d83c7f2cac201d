"""Adapters from pipeline stages to the other packages' APIs — the one place that knows their call shapes.

Each stage type (``zephyr.pipelines.config.STAGE_TYPES``) has a ``run_<type>(ctx) -> StageOutcome`` here. A data
stage reads the previous stage's Parquet parts, runs its work on the engine with ``ctx.engine(...)`` (which
carries a work directory under the stage folder, so a rerun skips finished tasks), and writes
``part-*.parquet`` into its stage folder.

Accounting. Every data stage ends its plan with operators of this module, named ``pipeline.<stage>.*``:

- the stage's *accounting ops* (``StageOutcome.accounting_ops``) are the ``map_batches`` steps that keep, drop
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
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from zephyr import counters
from zephyr.errors import ConfigError, InputError, SchemaError

if TYPE_CHECKING:
    from zephyr.pipelines.config import PipelineConfig, StageEntry

    from zephyr.dataset import Dataset, WriteResult

__all__ = [
    "StageContext",
    "StageOutcome",
    "PrepareRows",
    "CountValues",
    "RemoveDuplicates",
    "MinScoreFilter",
    "RUNNERS",
    "preflight",
]

log = logging.getLogger(__name__)

@dataclass
class StageContext:
    """Everything a stage adapter needs: its config, folders, input parts and the engine options."""

    entry: StageEntry
    pipeline: PipelineConfig
    fingerprint: str
    stage_dir: Path
    inputs: list[str]
    """Parquet parts written by the previous data stage (empty for ``read``)."""
    execution: dict[str, Any]
    """Engine action keywords without ``work_dir`` (``executor``, ``workers``, ``progress``...)."""
    earlier: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Stats of the stages that ran before, by stage name."""
    tokenize_dir: Path | None = None
    """The token shards of the tokenize stage (for ``train``)."""

    def engine(self, step: str = "main") -> dict[str, Any]:
        """Engine keywords for one action of this stage, with its own resumable work directory."""
        return {**self.execution, "work_dir": str(self.stage_dir / "_work" / step)}

    def read_inputs(self, columns: list[str] | None = None) -> Dataset:
        import zephyr

        if not self.inputs:  # the previous stage kept no rows (or read none): empty input is valid input
            p = self.pipeline
            names = [c for c in (p.id_column, p.text_column, p.source_column) if c and (not columns or c in columns)]
            return zephyr.from_arrow(pa.table({c: pa.array([], pa.string()) for c in names}))
        return zephyr.read_parquet(self.inputs, columns=columns)


@dataclass
class StageOutcome:
    """What a stage produced: Parquet parts (data stages), the engine stats of the write and extras."""

    files: list[str] = field(default_factory=list)
    engine_stats: dict[str, Any] | None = None
    accounting_ops: tuple[str, ...] = ()
    extra: dict[str, Any] = field(default_factory=dict)


# -- operators (picklable; they run inside engine tasks) ---------------------------------------------------
def _column(table: pa.Table, name: str) -> pa.Array:
    col = table.column(name)
    return col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col


def _value_counts(values: pa.Array) -> dict[str, int]:
    counts = pc.value_counts(values.cast(pa.string()) if not pa.types.is_string(values.type) else values)
    out: dict[str, int] = {}
    for item in counts.to_pylist():
        key = "null" if item["values"] is None else str(item["values"])
        out[key] = out.get(key, 0) + int(item["counts"])
    return out


@dataclass(frozen=True)
class CountValues:
    """Pass-through op: counts rows per value of some columns into ``pipeline/<role>/<key>=<value>``."""

    role: str
    """``in`` or ``out`` (or another label): which side of the stage the counts describe."""
    columns: tuple[tuple[str, str], ...]
    """(key, column) pairs, e.g. (("source", "source"), ("lang", "lang")); missing columns are skipped."""

    def __call__(self, table: pa.Table) -> pa.Table:
        for key, column in self.columns:
            if column in table.column_names:
                for value, n in _value_counts(_column(table, column)).items():
                    counters.increment(f"pipeline/{self.role}/{key}={value}", n)
        return table


@dataclass(frozen=True)
class PrepareRows:
    """The read stage's row check: a string source column, and no row without id or text goes on.

    Rows with a null id or null text are quarantined with reason ``null_id``/``null_text``; later stages
    (dedup keys on ids, tokenize on texts) can rely on both being present."""

    text_column: str
    id_column: str
    source_column: str
    source: str | None = None
    lang_column: str = "lang"

    def __call__(self, table: pa.Table) -> Any:
        from zephyr.ops import BatchOutput

        for role, name in (("text", self.text_column), ("id", self.id_column)):
            if name not in table.column_names:
                raise SchemaError(
                    f"the input has no {role} column {name!r} (columns: {', '.join(table.column_names)}); "
                    f"set {role}_column: in the pipeline config"
                )
        n = table.num_rows
        if self.source is not None or self.source_column not in table.column_names:
            value = self.source if self.source is not None else "unknown"
            sources = pa.array([value] * n, pa.string())
        else:
            sources = _column(table, self.source_column).cast(pa.string())
        if self.source_column in table.column_names:
            table = table.set_column(table.schema.get_field_index(self.source_column), self.source_column, sources)
        else:
            table = table.append_column(self.source_column, sources)
        CountValues("in", (("source", self.source_column), ("lang", self.lang_column)))(table)
        null_id = pc.is_null(_column(table, self.id_column))
        null_text = pc.is_null(_column(table, self.text_column))
        bad = pc.or_(null_id, null_text)
        if not pc.any(bad).as_py():
            return table
        reasons = pc.if_else(null_id, pa.scalar("null_id"), pa.scalar("null_text"))
        rejected = table.filter(bad).append_column("reject_reason", reasons.filter(bad))
        return BatchOutput(kept=table.filter(pc.invert(bad)), rejected=rejected)


@dataclass(frozen=True)
class RemoveDuplicates:
    """After dedup in annotate mode: drop rows with ``dup_keep = false`` (reason ``<kind>_duplicate``),
    count kept documents by cluster size, and drop the dup columns."""

    kind: str

    def __call__(self, table: pa.Table) -> Any:
        from zephyr.ops import BatchOutput

        keep = pc.fill_null(_column(table, "dup_keep"), True)
        sizes = np.asarray(pc.fill_null(_column(table, "dup_cluster_size"), 1), dtype=np.int64)
        values, per = np.unique(sizes[np.asarray(keep, dtype=bool)], return_counts=True)
        for size, n in zip(values.tolist(), per.tolist()):
            counters.increment(f"pipeline/cluster_size={size}", n)
        kept = table.filter(keep).drop_columns(["dup_cluster", "dup_cluster_size", "dup_keep"])
        removed = table.num_rows - kept.num_rows
        return BatchOutput(kept=kept, dropped={f"{self.kind}_duplicate": removed} if removed else {})


@dataclass(frozen=True)
class MinScoreFilter:
    """Keep rows whose ``score_column`` reaches ``min_score``; others are dropped as ``quality_below_<min>``."""

    score_column: str
    min_score: float

    @property
    def reason(self) -> str:
        return f"quality_below_{self.min_score:g}"

    def reasons(self, table: pa.Table) -> pa.Array:
        """Per-row drop reason (null: kept); the report's examples use the same verdict."""
        keep = pc.fill_null(pc.greater_equal(_column(table, self.score_column), self.min_score), False)
        return pc.if_else(keep, pa.scalar(None, pa.string()), pa.scalar(self.reason))

    def __call__(self, table: pa.Table) -> Any:
        from zephyr.ops import BatchOutput

        keep = pc.fill_null(pc.greater_equal(_column(table, self.score_column), self.min_score), False)
        kept = table.filter(keep)
        removed = table.num_rows - kept.num_rows
        return BatchOutput(kept=kept, dropped={self.reason: removed} if removed else {})


def _label(name: str) -> str:
    """The engine's label of a ``map_batches(..., name=name)`` op in its stats."""
    return f"map_batches({name})"


def _out_counter(ctx: StageContext) -> CountValues:
    p = ctx.pipeline
    return CountValues("out", (("source", p.source_column), ("lang", p.lang_column)))


def _finish(ctx: StageContext, ds: Dataset, accounting: tuple[str, ...], step: str = "main") -> StageOutcome:
    """Count the output, write ``part-*.parquet`` into the stage folder, return the outcome."""
    name = f"pipeline.{ctx.entry.name}.count"
    result: WriteResult = ds.map_batches(_out_counter(ctx), name=name).write_parquet(
        str(ctx.stage_dir), **ctx.engine(step)
    )
    return StageOutcome(files=sorted(result.files), engine_stats=result.stats, accounting_ops=tuple(map(_label, accounting)))


# -- stage adapters --------------------------------------------------------------------------------------
def run_read(ctx: StageContext) -> StageOutcome:
    import zephyr
    from zephyr.io.paths import input_files
    from zephyr.io.text_column import check_text_inputs

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
    ds = ds.map_batches(PrepareRows(p.text_column, p.id_column, p.source_column, cfg.source, p.lang_column), name=prepare)
    if cfg.num_shards:
        ds = ds.reshard(cfg.num_shards)
    return _finish(ctx, ds, (prepare,))


def run_normalize(ctx: StageContext) -> StageOutcome:
    from zephyr.pipelines.quality.normalize import NormalizeConfig
    from zephyr.pipelines.quality.stages import Normalize

    cfg = ctx.entry.config
    step = f"pipeline.{ctx.entry.name}.normalize"
    normalize = Normalize(
        NormalizeConfig(cfg.nfc, cfg.strip_control, cfg.collapse_whitespace, cfg.fix_mojibake),
        ctx.pipeline.text_column,
    )
    return _finish(ctx, ctx.read_inputs().map_batches(normalize, name=step), (step,))


def run_langid(ctx: StageContext) -> StageOutcome:
    from zephyr.pipelines.columns import lang_columns
    from zephyr.pipelines.examples import ReasonGroups, filter_collector, filter_examples
    from zephyr.pipelines.quality.langid import LangIdConfig, LanguageIdentifier
    from zephyr.pipelines.quality.lid_model import ensure_lid_model
    from zephyr.pipelines.quality.stages import LanguageFilter

    cfg = ctx.entry.config
    lang_column, score_column = lang_columns(ctx.entry, ctx.pipeline)
    model = cfg.model or str(ensure_lid_model())
    identify = f"pipeline.{ctx.entry.name}.identify"
    keep = f"pipeline.{ctx.entry.name}.filter"
    lid = LangIdConfig(model_path=model, max_chars=cfg.max_chars, lang_column=lang_column, score_column=score_column)
    verdict = LanguageFilter(tuple(cfg.languages) if cfg.languages else None, cfg.min_score, lang_column, score_column)
    ds = (
        ctx.read_inputs()
        .map_batches(LanguageIdentifier(lid, ctx.pipeline.text_column, cfg.overwrite), name=identify)
        .map_batches(CountValues("in", (("lang", lang_column),)), name=f"pipeline.{ctx.entry.name}.count_in")
        .map_batches(
            filter_collector(ctx, ReasonGroups(verdict.reasons)), name=f"pipeline.{ctx.entry.name}.examples"
        )
        .map_batches(verdict, name=keep)
    )
    return filter_examples(ctx, _finish(ctx, ds, (identify, keep)))


def run_heuristic_filter(ctx: StageContext) -> StageOutcome:
    from zephyr.pipelines.examples import ReasonGroups, filter_collector, filter_examples
    from zephyr.pipelines.quality.filters import DROP_REASON, NULL_TEXT
    from zephyr.pipelines.quality.stages import FilterAnnotator, RouteByReason

    import zephyr
    from zephyr.io.added_columns import set_aside

    cfg = ctx.entry.config
    p = ctx.pipeline
    annotate = f"pipeline.{ctx.entry.name}.annotate"
    route = f"pipeline.{ctx.entry.name}.route"
    reason = cfg.output_column or DROP_REASON
    aside = (DROP_REASON,) if reason != DROP_REASON else ()  # the data's own drop_reason passes unchanged
    annotator = FilterAnnotator(
        ",".join(cfg.rules), cfg.overrides, p.text_column, p.lang_column, cfg.default_lang, cfg.overwrite
    )
    scratch = ctx.stage_dir / "_annotated"
    ds = ctx.read_inputs()
    if aside:
        ds = ds.map_batches(set_aside(aside), name=f"pipeline.{ctx.entry.name}.aside")
    annotated_result = ds.map_batches(annotator, name=annotate).write_parquet(str(scratch), **ctx.engine("annotate"))
    annotated = zephyr.read_parquet(sorted(annotated_result.files))
    examples = filter_collector(ctx, ReasonGroups(DROP_REASON, skip=(NULL_TEXT,)))  # renamed at routing
    kept = annotated.map_batches(examples, name=f"pipeline.{ctx.entry.name}.examples")
    kept = kept.map_batches(RouteByReason("kept", reason, aside), name=route)
    outcome = _finish(ctx, kept, (route,), step="kept")
    if cfg.keep_dropped:
        dropped = annotated.map_batches(
            RouteByReason("dropped", reason, aside), name=f"pipeline.{ctx.entry.name}.dropped"
        )
        result = dropped.write_parquet(str(ctx.stage_dir / "_dropped"), **ctx.engine("dropped"))
        outcome.extra["dropped_files"] = sorted(result.files)
        outcome.extra["dropped_rows"] = _parquet_rows(result.files)
    shutil.rmtree(scratch, ignore_errors=True)
    return filter_examples(ctx, outcome)


def run_exact_dedup(ctx: StageContext) -> StageOutcome:
    from zephyr.dedup.stages import exact_dedup_dataset
    from zephyr.pipelines.examples import dedup_collector, dedup_examples

    cfg = ctx.entry.config
    p = ctx.pipeline
    remove = f"pipeline.{ctx.entry.name}.remove"
    annotated = exact_dedup_dataset(
        _dedup_inputs(ctx), text_column=p.text_column, id_column=p.id_column, normalize=cfg.normalize,
        mode="annotate", priority_column=cfg.priority_column, execution=ctx.engine("hashes"),
    )
    annotated = annotated.map_batches(dedup_collector(ctx), name=f"pipeline.{ctx.entry.name}.examples")
    output = annotated.map_batches(RemoveDuplicates("exact"), name=remove)
    outcome = _finish(ctx, _restore_dedup_columns(ctx, output), (remove,))
    # exact duplicates share every shingle once normalized: the Jaccard shown is that of word 5-grams
    dedup_examples(ctx, outcome, "word", 5, cfg.normalize)
    return outcome


def _dedup_inputs(ctx: StageContext) -> Dataset:
    """The stage input with the data's own ``dup_*`` columns (if any) set aside: dedup's helper columns of those
    names are removed with the duplicates, and would take the data's with them (``zephyr.pipelines.columns``)."""
    from zephyr.pipelines.columns import DEDUP_COLUMNS

    from zephyr.io.added_columns import set_aside

    return ctx.read_inputs().map_batches(set_aside(DEDUP_COLUMNS), name=f"pipeline.{ctx.entry.name}.aside")


def _restore_dedup_columns(ctx: StageContext, ds: Dataset) -> Dataset:
    from zephyr.pipelines.columns import DEDUP_COLUMNS

    from zephyr.io.added_columns import set_aside

    return ds.map_batches(set_aside(DEDUP_COLUMNS, restore=True), name=f"pipeline.{ctx.entry.name}.restore")


def run_fuzzy_dedup(ctx: StageContext) -> StageOutcome:
    from zephyr.dedup.index import open_index, write_generation
    from zephyr.dedup.stages import StripRowNumbers, fuzzy_dedup_dataset
    from zephyr.pipelines.examples import dedup_collector, dedup_examples

    cfg = ctx.entry.config
    p = ctx.pipeline
    remove = f"pipeline.{ctx.entry.name}.remove"
    dedup_config = cfg.build()
    # generations this stage wrote before it was interrupted are not "earlier runs": left out, then replaced
    index = open_index(cfg.index, dedup_config, missing_ok=cfg.update_index, run=ctx.fingerprint) if cfg.index else None
    graph: dict[str, Any] = {}
    annotated = fuzzy_dedup_dataset(
        _dedup_inputs(ctx), dedup_config, text_column=p.text_column, id_column=p.id_column, mode="annotate",
        priority_column=cfg.priority_column, execution=ctx.engine("candidates"), stats=graph, index=index,
        row_numbers=cfg.update_index,
    )
    output = annotated.map_batches(StripRowNumbers("annotate"), name=f"pipeline.{ctx.entry.name}.rows")
    output = output.map_batches(dedup_collector(ctx), name=f"pipeline.{ctx.entry.name}.examples")
    output = _restore_dedup_columns(ctx, output.map_batches(RemoveDuplicates("fuzzy"), name=remove))
    outcome = _finish(ctx, output, (remove,))
    dedup_examples(ctx, outcome, dedup_config.shingle, dedup_config.ngram, dedup_config.normalize)
    if index is not None:
        outcome.extra["index"] = {"path": cfg.index, "docs": index.docs, "matched": graph.get("matched_index", 0)}
    if cfg.update_index:  # every row, the removed ones tied to their kept row (zephyr.dedup.index)
        entry = write_generation(
            cfg.index, annotated, dedup_config, text_column=p.text_column, id_column=p.id_column,
            create=open_index(cfg.index, dedup_config, missing_ok=True) is None, run=ctx.fingerprint,
            execution=ctx.engine("index"),
        )
        outcome.extra["index_written"] = entry
    bands, rows = dedup_config.bands_rows()
    outcome.extra["lsh"] = {"bands": bands, "rows": rows, "threshold": dedup_config.threshold,
                            "lsh_threshold": round(dedup_config.lsh_threshold, 4)}
    return outcome


def _parquet_rows(files: list[str]) -> int:
    import pyarrow.parquet as pq

    return sum(pq.ParquetFile(f).metadata.num_rows for f in files)


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


def _train_quality_classifier(ctx: StageContext, output: Path) -> Path:
    from zephyr.pipelines.quality.classifier import train_classifier

    cfg = ctx.entry.config
    p = ctx.pipeline
    classifier_cfg = cfg.classifier_config()
    stamp = output.with_suffix(".fingerprint")
    if output.is_file() and stamp.is_file() and stamp.read_text() == ctx.fingerprint:
        log.info("quality: reusing the classifier trained by the interrupted run at %s", output)
        return output
    if cfg.train_from:
        source = ctx.earlier[cfg.train_from]
        positive = _first_texts(source["files"], p.text_column, cfg.train_max_rows)
        negative = _first_texts(source["extra"].get("dropped_files", []), p.text_column, cfg.train_max_rows)
        if not positive or not negative:
            raise InputError(
                f"stage {ctx.entry.name!r}: train_from {cfg.train_from!r} gives {len(positive)} kept and "
                f"{len(negative)} dropped rows; the classifier needs both (give model: or train: instead)"
            )
        texts = positive + negative
        labels = [cfg.positive_label] * len(positive) + [cfg.negative_label] * len(negative)
        table = pa.table({"text": pa.array(texts, pa.large_string()), "label": labels})
        label_column = "label"
    else:
        import pyarrow.parquet as pq

        parts = [pq.read_table(path, columns=[p.text_column, cfg.label_column]) for path in cfg.train]
        table = pa.concat_tables(parts, promote_options="permissive").rename_columns(["text", cfg.label_column])
        labels_np = np.asarray(table[cfg.label_column].to_pylist(), dtype=object)
        picked = np.concatenate(
            [np.flatnonzero(labels_np == lab)[: cfg.train_max_rows] for lab in (cfg.positive_label, cfg.negative_label)]
        )
        table = table.take(pa.array(np.sort(picked)))
        label_column = cfg.label_column
    log.info("quality: training the classifier on %d rows", table.num_rows)
    train_classifier(table, output, classifier_cfg, text_column="text", label_column=label_column)
    stamp.write_text(ctx.fingerprint)
    return output


def run_quality(ctx: StageContext) -> StageOutcome:
    from zephyr.pipelines.examples import ReasonGroups, filter_collector, filter_examples
    from zephyr.pipelines.quality.classifier import QualityScorer

    cfg = ctx.entry.config
    model = Path(cfg.model) if cfg.model else _train_quality_classifier(ctx, ctx.stage_dir / "_classifier.bin")
    score = f"pipeline.{ctx.entry.name}.score"
    keep = f"pipeline.{ctx.entry.name}.filter"
    column = cfg.output_column or "quality_score"
    verdict = MinScoreFilter(column, cfg.min_score)
    scorer = QualityScorer(
        str(model), cfg.classifier_config(), ctx.pipeline.text_column, overwrite=cfg.overwrite, score_column=column
    )
    ds = (
        ctx.read_inputs()
        .map_batches(scorer, name=score)
        .map_batches(filter_collector(ctx, ReasonGroups(verdict.reasons)), name=f"pipeline.{ctx.entry.name}.examples")
        .map_batches(verdict, name=keep)
    )
    outcome = filter_examples(ctx, _finish(ctx, ds, (score, keep)))
    outcome.extra["classifier"] = str(model)
    return outcome


def run_tokenize(ctx: StageContext) -> StageOutcome:
    from zephyr.tokenize.train_tokenizer import train_tokenizer
    from zephyr.tokenize.writer import write_token_shards

    from zephyr.options import DEFAULT_MEMORY_BUDGET

    cfg = ctx.entry.config
    p = ctx.pipeline
    if not ctx.inputs:
        raise InputError(f"stage {ctx.entry.name!r}: the previous stage kept no rows; nothing to tokenize")
    extra: dict[str, Any] = {}
    if cfg.tokenizer:
        tokenizer = Path(cfg.tokenizer)
    else:  # what `zephyr tokenizer train STAGE_INPUT --vocab-size N --output tokenizer.json` does
        trained = train_tokenizer(
            ctx.inputs, vocab_size=cfg.vocab_size, output=str(ctx.stage_dir / "tokenizer.json"),
            text_column=p.text_column, sample_bytes=cfg.tokenizer_train_bytes,
            memory_budget=ctx.execution.get("memory_budget", DEFAULT_MEMORY_BUDGET), format="parquet",
        )
        tokenizer = Path(trained.output)
        extra["tokenizer_trained_on"] = trained.to_dict()
        log.info("tokenize: trained a %d-token BPE on %d documents -> %s", trained.vocab_size, trained.documents,
                 tokenizer)
    columns = [p.text_column, p.id_column, p.source_column]
    result = write_token_shards(
        ctx.read_inputs(columns),
        tokenizer=str(tokenizer),
        output=str(ctx.stage_dir / "shards"),
        text_column=p.text_column,
        id_column=p.id_column,
        source_column=p.source_column,
        shard_size=cfg.shard_size,
        seed=cfg.seed,
        bos=cfg.bos,
        engine=cfg.engine,
        batch_rows=cfg.batch_rows,
        megatron=cfg.megatron,
        **ctx.engine(),
    )
    manifest = result.manifest
    extra.update(
        tokenizer=str(tokenizer),
        shards_dir=str(ctx.stage_dir / "shards"),
        num_tokens=result.num_tokens,
        num_documents=result.num_documents,
        num_shards=len(manifest["shards"]),
        vocab_size=manifest.get("vocab_size"),
        dtype=manifest.get("dtype"),
        per_source=manifest.get("sources", {}).get("per_source", {}),
    )
    return StageOutcome(engine_stats=result.stats, extra=extra)


def run_train(ctx: StageContext) -> StageOutcome:
    from zephyr.trainer.train import train

    if ctx.tokenize_dir is None:
        raise ConfigError(f"stage {ctx.entry.name!r} needs the token shards of a tokenize stage")
    log_path = ctx.stage_dir / "train.jsonl"
    cfg = ctx.entry.config.build(
        data=str(ctx.tokenize_dir), log=str(log_path), checkpoint_dir=str(ctx.stage_dir / "checkpoints")
    )
    result = train(cfg)
    records = read_train_log(log_path)
    losses = [r["loss"] for r in records]
    extra = {
        "steps": result.step,
        "resumed_from": result.resumed_from,
        "log": str(log_path),
        "checkpoints": str(ctx.stage_dir / "checkpoints"),
        "final_loss": losses[-1] if losses else None,
        "first_loss": losses[0] if losses else None,
        "tokens_trained": int(sum(r.get("tokens", 0) for r in records)),
        "mean_tokens_per_s": float(np.mean([r["tokens_per_s"] for r in records[1:]])) if len(records) > 1 else None,
        "config": cfg.to_dict(),
        "packing": cfg.packing,
        "instances_filtered": records[-1].get("instances_filtered_total") if records else None,
        "mix_tokens": records[-1].get("mix_tokens") if records else None,
        "mix_share": records[-1].get("mix_share") if records else None,
    }
    return StageOutcome(extra=extra)


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


RUNNERS: dict[str, Callable[[StageContext], StageOutcome]] = {
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
"""Stage type → adapter."""


def preflight(entry: StageEntry) -> None:
    """Checks that need the environment (models present...), run for every stage before any work starts."""
    if entry.type == "langid" and entry.config.model is None:
        from zephyr.pipelines.quality.lid_model import ensure_lid_model

        ensure_lid_model()


def run_map(ctx: StageContext) -> StageOutcome:
    cfg = ctx.entry.config
    step = f"pipeline.{ctx.entry.name}.map"
    ds = ctx.read_inputs().map_batches(cfg.load(), batch_rows=cfg.batch_rows, name=step)
    return _finish(ctx, ds, (step,))


RUNNERS["map"] = run_map

from zephyr.pipelines.web.stages import (  # noqa: E402  (they build on this module's operators)
    run_extract,
    run_substring_dedup,
    run_url_dedup,
    run_url_filter,
)

RUNNERS.update(
    extract=run_extract, url_filter=run_url_filter, url_dedup=run_url_dedup, substring_dedup=run_substring_dedup
)
