"""``zephyr dedup paragraph|url|substring``: the dedup commands of web text (registered by ``zephyr.dedup.cli``).

::

    zephyr dedup paragraph INPUT... --output DIR [--method exact|bloom] [--expected N] [--fp-rate 1e-4]
                           [--keep-first-in-doc] [--save-filter FILE] [--load-filter FILE]
    zephyr dedup url INPUT... --output DIR [--url-column url] [--mode annotate|remove]
    zephyr dedup substring INPUT... --output DIR [--min-bytes 100] [--min-doc-bytes 0] [--anchor-bytes N]

Each writes Parquet parts and ``DIR.zephyr/stats.json`` like ``zephyr dedup exact``.
"""

from __future__ import annotations

import argparse
import os
from typing import Any

from zephyr.dedup.cli_common import (
    DEFAULT_EXECUTOR,
    action_kwargs,
    add_common_io,
    check_bloom_flags,
    check_dropped_output,
    finish,
    internal_mode,
    logger,
    output_of,
    paragraph_bloom_of_inputs,
    paragraph_dedup_of_inputs,
    read_inputs,
    recorded,
    write_output,
)
from zephyr.dedup.config import NORMALIZATIONS

__all__ = ["register_text_commands", "register_text_explains", "substring_config"]


@recorded
def _url(args: argparse.Namespace) -> int:
    from zephyr.dedup.url import url_dedup_dataset

    from zephyr.cli import execution_options
    from zephyr.executors import reuse_workers

    check_dropped_output(args)
    with reuse_workers(action_kwargs(execution_options(args))) as execution:
        path: dict[str, Any] = {}
        out = url_dedup_dataset(
            read_inputs(args),
            url_column=args.url_column,
            id_column=args.id_column,
            mode=internal_mode(args),
            priority_column=args.priority_column,
            execution=execution,
            stats=path,
        )
        extra = {"kind": "url", "url_column": args.url_column, "mode": args.mode, **path}
        result, routed = write_output(args, out, execution, extra)
        return finish(result, args.output, extra, args.engine_jobs, routed)


@recorded
def _paragraph(args: argparse.Namespace) -> int:
    """``zephyr dedup paragraph``: the exact paragraph dedup (``--method exact``, in id order) or the Bloom
    filter's single streaming pass in input order (``--method bloom``)."""
    from zephyr.cli import execution_options

    opts = action_kwargs(execution_options(args))
    extra: dict[str, Any] = {
        "kind": "paragraph",
        "method": args.method,
        "normalize": args.normalize,
        "mode": args.mode,
    }
    if args.method == "exact":
        out = paragraph_dedup_of_inputs(args)
        return finish(
            output_of(args, out).write_parquet(args.output, **opts), args.output, extra, args.engine_jobs
        )
    return _paragraph_bloom(args, opts, extra)


def _paragraph_bloom(args: argparse.Namespace, opts: dict[str, Any], extra: dict[str, Any]) -> int:
    import uuid

    check_bloom_flags(args)
    partial = None
    if args.save_filter is not None:
        partial = f"{args.save_filter}.tmp-{uuid.uuid4().hex[:8]}"
    out = paragraph_bloom_of_inputs(args, partial)
    result = out.write_parquet(args.output, **opts)
    bloom = _final_filter(args, partial)
    if args.save_filter is not None:
        bloom.save(args.save_filter)
        if partial is not None and os.path.exists(partial):
            os.remove(partial)
    num_bits, num_hashes = bloom.num_bits, bloom.num_hashes
    extra.update(
        fp_rate=bloom.fp_rate,
        expected=bloom.expected,
        filter_bytes=(num_bits + 7) // 8,
        num_hashes=num_hashes,
        inserted=bloom.inserted,
        false_positive_rate_now=bloom.false_positive_rate(),
        keep_first_in_doc=args.keep_first_in_doc,
        filter_saved=args.save_filter,
    )
    if bloom.inserted > bloom.expected:
        logger.warning(
            "bloom dedup: %d paragraphs inserted into a filter sized for %d: its false-positive rate is now %.2g "
            "(asked %.2g); rerun with a larger --expected",
            bloom.inserted,
            bloom.expected,
            bloom.false_positive_rate(),
            bloom.fp_rate,
        )
    return finish(result, args.output, extra, args.engine_jobs)


