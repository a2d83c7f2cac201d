"""What the dedup commands share: reading the inputs, the dup columns, the stats file and the common flags
(``zephyr.dedup.cli`` registers ``exact`` and ``fuzzy``, ``zephyr.dedup.cli_text`` the text-level kinds)."""

from __future__ import annotations

import argparse
import functools
import json
import logging
from typing import Any

from zephyr.config import REMOVAL_MODES

logger = logging.getLogger("zephyr.dedup.cli")


DEFAULT_EXECUTOR = "threads"
"""Dedup's work is Arrow, Parquet and numba ``nogil`` kernels: threads of one process use the cores without
each worker process importing pyarrow, polars and numba first (``zephyr.executors.threads``). The output is
the same bytes on every executor; ``--executor local`` isolates tasks in processes."""

# Input shards of about this many uncompressed bytes (runs of Parquet row groups / JSON-lines byte ranges):
# files of very different sizes would otherwise leave one worker hashing the largest file alone.
APPROX_SHARD_BYTES = "32MiB"


DUP_COLUMNS = {
    "document": ("dup_cluster", "dup_cluster_size", "dup_keep"),
    "paragraph": ("dup_paragraphs", "dup_paragraph_bytes"),
    "none": (),
}
"""The columns dedup computes, by level: written in ``annotate`` mode, removed in ``remove`` mode. A command
sets ``dup_level`` when its own ``--level`` does not say (``paragraph``, ``url``, ``substring``: none)."""


def read_inputs(args: argparse.Namespace):
    """The inputs, after the column check (``annotate`` mode: none of the columns it writes may exist unless
    ``--replace-columns``), with the input's own ``dup_*`` columns set aside where they must pass unchanged: in
    ``remove`` mode (dedup's columns of those names are removed with the duplicates) and with
    ``--output-column`` (dedup's are renamed at the end). ``output_of`` undoes it."""
    import zephyr
    from zephyr.io.schema import schema_arguments
    from zephyr.removal import check_input_columns, set_aside

    internal, written = dup_columns(args)
    if args.mode == "annotate":
        check_input_columns(
            args.inputs, written, replace_columns=args.replace_columns, rename="--output-column NAME"
        )
    schema = schema_arguments(args)  # --unify-schemas / --schema FILE
    ds = zephyr.read(args.inputs, approx_shard_bytes=APPROX_SHARD_BYTES, on_error=args.on_error, **schema)
    return ds.map_batches(set_aside(internal), name="dedup.aside") if sets_aside(args) else ds


def dup_columns(args: argparse.Namespace) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(the columns dedup computes at this level, the names ``annotate`` writes them under)."""
    internal = DUP_COLUMNS[getattr(args, "dup_level", None) or getattr(args, "level", "document")]
    return internal, tuple(args.output_column + name[len("dup") :] for name in internal)


def sets_aside(args: argparse.Namespace) -> bool:
    return bool(dup_columns(args)[0]) and (args.mode == "remove" or args.output_column != "dup")


def output_of(args: argparse.Namespace, out: Any) -> Any:
    """The dedup result as written: its columns under ``--output-column`` names, the input's own restored."""
    from zephyr.removal import ASIDE_PREFIX, RenameColumns

    if not sets_aside(args):
        return out
    internal, written = dup_columns(args)
    names = tuple(zip(internal, written)) if args.mode == "annotate" else ()
    restore = tuple((ASIDE_PREFIX + name, name) for name in internal)
    return out.map_batches(RenameColumns(names + restore, replace=args.replace_columns), name="dedup.columns")


