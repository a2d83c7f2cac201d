"""The pipelines package's ``zephyr`` commands, declared once as ``zephyr.cli.Command``s: ``run`` (a pipeline
config, docs/pipelines.md), ``normalize``, ``langid``, ``filter``, ``quality train|score``, ``pii``,
``decontaminate`` (docs/quality.md) and ``extract`` (docs/web.md). Each one's flags are the fields of the
dataclasses it names (a pipeline step's keys where the step does the same work) plus the shared groups
``Inputs``, ``Output``, ``Removal`` and the execution options; ``zephyr explain WORDS`` prints the plan of
each command that reads files, built by the code the command runs.

Every command but ``run`` and ``quality train`` reads Parquet or JSONL inputs (files, directories, globs) and
writes Parquet ``part-00000.parquet``, ... into ``--output`` and nothing else, so reading the output folder
gives exactly the kept rows; the rest is in its sidecar ``OUTPUT.zephyr/`` (``zephyr.io.layout``):
``stats.json`` (every command's one format, ``zephyr.summary.write_summary``: the stats of the job that wrote
the output, task totals over all its jobs, and its own figures and row balance under the command's name), and
for ``zephyr filter`` ``dropped/`` (rows with ``drop_reason``; ``--dropped-output DIR`` puts them elsewhere),
``quarantine/`` (null texts, ``quarantine_reason``), ``unreadable/`` (input lines that cannot be read) and the
retention report ``report.json`` / ``report.md``.

``zephyr run PIPELINE``: PIPELINE is a YAML file or the name of a built-in config (``quickstart``, ``web``,
``code``). Rerunning with the same ``--job-dir`` resumes: complete steps are skipped, the first unfinished
one skips its finished tasks. Ends with the run's summary, whose last line says where the report is::

    zephyr run pipelines/configs/quickstart.yaml --job-dir out/quickstart
    zephyr run cfg.yaml --set steps.fuzzy_dedup.threshold=0.7 --from fuzzy_dedup --until tokenize
"""

from __future__ import annotations

import dataclasses
import json
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from zephyr.pipelines.quality.config import ClassifierConfig, NormalizeConfig, PIIConfig
from zephyr.pipelines.steps import HeuristicFilterStep, LangIdStep, NormalizeStep, routed_jobs

from zephyr.cli import Command, Inputs, Output
from zephyr.config import embedded_field
from zephyr.errors import ConfigError, require
from zephyr.options import ExecutionOptions
from zephyr.removal import Removal

if TYPE_CHECKING:
    from zephyr.dataset import Dataset
    from zephyr.summary import Summary


# -- what the text commands share ---------------------------------------------------------------------------
@dataclass(frozen=True)
class TextInputs(Inputs):
    """The files a text command reads and the column holding each document's text."""

    text_column: str = "text"
    """The column holding each document's text."""

    def read_text(self, adds: tuple[str, ...] = (), replace_columns: bool = False) -> Dataset:
        """The inputs as a Dataset, after checking that every file's text column holds text and has none of
        the columns ``adds`` the command will add (unless ``replace_columns``): one line naming the file and
        the column, before any task starts."""
        from zephyr.io.paths import input_files
        from zephyr.io.sources import check_text_inputs
        from zephyr.removal import check_input_columns

        files, fmt = input_files(list(self.inputs), self.format)
        check_text_inputs(files, self.text_column, format=fmt)
        rename = "--output-column NAME"
        check_input_columns(files, adds, replace_columns=replace_columns, format=fmt, rename=rename)
        return self.read()


@dataclass(frozen=True)
class Replace:
    """Whether a command may replace the columns it adds."""

    replace_columns: bool = False
    """Replace the columns the command adds when the input already has them (without it: an error naming the
    column, before any work)."""


@dataclass(frozen=True)
class Dropped:
    """Where a command keeps the rows it drops."""

    dropped_output: str | None = field(default=None, metadata={"metavar": "DIR"})
    """Also write the dropped rows to DIR as Parquet, each with its reason in a drop_reason column (without it:
    dropped rows are counted, not kept)."""


