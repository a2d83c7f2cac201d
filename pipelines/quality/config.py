"""Config dataclasses of the quality package, apart from the kernels so that loading a pipeline config
(``zephyr run --check``, ``zephyr.pipelines.steps``) imports no pyarrow.

``NormalizeConfig`` is what ``zephyr normalize`` and the pipeline's ``normalize`` step (which embeds it:
its keys are this dataclass's fields) run with. ``DEFAULT_RULES`` are the heuristic rule sets that
``zephyr filter``, the ``heuristic_filter`` step and the filter batch ops apply unless told otherwise (the
rules' own config, which checks names against the rule modules, is ``filter_config.HeuristicFilterConfig``).
``ClassifierConfig`` is the fastText classifier's, ``PIIConfig`` what ``zephyr pii`` redacts.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from zephyr.errors import ConfigError

DEFAULT_RULES: tuple[str, ...] = ("gopher", "c4", "fineweb")
"""The default heuristic rule sets (names of ``filters.RULE_SETS``), in the order they are applied."""


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


def _names(text: str) -> tuple[str, ...]:
    return tuple(name.strip() for name in text.split(",") if name.strip())


@dataclass(frozen=True)
class PIIConfig:
    """What ``RedactPII`` (``zephyr pii``) redacts and counts."""

    kinds: tuple[str, ...] = field(
        default=PII_KINDS, metadata={"parse": _names, "metavar": "KINDS", "show_default": False}
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
