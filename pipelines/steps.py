"""The pipeline's step types: one ``Step`` subclass per type, its keys and what it does, in one place.

Each class is the step's config (a frozen dataclass, every key documented where it is declared) and its
behaviour (``zephyr.pipelines.step``): ``run`` builds the step's engine plan on the previous step's Parquet
parts with ``ctx.engine(...)`` (a work directory under the step's sidecar, so a rerun skips finished tasks) and
writes ``part-*.parquet`` into its step folder; ``adds``, ``check``, ``report`` and ``plots`` say the rest.
The web step types are in ``zephyr.pipelines.web.steps``.

Where a package has a config dataclass of its own, the step embeds it (``zephyr.config.embedded_field``)
instead of copying its fields: a ``fuzzy_dedup`` step's MinHash keys are ``zephyr.dedup.FuzzyDedupConfig``'s,
a ``normalize`` step's are ``NormalizeConfig``'s, a ``tokenize`` step's shard keys ``TokenizeConfig``', and
the YAML stays flat (``threshold: 0.7`` beside ``index:``). Those package configs import only the standard
library, so loading a pipeline (``zephyr run --check``) imports no pyarrow.

The packages behind the steps: ``zephyr.pipelines.quality`` (normalize, langid, heuristics, classifier),
``zephyr.dedup`` (exact and fuzzy dedup, engine stages in annotate mode), ``zephyr.tokenize``
(``write_token_shards``; ``train_tokenizer``, the function of ``zephyr tokenizer train``, makes the BPE of a
pipeline without a tokenizer) and ``zephyr.trainer`` (``train``).
"""

from __future__ import annotations

import dataclasses
import functools
import json
import logging
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from zephyr.dedup.config import DUP_COLUMNS, DedupColumns, ExactDedupConfig, FuzzyDedupConfig, IndexConfig
from zephyr.pipelines.markdown import md_code, md_count, md_text
from zephyr.pipelines.quality.config import ClassifierConfig, HeuristicFilterConfig, NormalizeConfig
from zephyr.pipelines.step import (
    STEPS,
    AccountingError,
    CountValues,
    MinScoreFilter,
    RemoveDuplicates,
    Step,
    StepContext,
    StepOutcome,
    rows_record,
)
from zephyr.tokenize.config import SHARD_KEYS, TokenizeConfig

from zephyr.config import (
    ConfigProblems,
    FieldError,
    build_flat,
    embedded_field,
    format_bytes,
    path_field,
    ranged_field,
)
from zephyr.errors import ConfigError, InputError, require
from zephyr.flags import comma_names

if TYPE_CHECKING:
    from zephyr.pipelines.step import PipelineConfig, StepEntry

    from zephyr.dataset import Dataset

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ReadStep(Step, type="read"):
    """Read the raw corpus; quarantine rows without id or text; optionally reshard for parallelism."""

    starts: ClassVar[bool] = True
    paths: list[str] = path_field([], required=True)
    """Input files, directories or globs (Parquet, JSONL[.gz|.zst], Vortex) or fsspec URLs."""
    format: Literal["auto", "parquet", "jsonl", "vortex"] = "auto"
    """``auto`` picks by file extension (``.jsonl``/``.json`` → JSONL, ``.vortex`` → Vortex, else Parquet)."""
    source: str | None = None
    """Set the source column to this name for every row (for inputs without one); ``None`` keeps the input's
    source column, or names the source ``unknown`` when there is none."""
    num_shards: int | None = ranged_field(1, default=None)
    """Redistribute rows round-robin into this many shards (tasks); ``None`` keeps one shard per file."""
    approx_shard_bytes: str | None = field(default=None, metadata={"bytes": True})
    """Split large Parquet/JSONL files into shards of about this many bytes (e.g. ``64MB``)."""
    on_error: Literal["raise", "quarantine"] = "raise"
    """Unparseable JSONL lines: fail naming the file and line, or set them aside in the quarantine."""
    unify_schemas: bool = False
    """Input files whose column types differ: promote them by the documented rule (int → wider int → double;
    ``zephyr.io.schema``). ``False``: files must agree (a column missing from some files is nulls)."""
    schema: str | None = path_field(None)
    """A schema file (Parquet, or a JSON/YAML map of column to type) every input file is cast to."""

    def __post_init__(self) -> None:
        if not self.paths:
            raise FieldError("paths", "give at least one input path")
        if self.unify_schemas and self.schema is not None:
            raise FieldError("schema", "give unify_schemas: true or schema: FILE, not both")
        super().__post_init__()

    def columns_after(self, origin: dict[str, str], pipeline: PipelineConfig, name: str) -> dict[str, str]:
        """Column → the first input file that has it (footers or first blocks), plus the source column."""
        from zephyr.io.paths import input_files
        from zephyr.io.sources import list_shards, peek_schemas

        files, fmt = input_files(self.paths, self.format)
        origin = {}
        for path, schema in peek_schemas(list_shards(files, fmt)):
            for column in schema.names if schema is not None else ():
                origin.setdefault(column, path)
        origin.setdefault(pipeline.source_column, f"step {name!r}")
        return origin

    def plan(self, ctx: StepContext) -> tuple[Dataset, tuple[str, ...]]:
        import zephyr
        from zephyr.io.paths import input_files
        from zephyr.io.sources import check_text_inputs

        files, fmt = input_files(self.paths, self.format)
        check_text_inputs(
            files, ctx.pipeline.text_column, format=fmt
        )  # a non-text column: one line naming the file
        ds = zephyr.read(
            files,
            format=fmt,
            approx_shard_bytes=self.approx_shard_bytes,
            on_error=self.on_error,
            unify_schemas=self.unify_schemas,  # files that disagree: zephyr.io.schema
            schema=self.schema,
        )
        return ctx.prepared(ds, self.source, self.num_shards), (ctx.op("prepare"),)


@dataclass(frozen=True)
class NormalizeStep(Step, type="normalize"):
    """Unicode/whitespace normalization that is safe for prose, code and maths (``zephyr normalize``); its
    keys (``nfc``, ``strip_control``, ``collapse_whitespace``, ``fix_mojibake``) are ``NormalizeConfig``'s."""

    normalize: NormalizeConfig = embedded_field(NormalizeConfig)

    def preflight(self) -> None:
        if self.normalize.fix_mojibake:
            require("ftfy", "quality", "the normalize step's fix_mojibake")

    def apply(self, ds: Dataset, text_column: str, op: Callable[[str], str] = str) -> Dataset:
        """``ds`` with its texts normalized, the op named ``op("normalize")``: what the step, ``zephyr
        normalize`` and ``zephyr filter --normalize`` run."""
        from zephyr.pipelines.quality.normalize import Normalize

        return ds.map_batches(Normalize(self.normalize, text_column), name=op("normalize"))

    def plan(self, ctx: StepContext) -> tuple[Dataset, tuple[str, ...]]:
        return self.apply(ctx.read_inputs(), ctx.pipeline.text_column, ctx.op), (ctx.op("normalize"),)


