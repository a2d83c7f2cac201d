"""zephyr.pipelines.quality: normalization, language ID, heuristic filters, quality classifier, PII, decontamination."""

DEFAULT_RULES: tuple[str, ...] = ("gopher", "c4", "fineweb")
"""The default heuristic rule sets (names of ``filters.RULE_SETS``), in the order they are applied: here, below
both ``config`` (whose ``HeuristicFilterConfig`` checks rule names by importing ``filters``) and ``filters``."""


def comma_names(text: str) -> list[str]:
    """Names from comma-separated text (``"en, de"``), blanks left out: a list flag's parser (here, below
    ``config`` and ``filters``, which both split rule names with it)."""
    return [name.strip() for name in text.split(",") if name.strip()]
