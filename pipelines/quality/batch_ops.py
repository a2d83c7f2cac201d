"""Batch ops: the plain functions of this package as picklable ``Dataset.map_batches`` callables.

Each batch op is a small dataclass holding only configuration (so it pickles cheaply and fingerprints
stably); models and indexes load lazily on the first batch of each task. Ops that remove rows return a
``zephyr.BatchOutput`` so the engine accounts ``rows_in = rows_out + rows_dropped + rows_quarantined``, with
drops counted by reason; rule counters go to ``zephyr.counters``.

>>> import zephyr
>>> from zephyr.pipelines.quality.batch_ops import HeuristicFilter
>>> ds = zephyr.from_items([{"text": "short."}, {"text": "A line of text well over thirty characters."}, {"text": None}])
>>> ds.map_batches(HeuristicFilter("fineweb"), name="filter").count(executor="inprocess")
1
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from zephyr.pipelines.quality._text import text_array
from zephyr.pipelines.quality.decontaminate import (
    EvalNgramIndex,
    added_columns,
    annotated,
    contamination,
)
from zephyr.pipelines.quality.filters import (
    DEFAULT_RULES,
    DROP_REASON,
    NULL_TEXT,
    REJECT_REASON,
    annotate_drop_reasons,
    build_rule_families,
)
from zephyr.pipelines.quality.langid import language_drop_reasons
from zephyr.pipelines.quality.normalize import NormalizeConfig, normalize_text
from zephyr.pipelines.quality.pii import PIIConfig, count_columns, redact_pii_array, with_redactions

from zephyr import counters
from zephyr.config import check_removal_mode
from zephyr.io.added_columns import RenameColumns, check_added_columns, set_aside
from zephyr.ops import BatchOutput

__all__ = [
    "Normalize",
    "FilterAnnotator",
    "HeuristicFilter",
    "RouteByReason",
    "reason_aside",
    "LanguageFilter",
    "RedactPII",
    "Decontaminate",
]


def _count_reasons(reasons: pa.Array) -> dict[str, int]:
    vc = pc.value_counts(reasons.drop_null())
    return {str(v["values"]): int(v["counts"]) for v in vc.to_pylist()}


@dataclass
class Normalize:
    config: NormalizeConfig = field(default_factory=NormalizeConfig)
    text_column: str = "text"

    def __call__(self, table: pa.Table) -> pa.Table:
        """Normalized ``table``; counts ``normalize/rows_rewritten`` (texts that changed) and
        ``normalize/bytes_removed`` (UTF-8 bytes fewer), so a report shows what normalization did."""
        out = normalize_text(table, self.config, text_column=self.text_column)
        before, after = table.column(self.text_column), out.column(self.text_column)
        if table.num_rows and not pa.types.is_null(before.type):
            changed = pc.sum(pc.fill_null(pc.not_equal(before, after.cast(before.type)), False)).as_py() or 0
            removed = (pc.sum(pc.binary_length(before)).as_py() or 0) - (
                pc.sum(pc.binary_length(after)).as_py() or 0
            )
            counters.increment("normalize/rows_rewritten", int(changed))
            counters.increment("normalize/bytes_removed", int(removed))
        return out


@dataclass
class FilterAnnotator:
    """Adds ``drop_reason`` (null = kept, ``null_text`` = quarantine) and writes cleaned text for kept rows.

    An input that has a ``drop_reason`` of its own fails unless ``replace_columns`` (``zephyr.io.added_columns``);
    to keep it, set it aside around the filter (``zephyr.io.added_columns.set_aside``)."""

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
        for name, n in _count_reasons(reasons).items():
            counters.increment(f"rule/{name}", n)
        for name, n in extra.items():
            counters.increment(name, n)
        keep = pc.is_null(reasons)
        original = table.column(self.text_column)
        if pa.types.is_null(
            original.type
        ):  # no value at all (see zephyr.io.text_column): becomes a text column
            original = original.cast(text.type)
        merged = pc.if_else(keep, text.cast(original.type), original)
        table = table.set_column(table.schema.get_field_index(self.text_column), self.text_column, merged)
        if DROP_REASON in table.schema.names:
            table = table.drop_columns([DROP_REASON])
        return table.append_column(DROP_REASON, reasons)


@dataclass
class RouteByReason:
    """Selects one outcome of annotated rows: ``kept`` (drops the reason column), ``dropped`` or ``quarantined``.

    The ``kept`` route reports every other row to the engine as dropped by its reason, so that stage's
    stats show the per-rule counts. ``reason_column`` names the reason column of the dropped rows (an
    existing column of that name is replaced: the command checked that it may); ``aside`` lists input
    columns ``set_aside`` moved out of the filter's way, restored on every route."""

    outcome: str = "kept"
    reason_column: str = DROP_REASON
    aside: tuple[str, ...] = ()

    def __call__(self, table: pa.Table) -> BatchOutput | pa.Table:
        out = self._route(table)
        if self.aside:
            restore = set_aside(self.aside, restore=True)
            if isinstance(out, BatchOutput):
                return BatchOutput(kept=restore(out.kept), dropped=out.dropped)
            return restore(out)
        return out

    def _route(self, table: pa.Table) -> BatchOutput | pa.Table:
        reasons = table.column(DROP_REASON)
        quarantine = pc.fill_null(pc.equal(reasons, NULL_TEXT), False)
        if self.outcome == "kept":
            keep = pc.is_null(reasons)
            return BatchOutput(
                kept=table.filter(keep).drop_columns([DROP_REASON]),
                dropped=_count_reasons(
                    reasons.combine_chunks() if isinstance(reasons, pa.ChunkedArray) else reasons
                ),
            )
        if self.outcome == "dropped":
            dropped = table.filter(pc.and_(pc.is_valid(reasons), pc.invert(quarantine)))
            if self.reason_column == DROP_REASON:
                return dropped
            return RenameColumns(((DROP_REASON, self.reason_column),), replace=True)(dropped)
        if self.outcome == "quarantined":
            q = table.filter(quarantine)
            return q.rename_columns([REJECT_REASON if n == DROP_REASON else n for n in q.schema.names])
        raise ValueError(f"unknown outcome {self.outcome!r}")


