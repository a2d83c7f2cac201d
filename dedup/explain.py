"""What ``zephyr explain dedup exact|fuzzy`` prints: the engine jobs a dedup command runs, in order, each with
its physical plan (``Dataset.explain``: stages, shuffles, partition counts), and between them the budget
shares (``zephyr.budget``) that choose the path, against sizes known only once the job before has run.

Nothing runs and nothing is written: the inputs are listed and their Parquet footers read, as for any plan.
The plans are the ones the commands run, built by the same functions (``exact_job_plans``,
``fuzzy_job_plans``); the budget's shares are printed once, at the end.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from zephyr.dedup.cli_common import (
    exact_dedup_arguments,
    internal_mode,
    output_of,
    paragraph_dedup_of_inputs,
    read_inputs,
)
from zephyr.dedup.eager import budget_of

if TYPE_CHECKING:
    from zephyr.dedup.config import FuzzyDedupConfig

    from zephyr.budget import Budget
    from zephyr.dataset import Dataset

__all__ = ["exact_plan_text", "fuzzy_plan_text"]

Step = tuple[str, "Dataset | None"]
"""A job (its title and plan) or a decision between jobs (its rule, no plan)."""


def exact_plan_text(args: argparse.Namespace, execution: dict[str, Any]) -> str:
    """The jobs of ``zephyr dedup exact`` with these arguments."""
    from zephyr.dedup.exact_dataset import exact_job_plans

    budget = budget_of(execution)
    if args.level == "paragraph":
        out = paragraph_dedup_of_inputs(args)
        title = "job 1: the output (rows in one partition, paragraphs seen earlier removed)"
        return _text("exact --level paragraph", [(title, output_of(args, out))], budget, execution)
    plans = exact_job_plans(read_inputs(args), **exact_dedup_arguments(args))
    steps: list[Step] = [
        ("job 1: member hashes (row, hash, id, priority), materialized, then counted", plans.member_hashes),
        (
            f"member rows ≤ driver_pair_rows {budget.driver_pair_rows:,} (64 bytes a row in B/4): groups "
            "form in the driver and job 2a runs; more: job 2b",
            None,
        ),
        ("job 2a: the output, cluster columns attached by row number", output_of(args, plans.attached(None))),
        (
            "job 2b: the output by the shuffle path (hash → keepers → join back)",
            output_of(args, plans.shuffle_path),
        ),
    ]
    return _text("exact", steps, budget, execution)


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
    """A header, each job's plan (without its budget lines) or decision, then the budget's shares once."""
    lines = [
        f"zephyr dedup {kind}: nothing ran. The physical plans of its engine jobs in the order they run; "
        "'then:' lines are the budget shares that choose between them"
    ]
    for title, plan in steps:
        if plan is None:
            lines.append(f"then: {title}")
            continue
        lines.append(title)
        text = plan.explain(**execution).split("\nbudget shares", 1)[0]
        lines.extend("  " + line for line in text.splitlines())
    lines.append(f"budget shares (bytes per task, of {budget.bytes:,}):")
    lines.extend("  " + line for line in budget.describe().splitlines())
    return "\n".join(lines)