@dataclass(frozen=True)
class LangIdStep(Step, type="langid"):
    """fastText language ID (``lid.176.ftz``): sets ``lang``/``lang_score``, drops other languages."""

    filter_examples: ClassVar[bool] = True

    languages: list[str] | None = field(default=None, metadata={"parse": comma_names})
    """Languages to keep (fastText codes: ``en``, ``de``...; on the command line comma-separated, e.g.
    en,de); ``None`` keeps every language."""
    min_score: float = ranged_field(0, 1, default=0.0)
    """Drop rows whose language probability is below this, in [0, 1]."""
    model: str | None = path_field(None)
    """The fastText LID model; ``None`` means ``ZEPHYR_LID_MODEL`` or the cache (``scripts/setup`` fills it)."""
    max_chars: int = ranged_field(1, default=10_000)
    """Predict on the first N characters of each text."""
    replace_columns: bool = False
    """Replace the language columns when the data already has them (a claimed ``lang``, an earlier run);
    ``false``: the pipeline refuses such data before any work."""
    output_column: str | None = field(default=None, metadata={"metavar": "NAME", "column": True})
    """Write the language to NAME and its score to NAME_score, e.g. to keep a claimed-language column the
    data already has (default: lang; in a pipeline, its ``lang_column``)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.languages is not None and not self.languages:
            raise FieldError("languages", "give at least one language, or null for all")

    def adds(self, pipeline: PipelineConfig) -> tuple[str, str]:
        """The (language, score) columns."""
        lang = self.output_column or pipeline.lang_column
        return lang, f"{lang}_score"

    def preflight(self) -> None:
        from zephyr.pipelines.quality.langid import ensure_lid_model

        require("fasttext", "quality", "the langid step")
        if self.model is None:
            ensure_lid_model()

    def ops(self, text_column: str, lang_column: str) -> tuple[Any, Any]:
        """The identifier and the language filter these settings make, the columns named after
        ``output_column`` or else ``lang_column``: what the step and ``zephyr langid`` both run."""
        from zephyr.pipelines.quality.langid import LanguageFilter, LanguageIdentifier, ensure_lid_model

        lang, score = self.output_column or lang_column, f"{self.output_column or lang_column}_score"
        model = self.model or str(ensure_lid_model())
        languages = tuple(self.languages) if self.languages else None
        verdict = LanguageFilter(languages, self.min_score, lang, score)
        identify = LanguageIdentifier(model, self.max_chars, lang, score, text_column, self.replace_columns)
        return identify, verdict

    def plan(self, ctx: StepContext) -> tuple[Dataset, tuple[str, ...]]:
        identify, verdict = self.ops(ctx.pipeline.text_column, ctx.pipeline.lang_column)
        ds = ctx.read_inputs().map_batches(identify, name=ctx.op("identify"))
        ds = ds.map_batches(CountValues("in", (("lang", verdict.lang_column),)), name=ctx.op("count_in"))
        return filtered(ctx, ds, verdict), (ctx.op("identify"), ctx.op("filter"))


def filtered(ctx: StepContext, ds: Dataset, verdict: Any) -> Dataset:
    """``ds`` through a filter step's ``verdict`` (op ``filter``; ``langid``, ``quality``), the report's examples
    of the rows it drops saved on the way (op ``examples``, ``zephyr.pipelines.examples``)."""
    from zephyr.pipelines.examples import ReasonGroups, filter_collector

    examples = filter_collector(ctx, ReasonGroups(verdict.reasons))
    return ds.map_batches(examples, name=ctx.op("examples")).map_batches(verdict, name=ctx.op("filter"))


@dataclass(frozen=True)
class HeuristicFilterStep(Step, type="heuristic_filter"):
    """Gopher / C4 / FineWeb heuristic rules; dropped rows are kept aside under the step's
    ``NN-NAME.zephyr/dropped/`` with reasons. The rule keys (``rules``, ``overrides``, ``default_lang``) are
    ``HeuristicFilterConfig``'s, as ``zephyr filter`` takes them."""

    filter_examples: ClassVar[bool] = True

    filter: HeuristicFilterConfig = embedded_field(HeuristicFilterConfig)
    keep_dropped: bool = True
    """Write the dropped rows (with ``drop_reason``) to ``NN-NAME.zephyr/dropped/``; needed by ``quality.train_from``."""
    replace_columns: bool = False
    """Replace a ``drop_reason`` column the data already has (kept rows then lose it); without it, such data
    is refused before any work."""
    output_column: str | None = field(default=None, metadata={"column": True, "metavar": "NAME"})
    """Name of the reason column of the dropped rows; a ``drop_reason`` the data has then passes unchanged.
    Not set: ``drop_reason``."""

    def adds(self, pipeline: PipelineConfig) -> tuple[str, ...]:
        """The reason column, on the rows it writes to ``dropped/`` (not on the rows it passes on)."""
        return (self.reason,)

    def preflight(self) -> None:
        if "url" in self.filter.rules:
            require("tldextract", "web", "the url rules")
            if blocklist := self.filter.overrides.get("url", {}).get("blocklist"):
                from zephyr.pipelines.web.urls import load_blocklist

                load_blocklist(blocklist)  # a bad line fails before any work, naming the file and line

    def columns_after(self, origin: dict[str, str], pipeline: PipelineConfig, name: str) -> dict[str, str]:
        if self.replace_columns and self.output_column is None:  # replaced, so gone from the kept rows
            return {k: v for k, v in origin.items() if k != "drop_reason"}
        return origin

    @property
    def reason(self) -> str:
        """The reason column of the dropped rows."""
        return self.output_column or "drop_reason"

    def routing(
        self, ds: Dataset, text_column: str, lang_column: str | None, op: Callable[[str], str] = str
    ) -> tuple[Dataset, Any]:
        """``ds`` with every row's first failing rule in ``drop_reason``, and the ``zephyr.removal.Route`` that
        sends those rows on: ``kept``, ``dropped`` (their reason in ``reason``) or ``quarantined`` (null texts,
        with ``quarantine_reason``). The input's own ``drop_reason`` is set aside when the reasons go to another
        column, and put back on every side; with the url rules the URLs are normalized first, as
        ``url_filter`` does. The one annotate and routing path of this step and ``zephyr filter``; ``op``
        names the engine ops."""
        from zephyr.pipelines.quality.filters import NULL_TEXT, FilterAnnotator

        from zephyr.removal import DROP_REASON, Route, set_aside

        aside = (DROP_REASON,) if self.reason != DROP_REASON else ()
        if aside:
            ds = ds.map_batches(set_aside(aside), name=op("set_aside"))
        f = self.filter
        if "url" in f.rules:
            from zephyr.pipelines.web.urls import NormalizeUrls

            url_column = f.overrides.get("url", {}).get("url_column", "url")
            ds = ds.map_batches(NormalizeUrls(url_column), name=op("normalize_urls"))
        annotator = FilterAnnotator(
            ",".join(f.rules), f.overrides, text_column, lang_column, f.default_lang, self.replace_columns
        )
        route = Route(column=DROP_REASON, reason_column=self.reason, quarantine=(NULL_TEXT,), aside=aside)
        return ds.map_batches(annotator, name=op("filter")), route

    def _routing(self, ctx: StepContext) -> tuple[Dataset, dict[str, Any]]:
        """Job 1, every row annotated with its first failing rule (the report's examples saved on the way),
        and how ``zephyr.removal.write_routed`` routes its rows: the kept ones to the step folder, the dropped
        ones (``keep_dropped``) to the sidecar's ``dropped/``, each side counted per source and language."""
        from zephyr.pipelines.examples import ReasonGroups, filter_collector
        from zephyr.pipelines.quality.filters import DROP_REASON, NULL_TEXT

        p = ctx.pipeline
        rows, route = self.routing(ctx.read_inputs(), p.text_column, p.lang_column, ctx.op)
        examples = filter_collector(ctx, ReasonGroups(DROP_REASON, skip=(NULL_TEXT,)))  # renamed at routing
        sides = {"dropped": str(ctx.side_dir / "dropped")} if self.keep_dropped else {}
        routing = {"sides": sides, "route": route, "finish": ctx.counted}
        return rows.map_batches(examples, name=ctx.op("examples")), routing

    def run(self, ctx: StepContext) -> StepOutcome:
        from zephyr.removal import write_routed

        rows, routing = self._routing(ctx)
        opts = ctx.engine()
        routed = write_routed(
            rows, str(ctx.step_dir), opts=opts, scratch="annotated", overwrite=True, **routing
        )
        # no row came through job 1 (the previous step kept none): its filter op accounts the empty step
        kept, op = (routed.kept, "route_kept") if routed.kept else (routed.verdict, ctx.op("filter"))
        outcome = StepOutcome(sorted(kept.files), kept.checksums, kept.stats, (f"map_batches({op})",))
        # keep_dropped: the dropped rows' files, which a quality step may train on (train_from)
        if (dropped := routed.sides.get("dropped")) is not None:
            outcome.extra["dropped_files"] = sorted(dropped.files)
            outcome.checksums.update(dropped.checksums)
        return outcome

    def plans(self, ctx: StepContext) -> list[tuple[str, Dataset | None]]:
        """Job 1, then the routes, which read its files (the kept rows, the step's output, listed last)."""
        from zephyr.removal import routes

        rows, routing = self._routing(ctx)
        first = "every row annotated with its first failing rule, to a scratch folder"
        return routed_jobs(first, rows, routes(rows, str(ctx.step_dir), **routing)[::-1])


