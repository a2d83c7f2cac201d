"""``zephyr quality train|score``: the fastText quality classifier commands (registered by
``zephyr.pipelines.quality.cli``; helpers shared with it in ``cli_common``)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from zephyr.pipelines.quality._text import require_extra
from zephyr.pipelines.quality.cli_common import (
    engine_options,
    one_job_summary,
    read_text_inputs,
    stats_path,
    write_json,
)


def train_command(args: argparse.Namespace) -> int:
    require_extra("fasttext", "quality", "zephyr quality train")
    import polars as pl
    import pyarrow as pa
    import pyarrow.parquet as pq
    from zephyr.pipelines.quality.classifier import ClassifierConfig, evaluate_classifier, train_classifier

    table = pq.read_table(args.labelled)
    cfg = ClassifierConfig(
        positive_label=args.positive, negative_label=args.negative, epoch=args.epoch, threads=args.threads
    )
    if args.test:
        train, test = table, pq.read_table(args.test)
    else:  # deterministic held-out split by text hash
        h = pl.Series(table.column(args.text_column)).fill_null("").hash(seed=7).to_numpy() % 1000
        held = pa.array(h < int(args.holdout * 1000))
        train, test = table.filter(pa.compute.invert(held)), table.filter(held)
    model = train_classifier(
        train, args.output, cfg, text_column=args.text_column, label_column=args.label_column
    )
    report = evaluate_classifier(
        test, model, cfg, text_column=args.text_column, label_column=args.label_column
    )
    report.update({"version": 1, "train_rows": train.num_rows, "model": str(model)})
    write_json(Path(str(model) + ".report.json"), report)
    from zephyr.summary import Summary

    rows = train.num_rows + test.num_rows  # every labelled row trains or tests the model
    return Summary(
        rows_in=rows,
        rows_kept=rows,
        output=str(model),
        stats=str(model) + ".report.json",
        bytes_in=None,
        next=f"zephyr quality score INPUT --model {model} --output OUT",
        details={k: report[k] for k in ("rows", "precision", "recall", "f1", "auc")}
        | {"train_rows": train.num_rows},
    )


def score_command(args: argparse.Namespace) -> int:
    require_extra("fasttext", "quality", "zephyr quality score")
    from zephyr import job_stats

    with job_stats.recording() as jobs:  # scoring and bucketing are separate engine jobs
        return _score(args, jobs)


def _score(args: argparse.Namespace, jobs: list[dict[str, Any]]) -> int:
    import pyarrow.parquet as pq
    from zephyr.pipelines.quality.classifier import (
        ClassifierConfig,
        QualityScorer,
        assign_buckets,
        bucket_column,
        put_column,
        quantile_edges,
    )

    import zephyr
    from zephyr import job_stats
    from zephyr.io.layout import remove_folder, scratch_dir

    opts = engine_options(args)
    out = Path(args.output)
    score, buckets = args.output_column, bucket_column(args.output_column)
    scorer = QualityScorer(
        args.model,
        ClassifierConfig(positive_label=args.positive),
        args.text_column,
        replace_columns=args.replace_columns,
        score_column=score,
    )
    ds = read_text_inputs(args, adds=(score, buckets), rename="--output-column NAME")
    scratch = scratch_dir(args.output, "scored")  # in the output's sidecar (zephyr.io.layout)
    try:
        result = ds.map_batches(scorer, name="quality_score").write_parquet(scratch, overwrite=True, **opts)
        edges: tuple[float, ...] = ()
        if result.files:  # the scorer keeps every row: no file means no input row, and nothing to bucket
            scores = pq.read_table(list(result.files), columns=[score])[score]
            edges = quantile_edges(scores, args.buckets)

            def bucket(t):
                return put_column(t, buckets, assign_buckets(t[score], edges))

            result = (
                zephyr.read_parquet(list(result.files))
                .map_batches(bucket, name="quality_bucket")
                .write_parquet(str(out), **opts)
            )
    finally:
        remove_folder(scratch)
    write_json(
        stats_path(args),
        {"version": 1, "bucket_edges": list(edges), "job": result.stats, **job_stats.summarize(jobs)},
    )
    first = jobs[0]["stages"] if jobs else []  # the scoring job read the input (unreadable rows included)
    summary = one_job_summary(result, args, details={"bucket_edges": list(edges)})
    if first:
        summary.rows_in, summary.rows_quarantined = (
            first[0]["rows_in"],
            sum(s["rows_quarantined"] for s in first),
        )
    return summary