def reason_aside(reason_column: str) -> tuple[str, ...]:
    """The input columns to set aside around ``FilterAnnotator`` and restore at routing (``RouteByReason``'s
    ``aside``): an input's own ``drop_reason`` when the dropped rows' reasons go to another column, so that
    it passes unchanged; nothing when they go to ``drop_reason`` (the annotator then refuses an input that
    has one, unless ``replace_columns``).

    >>> reason_aside("drop_reason"), reason_aside("why")
    ((), ('drop_reason',))
    """
    return (DROP_REASON,) if reason_column != DROP_REASON else ()


@dataclass
class HeuristicFilter:
    """One-pass filter for pipelines: kept rows continue, null texts are quarantined, drops are counted.

    Its output never carries ``drop_reason`` (kept rows lose it, quarantined ones call it ``reject_reason``),
    so an input's own ``drop_reason`` is set aside around the rules and passes unchanged."""

    rules: str = ",".join(DEFAULT_RULES)
    overrides: dict[str, dict[str, Any]] = field(default_factory=dict)
    text_column: str = "text"
    lang_column: str | None = "lang"
    default_lang: str = "en"

    def __call__(self, table: pa.Table) -> BatchOutput:
        aside = (DROP_REASON,) if DROP_REASON in table.schema.names else ()
        annotate = FilterAnnotator(
            self.rules, self.overrides, self.text_column, self.lang_column, self.default_lang
        )
        annotated = annotate(set_aside(aside)(table))
        reasons = annotated.column(DROP_REASON).combine_chunks()
        quarantine = pc.fill_null(pc.equal(reasons, NULL_TEXT), False)
        dropped = {k: v for k, v in _count_reasons(reasons).items() if k != NULL_TEXT}
        rejected = annotated.filter(quarantine)
        rejected = rejected.rename_columns(
            [REJECT_REASON if n == DROP_REASON else n for n in rejected.schema.names]
        )
        restore = set_aside(aside, restore=True)
        return BatchOutput(
            kept=restore(annotated.filter(pc.is_null(reasons)).drop_columns([DROP_REASON])),
            rejected=restore(rejected) if rejected.num_rows else None,
            dropped=dropped,
        )


