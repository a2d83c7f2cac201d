"""Gopher quality and repetition rules (Rae et al. 2021, "Scaling Language Models", App. A, Table A1).

Statistics are computed for the whole batch at once: the text is split into whitespace tokens and
non-blank lines once (polars ``str.extract_all`` / ``str.split``), and per-token/per-line tests run with
``list.eval`` over the flattened values; stop words are counted by one semi-join of (row, language, word)
against the stop-word table; n-gram repetition uses ngrams.py's batch hashing. No per-document Python.

Definitions (where the paper leaves room):
- a *token* is a run of non-whitespace; a *word* is a token with at least one letter or digit (tokens of
  pure punctuation do not count as words, as in datatrove); word length is in characters;
- *lines* are the non-blank lines; *paragraphs* are separated by blank lines;
- symbol ratios count ``#`` and ellipses (``...`` or ``…``) per word;
- the stop-word rule counts occurrences of the language's stop words among lower-cased tokens; rows whose
  language has no list are not checked by it;
- rows whose language is written without spaces (``NO_SPACE_LANGUAGES``: zh, ja, th, …) skip all
  word-based rules, which would otherwise drop every such document as "too few words";
- duplicate lines/paragraphs: the occurrences after the first; their count over all lines/paragraphs, and
  their characters over the document's characters;
- n-gram fractions are over the characters of the (lower-cased) words; see ngrams.py.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import polars as pl
from zephyr.pipelines.quality._text import NO_SPACE_LANGUAGES
from zephyr.pipelines.quality.ngrams import (
    NgramCounts,
    duplicate_ngram_char_fraction,
    flat_words,
    top_ngram_char_fraction,
)
from zephyr.pipelines.quality.rules import Verdict, fails_above, fails_below
from zephyr.pipelines.quality.wordlists import stop_words

__all__ = ["GopherQuality", "GopherRepetition"]

_WORDLIKE = r"[\p{L}\p{N}]"
_BULLET = r"^\s*[•‣◦●○▪▫■□➢➤►\-\*–—·]"
_ELLIPSIS = r"\.\.\.|…"


def _nonblank_lines(texts: pl.Series) -> pl.Series:
    return texts.str.split("\n").list.eval(pl.element().filter(pl.element().str.strip_chars() != ""))


def _ratio(num: pl.Series, den: pl.Series) -> np.ndarray:
    n = num.cast(pl.Float64).to_numpy()
    d = den.cast(pl.Float64).to_numpy()
    return np.divide(n, d, out=np.full(len(n), np.nan), where=d > 0)


def _word_rules_apply(langs: pl.Series, skip: frozenset[str]) -> np.ndarray:
    return ~langs.is_in(sorted(skip)).to_numpy() if skip else np.ones(len(langs), dtype=bool)


def _count_stop_words(tokens: pl.Series, langs: pl.Series) -> tuple[np.ndarray, np.ndarray]:
    """(occurrences of the row language's stop words, whether that language has a list) per row."""
    table = stop_words()
    stop = pl.DataFrame(
        [(lang, w) for lang, words in table.items() for w in words], schema=["lang", "word"], orient="row"
    )
    rows = pl.DataFrame({"row": np.arange(len(tokens)), "lang": langs, "word": tokens})
    hits = (
        rows.filter(pl.col("lang").is_in(list(table)))
        .explode("word")
        .with_columns(pl.col("word").str.to_lowercase())
        .join(stop, on=["lang", "word"], how="semi")
        .group_by("row")
        .len()
    )
    counts = np.zeros(len(tokens), dtype=np.int64)
    counts[hits["row"].to_numpy()] = hits["len"].to_numpy()
    return counts, langs.is_in(list(table)).to_numpy()


@dataclass(frozen=True)
class GopherQuality:
    """Gopher quality rules; defaults are the paper's."""

    name = "gopher_quality"
    min_words: int | None = 50
    max_words: int | None = 100_000
    min_mean_word_length: float | None = 3.0
    max_mean_word_length: float | None = 10.0
    max_hash_word_ratio: float | None = 0.1
    max_ellipsis_word_ratio: float | None = 0.1
    max_bullet_line_ratio: float | None = 0.9
    max_ellipsis_line_ratio: float | None = 0.3
    min_alpha_word_ratio: float | None = 0.8
    """Share of tokens that must contain a letter."""
    min_stop_words: int | None = 2
    skip_word_rules_for: frozenset[str] = NO_SPACE_LANGUAGES

    def reasons(self) -> list[str]:
        return [
            "gopher_too_few_words",
            "gopher_too_many_words",
            "gopher_mean_word_too_short",
            "gopher_mean_word_too_long",
            "gopher_too_many_hashes",
            "gopher_too_many_ellipses",
            "gopher_too_many_bullet_lines",
            "gopher_too_many_ellipsis_lines",
            "gopher_too_few_alpha_words",
            "gopher_too_few_stop_words",
        ]

    def evaluate(self, texts: pl.Series, langs: pl.Series) -> Verdict:
        tokens = texts.str.extract_all(r"\S+")
        is_word = tokens.list.eval(pl.element().str.contains(_WORDLIKE))
        n_tokens = tokens.list.len()
        n_words = is_word.list.sum()
        word_chars = tokens.list.eval(
            pl.when(pl.element().str.contains(_WORDLIKE)).then(pl.element().str.len_chars()).otherwise(0)
        ).list.sum()
        alpha_tokens = tokens.list.eval(pl.element().str.contains(r"\p{L}")).list.sum()
        lines = _nonblank_lines(texts)
        n_lines = lines.list.len()
        bullet_lines = lines.list.eval(pl.element().str.contains(_BULLET)).list.sum()
        ellipsis_lines = lines.list.eval(pl.element().str.contains(rf"(?:{_ELLIPSIS})\s*$")).list.sum()

        words_apply = _word_rules_apply(langs, self.skip_word_rules_for)
        nw = n_words.cast(pl.Float64).to_numpy()

        def on_words(mask: np.ndarray | None) -> np.ndarray | None:
            return None if mask is None else mask & words_apply

        v = Verdict()
        v.add("gopher_too_few_words", on_words(fails_below(nw, self.min_words)))
        v.add("gopher_too_many_words", on_words(fails_above(nw, self.max_words)))
        mean_len = _ratio(word_chars, n_words)
        v.add("gopher_mean_word_too_short", on_words(fails_below(mean_len, self.min_mean_word_length)))
        v.add("gopher_mean_word_too_long", on_words(fails_above(mean_len, self.max_mean_word_length)))
        hashes = texts.str.count_matches("#", literal=True)
        v.add(
            "gopher_too_many_hashes", on_words(fails_above(_ratio(hashes, n_words), self.max_hash_word_ratio))
        )
        ellipses = texts.str.count_matches(_ELLIPSIS)
        v.add(
            "gopher_too_many_ellipses",
            on_words(fails_above(_ratio(ellipses, n_words), self.max_ellipsis_word_ratio)),
        )
        v.add(
            "gopher_too_many_bullet_lines",
            fails_above(_ratio(bullet_lines, n_lines), self.max_bullet_line_ratio),
        )
        v.add(
            "gopher_too_many_ellipsis_lines",
            fails_above(_ratio(ellipsis_lines, n_lines), self.max_ellipsis_line_ratio),
        )
        v.add(
            "gopher_too_few_alpha_words",
            on_words(fails_below(_ratio(alpha_tokens, n_tokens), self.min_alpha_word_ratio)),
        )
        if self.min_stop_words is not None:
            count, has_list = _count_stop_words(tokens, langs)
            v.add("gopher_too_few_stop_words", on_words((count < self.min_stop_words) & has_list))
        return v


def _duplicate_elements(parts: pl.Series) -> tuple[pl.Series, pl.Series, pl.Series]:
    """(count of elements, count of repeated elements, characters of repeated elements) per row."""
    dup = parts.list.eval(pl.element().is_first_distinct().not_())
    dup_chars = parts.list.eval(
        pl.when(pl.element().is_first_distinct()).then(0).otherwise(pl.element().str.len_chars())
    )
    return parts.list.len(), dup.list.sum(), dup_chars.list.sum()


@dataclass(frozen=True)
class GopherRepetition:
    """Gopher repetition rules (Table A1 thresholds)."""

    name = "gopher_repetition"
    max_duplicate_line_fraction: float | None = 0.30
    max_duplicate_paragraph_fraction: float | None = 0.30
    max_duplicate_line_char_fraction: float | None = 0.20
    max_duplicate_paragraph_char_fraction: float | None = 0.20
    top_ngram_max_char_fraction: tuple[tuple[int, float], ...] = ((2, 0.20), (3, 0.18), (4, 0.16))
    duplicate_ngram_max_char_fraction: tuple[tuple[int, float], ...] = (
        (5, 0.15),
        (6, 0.14),
        (7, 0.13),
        (8, 0.12),
        (9, 0.11),
        (10, 0.10),
    )
    skip_word_rules_for: frozenset[str] = NO_SPACE_LANGUAGES

    def reasons(self) -> list[str]:
        return [
            "gopher_too_many_duplicate_lines",
            "gopher_too_many_duplicate_paragraphs",
            "gopher_too_many_duplicate_line_chars",
            "gopher_too_many_duplicate_paragraph_chars",
            *(f"gopher_top_{n}gram_too_frequent" for n, _ in self.top_ngram_max_char_fraction),
            *(f"gopher_too_many_duplicate_{n}grams" for n, _ in self.duplicate_ngram_max_char_fraction),
        ]

    def evaluate(self, texts: pl.Series, langs: pl.Series) -> Verdict:
        total_chars = texts.str.len_chars()
        lines = (
            texts.str.split("\n")
            .list.eval(pl.element().str.strip_chars())
            .list.eval(pl.element().filter(pl.element() != ""))
        )
        paragraphs = (
            texts.str.replace_all(r"\n[ \t]*\n\s*", "\uffff")
            .str.split("\uffff")
            .list.eval(pl.element().str.strip_chars())
            .list.eval(pl.element().filter(pl.element() != ""))
        )
        n_lines, dup_lines, dup_line_chars = _duplicate_elements(lines)
        n_par, dup_par, dup_par_chars = _duplicate_elements(paragraphs)
        v = Verdict()
        v.add(
            "gopher_too_many_duplicate_lines",
            fails_above(_ratio(dup_lines, n_lines), self.max_duplicate_line_fraction),
        )
        v.add(
            "gopher_too_many_duplicate_paragraphs",
            fails_above(_ratio(dup_par, n_par), self.max_duplicate_paragraph_fraction),
        )
        v.add(
            "gopher_too_many_duplicate_line_chars",
            fails_above(_ratio(dup_line_chars, total_chars), self.max_duplicate_line_char_fraction),
        )
        v.add(
            "gopher_too_many_duplicate_paragraph_chars",
            fails_above(_ratio(dup_par_chars, total_chars), self.max_duplicate_paragraph_char_fraction),
        )
        if self.top_ngram_max_char_fraction or self.duplicate_ngram_max_char_fraction:
            words_apply = _word_rules_apply(langs, self.skip_word_rules_for)
            fw = flat_words(texts.str.to_lowercase().str.extract_all(r"\S+").to_arrow())
            counter = NgramCounts(fw)  # shared: each n reuses the repeated (n-1)-grams as candidates
            for n, limit in self.top_ngram_max_char_fraction:
                v.add(
                    f"gopher_top_{n}gram_too_frequent",
                    fails_above(top_ngram_char_fraction(fw, n, counter), limit) & words_apply,
                )
            for n, limit in self.duplicate_ngram_max_char_fraction:
                v.add(
                    f"gopher_too_many_duplicate_{n}grams",
                    fails_above(duplicate_ngram_char_fraction(fw, n, counter), limit) & words_apply,
                )
        return v
