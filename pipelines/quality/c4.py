"""C4 rules (Raffel et al. 2020, §2.2 "Colossal Clean Crawled Corpus"), line cleaning included.

Line level (``clean_lines=True``, as in C4; rewrites the text of the rows that pass): citation markers
(``[1]``, ``[edit]``, ``[citation needed]``) are removed, then a line is kept only if it ends in terminal
punctuation (``.``, ``!``, ``?``, ``"``), has at least ``min_words_per_line`` words, has no word longer than
``max_word_length``, does not mention "javascript" and contains none of the policy phrases.
Page level, in this order: "lorem ipsum" or a curly bracket in a line that would otherwise survive the
punctuation/length checks (as the reference implementation checks them) drops the page; then the cleaned
page needs at least ``min_sentences`` sentences (ends of ``.``/``!``/``?`` runs) and may contain no entry
of the bad-words list as a whole word (English rows only; ``badwords=None`` ships the project's list).

All per-line tests are polars ``list.eval`` expressions over the batch's lines; the bad-words test is one
RE2/Rust regex alternation per batch.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import polars as pl
from zephyr.pipelines.quality.rules import Verdict, fails_below
from zephyr.pipelines.quality.wordlists import bad_words

from zephyr.errors import ConfigError

__all__ = ["C4Quality"]

_CITATION = r"\[\d*\]|\[edit\]|\[citation needed\]"
_POLICY = ("terms of use", "privacy policy", "cookie policy", "uses cookies", "use of cookies", "use cookies")


@dataclass(frozen=True)
class C4Quality:
    """C4 rules; defaults follow the paper and its reference implementation (TFDS ``c4_utils``)."""

    name = "c4"
    clean_lines: bool = True
    """Apply the line-level rules and write the cleaned text (C4 behaviour); False: page rules only."""
    min_words_per_line: int = 5
    max_word_length: int = 1000
    min_sentences: int | None = 3
    drop_lorem_ipsum: bool = True
    drop_curly_bracket: bool = True
    drop_javascript_lines: bool = True
    drop_policy_lines: bool = True
    remove_citations: bool = True
    badwords: tuple[str, ...] | None = None
    """Bad words/phrases (lower case); None = the shipped English list; () disables the rule."""
    badwords_languages: frozenset[str] = frozenset({"en"})
    """Rows whose language is in this set get the bad-words check."""

    def __post_init__(self) -> None:
        if self.min_words_per_line < 0 or self.max_word_length < 1:
            raise ConfigError("min_words_per_line must be >= 0 and max_word_length >= 1")

    def reasons(self) -> list[str]:
        return ["c4_lorem_ipsum", "c4_curly_bracket", "c4_too_few_sentences", "c4_bad_words"]

    def _badwords_pattern(self) -> str | None:
        words = bad_words() if self.badwords is None else self.badwords
        if not words:
            return None
        return r"(?i)\b(?:" + "|".join(re.escape(w).replace(r"\ ", r"\s+") for w in words) + r")\b"

    def evaluate(self, texts: pl.Series, langs: pl.Series) -> Verdict:
        v = Verdict()
        if self.remove_citations and self.clean_lines:
            texts = texts.str.replace_all(_CITATION, "")
        df = pl.DataFrame({"lines": texts.str.split("\n")}).with_columns(
            pl.col("lines").list.eval(pl.element().str.strip_chars())
        )
        el = pl.element()
        lower = el.str.to_lowercase()
        candidate = (
            el.str.contains(r"[.!?\"]$")
            & (el.str.count_matches(r"\S+") >= self.min_words_per_line)
            & ~el.str.contains(rf"\S{{{self.max_word_length + 1},}}")
        )
        js = lower.str.contains("javascript", literal=True) if self.drop_javascript_lines else pl.lit(False)
        policy = lower.str.contains("|".join(_POLICY)) if self.drop_policy_lines else pl.lit(False)
        stats = df.select(
            lorem=pl.col("lines")
            .list.eval((candidate & lower.str.contains("lorem ipsum", literal=True)).any())
            .list.first(),
            curly=pl.col("lines")
            .list.eval((candidate & ~js & el.str.contains("{", literal=True)).any())
            .list.first(),
            kept=pl.col("lines").list.eval(el.filter(candidate & ~js & ~policy)),
            n_lines=pl.col("lines").list.eval(el.filter(el != "")).list.len(),
        )
        if self.drop_lorem_ipsum:
            v.add("c4_lorem_ipsum", stats["lorem"].fill_null(False))
        if self.drop_curly_bracket:
            v.add("c4_curly_bracket", stats["curly"].fill_null(False))
        if self.clean_lines:
            cleaned = stats["kept"].list.join("\n")
            v.counters["c4_lines_removed"] = int((stats["n_lines"] - stats["kept"].list.len()).sum())
            v.text = cleaned
        else:
            cleaned = texts
        if self.min_sentences is not None:
            sentences = cleaned.str.count_matches(r"[.!?]+(?:[\"'”’)\]]*)(?:\s|$)")
            v.add("c4_too_few_sentences", fails_below(sentences, self.min_sentences))
        pattern = self._badwords_pattern()
        if pattern is not None:
            applies = langs.is_in(sorted(self.badwords_languages)).to_numpy()
            v.add("c4_bad_words", cleaned.str.contains(pattern).fill_null(False).to_numpy() & applies)
        return v
