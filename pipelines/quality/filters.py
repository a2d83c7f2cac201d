"""Heuristic rule families on Arrow batches: each row kept, dropped (with ``drop_reason``) or quarantined.

``annotate_drop_reasons(table, [GopherQuality(), C4Quality(), ...])`` evaluates the families in order. Each
row gets the *first* reason it fails; rows with a null text are quarantined (``quarantine_reason =
"null_text"``), never passed to a rule. Later families only see the rows still alive (less work), and a
family that rewrites text (C4 line cleaning) hands its cleaned text to the next family and to the kept
output; dropped rows keep their original text so they can be inspected. Counts balance by construction::

    rows_in == rows_kept + sum(dropped_by_reason.values()) + rows_quarantined

**The heuristic filter path**, one declaration per step: the rule sets (``RULE_SETS``: names → the rule
families of ``rules.py`` and ``web/urls.py``; ``DEFAULT_RULES``) → one filter
function, ``annotate_drop_reasons`` (each row's first failing rule) → the batch ops that put it on a
``Dataset`` (``FilterAnnotator``, routed by ``zephyr.removal.Route``; ``HeuristicFilter`` in one pass) → their
two callers: ``zephyr filter`` (``zephyr.pipelines.cli``) and the pipeline's ``heuristic_filter`` step
(``pipelines/steps.HeuristicFilterStep``). Both hold the rules in one config,
``config.HeuristicFilterConfig`` (the step embeds it; the CLI builds it from its flags), whose check
calls ``build_rule_families`` here, the only place rule names are known.

**Retention report** of ``zephyr filter``: rows and text bytes kept, dropped per rule and quarantined, per
source. ``summarize_batch`` counts them in one *annotated* batch (the filter's annotation before routing: every
row plus a ``drop_reason`` column, null = kept, ``null_text`` = quarantined) and ``merge_summaries`` adds any
number of those up into the report (JSON ``version`` 2)::

    {"version": 2, "sources": {source: {outcome: {"rows", "bytes"}}}, "totals": {...}}

An outcome is ``kept``, a rule's reason, or ``null_text`` (quarantined).

Its examples are the filter steps' (``zephyr.pipelines.examples``), its Markdown the job report's
(``zephyr.pipelines.report.retention_markdown``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.compute as pc
from zephyr.pipelines.quality import DEFAULT_RULES
from zephyr.pipelines.quality._text import lang_series, text_array
from zephyr.pipelines.quality.rules import (
    C4Quality,
    FineWebQuality,
    GopherQuality,
    GopherRepetition,
    RuleFamily,
)
from zephyr.pipelines.web.urls import UrlRules

from zephyr import counters
from zephyr.budget import kernel_slices
from zephyr.config import FieldError
from zephyr.errors import ConfigError
from zephyr.flags import comma_names
from zephyr.ops import BatchOutput
from zephyr.removal import DROP_REASON, Route, check_added_columns, set_aside

NULL_TEXT = "null_text"


RULE_SETS: dict[str, tuple[type, ...]] = {
    "gopher": (GopherQuality, GopherRepetition),
    "gopher_quality": (GopherQuality,),
    "gopher_repetition": (GopherRepetition,),
    "c4": (C4Quality,),
    "fineweb": (FineWebQuality,),
    "url": (UrlRules,),
}
"""Names accepted by ``build_rule_families`` and ``zephyr filter --rules``."""


def build_rule_families(names: Sequence[str] | str, **overrides: Any) -> list[RuleFamily]:
    """Rule families for comma-separated names (``"gopher,c4,fineweb"``) with default thresholds: the one check
    of rule names (a bad one is a ``FieldError`` on ``rules``, naming the allowed ones) and thresholds (a
    ``FieldError`` on ``overrides``).

    ``overrides`` maps a family's ``name`` (``gopher_quality``, ``c4``, …) to a dict of field values.
    """
    allowed = ", ".join(sorted(RULE_SETS))
    families: list[RuleFamily] = []
    for name in comma_names(names) if isinstance(names, str) else names:
        if name not in RULE_SETS:
            raise FieldError("rules", f"unknown rule family {name!r}; allowed: {allowed}")
        for cls in RULE_SETS[name]:
            if any(type(f) is cls for f in families):
                continue
            try:
                families.append(cls(**overrides.get(cls.name, {})))
            except (TypeError, ConfigError) as exc:  # a threshold a family does not have, or a bad value
                raise FieldError("overrides", str(exc)) from None
    if not families:
        raise FieldError("rules", f"give at least one rule family; allowed: {allowed}")
    return families


SCRATCH_PER_BYTE = 32
"""Peak scratch of the rule families per byte of input (token and line lists, lower-cased copies, the stop-word
join): measured 22× on 2 MiB and 28× on 8 MiB of web text. Tables larger than the running task's kernel share
allows are evaluated in row slices (``zephyr.budget.kernel_slices``); rows are judged one by one, so the
result does not depend on the slicing."""


def annotate_drop_reasons(
    table: pa.Table,
    families: Sequence[RuleFamily],
    *,
    text_column: str = "text",
    lang_column: str | None = "lang",
    default_lang: str = "en",
) -> tuple[pa.Array, pa.Array, dict[str, int]]:
    """(reason per row — null means kept, ``"null_text"`` means quarantine —, output text, counters)."""
    pieces = [
        _annotate_slice(piece, families, text_column, lang_column, default_lang)
        for piece in kernel_slices(table, SCRATCH_PER_BYTE)
    ]
    if len(pieces) == 1:
        return pieces[0]
    counters: Counter[str] = Counter()
    for _, _, piece_counters in pieces:
        counters.update(piece_counters)  # zeros stay: a counter of every slice
    reasons = pa.concat_arrays([r for r, _, _ in pieces])
    return reasons, pa.concat_arrays([t for _, t, _ in pieces]), dict(counters)


def _annotate_slice(
    table: pa.Table,
    families: Sequence[RuleFamily],
    text_column: str,
    lang_column: str | None,
    default_lang: str,
) -> tuple[pa.Array, pa.Array, dict[str, int]]:
    texts = text_array(table, text_column)
    n = len(texts)
    langs = lang_series(table, lang_column, default_lang)
    reasons = np.full(n, None, dtype=object)
    out_text = pl.Series("text", texts)
    null = texts.is_null().to_numpy(zero_copy_only=False)
    reasons[null] = NULL_TEXT
    alive = np.flatnonzero(~null)
    counters: Counter[str] = Counter()
    for family in families:
        if len(alive) == 0:
            break
        idx = pl.Series(alive)
        if hasattr(family, "evaluate_table"):  # a family that reads other columns (url rules)
            verdict = family.evaluate_table(table.take(pa.array(alive)))
        else:
            verdict = family.evaluate(out_text.gather(idx), langs.gather(idx))
        failed = np.zeros(len(alive), dtype=bool)
        for reason, fails in verdict.reasons:
            new = fails & ~failed
            reasons[alive[new]] = reason
            failed |= fails
        counters.update(verdict.counters)  # zeros stay: a counter of every slice
        if verdict.text is not None:
            survivors = pl.Series(alive[~failed])
            out_text = out_text.scatter(survivors, verdict.text.filter(pl.Series(~failed)))
        alive = alive[~failed]
    return pa.array(reasons, type=pa.string()), out_text.to_arrow().cast(pa.large_string()), dict(counters)


@dataclass
class FilterAnnotator:
    """Adds ``drop_reason`` (null = kept, ``null_text`` = quarantine) and writes cleaned text for kept rows.

    An input that has a ``drop_reason`` of its own fails unless ``replace_columns`` (``zephyr.removal``);
    to keep it, set it aside around the filter (``zephyr.removal.set_aside``)."""

    rules: str = ",".join(DEFAULT_RULES)
    overrides: dict[str, dict[str, Any]] = field(default_factory=dict)
    text_column: str = "text"
    lang_column: str | None = "lang"
    default_lang: str = "en"
    replace_columns: bool = False

    def __call__(self, table: pa.Table) -> pa.Table:
        check_added_columns(table.schema.names, (DROP_REASON,), replace_columns=self.replace_columns)
        families = build_rule_families(self.rules, **self.overrides)
        reasons, text, extra = annotate_drop_reasons(
            table,
            families,
            text_column=self.text_column,
            lang_column=self.lang_column,
            default_lang=self.default_lang,
        )
        for count in pc.value_counts(reasons.drop_null()).to_pylist():
            counters.increment(f"rule/{count['values']}", count["counts"])
        for name, n in extra.items():
            counters.increment(name, n)
        keep = pc.is_null(reasons)
        original = table.column(self.text_column)
        if pa.types.is_null(original.type):  # no value at all (see zephyr.io.quarantine): a text column
            original = original.cast(text.type)
        merged = pc.if_else(keep, text.cast(original.type), original)
        table = table.set_column(table.schema.get_field_index(self.text_column), self.text_column, merged)
        if DROP_REASON in table.schema.names:
            table = table.drop_columns([DROP_REASON])
        return table.append_column(DROP_REASON, reasons)


@dataclass
class HeuristicFilter(FilterAnnotator):
    """One-pass filter for pipelines: kept rows continue, null texts are quarantined, drops are counted.

    Its output never carries ``drop_reason`` (kept rows lose it, quarantined ones call it ``quarantine_reason``),
    so an input's own ``drop_reason`` is set aside around the rules and passes unchanged (``replace_columns``
    has nothing to replace).

    >>> import zephyr
    >>> ds = zephyr.from_items([{"text": "short."}, {"text": "A line of text well over thirty characters."}, {"text": None}])
    >>> ds.map_batches(HeuristicFilter("fineweb"), name="filter").count(executor="inprocess")
    1
    """

    def __call__(self, table: pa.Table) -> BatchOutput:
        aside = (DROP_REASON,) if DROP_REASON in table.schema.names else ()
        annotated = super().__call__(set_aside(aside)(table))
        route = {"column": DROP_REASON, "quarantine": (NULL_TEXT,), "aside": aside}
        kept = Route("kept", **route)(annotated)
        quarantined = Route("quarantined", **route)(annotated)
        return BatchOutput(
            kept=kept.kept,
            quarantined=quarantined if quarantined.num_rows else None,
            dropped={k: v for k, v in kept.dropped.items() if k != NULL_TEXT},
        )


KEPT = "kept"


def summarize_batch(
    table: pa.Table, *, text_column: str = "text", source_column: str | None = "source"
) -> pa.Table:
    """Rows and text bytes per (source, outcome) of one annotated batch (a small table)."""
    source = (
        pl.Series(table.column(source_column)).cast(pl.String).fill_null("(none)")
        if source_column and source_column in table.schema.names
        else pl.Series(["(all)"] * table.num_rows, dtype=pl.String)
    )
    df = pl.DataFrame(
        {
            "source": source,
            "outcome": pl.Series(table.column(DROP_REASON)).cast(pl.String).fill_null(KEPT),
            "bytes": pl.Series(table.column(text_column)).cast(pl.String).str.len_bytes().fill_null(0),
        }
    )
    counts = df.group_by("source", "outcome").agg(rows=pl.len(), bytes=pl.col("bytes").sum())
    return counts.cast({"rows": pl.Int64, "bytes": pl.Int64}).to_arrow()


def merge_summaries(parts: Iterable[pa.Table]) -> dict[str, Any]:
    """Add ``summarize_batch`` outputs up into the report dict (see the module docstring)."""
    schema = {"source": pl.String, "outcome": pl.String, "rows": pl.Int64, "bytes": pl.Int64}
    frames = [pl.DataFrame(schema=schema), *(pl.from_arrow(p) for p in parts if p.num_rows)]
    counts = pl.concat(frames).group_by("source", "outcome").agg(pl.col("rows", "bytes").sum())
    sources: dict[str, dict[str, dict[str, int]]] = {}
    for source, outcome, rows, size in counts.sort("source", "outcome").iter_rows():
        sources.setdefault(source, {})[outcome] = {"rows": rows, "bytes": size}
    by_outcome = counts.group_by("outcome").agg(pl.col("rows", "bytes").sum()).sort("outcome")
    outcomes = {outcome: (rows, size) for outcome, rows, size in by_outcome.iter_rows()}
    dropped = {k: v for k, v in outcomes.items() if k not in (KEPT, NULL_TEXT)}
    totals: dict[str, Any] = {
        "rows_in": sum(rows for rows, _ in outcomes.values()),
        "bytes_in": sum(size for _, size in outcomes.values()),
        "rows_kept": outcomes.get(KEPT, (0, 0))[0],
        "bytes_kept": outcomes.get(KEPT, (0, 0))[1],
        "rows_dropped": sum(rows for rows, _ in dropped.values()),
        "rows_quarantined": outcomes.get(NULL_TEXT, (0, 0))[0],
        "dropped_rows_by_reason": {k: rows for k, (rows, _) in dropped.items()},
        "dropped_bytes_by_reason": {k: size for k, (_, size) in dropped.items()},
    }
    in_parts = totals["rows_kept"] + totals["rows_dropped"] + totals["rows_quarantined"]
    totals["balanced"] = totals["rows_in"] == in_parts
    return {"version": 2, "sources": sources, "totals": totals}