def _write(
    ds: Dataset,
    output: Output,
    execution: ExecutionOptions,
    section: str,
    details: Callable[[dict[str, int]], dict[str, Any]] = lambda _: {},
    removal: Removal | None = None,
    reasons: Callable[[Any], Any] | None = None,
    **fields: Any,
) -> Summary:
    """Write ``ds`` to ``--output`` (``Removal.write``: with ``--dropped-output``, the rows ``reasons`` drops
    go there); ``details`` of the counters of its ops (summed over the stages of the job that wrote the
    output) go to ``stats.json``'s ``section`` (``zephyr.summary.write_summary``) and to the summary."""
    from zephyr import job_stats
    from zephyr.summary import write_summary

    removal = removal or Removal()
    with job_stats.recording() as jobs:
        result, stages = removal.write(ds, output.output, execution.as_kwargs(), reasons)
    found = details(job_stats.counter_totals(result.stats.get("stages", [])))
    fields.update(jobs=jobs, stages=stages, dropped_output=removal.dropped_output, details=found)
    return write_summary(result, output.output, section, found, **fields)


# -- normalize -----------------------------------------------------------------------------------------------
def normalize_plan(inputs: TextInputs, config: NormalizeConfig, **_: Any) -> Dataset:
    if config.fix_mojibake:
        require("ftfy", "quality", "zephyr normalize --fix-mojibake")
    return NormalizeStep(config).apply(inputs.read_text(), inputs.text_column)


def normalize(
    inputs: TextInputs, output: Output, execution: ExecutionOptions, config: NormalizeConfig
) -> Summary:
    """Normalize text: NFC, control characters, whitespace (code-safe), optional ftfy mojibake repair."""

    # no row is dropped: what normalization did is the texts it rewrote and the bytes it took out
    counted = {"rows_changed": "normalize/rows_rewritten", "bytes_removed": "normalize/bytes_removed"}

    def changed(counts: dict[str, int]) -> dict[str, int]:
        return {key: counts.get(name, 0) for key, name in counted.items()}

    next = f"zephyr langid {output.output} --output OUT"
    ds = normalize_plan(inputs, config)
    return _write(ds, output, execution, "normalize", changed, next=next, shown=tuple(counted))


# -- langid --------------------------------------------------------------------------------------------------
def _langid(inputs: TextInputs, config: LangIdStep, dropped: Dropped, **_: Any) -> tuple[Dataset, Any]:
    """The rows with their language columns (the ``langid`` step's identifier) and the verdict of the filter
    the options ask for (None: keep every row), applied unless ``--dropped-output`` routes by it."""
    require("fasttext", "quality", "zephyr langid")
    identify, verdict = config.ops(inputs.text_column, "lang")  # finds the model before any task starts
    ds = inputs.read_text((verdict.lang_column, verdict.score_column), config.replace_columns)
    ds = ds.map_batches(identify, name="langid")
    if not (config.languages or config.min_score > 0):
        return ds, None
    return ds if dropped.dropped_output else ds.map_batches(verdict, name="language_filter"), verdict.reasons


def langid(
    inputs: TextInputs, output: Output, execution: ExecutionOptions, config: LangIdStep, dropped: Dropped
) -> Summary:
    """Add lang/lang_score with fastText lid.176; optionally keep some languages."""
    removal = Removal(dropped_output=dropped.dropped_output)
    removal.check(inputs.inputs, output.output)
    ds, reasons = _langid(inputs, config, dropped)
    next = f"zephyr filter {output.output} --output OUT"
    return _write(ds, output, execution, "langid", removal=removal, reasons=reasons, next=next)


