"""What ``zephyr explain dedup exact|fuzzy|paragraph|url|substring`` prints: the engine jobs a dedup command runs, in order, each with
its physical plan (``Dataset.explain``: stages, shuffles, partition counts), and between them the budget
shares (``zephyr.budget``) that choose the path, against sizes known only once the job before has run.

Nothing runs and nothing is written: the inputs are listed and their Parquet footers read, as for any plan.
The plans are the ones the commands run, built by the same functions (``exact_job_plans``,
``fuzzy_job_plans``, ``url_keyed``/``url_exact_arguments``, ``paragraph_dedup_of_inputs``,
``paragraph_bloom_of_inputs``, ``substring_job_plans``); a job that reads an earlier job's files is planned
over that job's lazy plan (the run reads the files instead); the budget's shares are printed once, at the end.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from zephyr.dedup.cli_common import (
    exact_dedup_arguments,
    internal_mode,
    output_of,
    paragraph_bloom_of_inputs,
    paragraph_dedup_of_inputs,
    read_inputs,
)
from zephyr.dedup.eager import budget_of

from zephyr.cli import PlanStep, jobs_plan_text

if TYPE_CHECKING:
    from zephyr.dedup.config import FuzzyDedupConfig, SubstringConfig
    from zephyr.dedup.exact_dataset import ExactJobPlans

    from zephyr.budget import Budget
    from zephyr.dataset import Dataset

__all__ = [
    "exact_plan_text",
    "fuzzy_plan_text",
    "paragraph_plan_text",
    "substring_plan_text",
    "url_plan_text",
]

Step = PlanStep


def exact_plan_text(args: argparse.Namespace, execution: dict[str, Any]) -> str:
    """The jobs of ``zephyr dedup exact`` with these arguments."""
    from zephyr.dedup.exact_dataset import exact_job_plans

    budget = budget_of(execution)
    if args.level == "paragraph":
        out = paragraph_dedup_of_inputs(args)
        title = "job 1: the output (rows in one partition, paragraphs seen earlier removed)"
        return _text("exact --level paragraph", [(title, output_of(args, out))], budget, execution)
    plans = exact_job_plans(read_inputs(args), **exact_dedup_arguments(args))
    steps = _document_steps(
        plans, lambda out: output_of(args, out), budget, "member hashes (row, hash, id, priority)"
    )
    return _text("exact", steps, budget, execution)


def url_plan_text(args: argparse.Namespace, execution: dict[str, Any]) -> str:
    """The jobs of ``zephyr dedup url`` with these arguments: exact dedup's, on the normalized URL."""
    from zephyr.dedup.exact_dataset import exact_job_plans
    from zephyr.dedup.url import url_exact_arguments, url_keyed, without_url_key

    budget = budget_of(execution)
    arguments = url_exact_arguments(
        id_column=args.id_column, mode=internal_mode(args), priority_column=args.priority_column
    )
    plans = exact_job_plans(url_keyed(read_inputs(args), args.url_column), **arguments)
    finish = lambda out: output_of(args, without_url_key(out))  # noqa: E731
    return _text(
        "url",
        _document_steps(plans, finish, budget, "URL key hashes (row, hash, id, priority)"),
        budget,
        execution,
    )


def _document_steps(
    plans: ExactJobPlans, finish: Callable[[Dataset], Dataset], budget: Budget, hashes: str
) -> list[Step]:
    """Exact document dedup's jobs (``exact_dedup_dataset``): the hashes, then the driver's or the shuffle
    path; ``finish``: what the command does to the output before writing it."""
    return [
        (f"job 1: {hashes}, materialized, then counted", plans.member_hashes),
        (
            f"member rows ≤ driver_pair_rows {budget.driver_pair_rows:,} (64 bytes a row in B/4): groups "
            "form in the driver and job 2a runs; more: job 2b",
            None,
        ),
        ("job 2a: the output, cluster columns attached by row number", finish(plans.attached(None))),
        ("job 2b: the output by the shuffle path (hash → keepers → join back)", finish(plans.shuffle_path)),
    ]


