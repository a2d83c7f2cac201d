"""Pipeline step adapters of the web package (registered in ``zephyr.pipelines.steps.RUNNERS``); they build on
the shared operators of ``zephyr.pipelines.step_ops``."""

from __future__ import annotations

import dataclasses

from zephyr.pipelines.step_ops import (
    PrepareRows,
    RemoveDuplicates,
    StepContext,
    StepOutcome,
    dedup_inputs,
    finish_step,
    restore_dedup_columns,
)

__all__ = ["run_extract", "run_url_filter", "run_url_dedup", "run_substring_dedup"]


def run_extract(ctx: StepContext) -> StepOutcome:
    """WARC/ARC files → documents: records (bad ones quarantined by the reader) → text → the read step's row
    check (source column, no null id or text)."""
    from zephyr.pipelines.web.extract import ExtractText, check_extractor

    import zephyr
    from zephyr.io.paths import input_files

    cfg = ctx.entry.config
    p = ctx.pipeline
    check_extractor(cfg.extractor)
    files, _ = input_files(cfg.paths, "warc")
    extract = f"pipeline.{ctx.entry.name}.extract"
    prepare = f"pipeline.{ctx.entry.name}.prepare"
    ds = zephyr.read_warc_records(files, on_error=cfg.on_error)
    ds = ds.map_batches(ExtractText(cfg.extractor, cfg.min_text_chars), name=extract)
    if p.text_column != "text":
        ds = ds.map_batches(
            lambda t: t.rename_columns([p.text_column if c == "text" else c for c in t.column_names]),
            name=f"pipeline.{ctx.entry.name}.rename",
        )
    ds = ds.map_batches(
        PrepareRows(p.text_column, p.id_column, p.source_column, cfg.source, p.lang_column), name=prepare
    )
    if cfg.num_shards:
        ds = ds.reshard(cfg.num_shards)
    outcome = finish_step(ctx, ds, (extract, prepare))
    outcome.extra["extract_examples"] = _examples(outcome.files, p.text_column)
    return outcome


def _examples(files: list[str], text_column: str, count: int = 3, chars: int = 400) -> list[dict]:
    """The first extracted documents (url and the start of the text), for the report."""
    import pyarrow.parquet as pq

    out: list[dict] = []
    for path in files:
        for batch in pq.ParquetFile(path).iter_batches(batch_size=count, columns=["url", text_column]):
            for row in batch.to_pylist():
                out.append({"url": row["url"], "text": (row[text_column] or "")[:chars]})
                if len(out) == count:
                    return out
    return out


def run_url_filter(ctx: StepContext) -> StepOutcome:
    """Normalized URLs and registered domains, then the ``url`` rules (invalid URLs, blocklist)."""
    from zephyr.pipelines.quality.batch_ops import HeuristicFilter
    from zephyr.pipelines.web.urls import NormalizeUrls, load_blocklist

    cfg = ctx.entry.config
    p = ctx.pipeline
    if cfg.blocklist:
        load_blocklist(cfg.blocklist)  # a bad line fails before any work
    op = f"pipeline.{ctx.entry.name}.filter"
    rules = HeuristicFilter(
        "url", {"url": {"blocklist": cfg.blocklist, "url_column": cfg.url_column}}, p.text_column, None
    )
    ds = ctx.read_inputs().map_batches(
        NormalizeUrls(cfg.url_column), name=f"pipeline.{ctx.entry.name}.normalize"
    )
    return finish_step(ctx, ds.map_batches(rules, name=op), (op,))


def run_url_dedup(ctx: StepContext) -> StepOutcome:
    """One document per normalized URL (``zephyr.dedup.exact``), duplicates removed with reason
    ``url_duplicate``."""
    from zephyr.dedup.exact import url_dedup_dataset

    cfg = ctx.entry.config
    p = ctx.pipeline
    remove = f"pipeline.{ctx.entry.name}.remove"
    annotated = url_dedup_dataset(
        dedup_inputs(ctx),  # the data's own dup_* columns pass unchanged (zephyr.pipelines.columns)
        url_column=cfg.url_column,
        id_column=p.id_column,
        mode="annotate",
        priority_column=cfg.priority_column,
        execution=ctx.engine("hashes"),
    )
    output = restore_dedup_columns(ctx, annotated.map_batches(RemoveDuplicates("url"), name=remove))
    return finish_step(ctx, output, (remove,))


def run_substring_dedup(ctx: StepContext) -> StepOutcome:
    """Exact substring dedup (``zephyr.dedup.substring``); the step's extra holds the bytes removed per
    source and the most repeated spans (the report shows them)."""
    import shutil

    from zephyr.dedup.substring import substring_dedup_dataset

    p = ctx.pipeline
    config = dataclasses.replace(
        ctx.entry.config.substring, text_column=p.text_column, source_column=p.source_column, top_spans=10
    )
    scratch = ctx.side_dir / "substring"
    info: dict = {}
    out = substring_dedup_dataset(
        ctx.read_inputs(), config, execution=ctx.engine("passes"), scratch=str(scratch), stats=info
    )
    outcome = finish_step(ctx, out, ("dedup.substring.cut",))
    shutil.rmtree(scratch, ignore_errors=True)
    counters = {
        k: v for st in outcome.engine_stats.get("stages", []) for k, v in (st.get("counters") or {}).items()
    }
    info["bytes_removed"] = counters.get("substring/bytes_removed", 0)
    info["bytes_removed_per_source"] = {
        k.split("=", 1)[1]: v for k, v in counters.items() if k.startswith("substring/bytes_removed/source=")
    }
    outcome.extra.update(substring=info)
    return outcome
