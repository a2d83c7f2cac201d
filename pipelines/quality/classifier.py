"""A fastText quality classifier: train on labelled Parquet, score documents, bucket by quantile.

Training data: a table with a text column and a label column (``hq``/``lq`` by default). Each text becomes
one fastText line ``__label__<label> <text>``: lower-cased, line breaks and whitespace runs → one space,
cut to ``max_chars`` (vectorized Arrow kernels); the file is written with one Arrow CSV-free join.
Training runs ``fasttext.train_supervised`` with a fixed seed (``thread=1`` makes it bit-reproducible), in a
fresh child process (see ``_fit_in_child``).

Held-out report (``evaluate``): precision, recall and F1 of the positive label at threshold 0.5, and ROC AUC
(Mann–Whitney rank statistic, ties averaged) of the positive-label probability.

Scoring adds ``quality_score`` = P(positive label) (float32). ``quantile_edges`` computes bucket edges from
a score sample and ``assign_buckets`` maps scores to ``quality_bucket`` 0 … k-1 (k-1 = best).
"""

from __future__ import annotations

import logging
import os
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from zephyr.pipelines.quality._text import put_column, text_array
from zephyr.pipelines.quality.config import ClassifierConfig
from zephyr.pipelines.quality.langid import load_fasttext_model

from zephyr.errors import ConfigError, SchemaError
from zephyr.io.quarantine import require_text_column
from zephyr.removal import check_added_columns

log = logging.getLogger(__name__)


_DEFAULT = ClassifierConfig()
_NOT_FASTTEXT = ("positive_label", "negative_label", "max_chars")
_NAN_RETRIES = 3
"""Times training restarts at half the learning rate after fastText diverges to NaN."""


def prepare_fasttext_text(texts: pa.Array, max_chars: int) -> pa.Array:
    """Lower-case, one line, whitespace runs collapsed, cut to ``max_chars`` characters; nulls → ''."""
    t = pc.utf8_slice_codeunits(pc.fill_null(texts, ""), 0, max_chars)
    t = pc.utf8_lower(t)
    return pc.utf8_trim_whitespace(pc.replace_substring_regex(t, r"\s+", " "))


def _labels(table: pa.Table, label_column: str, config: ClassifierConfig) -> np.ndarray:
    require_text_column(table.schema, label_column, what="label")
    labels = table.column(label_column)
    allowed = pa.array([config.positive_label, config.negative_label])
    bad = pc.invert(pc.fill_null(pc.is_in(labels, value_set=allowed), False))
    first = pc.index(bad, True).as_py()  # -1: every label is one of the two
    if first >= 0:
        raise SchemaError(
            f"label column {label_column!r} row {first} holds {labels[first].as_py()!r}; "
            f"expected {config.positive_label!r} or {config.negative_label!r} (set the label names)"
        )
    return pc.equal(labels, config.positive_label).to_numpy(zero_copy_only=False)


def roc_auc(y_true: np.ndarray, scores: np.ndarray) -> float:
    """ROC AUC via the Mann–Whitney U statistic with average ranks for ties; NaN if one class is absent."""
    y = np.asarray(y_true, dtype=bool)
    n_pos, n_neg = int(y.sum()), int((~y).sum())
    if n_pos == 0 or n_neg == 0:
        return float("nan")
    import polars as pl

    ranks = pl.Series(np.asarray(scores)).rank("average").to_numpy()  # 1-based, ties share their mean rank
    return float((ranks[y].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg))