def paragraph_plan_text(args: argparse.Namespace, execution: dict[str, Any]) -> str:
    """The job of ``zephyr dedup paragraph``: ``--method exact`` as ``dedup exact --level paragraph``, or
    ``--method bloom``'s one pass, its filter sized by ``--expected``/``--fp-rate`` (or ``--load-filter``)."""
    from zephyr.dedup.bloom import BloomFilter
    from zephyr.dedup.cli_common import check_bloom_flags

    budget = budget_of(execution)
    if args.method == "exact":
        title = "job 1: the output (rows in one partition, paragraphs seen earlier removed)"
        steps: list[Step] = [(title, output_of(args, paragraph_dedup_of_inputs(args)))]
        return _text("paragraph --method exact", steps, budget, execution)
    check_bloom_flags(args)
    if args.load_filter is not None:
        bloom = BloomFilter.load(args.load_filter)
        bits, hashes, sized = bloom.num_bits, bloom.num_hashes, f"loaded from {args.load_filter}"
    else:
        bits, hashes = BloomFilter.sizing(args.expected, args.fp_rate)
        sized = f"sized for --expected {args.expected:,} at --fp-rate {args.fp_rate:g}"
    filter_line = (
        f"the filter ({(bits + 7) // 8:,} bytes, {hashes} probes a paragraph, {sized}) is held by the one "
        "task, outside the budget's shares"
        + (f"; saved to {args.save_filter} after the run" if args.save_filter else "")
    )
    steps = [
        (
            "job 1: the output, one task in input order (reshard(1)), paragraphs the filter has seen removed",
            paragraph_bloom_of_inputs(args, None),
        ),
        (filter_line, None),
    ]
    return _text("paragraph --method bloom", steps, budget, execution)


def substring_plan_text(args: argparse.Namespace, config: SubstringConfig, execution: dict[str, Any]) -> str:
    """The jobs of ``zephyr dedup substring`` (``substring_dedup_dataset``'s passes), planned with nothing
    found yet: the arrays a job takes from the jobs before it are empty here."""
    import numpy as np
    from zephyr.dedup.substring import substring_job_plans

    budget = budget_of(execution)
    plans = substring_job_plans(read_inputs(args), config)
    nothing = np.zeros(0, np.uint64)
    candidates = plans.candidates(nothing)
    groups = plans.groups(candidates)
    steps: list[Step] = [
        (
            f"job 1: repeated anchors ({config.anchor}-byte winnowing grams seen twice), to the driver",
            plans.repeated_anchors(),
        ),
        (
            "no repeated anchor: jobs 2-5 are skipped; else every task holds the repeated anchors (8 bytes "
            "each, outside the budget's shares)",
            None,
        ),
        (
            f"job 2: candidate windows ({config.min_bytes} bytes with a repeated anchor), materialized",
            candidates,
        ),
        (
            "job 3: windows in two or more documents (count, first row), materialized; planned over job 2's "
            "plan, the run reads its files",
            groups,
        ),
        (
            f"shared windows ≤ shared_window_rows {budget.shared_window_rows:,} (48 bytes a window in B/4): the "
            "driver reads them and every task looks them up in memory (no join, no sort); more: job 4",
            None,
        ),
        (
            "job 4: the repeats by the join path, sorted by row, written once (over jobs 2-3's plans)",
            plans.repeats(candidates, groups),
        ),
        (
            "job 5: the most repeated windows' first documents, to the driver (top spans in the stats)",
            plans.top_documents([]),
        ),
        ("job 6: the output, each batch's repeats cut", plans.cut(nothing)),
    ]
    return _text("substring", steps, budget, execution)


def fuzzy_plan_text(args: argparse.Namespace, config: FuzzyDedupConfig, execution: dict[str, Any]) -> str:
    """The jobs of ``zephyr dedup fuzzy`` with these arguments (``config``: its ``FuzzyDedupConfig``)."""
    from zephyr.dedup.fuzzy_dataset import fuzzy_job_plans

    budget = budget_of(execution)
    plans = fuzzy_job_plans(
        read_inputs(args),
        config,
        text_column=args.text_column,
        id_column=args.id_column,
        mode=internal_mode(args),
        priority_column=args.priority_column,
    )
    index = " (with --index, the index's band rows join the bucket shuffle)" if args.index else ""
    verify = (
        f"pairs in the driver and their sets ≤ driver_set_bytes {budget.driver_set_bytes:,}: verification "
        "and clusters in the driver; else verification on the engine (sets joined onto the pairs, a giant "
        f"bucket's first members broadcast up to broadcast_bytes {budget.broadcast_bytes:,}), and the "
        f"verified graph clustered in the driver up to driver_graph_edges {budget.driver_graph_edges:,}, "
        "else (--clusters components) by engine rounds whose labels are joined on the row number"
        if config.verify
        else "pairs in the driver: clusters in the driver; else clusters on the engine as for verified pairs"
    )
    steps: list[Step] = [
        (f"job 1: candidate pairs, materialized, then counted{index}", plans.candidate_pairs),
        (
            f"candidate pairs ≤ driver_pair_rows {budget.driver_pair_rows:,}: they come to the driver and "
            "job 2 writes only their endpoints' sets; more: every row's",
            None,
        ),
        ("job 2: shingle sets, written once", plans.node_sets),
        (verify, None),
        ("job 3: the output, cluster columns attached by row number", output_of(args, plans.attached)),
    ]
    return _text("fuzzy", steps, budget, execution)


def _text(kind: str, steps: list[Step], budget: Budget, execution: dict[str, Any]) -> str:
    then = "the rules" if kind.startswith("paragraph") else "the budget shares"  # bloom's filter is no share
    return jobs_plan_text(f"zephyr dedup {kind}", steps, budget, execution, then=then)
