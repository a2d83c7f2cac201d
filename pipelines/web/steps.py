"""The web package's pipeline step types (``zephyr.pipelines.step``): ``extract``, ``url_filter``,
``url_dedup`` and ``substring_dedup``.

``extract`` starts a pipeline from WARC/ARC files, as ``read`` starts one from Parquet/JSONL::

    steps:
      - step: extract
        paths: ["${ZEPHYR_WARC}"]
        extractor: resiliparse      # or trafilatura
      - step: url_filter
        blocklist: blocklist.txt    # optional; one domain per line

Their report blocks (examples of extracted text, the spans substring dedup removed) come from the step
records of ``stats.json``: nothing is recomputed.
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from zephyr.dedup.config import DedupColumns, SubstringConfig
from zephyr.pipelines.markdown import md_code, md_excerpt, md_text
from zephyr.pipelines.step import Step, StepContext, StepOutcome
from zephyr.pipelines.steps import DedupStep

from zephyr.config import FieldError, check_field_values, embedded_field, path_field, ranged_field

if TYPE_CHECKING:
    from zephyr.pipelines.step import PipelineConfig

    from zephyr.dataset import Dataset


@dataclass(frozen=True)
class ExtractStep(Step, type="extract"):
    """Read WARC/ARC files and extract each HTML page's main text (``zephyr extract``); a first step."""

    starts: ClassVar[bool] = True
    section: ClassVar[str] = "web"
    paths: list[str] = path_field([], required=True)
    """WARC/ARC files (``.warc``, ``.warc.gz``, ``.arc``, ``.arc.gz``), folders or globs."""
    extractor: Literal["resiliparse", "trafilatura"] = "resiliparse"
    """HTML → text: resiliparse (fast, the default) or trafilatura (datatrove's choice)."""
    min_text_chars: int = ranged_field(0, default=1)
    """Pages with less extracted text are dropped (``extract_no_text``)."""
    source: str = "web"
    """The source column's value for every row (per-source retention in the report)."""
    on_error: Literal["raise", "quarantine"] = "quarantine"
    """Bad records (truncated gzip member, wrong Content-Length, non-HTML, undecodable charset): set aside
    in the quarantine with their byte offset (default), or fail the step on the first."""
    num_shards: int | None = ranged_field(1, default=None)
    """Redistribute rows round-robin into this many shards; ``None`` keeps one shard per WARC file."""

    def __post_init__(self) -> None:
        if not self.paths:
            raise FieldError("paths", "give at least one WARC file, folder or glob")
        check_field_values(self)

    def preflight(self) -> None:
        from zephyr.pipelines.web.extract import check_extractor

        check_extractor(self.extractor)

    def columns_after(self, origin: dict[str, str], pipeline: PipelineConfig, name: str) -> dict[str, str]:
        """The columns it writes (its text column under the pipeline's name), whatever came before."""
        from zephyr.pipelines.web.extract import OUTPUT_COLUMNS

        names = [pipeline.text_column if column == "text" else column for column in OUTPUT_COLUMNS]
        return {column: f"step {name!r}" for column in (*names, pipeline.source_column)}

    def run(self, ctx: StepContext) -> StepOutcome:
        """The step's extra holds the first 3 documents it wrote (url and the first 400 characters of the
        text), for the report."""
        import pyarrow.dataset as pads

        outcome, text = super().run(ctx), ctx.pipeline.text_column
        rows = pads.dataset(outcome.files).head(3, columns=["url", text]).to_pylist() if outcome.files else []
        outcome.extra["extract_examples"] = [{"url": r["url"], "text": (r[text] or "")[:400]} for r in rows]
        return outcome

    def plan(self, ctx: StepContext) -> tuple[Dataset, tuple[str, ...]]:
        """WARC/ARC files → documents: records (bad ones quarantined by the reader) → text → the read step's
        row check (source column, no null id or text)."""
        from zephyr.pipelines.web.extract import read_warc

        from zephyr.io.paths import input_files

        p = ctx.pipeline
        files, _ = input_files(self.paths, "warc")
        options = {"min_text_chars": self.min_text_chars, "on_error": self.on_error}
        ds = read_warc(files, extractor=self.extractor, name=ctx.op("extract"), **options)
        if p.text_column != "text":
            ds = ds.map_batches(
                lambda t: t.rename_columns([p.text_column if c == "text" else c for c in t.column_names]),
                name=ctx.op("rename"),
            )
        return ctx.prepared(ds, self.source, self.num_shards), (ctx.op("extract"), ctx.op("prepare"))

    @classmethod
    def report(cls, record: dict[str, Any], plots: dict[str, str]) -> list[tuple]:
        examples = record.get("extra", {}).get("extract_examples")
        if not examples:
            return []
        return [
            ("h", 2, f"Extracted text ({md_code(record['step'])})"),
            ("p", "The first documents the extractor produced:"),
            (
                "table",
                ["url", "text (start)"],
                [[md_text(e["url"]), md_excerpt(e["text"])] for e in examples],
            ),
        ]


