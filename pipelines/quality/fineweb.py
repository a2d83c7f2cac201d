"""FineWeb quality rules (Penedo et al. 2024, "The FineWeb Datasets", §3.5 custom filters).

Over the non-blank lines of a document (as in datatrove's ``FineWebQualityFilter``):

- ``fineweb_empty``: no non-blank line at all;
- ``fineweb_too_few_punctuated_lines``: the share of lines ending in terminal punctuation is ≤ 0.12;
- ``fineweb_too_many_duplicate_line_chars``: characters in repeated lines (each occurrence after the first)
  over all non-newline characters is ≥ 0.1 — the paper's value; datatrove's default is 0.01;
- ``fineweb_too_many_short_lines``: the share of lines of at most 30 characters is ≥ 0.67;
- ``fineweb_too_many_newlines`` (off by default; datatrove's extra rule): newlines per word > 0.3.

All statistics are polars ``list.eval`` expressions over the batch's lines.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import polars as pl
from zephyr.pipelines.quality.rules import Verdict, fails_above

__all__ = ["FineWebQuality", "TERMINAL_PUNCTUATION"]

TERMINAL_PUNCTUATION = ".!?\"'…。！？｡।॥؟۔፧፨։჻᙮᠃᠉⸮⸼꓿꘎꘏꛳꛷︒﹒﹖﹗！．？｡"
"""Characters that end a sentence in a line (Latin, CJK full stops, Devanagari danda, Arabic, …)."""


@dataclass(frozen=True)
class FineWebQuality:
    name = "fineweb"
    min_punctuated_line_ratio: float | None = 0.12
    """Drop when the ratio is <= this value."""
    max_duplicate_line_char_ratio: float | None = 0.1
    """Drop when the ratio is >= this value (paper: 0.1; datatrove default: 0.01)."""
    max_short_line_ratio: float | None = 0.67
    """Drop when the ratio is >= this value."""
    short_line_chars: int = 30
    max_newline_word_ratio: float | None = None

    def reasons(self) -> list[str]:
        return [
            "fineweb_empty",
            "fineweb_too_few_punctuated_lines",
            "fineweb_too_many_duplicate_line_chars",
            "fineweb_too_many_short_lines",
            "fineweb_too_many_newlines",
        ]

    def evaluate(self, texts: pl.Series, langs: pl.Series) -> Verdict:
        el = pl.element()
        punct = "[" + TERMINAL_PUNCTUATION.replace("\\", "\\\\").replace("]", "\\]") + "]$"
        lines = texts.str.split("\n").list.eval(el.filter(el.str.strip_chars() != ""))
        df = pl.DataFrame({"lines": lines, "text": texts}).select(
            n=pl.col("lines").list.len().cast(pl.Float64),
            punct=pl.col("lines").list.eval(el.str.strip_chars_end().str.contains(punct)).list.sum(),
            short=pl.col("lines").list.eval(el.str.len_chars() <= self.short_line_chars).list.sum(),
            dup_chars=pl.col("lines")
            .list.eval(pl.when(el.is_first_distinct()).then(0).otherwise(el.str.len_chars()))
            .list.sum(),
            chars=pl.col("text").str.len_chars() - pl.col("text").str.count_matches("\n", literal=True),
            newlines=pl.col("text").str.count_matches("\n", literal=True),
            words=pl.col("text").str.count_matches(r"\S+"),
        )

        def ratio(num: str, den: str) -> np.ndarray:
            d = df[den].cast(pl.Float64).to_numpy()
            return np.divide(df[num].cast(pl.Float64).to_numpy(), d, out=np.full(len(d), np.nan), where=d > 0)

        v = Verdict()
        v.add("fineweb_empty", df["n"].to_numpy() == 0)
        if self.min_punctuated_line_ratio is not None:
            r = ratio("punct", "n")
            v.add(
                "fineweb_too_few_punctuated_lines",
                np.nan_to_num(r, nan=np.inf) <= self.min_punctuated_line_ratio,
            )
        v.add(
            "fineweb_too_many_duplicate_line_chars",
            fails_above(ratio("dup_chars", "chars"), self.max_duplicate_line_char_ratio, inclusive=True),
        )
        v.add(
            "fineweb_too_many_short_lines",
            fails_above(ratio("short", "n"), self.max_short_line_ratio, inclusive=True),
        )
        v.add(
            "fineweb_too_many_newlines", fails_above(ratio("newlines", "words"), self.max_newline_word_ratio)
        )
        return v
