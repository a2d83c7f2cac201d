"""Pipeline stage adapters of the web package (registered in ``zephyr.pipelines.stages.RUNNERS``)."""

from __future__ import annotations

from zephyr.pipelines.stages import PrepareRows, StageContext, StageOutcome, _finish

__all__ = ["run_extract"]


def run_extract(ctx: StageContext) -> StageOutcome:
    """WARC/ARC files → documents: records (bad ones quarantined by the reader) → text → the read stage's row
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
    return _finish(ctx, ds, (extract, prepare))