# -- filter --------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class FilterOptions(HeuristicFilterStep):
    """``zephyr filter``'s settings: its ``heuristic_filter`` step's (the rules, ``--default-lang``,
    ``--replace-columns``, ``--output-column``), the url rules' inputs, the columns read, the report and where
    the dropped rows go."""

    url_blocklist: str | None = field(default=None, metadata={"metavar": "FILE", "reads": True})
    """With --rules url: domains/hosts to drop, one per line (example:
    pipelines/web/data/blocklist.example.txt)."""
    url_column: str = "url"
    """The URL column the url rules read and normalize."""
    lang_column: str = "lang"
    """Per-row language for stop words ('' = none)."""
    source_column: str = "source"
    """Report retention per value of this column."""
    id_column: str = "id"
    """The id column of the report's examples (without it the report has none)."""
    samples: int = 5
    """Examples of kept rows and per rule in the report (OUTPUT.zephyr/examples.json)."""
    normalize: bool = False
    """Normalize text before filtering."""
    dropped_output: str | None = field(default=None, metadata={"metavar": "DIR"})
    """Where the dropped rows (with drop_reason) go (default: OUTPUT.zephyr/dropped)."""

    def with_urls(self) -> FilterOptions:
        """These settings with the url rules' blocklist and column; the blocklist is read now (by the url
        rules that ``HeuristicFilterConfig``'s check builds), so a bad line fails before any work, naming the
        file and line."""
        if "url" not in self.filter.rules:
            if self.url_blocklist:
                raise ConfigError("--url-blocklist needs the url rules: add url to --rules")
            return self
        overrides = {"url": {"blocklist": self.url_blocklist, "url_column": self.url_column}}
        return dataclasses.replace(self, filter=dataclasses.replace(self.filter, overrides=overrides))


def _filtered(inputs: TextInputs, config: FilterOptions, out: str) -> tuple[Dataset, dict[str, Any]]:
    """Job 1: every row with its first failing rule in the reason column, as the ``heuristic_filter`` step
    annotates it; and how its rows are routed (``zephyr.removal.routes``): the kept ones to ``out``, the
    dropped ones to ``--dropped-output`` (default ``out.zephyr/dropped``), the quarantined ones to
    ``out.zephyr/quarantine``, and the report's per-batch summaries and examples to the driver."""
    from zephyr.pipelines.examples import PARTS_DIR, CollectExamples, ReasonGroups
    from zephyr.pipelines.quality.filters import NULL_TEXT, summarize_batch

    from zephyr.io.layout import dropped_dir, quarantine_dir, side_path

    step = config.with_urls()
    step.preflight()  # the url rules need the web extra
    ds = inputs.read_text((step.reason,), step.replace_columns)
    if config.normalize:
        ds = NormalizeStep().apply(ds, inputs.text_column)
    ds, route = step.routing(ds, inputs.text_column, config.lang_column or None)
    text, source = inputs.text_column, config.source_column or None
    examples = CollectExamples(
        side_path(out, str(PARTS_DIR)),
        ReasonGroups("drop_reason", skip=(NULL_TEXT,)),
        id_column=config.id_column,
        text_column=text,
        fields=(config.source_column,),
        per_group=config.samples,
    )

    def summarize(t: Any) -> Any:
        return summarize_batch(t, text_column=text, source_column=source)

    def report(rows: Dataset) -> Dataset:
        return rows.map_batches(examples, name="examples").map_batches(summarize, name="report")

    sides = {"dropped": config.dropped_output or dropped_dir(out), "quarantined": quarantine_dir(out)}
    return ds, {"sides": sides, "route": route, "also": report}


def filter_plans(inputs: TextInputs, config: FilterOptions, **_: Any) -> list[tuple[str, Dataset | None]]:
    """The jobs of ``zephyr filter`` in order, built by the functions it runs. The routes and the report read
    the annotated rows' files; here they are planned over the annotating job's plan. Nothing runs."""
    from zephyr.removal import routes

    ds, routing = _filtered(inputs, config, "OUTPUT")
    rules = ",".join(config.filter.rules)
    annotate = (
        f"every row with its first failing rule (rules {rules}) in {config.reason}, written to "
        "a scratch folder in OUTPUT.zephyr; no file (no input row): nothing to route"
    )
    return routed_jobs(annotate, ds, routes(ds, "OUTPUT", **routing))