def finish(result: Any, output: str, extra: dict[str, Any], jobs: list[dict[str, Any]], routed: Any = None):
    """Write ``OUTPUT.zephyr/stats.json`` and return the command's ``Summary`` (``zephyr.summary``).

    ``routed`` (a ``zephyr.dropped.Routed``, with ``--dropped-output``): the run wrote its kept and removed
    rows in separate jobs; ``result`` is the kept rows' write, and the accounting comes from all three."""
    from zephyr import job_stats
    from zephyr.summary import from_stages

    stats = dict(result.stats)
    stats.update(
        job_stats.summarize(jobs)
    )  # task totals of every engine job (``recorded``), not only this write
    stats["dedup"] = extra
    counters: dict[str, int] = {}
    for stage in stats.get("stages", []):
        for key, value in (stage.get("counters") or {}).items():
            if key.startswith("dedup/"):
                counters[key] = counters.get(key, 0) + value
    hist = {k.split("=", 1)[1]: v for k, v in counters.items() if k.startswith("dedup/cluster_size=")}
    stats["dedup"]["cluster_size_histogram"] = dict(sorted(hist.items(), key=lambda kv: int(kv[0])))
    stats["dedup"]["counters"] = counters
    stats["dedup"]["rows"] = row_balance(stats.get("stages", []))
    from zephyr.io.layout import stats_path as side_stats

    stats_path = side_stats(output)
    fields: dict[str, Any] = {
        "output": output,
        "stats": stats_path,
        "next": f"zephyr tokenize {output} --tokenizer tokenizer.json --output tokens/",
        "details": {"kind": extra.get("kind"), "files": len(result.files)},
    }
    if routed is not None:
        summary = routed.summary(dropped_output=extra["dropped_output"], **fields)
        stats["dedup"]["rows"] = {
            "in": summary.rows_in,
            "kept": summary.rows_kept,
            "dropped": summary.rows_dropped,
            "quarantined": summary.rows_quarantined,
        }
    else:
        summary = from_stages(stats.get("stages", []), **fields)
    from zephyr.io.paths import write_bytes_atomic

    write_bytes_atomic(stats_path, json.dumps(stats, indent=2, sort_keys=True, default=str).encode())
    logger.info("dedup: %d files written to %s; counters %s", len(result.files), output, counters)
    return summary


def write_output(args: argparse.Namespace, out: Any, execution: dict[str, Any], extra: dict[str, Any]):
    """Write a document-level dedup's ``out`` to ``--output``: as it is, or, with ``--dropped-output``
    (``out`` then made in ``annotate`` mode), split by ``dup_keep`` into the kept rows and the removed ones
    with ``drop_reason = duplicate`` (``zephyr.dropped``). Returns (the kept rows' write, the routing)."""
    if not getattr(args, "dropped_output", None):
        return output_of(args, out).write_parquet(args.output, **execution), None
    from zephyr.removal import Unless, write_routed

    extra["dropped_output"] = args.dropped_output
    routed = write_routed(
        out,
        Unless("dup_keep", "duplicate"),
        args.output,
        args.dropped_output,
        execution,
        finish=lambda d: output_of(args, d),
        working=DUP_COLUMNS["document"],
    )
    return routed.kept or routed.verdict, routed


def internal_mode(args: argparse.Namespace) -> str:
    """The mode dedup runs in: ``annotate`` when ``--dropped-output`` needs the verdict of every row."""
    return "annotate" if getattr(args, "dropped_output", None) else args.mode


def exact_dedup_arguments(args: argparse.Namespace) -> dict[str, Any]:
    """The keyword arguments the flags give ``exact_dedup_dataset`` and ``exact_job_plans``, one list so that
    ``zephyr explain dedup exact`` shows the plans ``zephyr dedup exact`` runs."""
    return {
        "text_column": args.text_column,
        "id_column": args.id_column,
        "normalize": args.normalize,
        "mode": internal_mode(args),
        "priority_column": args.priority_column,
    }


def paragraph_dedup_of_inputs(args: argparse.Namespace) -> Any:
    """The exact paragraph dedup of the inputs as the flags ask (``paragraph_dedup_dataset``): the plan of
    ``dedup exact --level paragraph``, of ``dedup paragraph --method exact`` and of their ``explain``."""
    from zephyr.dedup.dataset_ops import paragraph_dedup_dataset

    return paragraph_dedup_dataset(
        read_inputs(args),
        text_column=args.text_column,
        id_column=args.id_column,
        normalize=args.normalize,
        mode=args.mode,
    )


def check_bloom_flags(args: argparse.Namespace) -> None:
    """Refuse, before any work, ``--method bloom`` flags that cannot size or load a filter."""
    from zephyr.dedup.bloom import BloomFilter

    from zephyr.errors import ConfigError

    if args.load_filter is None and args.expected is None:
        raise ConfigError(
            "--method bloom needs --expected N (paragraphs the filter must hold) or --load-filter FILE"
        )
    if args.load_filter is not None:
        BloomFilter.load(args.load_filter).check_compatible(
            args.normalize, "\n", args.load_filter
        )  # fail now
    else:
        BloomFilter.sizing(args.expected, args.fp_rate)


