"""``HeuristicFilterConfig``: which heuristic rules ``zephyr filter`` and the pipeline's ``heuristic_filter``
step (which embeds it) apply, and how; declared and checked once.

Its own module, apart from ``config.py``: checking rule names imports the rule modules (``filters``, which
need pyarrow and import ``config.DEFAULT_RULES``), lazily, when a config that names rules is built.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from zephyr.pipelines.quality.config import DEFAULT_RULES

from zephyr.config import FieldError
from zephyr.errors import ConfigError


@dataclass(frozen=True)
class HeuristicFilterConfig:
    """Which heuristic rules a filter applies and how (``filters.RULE_SETS``; docs/quality.md)."""

    rules: list[str] = field(default_factory=lambda: list(DEFAULT_RULES))
    """Rule families, applied in order; each row gets the first rule it fails."""
    overrides: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Thresholds per family, e.g. ``{c4: {min_sentences: 3}}`` (see docs/quality.md)."""
    default_lang: str = "en"
    """Language assumed for rows without a ``lang`` value (stop words, word splitting)."""

    def __post_init__(self) -> None:
        # the rule modules need pyarrow: imported only to check a config that names rules
        from zephyr.pipelines.quality.filters import RULE_SETS, build_rule_families, unknown_rule_sets

        allowed = ", ".join(sorted(RULE_SETS))
        if not self.rules:
            raise FieldError("rules", f"give at least one rule family; allowed: {allowed}")
        bad = unknown_rule_sets(self.rules)
        if bad:
            raise FieldError("rules", f"unknown rule family {bad[0]!r}; allowed: {allowed}")
        try:
            build_rule_families(self.rules, **self.overrides)
        except TypeError as exc:
            raise FieldError("overrides", f"{exc}") from None
        except ConfigError as exc:
            raise FieldError("overrides", str(exc)) from None

    def annotator(self, text_column: str, lang_column: str | None, replace_columns: bool) -> Any:
        """The batch op writing each row's first failing rule (``filters.FilterAnnotator``): the one that
        ``zephyr filter`` and the ``heuristic_filter`` step both run."""
        from zephyr.pipelines.quality.filters import FilterAnnotator

        rules = ",".join(self.rules)
        return FilterAnnotator(
            rules, self.overrides, text_column, lang_column, self.default_lang, replace_columns
        )
