"""Config dataclasses of the quality package, apart from the kernels so that loading a pipeline config
(``zephyr run --check``, ``zephyr.pipelines.steps``) imports no pyarrow.

``NormalizeConfig`` is what ``zephyr normalize`` and the pipeline's ``normalize`` step (which embeds it:
its keys are this dataclass's fields) run with. ``DEFAULT_RULES`` are the heuristic rule sets that
``zephyr filter``, the ``heuristic_filter`` step and the filter batch ops apply unless told otherwise.
The rules' own config, which checks names against the rule modules, is ``filter_config.HeuristicFilterConfig``.
"""

from __future__ import annotations

from dataclasses import dataclass

DEFAULT_RULES: tuple[str, ...] = ("gopher", "c4", "fineweb")
"""The default heuristic rule sets (names of ``filters.RULE_SETS``), in the order they are applied."""


@dataclass(frozen=True)
class NormalizeConfig:
    """What ``normalize_text`` does. Defaults are safe for code and LaTeX."""

    nfc: bool = True
    """Apply Unicode NFC (never NFKC, which would fold ``²``/``ℝ``/ligatures)."""
    strip_control: bool = True
    """Remove control characters other than tab and newline (and the BOM); ``\\r\\n``/``\\r`` → ``\\n``."""
    collapse_whitespace: bool = True
    """Unicode spaces → ' ', strip line ends, collapse interior runs of 2+ spaces/tabs, ≥3 newlines → 2
    (indentation kept)."""
    fix_mojibake: bool = False
    """Repair UTF-8-read-as-Latin-1 mojibake with ``ftfy.fix_encoding`` (needs the ``quality`` extra)."""