def heuristic_filter(
    inputs: TextInputs, output: Output, execution: ExecutionOptions, config: FilterOptions
) -> Summary:
    """Heuristic quality filters (Gopher, C4, FineWeb, url) with per-rule counts and a retention report.

    One engine job annotates every row with its first failing rule into a scratch folder; three route the
    annotated rows (kept → OUTPUT, dropped → OUTPUT.zephyr/dropped/, quarantined → OUTPUT.zephyr/quarantine/)
    and one summarizes them for OUTPUT.zephyr/report.json and report.md (``zephyr.removal.write_routed``).
    Input lines that cannot be read go to OUTPUT.zephyr/unreadable/."""
    from zephyr.pipelines.examples import merge_filter_examples, read_examples
    from zephyr.pipelines.quality.filters import merge_summaries
    from zephyr.pipelines.report import retention_markdown

    from zephyr import job_stats
    from zephyr.io.claim import check_side_dir, prune_quarantine
    from zephyr.io.layout import quarantine_dir, remove_folder, side_path
    from zephyr.removal import write_routed
    from zephyr.summary import write_summary

    out = output.output
    if config.dropped_output:
        check_side_dir(config.dropped_output, out, "--dropped-output")
    # quarantine/ holds the rows the filters quarantine (input columns + quarantine_reason); unreadable input
    # lines (source, line, reason, raw) have another schema, so they go to a folder of their own
    unreadable_dir = side_path(out, "unreadable")
    opts = execution.replace(quarantine_dir=unreadable_dir).as_kwargs()
    ds, routing = _filtered(inputs, config, out)
    rules = ",".join(config.filter.rules)
    remove_folder(side_path(out, "work"))  # parts an interrupted run left
    with job_stats.recording() as jobs:  # annotate, three routes and the report are separate engine jobs
        routed = write_routed(ds, out, opts=opts, scratch="annotated", overwrite=True, **routing)
    unreadable = routed.verdict.stats["rows_quarantined"]
    prune_quarantine(unreadable_dir, jobs)
    report = merge_summaries([] if routed.also is None else [routed.also])
    totals = report["totals"]
    reasons = totals["dropped_rows_by_reason"]
    examples = merge_filter_examples(Path(side_path(out)), reasons, config.samples, None)
    remove_folder(side_path(out, "work"))  # the examples' parts, merged
    if unreadable:  # never reached the filters, so the report does not see them; they are input all the same
        totals["rows_in"] += unreadable
        totals["rows_quarantined"] += unreadable
        totals["rows_unreadable"] = unreadable
        totals["unreadable_quarantine_dir"] = routed.verdict.stats.get("quarantine_dir")
    report_json = json.dumps(report, indent=2, sort_keys=True, ensure_ascii=False) + "\n"
    Path(side_path(out, "report.json")).write_text(report_json, encoding="utf-8")
    Path(side_path(out, "report.md")).write_text(
        retention_markdown(report, read_examples(examples)), encoding="utf-8"
    )
    dropped_output = routing["sides"]["dropped"]
    rows = {key: totals[key] for key in ("rows_in", "rows_kept", "rows_dropped", "rows_quarantined")}
    # the top level: the job that wrote the kept rows; tasks, tasks_resumed, task_retries and jobs: every job
    return write_summary(
        routed.kept or routed.verdict,
        out,
        "filter",
        {"rules": rules, **totals, "dropped_output": dropped_output},
        jobs=jobs,
        **rows,
        dropped_by_reason=dict(reasons),
        dropped_output=dropped_output,
        quarantine_output=quarantine_dir(out),
        next=f"zephyr dedup fuzzy {out} --output OUT --mode remove",
        details={"report": side_path(out, "report.md"), "rules": rules},
    )


# -- quality train | score -----------------------------------------------------------------------------------
@dataclass(frozen=True)
class TrainOptions:
    """``zephyr quality train``'s settings."""

    labelled: str = field(default="", metadata={"positional": True, "required": True, "reads": True})
    """Parquet with text and label columns."""
    output: str = field(default="", metadata={"required": True})
    """Model file (.bin); a .report.json is written beside it."""
    test: str | None = field(default=None, metadata={"reads": True})
    """Held-out Parquet (default: a hash-based split of the input)."""
    holdout: float = 0.2
    """Share of the input held out for testing when --test is not given."""
    text_column: str = "text"
    """The column holding each document's text."""
    label_column: str = "label"
    """The column holding each row's label."""
    classifier: ClassifierConfig = embedded_field(
        ClassifierConfig, keys=("positive_label", "negative_label", "epoch", "threads")
    )