@dataclass
class LanguageFilter:
    """Keeps rows whose predicted language is allowed and confident enough (after ``LanguageIdentifier``)."""

    languages: tuple[str, ...] | None = None
    min_score: float = 0.0
    lang_column: str = "lang"
    score_column: str = "lang_score"

    def reasons(self, table: pa.Table) -> pa.Array:
        """Per-row drop reason (null: kept); the report's examples use the same verdict."""
        return language_drop_reasons(
            table, self.languages, self.min_score, self.lang_column, self.score_column
        )

    def __call__(self, table: pa.Table) -> BatchOutput:
        reasons = self.reasons(table)
        return BatchOutput(kept=table.filter(pc.is_null(reasons)), dropped=_count_reasons(reasons))


@dataclass
class RedactPII:
    """``redact_pii`` as a batch op, counting matches per kind (``pii/<kind>``) with or without count columns.

    The counts come from the arrays, not from written columns, so ``count_columns=False`` leaves an input's
    own ``pii_*`` columns alone; with count columns, an input that has them fails unless ``replace_columns``."""

    config: PIIConfig = field(default_factory=PIIConfig)
    text_column: str = "text"
    replace_columns: bool = False

    def __call__(self, table: pa.Table) -> pa.Table:
        check_added_columns(
            table.schema.names, count_columns(self.config), replace_columns=self.replace_columns
        )
        texts, counts = redact_pii_array(text_array(table, self.text_column), self.config)
        for kind, per_row in counts.items():
            counters.increment(f"pii/{kind}", int(pc.sum(per_row).as_py() or 0))
        return with_redactions(table, texts, counts, self.config, self.text_column)


@dataclass
class Decontaminate:
    """Annotates (``mode="annotate"``) or removes (``mode="remove"``) rows sharing an n-gram with the eval index
    file.

    Annotate mode adds ``output_column`` and ``<output_column>_ngrams``; an input that has them fails unless
    ``replace_columns`` (``zephyr.io.added_columns``). Remove mode adds nothing."""

    index_path: str
    mode: str = "remove"
    text_column: str = "text"
    replace_columns: bool = False
    output_column: str = "contaminated"
    _index: EvalNgramIndex | None = field(default=None, repr=False, compare=False)

    def __post_init__(self) -> None:
        self.mode = check_removal_mode(self.mode)

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_index": None}

    @property
    def columns(self) -> tuple[str, ...]:
        """The columns this step adds."""
        return added_columns(self.output_column) if self.mode == "annotate" else ()

    def _counts(self, table: pa.Table) -> Any:
        """Matching n-grams per row (numpy), counted as ``decontam/contaminated_rows``."""
        if self._index is None:
            self._index = EvalNgramIndex.load(self.index_path)
        counts = contamination(table.column(self.text_column).combine_chunks(), self._index)
        counters.increment("decontam/contaminated_rows", int((counts > 0).sum()))
        return counts

    def reasons(self, table: pa.Table) -> pa.Array:
        """Per-row drop reason of remove mode (null: kept), for ``--dropped-output`` (``zephyr.dropped``)."""
        hit = self._counts(table) > 0
        reason = f"decontam_shares_{self._index.n}gram"
        return pc.if_else(pa.array(hit, pa.bool_()), pa.scalar(reason), pa.scalar(None, pa.string()))

    def __call__(self, table: pa.Table) -> BatchOutput | pa.Table:
        check_added_columns(table.schema.names, self.columns, replace_columns=self.replace_columns)
        counts = self._counts(table)
        hit = counts > 0
        if self.mode == "annotate":
            return annotated(table, counts, self.output_column)
        reason = f"decontam_shares_{self._index.n}gram"
        return BatchOutput(
            kept=table.filter(pa.array(~hit)), dropped={reason: int(hit.sum())} if hit.any() else {}
        )