def routed_jobs(first: str, rows: Dataset, routes: list[tuple[str, str, Any]]) -> list[tuple[str, Any]]:
    """The titled jobs of a filter that routes its rows: job 1 (``first``) writes ``rows``, each with its
    verdict, and then ``routes`` (``zephyr.removal.routes``: side, folder, plan) read job 1's files, in the
    given order; a route without a folder (the filter's report) goes to the driver."""
    jobs = [(first, rows)]
    for side, where, plan in routes:
        title = f"the {side} rows → {where}" if where else "the report's counts and examples → the driver"
        jobs.append((f"{title} (reads job 1's files)", plan))
    return [(f"job {n}: {title}", plan) for n, (title, plan) in enumerate(jobs, 1)]


@dataclass(frozen=True)
class DedupStep(Step):
    """A step that runs one of ``zephyr.dedup``'s document dedups in annotate mode and removes the duplicates
    it marks (``RemoveDuplicates``, reason ``<kind>_duplicate``), the data's own ``dup_*`` columns set aside
    around it. ``run`` and ``plans`` are written once, here, for every such step: a step says which dedup
    function it runs (``method``), and ``plans`` is that function's listing (``zephyr.dedup._rows.Jobs``), so
    ``--explain`` shows what ``run`` runs."""

    kind: ClassVar[str]
    """The drop reason's first word (``exact`` → ``exact_duplicate``)."""
    action: ClassVar[str] = "hashes"
    """The engine work directory of its jobs (``StepContext.engine``)."""
    priority_column: str | None = None
    """Keep the row with the largest value of this column in each cluster (ties: smallest id)."""

    def method(self, ctx: StepContext) -> Any:
        """The dedup's Dataset function with the step's settings bound, called as ``method(rows, mode=,
        execution=)`` by ``run`` and with a listing ``jobs=`` by ``plans``."""
        raise NotImplementedError

    def shingling(self) -> tuple[str, int, str] | None:
        """``(shingle, ngram, normalize)`` of the Jaccard the report shows beside the step's example clusters;
        None: the step saves no examples."""
        return None

    def kept(self, ctx: StepContext, annotated: Dataset) -> Dataset:
        """Dedup's annotated rows → the kept rows: examples saved, duplicates removed and counted (the step's
        accounting op, ``remove``), the data's own ``dup_*`` columns put back (``StepContext.dedup_inputs``
        set them aside)."""
        from zephyr.removal import set_aside

        if self.shingling() is not None:
            from zephyr.pipelines.examples import dedup_collector

            annotated = annotated.map_batches(dedup_collector(ctx), name=ctx.op("examples"))
        removed = annotated.map_batches(RemoveDuplicates(self.kind), name=ctx.op("remove"))
        return removed.map_batches(set_aside(DUP_COLUMNS, restore=True), name=ctx.op("restore"))

    def written(self, ctx: StepContext, annotated: Dataset) -> StepOutcome:
        """The kept rows written to the step folder, and the examples the report shows."""
        outcome = ctx.finish(self.kept(ctx, annotated), (ctx.op("remove"),))
        if (shingling := self.shingling()) is not None:
            from zephyr.pipelines.examples import merge_dedup_examples

            outcome.extra["examples"] = str(merge_dedup_examples(ctx.side_dir, *shingling))
        return outcome

    def run(self, ctx: StepContext) -> StepOutcome:
        """The dedup's eager jobs on the step input (annotate mode), then the kept rows written."""
        annotated = self.method(ctx)(ctx.dedup_inputs(), mode="annotate", execution=ctx.engine(self.action))
        return self.written(ctx, annotated)

    def plans(self, ctx: StepContext) -> list[tuple[str, Dataset | None]]:
        from zephyr.dedup._rows import Jobs

        rows, finish = ctx.dedup_inputs(), lambda out: ctx.counted(self.kept(ctx, out))
        return Jobs.plans(self.method(ctx), rows, mode="annotate", budget=ctx.budget, finish=finish)


