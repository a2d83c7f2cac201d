"""The pipeline's step configs: one frozen dataclass per step type (``STEP_TYPES``), each key documented
where it is declared.

Where a package has a config dataclass of its own, the step embeds it (``zephyr.config.embedded_field``)
instead of copying its fields: a ``fuzzy_dedup`` step's MinHash keys are ``zephyr.dedup.FuzzyDedupConfig``'s,
a ``normalize`` step's are ``NormalizeConfig``'s, a ``tokenize`` step's shard keys ``TokenizeConfig``', and the YAML stays flat (``threshold: 0.7`` beside
``index:``). Those package configs import only the standard library, so loading a pipeline (``zephyr run
--check``) imports no pyarrow. Step-only keys (``priority_column``, ``index``, ``output_column``...) are
declared here; the web steps in ``zephyr.pipelines.web.config``.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field
from typing import Any, Literal

from zephyr.dedup.config import ExactDedupConfig, FuzzyDedupConfig
from zephyr.pipelines.quality.config import NormalizeConfig
from zephyr.pipelines.quality.filter_config import HeuristicFilterConfig
from zephyr.pipelines.web.config import ExtractStep, SubstringDedupStep, UrlDedupStep, UrlFilterStep
from zephyr.tokenize.config import TokenizeConfig

from zephyr.config import (
    FieldError,
    embedded_field,
    path_field,
    require_at_least,
    require_column_name,
    require_within,
)
from zephyr.errors import ConfigError

__all__ = [
    "STEP_TYPES",
    "DATA_STEPS",
    "SOURCE_STEPS",
    "ReadStep",
    "NormalizeStep",
    "LangIdStep",
    "HeuristicFilterStep",
    "ExactDedupStep",
    "FuzzyDedupStep",
    "QualityStep",
    "MapStep",
    "TokenizeStep",
    "TrainStep",
]


@dataclass(frozen=True)
class ReadStep:
    """Read the raw corpus; quarantine rows without id or text; optionally reshard for parallelism."""

    paths: list[str] = path_field([], required=True)
    """Input files, directories or globs (Parquet, JSONL[.gz|.zst], Vortex) or fsspec URLs."""
    format: Literal["auto", "parquet", "jsonl", "vortex"] = "auto"
    """``auto`` picks by file extension (``.jsonl``/``.json`` → JSONL, ``.vortex`` → Vortex, else Parquet)."""
    source: str | None = None
    """Set the source column to this name for every row (for inputs without one); ``None`` keeps the input's
    source column, or names the source ``unknown`` when there is none."""
    num_shards: int | None = None
    """Redistribute rows round-robin into this many shards (tasks); ``None`` keeps one shard per file."""
    approx_shard_bytes: str | None = None
    """Split large Parquet/JSONL files into shards of about this many bytes (e.g. ``64MB``)."""
    on_error: Literal["raise", "quarantine"] = "raise"
    """Unparseable JSONL lines: fail naming the file and line, or set them aside in the quarantine."""
    unify_schemas: bool = False
    """Input files whose column types differ: promote them by the documented rule (int → wider int → double;
    ``zephyr.io.input_schema``). ``False``: files must agree (a column missing from some files is nulls)."""
    schema: str | None = path_field(None)
    """A schema file (Parquet, or a JSON/YAML map of column to type) every input file is cast to."""

    def __post_init__(self) -> None:
        if not self.paths:
            raise FieldError("paths", "give at least one input path")
        if self.unify_schemas and self.schema is not None:
            raise FieldError("schema", "give unify_schemas: true or schema: FILE, not both")
        require_at_least("num_shards", self.num_shards, 1)
        if self.approx_shard_bytes is not None:
            from zephyr.config import parse_bytes

            try:
                parse_bytes(self.approx_shard_bytes)
            except (ConfigError, ValueError) as exc:
                raise FieldError("approx_shard_bytes", f"not a byte size ({exc}); e.g. 64MB") from None


@dataclass(frozen=True)
class NormalizeStep:
    """Unicode/whitespace normalization that is safe for prose, code and maths (``zephyr normalize``); its
    keys (``nfc``, ``strip_control``, ``collapse_whitespace``, ``fix_mojibake``) are ``NormalizeConfig``'s."""

    normalize: NormalizeConfig = embedded_field(NormalizeConfig)