@dataclass(frozen=True)
class UrlFilterStep(Step, type="url_filter"):
    """Normalize the url column, add ``domain`` (registered domain), and drop rows with an unusable URL or a
    blocked domain/host (``zephyr filter --rules url``; reasons ``url_invalid``, ``url_blocked_domain``,
    ``url_blocked_subdomain``)."""

    blocklist: str | None = path_field(None)
    """A file of blocked domains and hosts, one per line (``pipelines/web/data/blocklist.example.txt``);
    ``None``: only unusable URLs are dropped."""
    url_column: str = "url"
    """The column holding each document's URL."""

    def preflight(self) -> None:
        from zephyr.pipelines.web.urls import load_blocklist

        from zephyr.errors import require

        require("tldextract", "web", "the url_filter step (registered domains)")
        if self.blocklist:
            load_blocklist(self.blocklist)  # a bad line fails before any work

    def plan(self, ctx: StepContext) -> tuple[Dataset, tuple[str, ...]]:
        """Normalized URLs and registered domains, then the ``url`` rules (invalid URLs, blocklist)."""
        from zephyr.pipelines.quality.filters import HeuristicFilter
        from zephyr.pipelines.web.urls import NormalizeUrls

        self.preflight()
        options = {"url": {"blocklist": self.blocklist, "url_column": self.url_column}}
        rules = HeuristicFilter("url", options, ctx.pipeline.text_column, None)
        ds = ctx.read_inputs().map_batches(NormalizeUrls(self.url_column), name=ctx.op("normalize"))
        return ds.map_batches(rules, name=ctx.op("filter")), (ctx.op("filter"),)


@dataclass(frozen=True)
class UrlDedupStep(DedupStep, type="url_dedup"):
    """Keep one document per normalized URL (``zephyr dedup url``; the keep rule of exact dedup); duplicates are
    removed with reason ``url_duplicate``."""

    kind: ClassVar[str] = "url"
    url_column: str = "url"
    """The column holding each document's URL."""

    def method(self, ctx: StepContext) -> Any:
        from zephyr.dedup.exact import url_dedup_dataset

        columns = DedupColumns(id_column=ctx.pipeline.id_column, priority_column=self.priority_column)
        return functools.partial(url_dedup_dataset, columns=columns, url_column=self.url_column)


@dataclass(frozen=True)
class SubstringDedupStep(Step, type="substring_dedup"):
    """Remove repeats of byte spans of at least ``min_bytes`` after their first occurrence in corpus order
    (``zephyr dedup substring``): boilerplate, navigation and footers shared across pages. ``min_bytes``,
    ``min_doc_bytes`` and ``anchor_bytes`` are ``zephyr.dedup.config.SubstringConfig``'s, documented there."""

    section: ClassVar[str] = "web"
    substring: SubstringConfig = embedded_field(
        SubstringConfig, keys=("min_bytes", "min_doc_bytes", "anchor_bytes")
    )

    def _config(self, ctx: StepContext) -> SubstringConfig:
        p = ctx.pipeline
        return dataclasses.replace(
            self.substring, text_column=p.text_column, source_column=p.source_column, top_spans=10
        )

    def plans(self, ctx: StepContext) -> list[tuple[str, Dataset | None]]:
        """``substring_dedup_dataset``'s passes, planned with nothing found yet (``zephyr explain dedup
        substring``'s)."""
        from zephyr.dedup._rows import Jobs
        from zephyr.dedup.substring import substring_dedup_dataset

        inputs, config = ctx.read_inputs(), self._config(ctx)
        return Jobs.plans(substring_dedup_dataset, inputs, config, budget=ctx.budget, finish=ctx.counted)

    def run(self, ctx: StepContext) -> StepOutcome:
        """The step's extra holds the bytes removed per source and the most repeated spans (the report shows
        them)."""
        from zephyr.dedup._rows import Jobs, scratch_folder
        from zephyr.dedup.substring import removed_bytes, substring_dedup_dataset

        execution, info = ctx.engine("passes"), {}
        with scratch_folder(execution, "substring") as scratch:  # pass 3 reads the repeats written there
            jobs = Jobs(execution, info, scratch=scratch)
            out = substring_dedup_dataset(ctx.read_inputs(), self._config(ctx), jobs=jobs)
            outcome = ctx.finish(out, ("dedup.substring.cut",))
        outcome.extra["substring"] = {**info, **removed_bytes(outcome.engine_stats.get("stages", []))}
        return outcome

    @classmethod
    def report(cls, record: dict[str, Any], plots: dict[str, str]) -> list[tuple]:
        info = record.get("extra", {}).get("substring")
        if info is None:
            return []
        per = info.get("bytes_removed_per_source", {})
        text = (
            f"{info.get('bytes_removed', 0):,} bytes removed in repeats of spans of at least "
            f"{md_text(info.get('min_bytes'))} bytes"
        )
        if per:
            text += f"; per source: {', '.join(f'{md_text(k)} {v:,}' for k, v in sorted(per.items()))}"
        blocks: list[tuple] = [("h", 2, f"Removed spans ({md_code(record['step'])})"), ("p", text + ".")]
        spans = info.get("top_spans", [])
        if spans:
            rows = [[f"{t['documents']:,}", f"{t['bytes']:,}", md_excerpt(t["text"])] for t in spans]
            blocks.append(("table", ["documents", "bytes", "span (start)"], rows))
        return blocks