def quality_train(options: TrainOptions, execution: ExecutionOptions) -> Summary:
    """Train a fastText hq/lq classifier from labelled Parquet."""
    require("fasttext", "quality", "zephyr quality train")
    import polars as pl
    import pyarrow as pa
    import pyarrow.parquet as pq
    from zephyr.pipelines.quality.classifier import evaluate_classifier, train_classifier

    from zephyr.summary import Summary

    o = options
    table = pq.read_table(o.labelled)
    if o.test:
        train, test = table, pq.read_table(o.test)
    else:  # deterministic held-out split by text hash
        h = pl.Series(table.column(o.text_column)).fill_null("").hash(seed=7).to_numpy() % 1000
        held = pa.array(h < int(o.holdout * 1000))
        train, test = table.filter(pa.compute.invert(held)), table.filter(held)
    columns = {"text_column": o.text_column, "label_column": o.label_column}
    model = train_classifier(train, o.output, o.classifier, **columns)
    report = evaluate_classifier(test, model, o.classifier, **columns)
    report.update({"version": 1, "train_rows": train.num_rows, "model": str(model)})
    Path(f"{model}.report.json").write_text(json.dumps(report, indent=2, sort_keys=True) + "\n")
    rows = train.num_rows + test.num_rows  # every labelled row trains or tests the model
    return Summary(
        rows_in=rows,
        rows_kept=rows,
        output=str(model),
        stats=f"{model}.report.json",
        bytes_in=None,
        next=f"zephyr quality score INPUT --model {model} --output OUT",
        details={k: report[k] for k in ("rows", "precision", "recall", "f1", "auc")}
        | {"train_rows": train.num_rows},
    )


@dataclass(frozen=True)
class ScoreOptions:
    """``zephyr quality score``'s settings."""

    model: str = field(default="", metadata={"required": True, "reads": True})
    """The classifier (a .bin from zephyr quality train)."""
    buckets: int = 5
    """Quantile buckets of the score."""
    classifier: ClassifierConfig = embedded_field(ClassifierConfig, keys=("positive_label",))
    replace_columns: bool = False
    """Replace the score and bucket columns when the input already has them (without it: an error, before
    any work)."""
    output_column: str = field(default="quality_score", metadata={"metavar": "NAME"})
    """Write the score to NAME and its bucket to NAME_bucket."""


def _scored(inputs: TextInputs, config: ScoreOptions, **_: Any) -> Dataset:
    """The rows with their scores (``QualityScorer``, as the ``quality`` step scores them)."""
    from zephyr.pipelines.quality.classifier import QualityScorer, bucket_column

    require("fasttext", "quality", "zephyr quality score")
    score, replace = config.output_column, config.replace_columns
    ds = inputs.read_text((score, bucket_column(score)), replace)
    scorer = QualityScorer(config.model, config.classifier, inputs.text_column, replace, score)
    return ds.map_batches(scorer, name="quality_score")


def quality_score(
    inputs: TextInputs, output: Output, execution: ExecutionOptions, config: ScoreOptions
) -> Summary:
    """Add quality_score and quality_bucket (by quantile).

    Two engine jobs: the scores go to a scratch folder in the output's sidecar, then the rows with their
    bucket (quantile edges of every score) to OUTPUT."""
    import pyarrow.parquet as pq
    from zephyr.pipelines.quality._text import put_column
    from zephyr.pipelines.quality.classifier import assign_buckets, bucket_column, quantile_edges

    import zephyr
    from zephyr import job_stats
    from zephyr.io.layout import remove_folder, side_path
    from zephyr.removal import Routed
    from zephyr.summary import write_summary

    opts, out = execution.as_kwargs(), output.output
    score, buckets = config.output_column, bucket_column(config.output_column)
    ds = _scored(inputs, config)
    scratch = side_path(out, "scored")  # in the output's sidecar (zephyr.io.layout)
    with job_stats.recording() as jobs:  # scoring and bucketing are separate engine jobs
        try:
            scored = result = ds.write_parquet(scratch, overwrite=True, **opts)
            edges: tuple[float, ...] = ()
            if scored.files:  # the scorer keeps every row: no file means no input row, nothing to bucket
                scores = pq.read_table(list(scored.files), columns=[score])[score]
                edges = quantile_edges(scores, config.buckets)

                def bucket(t: Any) -> Any:
                    return put_column(t, buckets, assign_buckets(t[score], edges))

                rows = zephyr.read_parquet(list(scored.files))
                result = rows.map_batches(bucket, name="quality_bucket").write_parquet(out, **opts)
        finally:
            remove_folder(scratch)
    # rows in and quarantined as the scoring job read them (unreadable rows included), kept as written
    stages = Routed(scored, None if result is scored else result).stages
    data = {"bucket_edges": list(edges)}
    return write_summary(result, out, "quality", data, jobs=jobs, stages=stages, details=data)