@dataclass(frozen=True)
class _DedupStep(DedupStep):
    """What the document dedup steps of this module share (``DedupStep``'s run and plans besides): the
    columns they read, their report section (clusters by size, example clusters) and plot."""

    section: ClassVar[str] = "dedup"

    def _columns(self, ctx: StepContext) -> DedupColumns:
        return DedupColumns(ctx.pipeline.text_column, ctx.pipeline.id_column, self.priority_column)

    @classmethod
    def report(cls, record: dict[str, Any], plots: dict[str, str]) -> list[tuple]:
        """A dedup step's clusters by size and its example clusters (kept beside removed, with their Jaccard)."""
        from zephyr.pipelines.examples import dedup_example_blocks, read_examples

        name = record["step"]
        sizes = {int(k): v for k, v in record.get("cluster_sizes", {}).items()}
        multi = {k: v for k, v in sizes.items() if k > 1}
        lsh = record.get("extra", {}).get("lsh")
        note = (
            f" LSH: {md_text(lsh['bands'])} bands × {md_text(lsh['rows'])} rows (S-curve midpoint ≈ "
            f"{md_text(lsh['lsh_threshold'])}), verified Jaccard ≥ {md_text(lsh['threshold'])}."
            if lsh
            else ""
        )
        blocks: list[tuple] = [
            (
                "p",
                f"{md_code(name)}: {md_count(sum(multi.values()))} cluster(s) with duplicates, "
                f"{md_count(record['rows_dropped'])} document(s) removed.{note}",
            )
        ]
        if sizes:
            rows = [[str(k), md_count(v), md_count(v * (k - 1))] for k, v in sorted(sizes.items())]
            blocks.append(("table", ["cluster size", "clusters (kept documents)", "documents removed"], rows))
        if f"clusters_{name}" in plots:
            blocks.append(("img", plots[f"clusters_{name}"], f"cluster sizes of {name}"))
        payload = read_examples(record.get("extra", {}).get("examples"))
        if payload and payload["kind"] == "dedup":
            blocks += dedup_example_blocks(name, payload)
        return blocks

    @classmethod
    def plots(cls, record: dict[str, Any], plt: Any, save: Any) -> None:
        """Duplicate clusters by size, sizes ≥ 2 only (the singletons are counted in the title: they would dwarf
        the bars that matter)."""
        sizes = sorted((int(k), v) for k, v in record.get("cluster_sizes", {}).items())
        multi = [(k, v) for k, v in sizes if k > 1]
        if not multi:
            return
        singles = sum(v for k, v in sizes if k == 1)
        fig, ax = plt.subplots(figsize=(min(7.0, 3.2 + 0.45 * len(multi)), 2.8))
        bars = ax.bar([str(k) for k, _ in multi], [v for _, v in multi], color="#8172b3", width=0.6)
        ax.bar_label(bars, labels=[f"{v:,}" if v else "" for _, v in multi], padding=2, fontsize=8)
        ax.set_xlabel("cluster size (documents)")
        ax.set_ylabel("clusters")
        ax.margins(y=0.15)
        ax.set_title(
            f"{record['step']}: {sum(v for _, v in multi):,} clusters with duplicates\n"
            f"({singles:,} kept documents had none)",
            fontsize=10,
        )
        save(fig, f"clusters_{record['step']}")


@dataclass(frozen=True)
class ExactDedupStep(_DedupStep, type="exact_dedup"):
    """Document-level exact dedup: 128-bit xxh3 of the normalized text; the smallest id of a cluster stays.
    ``normalize`` is ``ExactDedupConfig``'s key (documents only: ``level`` is not a step key)."""

    kind: ClassVar[str] = "exact"
    dedup: ExactDedupConfig = embedded_field(ExactDedupConfig, keys=("normalize",))

    def method(self, ctx: StepContext) -> Any:
        from zephyr.dedup.exact import exact_dedup_dataset

        return functools.partial(
            exact_dedup_dataset, columns=self._columns(ctx), normalize=self.dedup.normalize
        )

    def shingling(self) -> tuple[str, int, str]:
        # exact duplicates share every shingle once normalized: the Jaccard shown is that of word 5-grams
        return "word", 5, self.dedup.normalize


