"""The heuristic rule families (Gopher, C4, FineWeb), their word lists, and the shape they share.

A rule family (``GopherQuality``, ``GopherRepetition``, ``C4Quality``, ``FineWebQuality``) is a frozen
dataclass of thresholds with one method, ``evaluate(texts, langs) -> Verdict``: it computes its per-document
statistics column-wise for the whole batch and returns, in rule order, a boolean "fails" mask per reason.
``annotate_drop_reasons`` (filters.py) gives each row the first reason it fails, so per-reason drop counts are
exclusive and add up: ``rows_in = kept + Σ dropped[reason] + quarantined``.

Reason strings name the failing condition (``gopher_too_few_stop_words``), never the passing one.
A threshold set to ``None`` disables its rule.

**Word lists** shipped with the package: per-language stop words and the English bad-words list.

``data/stopwords.json`` (format version 1: ``{"version": 1, "languages": {code: [word, ...]}}``) and
``data/badwords_en.txt`` (one word or phrase per line, ``#`` comments). Both are read once per process.

**Gopher** quality and repetition rules (Rae et al. 2021, "Scaling Language Models", App. A, Table A1).

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

**C4** rules (Raffel et al. 2020, §2.2 "Colossal Clean Crawled Corpus"), line cleaning included.

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

**FineWeb** quality rules (Penedo et al. 2024, "The FineWeb Datasets", §3.5 custom filters).

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

import json
import re
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources
from typing import ClassVar, Protocol

import numpy as np
import polars as pl
from zephyr.pipelines.quality._text import NO_SPACE_LANGUAGES
from zephyr.pipelines.quality.ngrams import (
    NgramCounts,
    duplicate_ngram_char_fraction,
    flat_words,
    top_ngram_char_fraction,
)

from zephyr.errors import ConfigError


@dataclass
class Verdict:
    """One rule family's result for a batch of non-null texts."""

    reasons: list[tuple[str, np.ndarray]] = field(default_factory=list)
    """(reason, fails[bool, rows]) in the order the rules are checked."""
    text: pl.Series | None = None
    """Rewritten texts (e.g. C4 line cleaning) for the rows that pass, or None when unchanged."""
    counters: dict[str, int] = field(default_factory=dict)
    """Extra counts, e.g. lines removed by a line-level rule."""

    def add(self, reason: str, fails: np.ndarray | pl.Series) -> None:
        """Append a rule's result: True where a row fails it."""
        self.reasons.append(
            (reason, np.asarray(fails.to_numpy() if hasattr(fails, "to_numpy") else fails, bool))
        )


class RuleFamily(Protocol):
    name: str

    def evaluate(self, texts: pl.Series, langs: pl.Series) -> Verdict: ...


_COMPARE = {"<": np.less, "<=": np.less_equal, ">": np.greater, ">=": np.greater_equal}


def check_limits(
    family: object,
    rules: tuple[tuple[str, str, str], ...],
    stats: dict[str, np.ndarray],
    into: Verdict | None = None,
) -> Verdict:
    """A family's threshold rules, in order: ``(reason, field, op)`` fails the rows whose statistic (``stats``
    under the field's name less its ``min_``/``max_`` prefix) is ``op`` the family's ``field`` value. A field
    set to None turns its rule off; a NaN statistic (not applicable: no word, no line, a language the word
    rules skip) never fails a row."""
    v = into if into is not None else Verdict()
    for reason, key, op in rules:
        limit = getattr(family, key)
        if limit is not None:
            v.add(reason, _COMPARE[op](np.asarray(stats[key.split("_", 1)[1]], dtype=float), limit))
    return v


_PKG = "zephyr.pipelines.quality"


@lru_cache(maxsize=1)
def stop_words() -> dict[str, frozenset[str]]:
    """Language code → stop words (the Gopher list for ``en``)."""
    raw = json.loads(resources.files(_PKG).joinpath("data/stopwords.json").read_text("utf-8"))
    if raw.get("version") != 1:
        raise ConfigError(f"data/stopwords.json has version {raw.get('version')!r}, expected 1")
    return {lang: frozenset(words) for lang, words in raw["languages"].items()}