@dataclass(frozen=True)
class LangIdStep:
    """fastText language ID (``lid.176.ftz``): sets ``lang``/``lang_score``, drops other languages."""

    languages: list[str] | None = None
    """Languages to keep (fastText codes: ``en``, ``de``...); ``None`` keeps every language."""
    min_score: float = 0.0
    """Drop rows whose language probability is below this, in [0, 1]."""
    model: str | None = path_field(None)
    """The fastText LID model; ``None`` means ``ZEPHYR_LID_MODEL`` or the cache (``scripts/setup`` fills it)."""
    max_chars: int = 10_000
    """Predict on the first N characters of each text."""
    replace_columns: bool = False
    """Replace the language columns when the data already has them (a claimed ``lang``, an earlier run);
    ``false``: the pipeline refuses such data before any work (``zephyr.pipelines.columns``)."""
    output_column: str | None = None
    """Write the language here and its score to ``<output_column>_score``, keeping a column the data has;
    ``null``: the pipeline's ``lang_column`` (and ``<lang_column>_score``)."""

    def __post_init__(self) -> None:
        require_within("min_score", self.min_score, 0.0, 1.0)
        require_at_least("max_chars", self.max_chars, 1)
        if self.languages is not None and not self.languages:
            raise FieldError("languages", "give at least one language, or null for all")
        require_column_name("output_column", self.output_column)


@dataclass(frozen=True)
class HeuristicFilterStep:
    """Gopher / C4 / FineWeb heuristic rules; dropped rows are kept aside under the step's ``NN-NAME.zephyr/dropped/`` with reasons. The
    rule keys (``rules``, ``overrides``, ``default_lang``) are ``HeuristicFilterConfig``'s, as ``zephyr filter``
    takes them."""

    filter: HeuristicFilterConfig = embedded_field(HeuristicFilterConfig)
    keep_dropped: bool = True
    """Write the dropped rows (with ``drop_reason``) to ``NN-NAME.zephyr/dropped/``; needed by ``quality.train_from``."""
    replace_columns: bool = False
    """Replace a ``drop_reason`` column the data already has (kept rows then lose it); ``false``: refuse."""
    output_column: str | None = None
    """Name of the reason column of the dropped rows; a ``drop_reason`` the data has then passes unchanged.
    ``null``: ``drop_reason``."""

    def __post_init__(self) -> None:
        require_column_name("output_column", self.output_column)


@dataclass(frozen=True)
class ExactDedupStep:
    """Document-level exact dedup: 128-bit xxh3 of the normalized text; the smallest id of a cluster stays.
    ``normalize`` is ``ExactDedupConfig``'s key (documents only: ``level`` is not a step key)."""

    dedup: ExactDedupConfig = embedded_field(ExactDedupConfig, keys=("normalize",))
    priority_column: str | None = None
    """Keep the row with the largest value of this column in each cluster (ties: smallest id)."""