@dataclass(frozen=True)
class FuzzyDedupStep(_DedupStep, type="fuzzy_dedup"):
    """MinHash-LSH near-duplicate removal with verified (true Jaccard) clusters (``zephyr.dedup``).

    The MinHash keys are ``FuzzyDedupConfig``'s, documented there: ``preset`` (the other keys override it),
    ``threshold``, ``shingle``, ``ngram``, ``normalize``, ``bands``, ``rows_per_band``, ``num_perm``, ``seed``,
    ``scheme``, ``verify``, ``clusters``, ``signature_device``, ``bucket_links``. The ``zephyr dedup fuzzy``
    flags build the same dataclass. ``index`` (a signature index of earlier runs' kept rows: a folder or fsspec
    URL, whose MinHash settings must equal this step's) and ``update_index`` (append this step's kept rows to
    it, created on the first run) are ``IndexConfig``'s, as ``zephyr dedup fuzzy --index DIR --update-index``
    takes them."""

    kind: ClassVar[str] = "fuzzy"
    action: ClassVar[str] = "candidates"
    dedup: FuzzyDedupConfig = embedded_field(FuzzyDedupConfig)
    signatures: IndexConfig = embedded_field(IndexConfig, keys=("index", "update_index"))

    def indexed(self, ctx: StepContext, index: IndexConfig | None = None) -> Any:
        """The fuzzy dedup against and into ``index`` (``zephyr.dedup.fuzzy.IndexedDedup``, as ``zephyr dedup
        fuzzy`` runs it); a listing names the index, ``run`` opens it."""
        from zephyr.dedup.fuzzy import IndexedDedup

        index = index or self.signatures
        return IndexedDedup(self.dedup, self._columns(ctx), index, ctx.fingerprint, ctx.op("rows"))

    def method(self, ctx: StepContext) -> Any:
        return self.indexed(ctx).dedup

    def shingling(self) -> tuple[str, int, str]:
        return self.dedup.shingle, self.dedup.ngram, self.dedup.normalize

    def run(self, ctx: StepContext) -> StepOutcome:
        from zephyr.dedup._rows import Jobs
        from zephyr.dedup.index import open_index

        index, path = self.signatures, self.signatures.index
        if index.update_index and open_index(path, self.dedup, missing_ok=True) is None:
            index = IndexConfig(write_index=path)  # created on the first run
        indexed, graph = self.indexed(ctx, index), {}
        annotated = indexed.dedup(ctx.dedup_inputs(), "annotate", Jobs(ctx.engine(self.action), graph))
        outcome = self.written(ctx, annotated)
        if indexed.opened is not None:
            matched = graph.get("matched_index", 0)
            outcome.extra["index"] = {"path": path, "docs": indexed.opened.docs, "matched": matched}
        if self.signatures.update_index:  # every row, the removed ones tied to their kept row (dedup.index)
            outcome.extra["index_written"] = indexed.write(ctx.engine("index"))
        outcome.extra["lsh"] = graph["lsh"]  # as zephyr dedup fuzzy's stats have it
        return outcome


@dataclass(frozen=True)
class QualityStep(Step, type="quality"):
    """fastText quality classifier: score every row (``quality_score``) and drop rows below ``min_score``.

    Exactly one of ``model``, ``train`` or ``train_from`` says where the classifier comes from. The fastText
    keys (``positive_label``, ``negative_label``, ``epoch``, ``lr``, ``dim``, ``word_ngrams``, ``seed``...) are
    ``ClassifierConfig``'s, as ``zephyr quality train`` takes them, written flat beside ``model:``."""

    filter_examples: ClassVar[bool] = True

    model: str | None = path_field(None)
    """A trained fastText classifier (``.bin``) with labels ``positive_label``/``negative_label``."""
    train: list[str] | None = path_field(None)
    """Labelled Parquet file(s) (``text`` + ``label_column``) to train the classifier on, inside the job."""
    train_from: str | None = None
    """Name of an earlier ``heuristic_filter`` step: train on its kept rows (positive) against its dropped
    rows (negative) — a bootstrapped classifier for corpora without labels."""
    label_column: str = "label"
    """Label column of ``train``."""
    min_score: float = ranged_field(0, 1, default=0.5)
    """Keep rows whose P(positive) is at least this, in [0, 1]; 0 scores without dropping."""
    train_max_rows: int = ranged_field(2, default=200_000)
    """At most this many rows of each label are used for training (a deterministic prefix)."""
    classifier: ClassifierConfig = embedded_field(ClassifierConfig)
    replace_columns: bool = False
    """Replace a ``quality_score`` column the data already has (scores of another model); ``false``: refuse."""
    output_column: str | None = field(default=None, metadata={"column": True})
    """Write the score to this column instead of ``quality_score``; ``null``: ``quality_score``."""

    def __post_init__(self) -> None:
        given = [k for k in ("model", "train", "train_from") if getattr(self, k)]
        if len(given) != 1:
            raise FieldError(
                "model", f"give exactly one of model, train or train_from (got {', '.join(given) or 'none'})"
            )
        super().__post_init__()

    def adds(self, pipeline: PipelineConfig) -> tuple[str, ...]:
        return (self.output_column or "quality_score",)

    def preflight(self) -> None:
        require("fasttext", "quality", "the quality step")

    def check(self, index: int, earlier: list[StepEntry]) -> list[str]:
        if not self.train_from:
            return []
        source = next((e.step for e in earlier if e.name == self.train_from), None)
        if not isinstance(source, HeuristicFilterStep):
            return [
                f"steps[{index}].train_from: must name an enabled heuristic_filter step before it, got {self.train_from!r}"
            ]
        if not source.keep_dropped:
            return [f"steps[{index}].train_from: step {self.train_from!r} must have keep_dropped: true"]
        return []

    def run(self, ctx: StepContext) -> StepOutcome:
        if not self.model:
            self._train(ctx, ctx.side_dir / "classifier.bin")
        outcome = super().run(ctx)
        outcome.extra["classifier"] = str(self._model(ctx))
        return outcome

    def _model(self, ctx: StepContext) -> Path:
        return Path(self.model) if self.model else ctx.side_dir / "classifier.bin"

    def plans(self, ctx: StepContext) -> list[tuple[str, Dataset | None]]:
        trained = (
            [] if self.model else [("the classifier is trained first, in the driver (no engine job)", None)]
        )
        return [*trained, *super().plans(ctx)]

    def plan(self, ctx: StepContext) -> tuple[Dataset, tuple[str, ...]]:
        from zephyr.pipelines.quality.classifier import QualityScorer

        column = self.output_column or "quality_score"
        model, text = str(self._model(ctx)), ctx.pipeline.text_column
        scorer = QualityScorer(model, self.classifier, text, self.replace_columns, column)
        ds = ctx.read_inputs().map_batches(scorer, name=ctx.op("score"))
        return filtered(ctx, ds, MinScoreFilter(column, self.min_score)), (ctx.op("score"), ctx.op("filter"))

    def _train(self, ctx: StepContext, output: Path) -> None:
        """Train the classifier into ``output``, or reuse the one an interrupted run of this config trained: its
        stamp holds this step's fingerprint and the model file still has the size and checksum it had when
        trained (the job folder may be writable by others; a model is a file a native parser reads)."""
        import pyarrow as pa
        from zephyr.pipelines.quality.classifier import train_classifier

        from zephyr import resume
        from zephyr.io.checksum import checksum_record, file_checksum

        p, c = ctx.pipeline, self.classifier
        stamp = output.with_suffix(".fingerprint")
        recorded = resume.read_marker(stamp, ctx.fingerprint)
        problem = "no stamp" if recorded is None else resume.check_files({str(output): recorded})
        if problem is None:
            log.info("quality: reusing the classifier trained by the interrupted run at %s", output)
            return
        if recorded is not None:
            log.warning("quality: not reusing the classifier: %s", problem)
        if self.train:  # labelled Parquet: the first train_max_rows rows of each label, in file order
            import polars as pl
            import pyarrow.parquet as pq

            columns = [p.text_column, self.label_column]
            parts = [pq.read_table(path, columns=columns) for path in self.train]
            frame = pl.from_arrow(pa.concat_tables(parts, promote_options="permissive"))
            frame = frame.rename(dict(zip(columns, ("text", "label"), strict=True)))
            wanted = pl.col("label").is_in([c.positive_label, c.negative_label])
            table = frame.filter(
                wanted & (pl.int_range(pl.len()).over("label") < self.train_max_rows)
            ).to_arrow()
        else:
            source = ctx.earlier[self.train_from]
            positive = _first_texts(source["files"], p.text_column, self.train_max_rows)
            negative = _first_texts(
                source["extra"].get("dropped_files", []), p.text_column, self.train_max_rows
            )
            if not positive or not negative:
                raise InputError(
                    f"step {ctx.entry.name!r}: train_from {self.train_from!r} gives {len(positive)} kept and "
                    f"{len(negative)} dropped rows; the classifier needs both (give model: or train: instead)"
                )
            labels = [c.positive_label] * len(positive) + [c.negative_label] * len(negative)
            table = pa.table({"text": pa.array(positive + negative, pa.large_string()), "label": labels})
        train_classifier(table, output, c)  # columns text and label; it logs the rows it trained on
        stamp.write_text(
            json.dumps({"fingerprint": ctx.fingerprint, **checksum_record(*file_checksum(str(output)))})
        )


