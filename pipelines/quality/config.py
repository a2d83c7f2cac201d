"""Config dataclasses of the quality package, apart from the kernels so that loading a pipeline config
(``zephyr run --check``, ``zephyr.pipelines.steps``) imports no pyarrow.

``NormalizeConfig`` is what ``zephyr normalize`` and the pipeline's ``normalize`` step (which embeds it:
its keys are this dataclass's fields) run with. ``HeuristicFilterConfig`` holds the rules ``zephyr filter`` and
the ``heuristic_filter`` step apply (default: the package's ``DEFAULT_RULES``); it checks rule names against
the rule modules, imported (with pyarrow) only when a config that names rules is built.
``ClassifierConfig`` is the fastText classifier's, ``PIIConfig`` what ``zephyr pii`` redacts.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from zephyr.pipelines.quality import DEFAULT_RULES

from zephyr.errors import ConfigError
from zephyr.flags import comma_names


@dataclass(frozen=True)
class NormalizeConfig:
    """What ``Normalize`` does. Defaults are safe for code and LaTeX."""

    nfc: bool = True
    """Apply Unicode NFC (never NFKC, which would fold ``²``/``ℝ``/ligatures)."""
    strip_control: bool = True
    """Remove control characters other than tab and newline (and the BOM); ``\\r\\n``/``\\r`` → ``\\n``."""
    collapse_whitespace: bool = True
    """Unicode spaces → ' ', strip line ends, collapse interior runs of 2+ spaces/tabs, ≥3 newlines → 2
    (indentation kept)."""
    fix_mojibake: bool = False
    """Repair UTF-8-read-as-Latin-1 mojibake with ``ftfy.fix_encoding`` (needs the ``quality`` extra)."""


PII_KINDS: tuple[str, ...] = ("email", "ipv6", "ipv4", "phone")
"""The kinds of PII ``zephyr pii`` redacts, in the order their patterns apply (``pii.PII_PATTERNS``)."""


@dataclass(frozen=True)
class PIIConfig:
    """What ``RedactPII`` (``zephyr pii``) redacts and counts."""

    kinds: tuple[str, ...] = field(
        default=PII_KINDS,
        metadata={"parse": lambda text: tuple(comma_names(text)), "metavar": "KINDS", "show_default": False},
    )
    """Comma-separated kinds to redact: email, ipv6, ipv4, phone (applied in that order)."""
    placeholders: dict[str, str] = field(
        default_factory=lambda: {
            "email": "<EMAIL>",
            "ipv6": "<IP_ADDRESS>",
            "ipv4": "<IP_ADDRESS>",
            "phone": "<PHONE_NUMBER>",
        },
        metadata={"flag": False},
    )
    count_columns: bool = True
    """Add NAME_<kind> int32 columns with the per-row counts."""
    column_prefix: str = field(default="pii", metadata={"flag": "--output-column", "metavar": "NAME"})
    """Name the count columns NAME_<kind>: another prefix keeps an input's own pii_* columns."""

    def __post_init__(self) -> None:
        unknown = set(self.kinds) - set(PII_KINDS)
        if unknown:
            raise ConfigError(f"unknown PII kind(s) {sorted(unknown)}; choose from {list(PII_KINDS)}")


@dataclass(frozen=True)
class ClassifierConfig:
    """fastText supervised settings and label names."""

    positive_label: str = field(default="hq", metadata={"flag": "--positive"})
    """The label of good documents (its probability is the score)."""
    negative_label: str = field(default="lq", metadata={"flag": "--negative"})
    """The label of bad documents."""
    max_chars: int = 20_000
    epoch: int = 10
    """Training epochs."""
    lr: float = 0.1
    """fastText learning rate (0.2 diverged to NaN on the medium quality set)."""
    dim: int = 32
    word_ngrams: int = 2
    min_count: int = 2
    bucket: int = 200_000
    """Hash buckets for word n-grams; the model holds bucket × dim floats (200k × 32 × 4 B ≈ 26 MB)."""
    threads: int = 1
    """fastText threads; 1 gives bit-identical models across runs."""
    seed: int = 0


@dataclass(frozen=True)
class HeuristicFilterConfig:
    """Which heuristic rules a filter applies and how (``filters.RULE_SETS``; docs/quality.md)."""

    rules: list[str] = field(default_factory=lambda: list(DEFAULT_RULES), metadata={"parse": comma_names})
    """Rule families, applied in order; each row gets the first rule it fails: gopher, gopher_quality,
    gopher_repetition, c4, fineweb, url (URL normalization, invalid URLs, --url-blocklist); on the command line
    comma-separated (default: gopher,c4,fineweb)."""
    overrides: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Thresholds per family, e.g. ``{c4: {min_sentences: 3}}`` (see docs/quality.md)."""
    default_lang: str = "en"
    """Language assumed for rows without a ``lang`` value (stop words, word splitting)."""

    def __post_init__(self) -> None:
        # the rule modules need pyarrow: imported only to check a config that names rules
        from zephyr.pipelines.quality.filters import build_rule_families

        build_rule_families(self.rules, **self.overrides)