# -- pii -----------------------------------------------------------------------------------------------------
def pii_plan(inputs: TextInputs, config: PIIConfig, columns: Replace, **_: Any) -> Dataset:
    from zephyr.pipelines.quality.pii import RedactPII, count_columns

    ds = inputs.read_text(count_columns(config), columns.replace_columns)
    return ds.map_batches(RedactPII(config, inputs.text_column, columns.replace_columns), name="pii")


def pii(
    inputs: TextInputs, output: Output, execution: ExecutionOptions, config: PIIConfig, columns: Replace
) -> Summary:
    """Replace e-mails, phone numbers and IP addresses with placeholders (and count them per row)."""
    return _write(pii_plan(inputs, config, columns), output, execution, "pii", lambda c: c)


# -- decontaminate -------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class EvalSets:
    """The eval sets ``zephyr decontaminate`` protects."""

    eval: list[str] = field(default_factory=list, metadata={"required": True, "reads": True})
    """An eval set, Parquet or JSONL (repeat the flag for several)."""
    eval_column: list[str] = field(default_factory=lambda: ["text"])
    """A text column of the eval sets (repeat the flag for several; default: text)."""
    n: int = field(default=13, metadata={"flag": "-n", "metavar": "N"})
    """The n-gram length in words."""


@dataclass(frozen=True)
class DecontaminateRemoval(Removal):
    """What ``zephyr decontaminate`` does with contaminated rows."""

    output_column: str = field(default="contaminated", metadata={"metavar": "NAME"})
    """--mode annotate: write the flag to NAME and the matching n-grams to NAME_ngrams."""


def _decontaminate(inputs: TextInputs, removal: DecontaminateRemoval, index_path: str) -> tuple[Any, Dataset]:
    """The decontamination op reading the index at ``index_path``, and the rows it runs on: applied, unless
    ``--dropped-output`` routes them by its verdict."""
    from zephyr.pipelines.quality.decontaminate import Decontaminate

    step = Decontaminate(
        index_path, removal.mode, inputs.text_column, removal.replace_columns, removal.output_column
    )
    ds = inputs.read_text(step.columns, removal.replace_columns)
    return step, ds if removal.dropped_output else ds.map_batches(step, name="decontaminate")


def decontaminate_plan(
    inputs: TextInputs, removal: DecontaminateRemoval, sets: EvalSets, **_: Any
) -> Dataset:
    return _decontaminate(inputs, removal, "OUTPUT.zephyr/eval-ngrams.npz")[1]


def decontaminate(
    inputs: TextInputs,
    output: Output,
    execution: ExecutionOptions,
    removal: DecontaminateRemoval,
    sets: EvalSets,
) -> Summary:
    """Remove or annotate documents sharing an n-gram (13 words by default) with an eval set."""
    from zephyr.pipelines.quality.decontaminate import build_eval_index, read_eval_texts

    from zephyr.io.layout import side_path

    out = output.output
    removal.check(inputs.inputs, out)
    index_path = Path(side_path(out, "eval-ngrams.npz"))  # read by the tasks: in the sidecar
    step, ds = _decontaminate(inputs, removal, str(index_path))  # checks the inputs before the index is built
    index_path.parent.mkdir(parents=True, exist_ok=True)
    index = build_eval_index(read_eval_texts(sets.eval, sets.eval_column), n=sets.n)
    index.save(index_path)
    eval_stats = {
        "eval_items": index.items,
        "eval_ngrams": int(len(index.hashes)),
        "eval_items_shorter_than_n": index.short_items,
    }
    next = f"zephyr tokenize {out} --tokenizer tokenizer.json --output tokens/"
    details = {"removal": removal, "reasons": step.reasons, "next": next}
    return _write(ds, output, execution, "decontaminate", lambda _: eval_stats, **details)