def _first_texts(files: list[str], column: str, max_rows: int) -> list[str]:
    """The first non-null texts of some Parquet parts, in file order, up to ``max_rows``."""
    import pyarrow.dataset as pads

    if not files:
        return []
    rows = pads.dataset(files).head(max_rows, columns=[column], filter=pads.field(column).is_valid())
    return rows.column(0).to_pylist()


@dataclass(frozen=True)
class MapStep(Step, type="map"):
    """A user transform: ``function(table: pa.Table) -> pa.Table | zephyr.BatchOutput`` on every batch.

    Rows it returns go on; rows it drops are counted (by reason, through ``BatchOutput.dropped``) and rows it
    rejects are quarantined. Loading the config (and ``zephyr run --check``) only finds the module, running
    none of its code or its packages' (``find_module``); a run imports it before any work starts
    (``preflight``), so a missing attribute still fails before the first step."""

    function: str = field(default="", metadata={"required": True})
    """``package.module:attribute`` — a function, or a class instantiated with no arguments."""
    batch_rows: int | None = ranged_field(1, default=None)
    """Rows per call; ``None`` passes the engine's batches as they come."""

    def __post_init__(self) -> None:
        super().__post_init__()
        module_name, sep, attr = self.function.partition(":")
        if not sep or not all(part.isidentifier() for part in f"{module_name}.{attr}".split(".")):
            raise FieldError("function", f"must look like package.module:function, got {self.function!r}")
        if (missing := find_module(module_name)) is not None:
            raise FieldError("function", f"cannot import {self.function!r}: {missing}")

    def load(self) -> Any:
        """The callable named by ``function``: imports its module (runs its code)."""
        import pkgutil

        try:
            target = pkgutil.resolve_name(self.function)
        except (ImportError, AttributeError) as exc:
            raise FieldError("function", f"cannot import {self.function!r}: {exc}") from None
        if isinstance(target, type):
            target = target()
        if not callable(target):
            raise FieldError("function", f"{self.function!r} is not callable")
        return target

    def preflight(self) -> None:
        self.load()  # the module runs here, before any work; --check only found it

    def columns_after(self, origin: dict[str, str], pipeline: PipelineConfig, name: str) -> None:
        return None  # unknown until it runs; each later step checks its own batches

    def plan(self, ctx: StepContext) -> tuple[Dataset, tuple[str, ...]]:
        ds = ctx.read_inputs().map_batches(self.load(), batch_rows=self.batch_rows, name=ctx.op("map"))
        return ds, (ctx.op("map"),)


def find_module(name: str) -> str | None:
    """Why the module ``name`` (dotted) cannot be imported, or None when it can be found: without running its
    code or any of its parent packages'.

    ``importlib.util.find_spec("a.b")`` would import ``a`` (its ``__init__`` runs) to read ``a.__path__``. Here
    only the top-level name goes to ``find_spec`` (finders search ``sys.path`` and run no module code); each
    submodule is then asked of the import system's finders with the parent's search locations, as ``import``
    itself does once the parent is loaded. A parent that is a plain module, not a package, cannot be looked
    into without running it (``os.path`` is set by ``os``'s code): the name is then taken as found, and the
    run's import says the rest.

    >>> find_module("json.decoder") is None
    True
    >>> find_module("json.no_such_part")
    "no module named 'json.no_such_part'"
    """
    import importlib.util
    import sys

    parts = name.split(".")
    try:
        spec = importlib.util.find_spec(parts[0])
    except (ImportError, ValueError) as exc:
        return str(exc)
    if spec is None:
        return f"no module named {parts[0]!r}"
    for depth in range(2, len(parts) + 1):
        full = ".".join(parts[:depth])
        loaded = sys.modules.get(full)
        if loaded is not None and getattr(loaded, "__spec__", None) is not None:
            spec = loaded.__spec__
            continue
        locations = spec.submodule_search_locations
        if locations is None:
            return None  # a plain module: its attributes are known only by running it
        found = None
        for finder in sys.meta_path:
            find_spec = getattr(finder, "find_spec", None)
            if find_spec is not None:
                found = find_spec(full, list(locations))
                if found is not None:
                    break
        if found is None:
            return f"no module named {full!r}"
        spec = found
    return None