def _fit_in_child(model_path: Path, **kwargs: Any) -> None:
    """``fasttext.train_supervised(**kwargs)`` saved to ``model_path``, in a fresh Python process (``python
    -c``). fastText's trainer is not isolated from its host process: after numba-compiled dedup kernels had
    run in the same process, the same seeded single-thread training intermittently hit "Encountered NaN"
    (never in a fresh process); a child also keeps a native crash in fastText from taking the caller down.
    Not a ``multiprocessing`` child: one started by ``spawn`` re-imports the caller's ``__main__``, which
    from a script without a ``__main__`` guard runs the script again. A failure raises ``RuntimeError`` with
    the child's own last line (fastText's ``Encountered NaN.``, a missing file); cost: one interpreter start."""
    import json
    import subprocess
    import sys

    code = (
        "import json, sys, fasttext; model, kwargs = json.load(sys.stdin); "
        "fasttext.train_supervised(**kwargs).save_model(model)"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        input=json.dumps([str(model_path), kwargs]),
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        lines = done.stderr.strip().splitlines() or [f"exit status {done.returncode}, no message"]
        raise RuntimeError(f"fastText training failed: {lines[-1]}")


def train_classifier(
    train: pa.Table,
    output: str | Path,
    config: ClassifierConfig = _DEFAULT,
    *,
    text_column: str = "text",
    label_column: str = "label",
) -> Path:
    """Train a fastText model on ``train`` and save it to ``output`` (``.bin``). Rows with null text are skipped."""
    positive = _labels(train, label_column, config)
    texts = text_array(train, text_column)
    keep = pc.is_valid(texts)
    labels = pa.array(
        np.where(positive, f"__label__{config.positive_label}", f"__label__{config.negative_label}"),
        type=pa.large_string(),
    )
    lines = pc.binary_join_element_wise(
        labels.filter(keep),
        prepare_fasttext_text(texts, config.max_chars).filter(keep),
        pa.scalar(" ", pa.large_string()),
    )
    if len(lines) == 0:
        raise ConfigError("no training rows with text")
    output = Path(output)
    output.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile(
        "w", suffix=".txt", dir=output.parent, delete=False, encoding="utf-8"
    ) as f:
        f.write("\n".join(lines.to_pylist()) + "\n")  # fastText trains from a file only
    tmp = output.with_name(output.name + ".tmp")
    try:
        # the config's training fields under fastText's names (the labels and max_chars are ours)
        names = {"word_ngrams": "wordNgrams", "min_count": "minCount", "threads": "thread"}
        settings = {names.get(k, k): v for k, v in asdict(config).items() if k not in _NOT_FASTTEXT}
        lr = config.lr
        for attempt in range(_NAN_RETRIES + 1):
            try:
                _fit_in_child(tmp, **{**settings, "input": f.name, "lr": lr, "verbose": 0})
                break
            except RuntimeError as exc:  # fastText diverges ("Encountered NaN") when lr is too high
                if "NaN" not in str(exc):
                    raise
                if attempt == _NAN_RETRIES:
                    raise ConfigError(
                        f"fastText training diverged (NaN) even at lr={lr:g}; lower `lr` or `epoch`"
                    ) from exc
                log.warning("fastText diverged at lr=%g; retrying at lr=%g", lr, lr / 2)
                lr /= 2
    finally:
        os.unlink(f.name)
    os.replace(tmp, output)
    log.info("trained quality classifier on %d rows -> %s", len(lines), output)
    return output


def bucket_column(score_column: str) -> str:
    """Where the buckets of ``score_column`` go: ``quality_bucket`` beside the default ``quality_score``,
    else ``<score_column>_bucket`` (so ``--output-column NAME`` moves both)."""
    return "quality_bucket" if score_column == "quality_score" else f"{score_column}_bucket"


@dataclass
class QualityScorer:
    """Callable ``pa.Table -> pa.Table`` adding ``score_column`` (buckets: ``quantile_edges`` and
    ``assign_buckets`` over every score, after).

    A table that already has that column (scored before) fails unless ``replace_columns``: a silent rescore would
    replace scores from another model (``zephyr.removal``)."""

    model_path: str
    config: ClassifierConfig = field(default_factory=ClassifierConfig)
    text_column: str = "text"
    replace_columns: bool = False
    score_column: str = "quality_score"
    """Where P(positive) goes; the buckets go to ``bucket_column(score_column)``."""

    def scores(self, texts: pa.Array) -> np.ndarray:
        model = load_fasttext_model(str(self.model_path))
        labels = model.get_labels()
        target = f"__label__{self.config.positive_label}"
        if target not in labels:
            raise ConfigError(f"model {self.model_path} has labels {labels}, not {target!r}")
        prepared = prepare_fasttext_text(texts, self.config.max_chars).to_pylist()
        # one C++ call for the whole batch; k=-1 returns every label's probability
        pred_labels, probs = model.predict(prepared, k=-1)
        out = np.fromiter(
            (p[list(lab).index(target)] if target in lab else 0.0 for lab, p in zip(pred_labels, probs)),
            dtype=np.float32,
            count=len(prepared),
        )
        return np.clip(out, 0.0, 1.0)

    def __call__(self, table: pa.Table) -> pa.Table:
        check_added_columns(table.schema.names, (self.score_column,), replace_columns=self.replace_columns)
        texts = text_array(table, self.text_column)
        scores = pa.array(self.scores(texts), mask=texts.is_null().to_numpy(zero_copy_only=False))
        return put_column(table, self.score_column, scores)


def quantile_edges(scores: pa.Array | pa.ChunkedArray | np.ndarray, num_buckets: int) -> tuple[float, ...]:
    """The ``num_buckets - 1`` inner quantile edges of the non-null scores."""
    if num_buckets < 1:
        raise ConfigError(f"num_buckets must be >= 1, got {num_buckets}")
    arr = np.asarray(pc.drop_null(scores) if not isinstance(scores, np.ndarray) else scores, dtype=np.float64)
    arr = arr[~np.isnan(arr)]
    if len(arr) == 0 or num_buckets == 1:
        return ()
    return tuple(float(x) for x in np.quantile(arr, np.arange(1, num_buckets) / num_buckets))


def assign_buckets(scores: pa.Array | pa.ChunkedArray, edges: tuple[float, ...]) -> pa.Array:
    """int16 bucket per score: the number of edges ≤ score (0 … len(edges)); nulls stay null."""
    if isinstance(scores, pa.ChunkedArray):
        scores = scores.combine_chunks()
    values = np.asarray(pc.fill_null(scores, 0.0), dtype=np.float64)
    buckets = np.searchsorted(np.asarray(edges, dtype=np.float64), values, side="right").astype(np.int16)
    return pa.array(buckets, mask=scores.is_null().to_numpy(zero_copy_only=False))


def evaluate_classifier(
    test: pa.Table,
    model_path: str | Path,
    config: ClassifierConfig = _DEFAULT,
    *,
    text_column: str = "text",
    label_column: str = "label",
    threshold: float = 0.5,
) -> dict[str, Any]:
    """Precision/recall/F1 at ``threshold`` and ROC AUC on a labelled table."""
    y = _labels(test, label_column, config)
    s = QualityScorer(str(model_path), config, text_column).scores(text_array(test, text_column))
    pred = s >= threshold
    tp = int((pred & y).sum())
    fp = int((pred & ~y).sum())
    fn = int((~pred & y).sum())
    precision = tp / (tp + fp) if tp + fp else 0.0
    recall = tp / (tp + fn) if tp + fn else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return {
        "rows": int(len(y)),
        "positives": int(y.sum()),
        "threshold": threshold,
        "precision": round(precision, 4),
        "recall": round(recall, 4),
        "f1": round(f1, 4),
        "accuracy": round(float((pred == y).mean()), 4) if len(y) else float("nan"),
        "auc": round(roc_auc(y, s), 4),
        "config": asdict(config),
    }
