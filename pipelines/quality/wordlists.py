"""Word lists shipped with the package: per-language stop words and the English bad-words list.

``data/stopwords.json`` (format version 1: ``{"version": 1, "languages": {code: [word, ...]}}``) and
``data/badwords_en.txt`` (one word or phrase per line, ``#`` comments). Both are read once per process.
"""

from __future__ import annotations

import json
from functools import lru_cache
from importlib import resources
from pathlib import Path

from zephyr.errors import ConfigError, InputError

__all__ = ["stop_words", "bad_words", "load_word_list"]

_PKG = "zephyr.pipelines.quality"


@lru_cache(maxsize=1)
def stop_words() -> dict[str, frozenset[str]]:
    """Language code → stop words (the Gopher list for ``en``)."""
    raw = json.loads(resources.files(_PKG).joinpath("data/stopwords.json").read_text("utf-8"))
    if raw.get("version") != 1:
        raise ConfigError(f"data/stopwords.json has version {raw.get('version')!r}, expected 1")
    return {lang: frozenset(words) for lang, words in raw["languages"].items()}


def load_word_list(path: str | Path) -> tuple[str, ...]:
    """Lower-cased entries of a one-per-line word list (blank lines and ``#`` comments skipped)."""
    try:
        text = Path(path).read_text("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"cannot read word list: {exc}", path=str(path)) from exc
    return _parse(text)


def _parse(text: str) -> tuple[str, ...]:
    words = (line.strip().lower() for line in text.splitlines())
    return tuple(sorted({w for w in words if w and not w.startswith("#")}))


@lru_cache(maxsize=1)
def bad_words() -> tuple[str, ...]:
    """The shipped English bad-words list (see the file's header for its origin and licence)."""
    return _parse(resources.files(_PKG).joinpath("data/badwords_en.txt").read_text("utf-8"))