# -- extract -------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class WarcInputs(Inputs):
    """The WARC/ARC files ``zephyr extract`` reads (as WARC: ``--format``, ``--unify-schemas`` and ``--schema``
    are not its flags); bad records are quarantined unless told otherwise."""

    inputs: list[str] = field(
        default_factory=list, metadata={"positional": True, "metavar": "WARC", "reads": True}
    )
    """.warc/.warc.gz/.arc/.arc.gz files, folders or globs."""
    on_error: Literal["raise", "quarantine"] = "quarantine"
    """Bad records (truncated gzip member, wrong Content-Length, non-HTML, undecodable charset): set aside in
    OUTPUT.zephyr/quarantine/ with their byte offset and go on (quarantine), or fail (raise)."""


@dataclass(frozen=True)
class ExtractOptions:
    """``zephyr extract``'s settings (the ``extract`` pipeline step's)."""

    extractor: Literal["resiliparse", "trafilatura"] = "resiliparse"
    """HTML → text: resiliparse (fast) or trafilatura (datatrove's choice)."""
    min_text_chars: int = 1
    """Drop pages with less extracted text."""


def extract_plan(inputs: WarcInputs, config: ExtractOptions, **_: Any) -> Dataset:
    from zephyr.pipelines.web.extract import read_warc

    from zephyr.io.paths import input_files

    files, _ = input_files(list(inputs.inputs), "warc")
    return read_warc(
        files, extractor=config.extractor, min_text_chars=config.min_text_chars, on_error=inputs.on_error
    )


def extract(
    inputs: WarcInputs, output: Output, execution: ExecutionOptions, config: ExtractOptions
) -> Summary:
    """Extract documents from WARC/ARC crawl files into Parquet (HTML text extraction).

    OUTPUT receives id, url, fetch_time, content_type, text and html_bytes; OUTPUT.zephyr/ receives
    quarantine/ (bad records with their byte offset) and stats.json: the job's stats and, under
    ``extract``, the extractor, HTML and text bytes (records in, kept, dropped by reason and quarantined balance in the summary)."""

    def details(counts: dict[str, int]) -> dict[str, Any]:
        bytes = {name: counts.get(f"extract/{name}", 0) for name in ("html_bytes", "text_bytes")}
        return {"extractor": config.extractor, **bytes}

    next = f"zephyr filter {output.output} --output OUT"
    return _write(extract_plan(inputs, config), output, execution, "extract", details, next=next)


# -- run -----------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class RunOptions:
    """``zephyr run``'s settings."""

    pipeline: str = field(default="", metadata={"positional": True, "required": True, "metavar": "PIPELINE"})
    """Pipeline YAML, or a built-in name: quickstart, web, code."""
    job_dir: str | None = None
    """Job folder (default: ./out/<pipeline name>)."""
    overrides: list[str] = field(default_factory=list, metadata={"flag": "--set", "metavar": "KEY=VALUE"})
    """Override a config key: steps.NAME.KEY=VALUE (or steps.INDEX.KEY), or a top-level KEY=VALUE."""
    from_step: str | None = field(default=None, metadata={"flag": "--from", "metavar": "STEP"})
    """Rerun from this pipeline step on."""
    until_step: str | None = field(default=None, metadata={"flag": "--until", "metavar": "STEP"})
    """Stop after this pipeline step."""
    check: bool = False
    """Validate the config and list its steps; run nothing (a map step's module is found, not imported: none
    of its code runs)."""
    explain: bool = False
    """Print every step's engine jobs (physical plans, in the order they run); run nothing."""
    report: bool = True
    """Write the Markdown/HTML report (--no-report: skip it)."""

    def load(self) -> tuple[Any, Path]:
        """The pipeline config and its job folder."""
        from zephyr.pipelines.config import load_config

        config = load_config(self.pipeline, self.overrides)
        return config, Path(self.job_dir) if self.job_dir else Path("out") / config.name


def run_plans(options: RunOptions, execution: ExecutionOptions) -> list[tuple[str, Dataset | None]]:
    from zephyr.pipelines.runner import pipeline_plans

    config, job_dir = options.load()
    return pipeline_plans(config, job_dir, execution=execution)