@dataclass(frozen=True)
class FuzzyDedupStep:
    """MinHash-LSH near-duplicate removal with verified (true Jaccard) clusters (``zephyr.dedup``).

    The MinHash keys are ``FuzzyDedupConfig``'s, documented there: ``preset`` (the other keys override it),
    ``threshold``, ``shingle``, ``ngram``, ``normalize``, ``bands``, ``rows_per_band`` (``rows`` until the
    next release), ``num_perm``, ``seed``, ``scheme``, ``verify``, ``clusters``, ``signature_device``,
    ``bucket_links``. The ``zephyr dedup fuzzy`` flags build the same dataclass."""

    dedup: FuzzyDedupConfig = embedded_field(FuzzyDedupConfig)
    priority_column: str | None = None
    """Keep the row with the largest value of this column in each cluster (ties: smallest id)."""
    index: str | None = None
    """Signature index (a folder or fsspec URL) of earlier runs' kept rows: rows near them are duplicates too
    (``zephyr.dedup.index``; its MinHash settings must equal this step's)."""
    update_index: bool = False
    """Append this step's kept rows to ``index`` (created on the first run)."""

    def __post_init__(self) -> None:
        if self.update_index and not self.index:
            raise FieldError("update_index", "update_index needs index: (the folder to add to)")


@dataclass(frozen=True)
class QualityStep:
    """fastText quality classifier: score every row (``quality_score``) and drop rows below ``min_score``.

    Exactly one of ``model``, ``train`` or ``train_from`` says where the classifier comes from."""

    model: str | None = path_field(None)
    """A trained fastText classifier (``.bin``) with labels ``positive_label``/``negative_label``."""
    train: list[str] | None = path_field(None)
    """Labelled Parquet file(s) (``text`` + ``label_column``) to train the classifier on, inside the job."""
    train_from: str | None = None
    """Name of an earlier ``heuristic_filter`` step: train on its kept rows (positive) against its dropped
    rows (negative) — a bootstrapped classifier for corpora without labels."""
    label_column: str = "label"
    """Label column of ``train``."""
    positive_label: str = "hq"
    negative_label: str = "lq"
    min_score: float = 0.5
    """Keep rows whose P(positive) is at least this, in [0, 1]; 0 scores without dropping."""
    train_max_rows: int = 200_000
    """At most this many rows of each label are used for training (a deterministic prefix)."""
    classifier: dict[str, Any] = field(default_factory=dict)
    """fastText settings (``epoch``, ``lr``, ``dim``, ``word_ngrams``, ``min_count``, ``seed``...)."""
    replace_columns: bool = False
    """Replace a ``quality_score`` column the data already has (scores of another model); ``false``: refuse."""
    output_column: str | None = None
    """Write the score to this column instead of ``quality_score``; ``null``: ``quality_score``."""

    def __post_init__(self) -> None:
        require_column_name("output_column", self.output_column)
        given = [k for k in ("model", "train", "train_from") if getattr(self, k)]
        if len(given) != 1:
            raise FieldError(
                "model", f"give exactly one of model, train or train_from (got {', '.join(given) or 'none'})"
            )
        require_within("min_score", self.min_score, 0.0, 1.0)
        require_at_least("train_max_rows", self.train_max_rows, 2)
        self.classifier_config()

    def classifier_config(self) -> Any:
        from zephyr.pipelines.quality.classifier import ClassifierConfig

        allowed = {f.name for f in dataclasses.fields(ClassifierConfig)} - {
            "positive_label",
            "negative_label",
        }
        bad = sorted(set(self.classifier) - allowed)
        if bad:
            raise FieldError("classifier", f"unknown key {bad[0]!r}; allowed: {', '.join(sorted(allowed))}")
        try:
            return ClassifierConfig(
                positive_label=self.positive_label, negative_label=self.negative_label, **self.classifier
            )
        except (TypeError, ConfigError) as exc:
            raise FieldError("classifier", str(exc)) from None