@dataclass(frozen=True)
class TokenizeStep(Step, type="tokenize"):
    """Globally shuffled token shards (``zephyr.tokenize``); trains a byte-level BPE when no tokenizer is given.
    ``shard_bytes``, ``seed``, ``bos``, ``engine``, ``batch_rows`` and ``megatron`` are
    ``zephyr.tokenize.config.TokenizeConfig``'s, as the ``zephyr tokenize`` flags are."""

    output: ClassVar[str] = "tokens"
    unique: ClassVar[bool] = True
    section: ClassVar[str] = "tokens"
    tokenizer: str | None = path_field(None)
    """A HF ``tokenizer.json`` (one from ``zephyr tokenizer train``, or a model folder's); ``None`` trains a
    byte-level BPE of ``vocab_size`` on the step input, as ``zephyr tokenizer train`` does (the same function,
    ``zephyr.tokenize.train_tokenizer``), and saves it as ``tokenizer.json`` in the step folder."""
    vocab_size: int = ranged_field(258, default=8192)
    """Vocabulary of the trained tokenizer, special tokens included (only without ``tokenizer``)."""
    tokenizer_train_bytes: str = field(default="32MB", metadata={"bytes": True})
    """Most text the trainer sees: an equal share of the first bytes of every input part, streamed (the
    trainer's ``sample_bytes``; lowered to fit the job's ``--memory-budget``)."""
    shards: TokenizeConfig = embedded_field(TokenizeConfig, keys=SHARD_KEYS)

    def run(self, ctx: StepContext) -> StepOutcome:
        from zephyr.tokenize.train_tokenizer import train_tokenizer
        from zephyr.tokenize.writer import write_token_shards

        from zephyr.options import DEFAULT_MEMORY_BUDGET

        if not ctx.inputs:
            raise InputError(f"step {ctx.entry.name!r}: the previous step kept no rows; nothing to tokenize")
        extra: dict[str, Any] = {}
        if self.tokenizer:
            tokenizer = Path(self.tokenizer)
        else:  # what `zephyr tokenizer train STEP_INPUT --vocab-size N --output tokenizer.json` does
            trained = train_tokenizer(
                ctx.inputs,
                vocab_size=self.vocab_size,
                output=str(ctx.step_dir / "tokenizer.json"),
                text_column=ctx.pipeline.text_column,
                sample_bytes=self.tokenizer_train_bytes,
                memory_budget=ctx.execution.get("memory_budget", DEFAULT_MEMORY_BUDGET),
                format="parquet",
            )
            tokenizer = Path(trained.output)
            extra["tokenizer_trained_on"] = trained.to_dict()  # train_tokenizer logs it too
        from zephyr.io import claim, layout

        result = write_token_shards(**self._writer(ctx, str(tokenizer)), **ctx.engine())
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
        # what a rerun that skips the step checks: every file of the set as its claim names it (zephyr.io.claim)
        published = claim.read_manifest(layout.manifest_path(result.output))["files"]
        checksums = {f"{result.output}/{name}": record for name, record in published.items()}
        return StepOutcome(engine_stats=result.stats, extra=extra, checksums=checksums)

    def _writer(self, ctx: StepContext, tokenizer: str) -> dict[str, Any]:
        """The token writer's arguments (``zephyr.tokenize.writer``) but the engine's: what ``run`` writes
        and ``plans`` prints."""
        p = ctx.pipeline
        columns = {"text_column": p.text_column, "id_column": p.id_column, "source_column": p.source_column}
        written = {"data": ctx.read_inputs(list(columns.values())), "output": str(ctx.step_dir / "shards")}
        return {**written, "tokenizer": tokenizer, **dataclasses.asdict(self.shards), **columns}

    def plans(self, ctx: StepContext) -> list[tuple[str, Dataset | None]]:
        from zephyr.tokenize.writer import plans

        if not self.tokenizer:
            return [("a byte-level BPE is trained on the step input first; the token jobs follow", None)]
        return plans(**self._writer(ctx, self.tokenizer), **ctx.execution)

    def account(self, name: str, outcome: StepOutcome, input_rows: int | None) -> dict[str, Any]:
        """A tokenize step keeps every document: the shards must hold as many as came in."""
        kept = int(outcome.extra["num_documents"])
        if input_rows != kept:
            raise AccountingError(
                f"step {name!r}: {input_rows} documents came in but the token shards hold {kept}; "
                "every document must be tokenized (the read step quarantines null texts)"
            )
        shards = [str(p) for p in Path(outcome.extra["shards_dir"]).glob("shard-*")]
        per_source = outcome.extra.get("per_source", {})
        return {
            "per_source": {"out": {k: int(v["documents"]) for k, v in per_source.items()}},
            **rows_record(input_rows, kept, 0, {}, 0, shards),
        }

    @classmethod
    def done_line(cls, record: dict[str, Any]) -> str:
        return super().done_line(record) + f", {record['extra'].get('num_tokens', 0):,} tokens"

    @classmethod
    def report(cls, record: dict[str, Any], plots: dict[str, str]) -> list[tuple]:
        """Tokens: documents, tokens, shards, per source."""
        extra = record.get("extra", {})
        trained = extra.get("tokenizer_trained_on")
        note = (
            f" (a {md_text(extra.get('vocab_size'))}-entry byte-level BPE trained here, as `zephyr tokenizer train` does, on "
            f"{md_count(trained['documents'])} documents: a {format_bytes(trained['sample_bytes'], decimal=True)} sample of the step input)"
            if trained
            else ""
        )
        blocks: list[tuple] = [
            ("h", 2, "Tokens"),
            (
                "p",
                f"{md_count(extra.get('num_documents', 0))} documents, {md_count(extra.get('num_tokens', 0))} tokens "
                f"({md_text(extra.get('dtype'))}) in {md_text(extra.get('num_shards'))} shards at "
                f"{md_code(extra.get('shards_dir'))}; tokenizer {md_code(extra.get('tokenizer'))}{note}.",
            ),
        ]
        per = extra.get("per_source", {})
        if per:
            mean = {
                k: f"{v['tokens'] / v['documents']:.0f}" if v["documents"] else "–" for k, v in per.items()
            }
            rows = [
                [md_text(k), md_count(v["documents"]), md_count(v["tokens"]), mean[k]] for k, v in per.items()
            ]
            blocks.append(("table", ["source", "documents", "tokens", "tokens per document"], rows))
        return blocks


_TRAIN_MANAGED = ("data", "log", "checkpoint_dir", "tensorboard_dir")