def run(options: RunOptions, execution: ExecutionOptions) -> Any:
    """Run a pipeline config (read → filter → dedup → tokenize → train) as a resumable batch job."""
    from zephyr.pipelines.config import check_added_columns, check_inputs
    from zephyr.pipelines.runner import ProgressReporter, pipeline_plans, run_pipeline, step_dir_name

    config, job_dir = options.load()
    if options.check:
        check_inputs(config)
        check_added_columns(config)
        print(f"pipeline {config.name!r} ({config.path}): {len(config.steps)} steps, job dir {job_dir}")
        for index, entry in enumerate(config.steps):
            state = "" if entry.enabled else "  (disabled)"
            print(f"  {step_dir_name(index, entry)}: {entry.type}{state}")
        return 0
    if options.explain:
        from zephyr.cli import explain_planned

        jobs = pipeline_plans(config, job_dir, execution=execution)
        return explain_planned(f"run {config.name}", jobs, execution, "the rules")
    result = run_pipeline(
        config,
        job_dir,
        execution=execution,
        from_step=options.from_step,
        until_step=options.until_step,
        reporter=ProgressReporter(sys.stderr),
        report=options.report,
    )
    return _run_summary(result)


def _run_summary(result: Any) -> Summary:
    """The run's ``Summary``: rows the first data step read, kept by the last one, and what every step
    dropped and quarantined on the way (each step reads what the one before kept), with the report's path
    as its last line. Its ``details`` name each step's status under ``steps``."""
    from zephyr.pipelines.step import STEPS

    from zephyr.job_stats import add_counts
    from zephyr.summary import Summary

    data = [s for s in result.steps if STEPS[s["type"]].output != "model"]
    reasons: dict[str, int] = {}
    for step in data:
        add_counts(reasons, step.get("dropped_by_reason") or {})
    report = result.html_report or result.report
    return Summary(
        rows_in=data[0]["rows_in"] if data else 0,
        rows_kept=data[-1]["rows_kept"] if data else 0,
        rows_dropped=sum(int(s.get("rows_dropped", 0)) for s in data),
        rows_quarantined=sum(int(s.get("rows_quarantined", 0)) for s in data),
        dropped_by_reason=reasons,
        output=str(result.job_dir),
        stats=str(result.stats_path) if result.stats_path else None,
        next=f"open {report}" if report else None,
        bytes_in=None,
        details={
            "report": str(result.report) if result.report else None,
            "html_report": str(result.html_report) if result.html_report else None,
            "steps": {s["step"]: s.get("status") for s in result.steps},
        },
    )


_TEXT = {"inputs": TextInputs, "output": Output}
COMMANDS = [
    Command("run", run, {"options": RunOptions}, plans=run_plans, then="the rules"),
    Command("normalize", normalize, {**_TEXT, "config": NormalizeConfig}, plans=normalize_plan),
    Command(
        "langid",
        langid,
        {**_TEXT, "config": LangIdStep, "dropped": Dropped},
        plans=lambda **configs: _langid(**configs)[0],
    ),
    Command(
        "filter",
        heuristic_filter,
        {**_TEXT, "config": FilterOptions},
        plans=filter_plans,
        then="the rules",
        skip=("overrides", "keep_dropped"),  # the url flags set them; dropped rows are kept
    ),
    Command("quality train", quality_train, {"options": TrainOptions}),
    Command("quality score", quality_score, {**_TEXT, "config": ScoreOptions}, plans=_scored),
    Command("pii", pii, {**_TEXT, "config": PIIConfig, "columns": Replace}, plans=pii_plan),
    Command(
        "decontaminate",
        decontaminate,
        {**_TEXT, "removal": DecontaminateRemoval, "sets": EvalSets},
        plans=decontaminate_plan,
    ),
    Command(
        "extract",
        extract,
        {"inputs": WarcInputs, "output": Output, "config": ExtractOptions},
        plans=extract_plan,
        skip=("format", "unify_schemas", "schema"),
    ),
]
GROUPS = {
    "quality": "fastText quality classifier: train | score",
    "explain quality": "the plan of zephyr quality score",
}