@lru_cache(maxsize=1)
def bad_words() -> tuple[str, ...]:
    """The shipped English bad-words list (see the file's header for its origin and licence)."""
    lines = resources.files(_PKG).joinpath("data/badwords_en.txt").read_text("utf-8").splitlines()
    return tuple(sorted({w for w in (line.strip().lower() for line in lines) if w and not w.startswith("#")}))


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

    rules: ClassVar[tuple[tuple[str, str, str], ...]] = (
        ("gopher_too_few_words", "min_words", "<"),
        ("gopher_too_many_words", "max_words", ">"),
        ("gopher_mean_word_too_short", "min_mean_word_length", "<"),
        ("gopher_mean_word_too_long", "max_mean_word_length", ">"),
        ("gopher_too_many_hashes", "max_hash_word_ratio", ">"),
        ("gopher_too_many_ellipses", "max_ellipsis_word_ratio", ">"),
        ("gopher_too_many_bullet_lines", "max_bullet_line_ratio", ">"),
        ("gopher_too_many_ellipsis_lines", "max_ellipsis_line_ratio", ">"),
        ("gopher_too_few_alpha_words", "min_alpha_word_ratio", "<"),
        ("gopher_too_few_stop_words", "min_stop_words", "<"),
    )
    """(reason, threshold field, failing comparison) in the order rows are checked (``check_limits``)."""

    def evaluate(self, texts: pl.Series, langs: pl.Series) -> Verdict:
        el = pl.element()
        tokens = texts.str.extract_all(r"\S+")
        n_words = tokens.list.eval(el.str.contains(_WORDLIKE)).list.sum()
        word_chars = tokens.list.eval(
            pl.when(el.str.contains(_WORDLIKE)).then(el.str.len_chars()).otherwise(0)
        ).list.sum()
        lines = _nonblank_lines(texts)
        # a statistic of words is NaN (never fails) where the language skips the word rules
        words = np.where(_word_rules_apply(langs, self.skip_word_rules_for), 1.0, np.nan)
        stats = {
            "words": n_words.cast(pl.Float64).to_numpy() * words,
            "mean_word_length": _ratio(word_chars, n_words) * words,
            "hash_word_ratio": _ratio(texts.str.count_matches("#", literal=True), n_words) * words,
            "ellipsis_word_ratio": _ratio(texts.str.count_matches(_ELLIPSIS), n_words) * words,
            "bullet_line_ratio": _ratio(
                lines.list.eval(el.str.contains(_BULLET)).list.sum(), lines.list.len()
            ),
            "ellipsis_line_ratio": _ratio(
                lines.list.eval(el.str.contains(rf"(?:{_ELLIPSIS})\s*$")).list.sum(), lines.list.len()
            ),
            "alpha_word_ratio": _ratio(
                tokens.list.eval(el.str.contains(r"\p{L}")).list.sum(), tokens.list.len()
            )
            * words,
        }
        if self.min_stop_words is not None:  # the one join of the family: only when its rule is on
            count, has_list = _count_stop_words(tokens, langs)
            stats["stop_words"] = np.where(has_list, count, np.nan) * words
        return check_limits(self, self.rules, stats)