@dataclass(frozen=True)
class TokenizeStep:
    """Globally shuffled token shards (``zephyr.tokenize``); trains a byte-level BPE when no tokenizer is given.
    ``shard_bytes``, ``seed``, ``bos``, ``engine``, ``batch_rows`` and ``megatron`` are
    ``zephyr.tokenize.config.TokenizeConfig``'s, as the ``zephyr tokenize`` flags are."""

    tokenizer: str | None = path_field(None)
    """A HF ``tokenizer.json`` (one from ``zephyr tokenizer train``, or a model folder's); ``None`` trains a
    byte-level BPE of ``vocab_size`` on the step input, as ``zephyr tokenizer train`` does (the same function,
    ``zephyr.tokenize.train_tokenizer``), and saves it as ``tokenizer.json`` in the step folder."""
    vocab_size: int = 8192
    """Vocabulary of the trained tokenizer, special tokens included (only without ``tokenizer``)."""
    tokenizer_train_bytes: str = "32MB"
    """Most text the trainer sees: an equal share of the first bytes of every input part, streamed (the
    trainer's ``sample_bytes``; lowered to fit the job's ``--memory-budget``)."""
    shards: TokenizeConfig = embedded_field(TokenizeConfig)

    def __post_init__(self) -> None:
        from zephyr.config import parse_bytes

        require_at_least("vocab_size", self.vocab_size, 258)
        try:
            parse_bytes(self.tokenizer_train_bytes)
        except (ConfigError, ValueError) as exc:
            raise FieldError("tokenizer_train_bytes", f"not a byte size ({exc}); e.g. 64MB") from None


_TRAIN_MANAGED = ("data", "log", "checkpoint_dir", "tensorboard_dir")


@dataclass(frozen=True)
class TrainStep:
    """Train the MoE language model on the token shards (``zephyr.trainer``).

    Any ``TrainConfig`` key is accepted (``preset``, ``steps``, ``batch_size``, ``seq_len``, ``device``,
    ``model: {...}``, ``optim: {...}``...), except ``data``, ``log`` and ``checkpoint_dir``, which the
    pipeline sets (the tokenize output, ``train.jsonl`` and ``checkpoints/`` in the step folder)."""

    settings: dict[str, Any] = field(default_factory=dict)
    """The ``TrainConfig`` keys given in the step."""

    def __post_init__(self) -> None:
        self.build(data=None, log=None, checkpoint_dir=None)

    @staticmethod
    def allowed_keys() -> list[str]:
        from zephyr.trainer.config import TrainConfig

        return sorted({f.name for f in dataclasses.fields(TrainConfig)} - set(_TRAIN_MANAGED))

    def build(self, *, data: str | None, log: str | None, checkpoint_dir: str | None) -> Any:
        """The ``TrainConfig`` to run."""
        from zephyr.trainer.config import TrainConfig, get_preset, model_config_from_dict

        allowed = self.allowed_keys()
        for key in self.settings:
            if key not in allowed:
                raise FieldError(
                    key, f"unknown key; allowed: {', '.join(['enabled', 'name', 'step', *allowed])}"
                )
        raw = {
            "checkpoint_every": 50,
            **self.settings,
            "data": data,
            "log": log,
            "checkpoint_dir": checkpoint_dir,
        }
        try:
            cfg = TrainConfig.from_dict(raw)
            model_config_from_dict(cfg.model, get_preset(cfg.preset))
        except TypeError as exc:
            raise FieldError("settings", str(exc)) from None
        except ConfigError as exc:
            key = next((k for k in self.settings if k in str(exc)), "settings")
            raise FieldError(key, str(exc)) from None
        return cfg