def paragraph_bloom_of_inputs(args: argparse.Namespace, partial: str | None) -> Any:
    """The Bloom paragraph dedup of the inputs as the flags ask (one task, input order; ``partial``: where
    the task saves its filter): the plan of ``dedup paragraph --method bloom`` and of its ``explain``."""
    from zephyr.dedup.bloom import BloomParagraphDedup

    stage = BloomParagraphDedup(
        args.expected or 1,
        args.fp_rate,
        args.text_column,
        args.normalize,
        "\n",
        args.mode,
        args.keep_first_in_doc,
        args.load_filter,
        partial,
    )
    return output_of(args, read_inputs(args).reshard(1).map_batches(stage, name="dedup.paragraph.bloom"))


def check_dropped_output(args: argparse.Namespace) -> None:
    """``--dropped-output`` needs ``--mode remove`` (annotate drops nothing) and a place of its own."""
    if not getattr(args, "dropped_output", None):
        return
    from zephyr import removal
    from zephyr.errors import ConfigError

    if args.mode != "remove":
        raise ConfigError("--dropped-output needs --mode remove: --mode annotate keeps every row")
    removal.check(args)


def row_balance(stages: list[dict]) -> dict[str, int]:
    """The input rows and where they went: ``in = kept + dropped + quarantined``. The first stage reads the
    input (a paragraph-level run reads it twice: counted once); kept rows are what the last stage wrote."""
    if not stages:
        return {"in": 0, "kept": 0, "dropped": 0, "quarantined": 0}
    return {
        "in": stages[0]["rows_in"],
        "kept": stages[-1]["rows_out"],
        "dropped": sum(s["rows_dropped"] for s in stages),
        "quarantined": stages[0]["rows_quarantined"],
    }


def recorded(handler):
    """Run a dedup handler with every engine job it starts recorded (hash or candidate jobs, then the final
    write) in ``args.engine_jobs``, so ``finish`` reports the retries and resumed tasks of all of them."""

    @functools.wraps(handler)
    def run(args: argparse.Namespace) -> int:
        from zephyr import job_stats

        with job_stats.recording() as jobs:
            args.engine_jobs = jobs
            return handler(args)

    return run


def action_kwargs(opts: Any) -> dict[str, Any]:
    return opts.as_kwargs()


def add_common_io(p: argparse.ArgumentParser, *, output: bool = True) -> None:
    """The flags every dedup command shares; ``output=False`` for ``zephyr explain dedup``, which writes nothing."""
    from zephyr.cli import add_on_error, add_output_dir

    p.add_argument(
        "inputs", nargs="+", metavar="INPUT", help="Parquet/JSON-lines files, directories or globs"
    )
    add_on_error(p)
    if output:
        add_output_dir(p, "output directory (Parquet parts; stats in OUTPUT.zephyr/stats.json)")
    p.add_argument(
        "--mode",
        choices=REMOVAL_MODES,  # zephyr.config: standard library only, so --help stays fast
        default="annotate",
        help="annotate: add dup_cluster/dup_cluster_size/dup_keep; remove: drop duplicates",
    )
    p.add_argument("--text-column", default="text")
    p.add_argument(
        "--id-column",
        default="id",
        type=column_or_none,
        help="ids order rows: the smallest id of a cluster is kept (rows that share an id, or have none, are "
        "still separate rows); 'none': no id column, input order decides",
    )
    p.add_argument("--priority-column", default=None, help="keep the row with the largest value instead")
    from zephyr.cli import add_replace_columns
    from zephyr.io.schema import add_schema_arguments

    add_schema_arguments(p)
    add_replace_columns(
        p,
        "the dup columns (--mode annotate)",
        default="dup",
        output_help="--mode annotate: write NAME_cluster, NAME_cluster_size, NAME_keep (paragraphs: "
        "NAME_paragraphs, NAME_paragraph_bytes); an input's own dup_* columns then pass unchanged, as they "
        "always do in --mode remove",
    )


def column_or_none(value: str) -> str | None:
    return None if value.lower() == "none" else value