@dataclass(frozen=True)
class TrainStep(Step, type="train"):
    """Train the MoE language model on the token shards (``zephyr.trainer``).

    Any ``TrainConfig`` key is accepted (``preset``, ``steps``, ``batch_size``, ``seq_len``, ``device``,
    ``model: {...}``, ``optim: {...}``...), except ``data``, ``log`` and ``checkpoint_dir``, which the
    pipeline sets (the tokenize output, ``train.jsonl`` and ``checkpoints/`` in the step folder)."""

    output: ClassVar[str] = "model"
    section: ClassVar[str] = "training"
    display_only: ClassVar[tuple[str, ...]] = ("log_every",)
    settings: dict[str, Any] = field(default_factory=dict)
    """The ``TrainConfig`` keys given in the step."""

    def __post_init__(self) -> None:
        self.build()

    @classmethod
    def from_keys(cls, body: dict[str, Any], where: str, errors: list[str]) -> Step | None:
        return build_flat(cls, {"settings": body}, where, errors)

    def keys(self) -> dict[str, Any]:
        return dict(self.settings)

    def check(self, index: int, earlier: list[StepEntry]) -> list[str]:
        if any(e.step.output == "tokens" for e in earlier):
            return []
        return [f"steps[{index}].step: 'train' needs an enabled tokenize step before it"]

    def build(self, **managed: str | None) -> Any:
        """The ``TrainConfig`` to run, given the keys the pipeline sets (``data``, ``log``, ``checkpoint_dir``);
        its own checks name the key (a model override included: ``TrainConfig`` checks it on its preset)."""
        from zephyr.trainer.config import TrainConfig

        if taken := [key for key in self.settings if key in _TRAIN_MANAGED]:
            raise FieldError(taken[0], f"set by the pipeline; leave out {', '.join(_TRAIN_MANAGED)}")
        try:
            return TrainConfig.from_dict({"checkpoint_every": 50, **self.settings, **managed})
        except ConfigError as exc:  # named by the key its first problem starts with (or else mentions)
            first = str(exc.problems[0] if isinstance(exc, ConfigProblems) else exc)
            word = first.split()[0].split(".")[0]
            key = (
                word if word in self.settings else next((k for k in self.settings if k in first), "settings")
            )
            raise FieldError(key, str(exc)) from None

    def run(self, ctx: StepContext) -> StepOutcome:
        import numpy as np
        from zephyr.trainer.train import train

        tokens = [r["extra"] for r in ctx.earlier.values() if STEPS[r["type"]].output == "tokens"]
        log_path, checkpoints = ctx.step_dir / "train.jsonl", str(ctx.step_dir / "checkpoints")
        cfg = self.build(data=tokens[-1]["shards_dir"], log=str(log_path), checkpoint_dir=checkpoints)
        result = train(cfg)
        records = read_train_log(log_path)
        first, last = (records[0], records[-1]) if records else ({}, {})
        speeds = [r["tokens_per_s"] for r in records[1:]]  # the first step warms up
        extra = {
            "steps": result.step,
            "resumed_from": result.resumed_from,
            "log": str(log_path),
            "checkpoints": checkpoints,
            "final_loss": last.get("loss"),
            "first_loss": first.get("loss"),
            "tokens_trained": int(sum(r.get("tokens", 0) for r in records)),
            "mean_tokens_per_s": float(np.mean(speeds)) if speeds else None,
            "config": dataclasses.asdict(cfg),
            "packing": cfg.packing,
            "instances_filtered": last.get("instances_filtered_total"),
            "mix_tokens": last.get("mix_tokens"),
            "mix_share": last.get("mix_share"),
        }
        return StepOutcome(extra=extra)

    def plans(self, ctx: StepContext) -> list[tuple[str, Dataset | None]]:
        return [("training on the token shards, in this process (zephyr.trainer): no engine job", None)]

    def account(self, name: str, outcome: StepOutcome, input_rows: int | None) -> dict[str, Any]:
        return rows_record(0, 0, 0, {}, 0, [])

    @classmethod
    def done_line(cls, record: dict[str, Any]) -> str:
        extra = record["extra"]
        loss = extra.get("final_loss")
        body = f"{extra.get('steps', 0)} steps" + (f", final loss {loss:.4f}" if loss is not None else "")
        if extra.get("mean_tokens_per_s"):
            body += f", {extra['mean_tokens_per_s']:,.0f} tokens/s"
        return body

    @classmethod
    def report(cls, record: dict[str, Any], plots: dict[str, str]) -> list[tuple]:
        """Training: steps, tokens, loss, throughput, and their curves."""
        extra = record.get("extra", {})
        loss0, loss1 = extra.get("first_loss"), extra.get("final_loss")
        tps = extra.get("mean_tokens_per_s")
        text = f"{md_text(extra.get('steps'))} steps, {md_count(extra.get('tokens_trained', 0))} tokens"
        if loss0 is not None and loss1 is not None:
            text += f"; loss {loss0:.4f} → {loss1:.4f}"
        if tps:
            text += f"; {tps:,.0f} tokens/s"
        if extra.get("resumed_from"):
            text += f"; resumed from step {md_text(extra['resumed_from'])}"
        if extra.get("packing"):
            text += f"; packing {md_text(extra['packing'])}"
        if extra.get("instances_filtered") is not None:
            text += f"; {md_count(extra['instances_filtered'])} samples masked by the instance filter"
        text += f". Metrics: {md_code(extra.get('log'))}; checkpoints: {md_code(extra.get('checkpoints'))}."
        blocks: list[tuple] = [("h", 2, "Training"), ("p", text)]
        if extra.get("mix_tokens"):
            share = extra.get("mix_share") or {}
            rows = [
                [md_text(k), md_count(v), f"{share.get(k, 0):.3f}"] for k, v in extra["mix_tokens"].items()
            ]
            blocks.append(("table", ["source", "tokens drawn", "share over the last window"], rows))
        if "training" in plots:
            blocks.append(("img", plots["training"], "training loss and tokens/s per step"))
        return blocks

    @classmethod
    def plots(cls, record: dict[str, Any], plt: Any, save: Any) -> None:
        """``training.png``: loss and tokens/s per step, side by side."""
        log_path = record.get("extra", {}).get("log")
        records = read_train_log(log_path) if log_path else []
        if not records:
            return
        steps = [r["step"] for r in records]
        fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.2))
        left.plot(steps, [r["loss"] for r in records], color="#4c72b0")
        left.set_title("training loss")
        speed = [(r["step"], r["tokens_per_s"]) for r in records if r.get("tokens_per_s") is not None]
        right.plot([s for s, _ in speed], [v for _, v in speed], color="#55a868")
        right.set_title("throughput (tokens/s)")
        right.set_ylim(bottom=0)
        for ax in (left, right):
            ax.set_xlabel("step")
            ax.grid(alpha=0.3)
        save(fig, "training")


def read_train_log(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """The trainer's JSONL records, one per step (a resumed run's log is trimmed to the steps its checkpoint
    holds before it goes on: ``zephyr.trainer.metrics.trim_log``)."""
    try:
        return [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]
    except FileNotFoundError:
        return []