@dataclass(frozen=True)
class MapStep:
    """A user transform: ``function(table: pa.Table) -> pa.Table | zephyr.BatchOutput`` on every batch.

    Rows it returns go on; rows it drops are counted (by reason, through ``BatchOutput.dropped``) and rows it
    rejects are quarantined. Loading the config (and ``zephyr run --check``) only finds the module, running
    none of its code or its packages' (``find_module``); a run imports it before any work starts
    (``zephyr.pipelines.steps.preflight``), so a missing attribute still fails before the first step."""

    function: str = field(default="", metadata={"required": True})
    """``package.module:attribute`` — a function, or a class instantiated with no arguments."""
    batch_rows: int | None = None
    """Rows per call; ``None`` passes the engine's batches as they come."""

    def __post_init__(self) -> None:
        require_at_least("batch_rows", self.batch_rows, 1)
        module_name, attr = self._parts()
        missing = find_module(module_name)
        if missing is not None:
            raise FieldError("function", f"cannot import {self.function!r}: {missing}")

    def _parts(self) -> tuple[str, str]:
        module_name, sep, attr = self.function.partition(":")
        dotted = r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*"
        if not sep or not re.fullmatch(dotted, module_name) or not re.fullmatch(dotted, attr):
            raise FieldError("function", f"must look like package.module:function, got {self.function!r}")
        return module_name, attr

    def load(self) -> Any:
        """The callable named by ``function``: imports its module (runs its code)."""
        import importlib

        module_name, attr = self._parts()
        try:
            target = importlib.import_module(module_name)
            for name in attr.split("."):
                target = getattr(target, name)
        except (ImportError, AttributeError) as exc:
            raise FieldError("function", f"cannot import {self.function!r}: {exc}") from None
        if isinstance(target, type):
            target = target()
        if not callable(target):
            raise FieldError("function", f"{self.function!r} is not callable")
        return target


def find_module(name: str) -> str | None:
    """Why the module ``name`` (dotted) cannot be imported, or None when it can be found: without running its
    code or any of its parent packages'.

    ``importlib.util.find_spec("a.b")`` would import ``a`` (its ``__init__`` runs) to read ``a.__path__``. Here
    only the top-level name goes to ``find_spec`` (finders search ``sys.path`` and run no module code); each
    submodule is then asked of the import system's finders with the parent's search locations, as ``import``
    itself does once the parent is loaded. A parent that is a plain module, not a package, cannot be looked
    into without running it (``os.path`` is set by ``os``'s code): the name is then taken as found, and the
    run's import says the rest.

    >>> find_module("json.decoder") is None
    True
    >>> find_module("json.no_such_part")
    "no module named 'json.no_such_part'"
    """
    import importlib.util
    import sys

    parts = name.split(".")
    try:
        spec = importlib.util.find_spec(parts[0])
    except (ImportError, ValueError) as exc:
        return str(exc)
    if spec is None:
        return f"no module named {parts[0]!r}"
    for depth in range(2, len(parts) + 1):
        full = ".".join(parts[:depth])
        loaded = sys.modules.get(full)
        if loaded is not None and getattr(loaded, "__spec__", None) is not None:
            spec = loaded.__spec__
            continue
        locations = spec.submodule_search_locations
        if locations is None:
            return None  # a plain module: its attributes are known only by running it
        found = None
        for finder in sys.meta_path:
            find_spec = getattr(finder, "find_spec", None)
            if find_spec is not None:
                found = find_spec(full, list(locations))
                if found is not None:
                    break
        if found is None:
            return f"no module named {full!r}"
        spec = found
    return None


STEP_TYPES: dict[str, type] = {
    "read": ReadStep,
    "normalize": NormalizeStep,
    "langid": LangIdStep,
    "heuristic_filter": HeuristicFilterStep,
    "exact_dedup": ExactDedupStep,
    "fuzzy_dedup": FuzzyDedupStep,
    "quality": QualityStep,
    "map": MapStep,
    "tokenize": TokenizeStep,
    "train": TrainStep,
    "extract": ExtractStep,
    "url_filter": UrlFilterStep,
    "url_dedup": UrlDedupStep,
    "substring_dedup": SubstringDedupStep,
}
"""Step type name → its config dataclass."""

SOURCE_STEPS = ("read", "extract")
"""Step types that start a pipeline from files (exactly one, first)."""

DATA_STEPS = (
    "read",
    "extract",
    "url_filter",
    "url_dedup",
    "substring_dedup",
    "normalize",
    "langid",
    "heuristic_filter",
    "exact_dedup",
    "fuzzy_dedup",
    "quality",
    "map",
)
"""Step types whose output is a set of Parquet parts (the input of the next step)."""