def _duplicate_elements(parts: pl.Series, strip: bool = False) -> tuple[pl.Series, pl.Series, pl.Series]:
    """(count of elements, count of repeated elements, characters of repeated elements) per row; ``strip``:
    of the elements stripped, the empty ones left out."""
    if strip:
        parts = parts.list.eval(pl.element().str.strip_chars()).list.eval(
            pl.element().filter(pl.element() != "")
        )
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
    rules: ClassVar[tuple[tuple[str, str, str], ...]] = (
        ("gopher_too_many_duplicate_lines", "max_duplicate_line_fraction", ">"),
        ("gopher_too_many_duplicate_paragraphs", "max_duplicate_paragraph_fraction", ">"),
        ("gopher_too_many_duplicate_line_chars", "max_duplicate_line_char_fraction", ">"),
        ("gopher_too_many_duplicate_paragraph_chars", "max_duplicate_paragraph_char_fraction", ">"),
    )
    """The line and paragraph rules (``check_limits``); the n-gram rules follow them."""

    def evaluate(self, texts: pl.Series, langs: pl.Series) -> Verdict:
        total_chars = texts.str.len_chars()
        paragraphs = texts.str.replace_all(r"\n[ \t]*\n\s*", "\uffff").str.split("\uffff")
        n_lines, dup_lines, dup_line_chars = _duplicate_elements(texts.str.split("\n"), strip=True)
        n_par, dup_par, dup_par_chars = _duplicate_elements(paragraphs, strip=True)
        stats = {
            "duplicate_line_fraction": _ratio(dup_lines, n_lines),
            "duplicate_paragraph_fraction": _ratio(dup_par, n_par),
            "duplicate_line_char_fraction": _ratio(dup_line_chars, total_chars),
            "duplicate_paragraph_char_fraction": _ratio(dup_par_chars, total_chars),
        }
        v = check_limits(self, self.rules, stats)
        if self.top_ngram_max_char_fraction or self.duplicate_ngram_max_char_fraction:
            words_apply = _word_rules_apply(langs, self.skip_word_rules_for)
            fw = flat_words(texts.str.to_lowercase().str.extract_all(r"\S+").to_arrow())
            counter = NgramCounts(fw)  # shared: each n reuses the repeated (n-1)-grams as candidates
            for n, limit in self.top_ngram_max_char_fraction:
                v.add(
                    f"gopher_top_{n}gram_too_frequent",
                    (top_ngram_char_fraction(fw, n, counter) > limit) & words_apply,
                )
            for n, limit in self.duplicate_ngram_max_char_fraction:
                v.add(
                    f"gopher_too_many_duplicate_{n}grams",
                    (duplicate_ngram_char_fraction(fw, n, counter) > limit) & words_apply,
                )
        return v


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
            v.add("c4_too_few_sentences", sentences.to_numpy() < self.min_sentences)
        words = bad_words() if self.badwords is None else self.badwords
        if words:
            pattern = r"(?i)\b(?:" + "|".join(re.escape(w).replace(r"\ ", r"\s+") for w in words) + r")\b"
            applies = langs.is_in(sorted(self.badwords_languages)).to_numpy()
            v.add("c4_bad_words", cleaned.str.contains(pattern).fill_null(False).to_numpy() & applies)
        return v


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
    rules: ClassVar[tuple[tuple[str, str, str], ...]] = (
        ("fineweb_too_few_punctuated_lines", "min_punctuated_line_ratio", "<="),
        ("fineweb_too_many_duplicate_line_chars", "max_duplicate_line_char_ratio", ">="),
        ("fineweb_too_many_short_lines", "max_short_line_ratio", ">="),
        ("fineweb_too_many_newlines", "max_newline_word_ratio", ">"),
    )
    """After ``fineweb_empty`` (no non-blank line), in this order (``check_limits``)."""

    def evaluate(self, texts: pl.Series, langs: pl.Series) -> Verdict:
        el = pl.element()
        punct = "[" + TERMINAL_PUNCTUATION.replace("\\", "\\\\").replace("]", "\\]") + "]$"
        lines = _nonblank_lines(texts)
        n_lines, _, dup_chars = _duplicate_elements(lines)
        newlines = texts.str.count_matches("\n", literal=True)
        v = Verdict()
        v.add("fineweb_empty", n_lines.to_numpy() == 0)
        stats = {
            "punctuated_line_ratio": _ratio(
                lines.list.eval(el.str.strip_chars_end().str.contains(punct)).list.sum(), n_lines
            ),
            "duplicate_line_char_ratio": _ratio(dup_chars, texts.str.len_chars() - newlines),
            "short_line_ratio": _ratio(
                lines.list.eval(el.str.len_chars() <= self.short_line_chars).list.sum(), n_lines
            ),
            "newline_word_ratio": _ratio(newlines, texts.str.count_matches(r"\S+")),
        }
        return check_limits(self, self.rules, stats, v)