def _final_filter(args: argparse.Namespace, partial: str | None):
    """The filter after the run: the task's saved copy, else (no batch ran, or not saved) its starting
    state with the inserts counted from the job's counters (bits not needed then)."""
    from zephyr.dedup.bloom import BloomFilter

    if partial is not None and os.path.exists(partial):
        return BloomFilter.load(partial)
    if args.load_filter is not None:
        return BloomFilter.load(args.load_filter)
    return BloomFilter.for_capacity(args.expected, args.fp_rate, normalize=args.normalize)


@recorded
def _substring(args: argparse.Namespace) -> int:
    """Exact substring dedup (``zephyr.dedup.substring``): removed bytes per source, top repeated spans."""
    import shutil
    import tempfile

    from zephyr.dedup.substring import SHORT_DOC, substring_dedup_dataset

    from zephyr.cli import execution_options
    from zephyr.executors import reuse_workers

    config = substring_config(args)
    opts = action_kwargs(execution_options(args))
    scratch = tempfile.mkdtemp(prefix="zephyr-substring-", dir=opts.get("work_dir") if _local(opts) else None)
    try:
        with reuse_workers(opts) as execution:
            info: dict[str, Any] = {}
            out = substring_dedup_dataset(
                read_inputs(args), config, execution=execution, scratch=scratch, stats=info
            )
            result = out.write_parquet(args.output, **execution)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    counters = {k: v for st in result.stats.get("stages", []) for k, v in (st.get("counters") or {}).items()}
    per_source = {
        k.split("=", 1)[1]: v for k, v in counters.items() if k.startswith("substring/bytes_removed/source=")
    }
    dropped = sum(
        op.get("dropped_by_reason", {}).get(SHORT_DOC, 0) for st in result.stats["stages"] for op in st["ops"]
    )
    extra = {
        "kind": "substring",
        **info,
        "min_doc_bytes": config.min_doc_bytes,
        "bytes_removed": counters.get("substring/bytes_removed", 0),
        "bytes_removed_per_source": per_source,
        "docs_changed": counters.get("substring/docs_changed", 0),
        "docs_dropped_short": dropped,
    }
    logger.info(
        "substring dedup: %d bytes removed from %d documents", extra["bytes_removed"], extra["docs_changed"]
    )
    return finish(result, args.output, extra, args.engine_jobs)


def substring_config(args: argparse.Namespace):
    """The ``SubstringConfig`` of the flags (``--unit tokens`` needs an existing ``--tokenizer``): of the
    command and of ``zephyr explain dedup substring``."""
    from zephyr.dedup.substring import SubstringConfig

    _check_no_annotation(args)
    return SubstringConfig(
        min_bytes=args.min_bytes,
        anchor_bytes=args.anchor_bytes,
        min_doc_bytes=args.min_doc_bytes,
        text_column=args.text_column,
        source_column=args.source_column or None,
        top_spans=args.top_spans,
        tokenizer=_tokenizer(args),
    )


def _check_no_annotation(args: argparse.Namespace) -> None:
    """Substring dedup cuts the repeated spans out of the text and adds no column: the shared dedup flags that
    choose or name added columns would be ignored, so they are refused instead."""
    from zephyr.errors import ConfigError

    if args.mode != "remove":
        raise ConfigError(
            "zephyr dedup substring removes the repeated spans from the text; it has no --mode annotate "
            "(leave --mode out)"
        )
    if args.replace_columns or args.output_column != "dup":
        raise ConfigError(
            "zephyr dedup substring adds no column, so --replace-columns and --output-column do not apply (leave them out)"
        )


def _tokenizer(args: argparse.Namespace) -> str | None:
    from zephyr.errors import ConfigError

    if args.unit == "bytes":
        if args.tokenizer:
            raise ConfigError("--tokenizer is for --unit tokens")
        return None
    if not args.tokenizer:
        raise ConfigError("--unit tokens needs --tokenizer FILE (a tokenizer.json)")
    if not os.path.exists(args.tokenizer):
        raise ConfigError(f"--tokenizer {args.tokenizer}: no such file")
    return args.tokenizer


def _local(opts: dict[str, Any]) -> bool:
    work_dir = opts.get("work_dir")
    return bool(work_dir) and "://" not in str(work_dir)


def register_text_commands(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    """Add ``paragraph``, ``url`` and ``substring`` under ``zephyr dedup``."""
    from zephyr.cli import add_dropped_output

    para = sub.add_parser(
        "paragraph",
        parents=[common],
        help="remove paragraphs (lines) seen earlier: exact, or one Bloom-filter pass",
    )
    add_common_io(para)
    _add_paragraph_flags(para)
    para.set_defaults(func=_paragraph, default_executor=DEFAULT_EXECUTOR)

    url = sub.add_parser(
        "url",
        parents=[common],
        help="one row per normalized URL (lower-case host, no default port/fragment/utm_*)",
    )
    add_common_io(url)
    _add_url_flags(url)
    add_dropped_output(url, "rows --mode remove drops (a URL seen before)")
    url.set_defaults(func=_url, default_executor=DEFAULT_EXECUTOR)

    substring = sub.add_parser(
        "substring",
        parents=[common],
        help="remove repeats of byte spans of at least --min-bytes (exact substrings)",
    )
    add_common_io(substring)
    _add_substring_flags(substring)
    substring.set_defaults(func=_substring, default_executor=DEFAULT_EXECUTOR)


def register_text_explains(kinds: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    """``zephyr explain dedup paragraph|url|substring``: each command's own flags without ``--output``
    (and ``--dropped-output``); prints its engine jobs' plans and runs nothing (``zephyr.dedup.explain``)."""
    for name, add_flags in (
        ("paragraph", _add_paragraph_flags),
        ("url", _add_url_flags),
        ("substring", _add_substring_flags),
    ):
        parser = kinds.add_parser(name, parents=[common], help=f"the jobs of zephyr dedup {name}")
        add_common_io(parser, output=False)
        add_flags(parser)
        parser.set_defaults(func=_explain_text, default_executor=DEFAULT_EXECUTOR)


def _explain_text(args: argparse.Namespace):
    from zephyr.dedup import explain

    from zephyr.cli import execution_options, explained

    execution = action_kwargs(execution_options(args))
    if args.explain_dedup_command == "substring":
        return explained(explain.substring_plan_text(args, substring_config(args), execution), args)
    plan_text = {"paragraph": explain.paragraph_plan_text, "url": explain.url_plan_text}
    return explained(plan_text[args.explain_dedup_command](args, execution), args)


def _add_paragraph_flags(para: argparse.ArgumentParser) -> None:
    para.set_defaults(mode="remove", dup_level="paragraph")
    para.add_argument(
        "--method",
        choices=("exact", "bloom"),
        default="exact",
        help="exact: every paragraph hash in memory, id order; bloom: fixed memory from --expected/--fp-rate, "
        "one pass in input order, false positives at most --fp-rate",
    )
    para.add_argument("--normalize", choices=NORMALIZATIONS, default="default")
    para.add_argument("--expected", type=int, default=None, help="bloom: paragraphs the filter is sized for")
    para.add_argument("--fp-rate", type=float, default=1e-4, help="bloom: false-positive rate at --expected")
    para.add_argument(
        "--keep-first-in-doc",
        action="store_true",
        help="bloom: a paragraph repeated inside the document where it first appears keeps every copy there",
    )
    para.add_argument(
        "--save-filter", default=None, metavar="FILE", help="bloom: write the filter here after the run"
    )
    para.add_argument("--load-filter", default=None, metavar="FILE", help="bloom: start from a saved filter")


def _add_url_flags(url: argparse.ArgumentParser) -> None:
    url.set_defaults(dup_level="document")
    url.add_argument("--url-column", default="url", help="the URL column (default url)")


def _add_substring_flags(substring: argparse.ArgumentParser) -> None:
    substring.set_defaults(
        mode="remove", dup_level="none"
    )  # adds no column: --replace-columns has nothing to do
    substring.add_argument(
        "--min-bytes", type=int, default=100, help="shortest repeated span removed (bytes)"
    )
    substring.add_argument(
        "--min-doc-bytes",
        type=int,
        default=0,
        help="drop documents left shorter than this (substring_short_doc)",
    )
    substring.add_argument(
        "--anchor-bytes", type=int, default=None, help="winnowing anchor length (default 32)"
    )
    substring.add_argument(
        "--source-column", default="source", help="report removed bytes per value ('' = none)"
    )
    substring.add_argument("--top-spans", type=int, default=20, help="most repeated spans in the stats")
    substring.add_argument(
        "--unit",
        choices=("bytes", "tokens"),
        default="bytes",
        help="what removed spans snap to: UTF-8 characters (bytes) or the token starts of --tokenizer",
    )
    substring.add_argument(
        "--tokenizer", default=None, metavar="FILE", help="tokenizer.json for --unit tokens"
    )
