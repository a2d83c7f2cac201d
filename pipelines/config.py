"""Pipeline configs: a YAML file → a validated ``PipelineConfig`` (dataclasses), before any work starts.

File format (version 1)::

    version: 1                      # optional; 1 is the only version
    name: quickstart
    text_column: text               # columns every stage works on
    id_column: id
    source_column: source
    stages:                         # run in this order; ``stage`` is the type, ``name`` defaults to it
      - stage: read
        paths: [../../data/sample/sample.parquet]   # relative paths: from the config file's folder
      - stage: fuzzy_dedup
        threshold: 0.8
      - stage: train
        enabled: false              # any stage can be switched off

Stage types and their keys are the dataclasses below (``STAGE_TYPES``); every key is documented where it is
declared. Validation walks the whole file and raises one ``ConfigError`` listing every problem, each naming
its key path and what is allowed, e.g.::

    stages[5].threshold: must be within (0, 1], got 1.5
    stages[2].langauges: unknown key; allowed: enabled, languages, max_chars, min_score, model, name, stage

String values may use ``${VAR}`` or ``${VAR:-default}`` (environment variables). Overrides
(``--set stages.fuzzy_dedup.threshold=0.7``, ``--set stages.3.enabled=false``, ``--set seed=1``) are applied
to the raw mapping before validation; their values are YAML scalars or flow lists (``[en, de]``), and
relative paths in them resolve from the current directory.

>>> cfg = parse_config({"name": "t", "stages": [{"stage": "read", "paths": ["/"]}, {"stage": "normalize"}]})
>>> [s.name for s in cfg.stages], cfg.stages[1].config.nfc
(['read', 'normalize'], True)
"""

from __future__ import annotations

import dataclasses
import glob
import hashlib
import json
import os
import re
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from zephyr.pipelines.config_fields import (
    FieldError,
    path_field,
    require_at_least,
    require_column_name,
    require_within,
)
from zephyr.pipelines.web.config import ExtractStage, SubstringDedupStage, UrlDedupStage, UrlFilterStage

from zephyr.errors import ConfigError

__all__ = [
    "CONFIG_VERSION",
    "STAGE_TYPES",
    "DATA_STAGES",
    "SOURCE_STAGES",
    "PipelineConfig",
    "StageEntry",
    "ReadStage",
    "NormalizeStage",
    "LangIdStage",
    "HeuristicFilterStage",
    "ExactDedupStage",
    "FuzzyDedupStage",
    "QualityStage",
    "MapStage",
    "TokenizeStage",
    "TrainStage",
    "load_config",
    "parse_config",
    "apply_overrides",
    "builtin_config",
]

CONFIG_VERSION = 1


# -- stage configs ----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class ReadStage:
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
            from zephyr.sizes import parse_bytes

            try:
                parse_bytes(self.approx_shard_bytes)
            except (ConfigError, ValueError) as exc:
                raise FieldError("approx_shard_bytes", f"not a byte size ({exc}); e.g. 64MB") from None


@dataclass(frozen=True)
class NormalizeStage:
    """Unicode/whitespace normalization that is safe for prose, code and maths (``zephyr normalize``)."""

    nfc: bool = True
    """Unicode NFC (never NFKC, which would fold ``²``/``ℝ``)."""
    strip_control: bool = True
    """Remove control characters except tab/newline; ``\\r\\n`` → ``\\n``."""
    collapse_whitespace: bool = True
    """Unicode spaces → ' ', strip line ends, collapse interior runs, ≥3 newlines → 2 (indentation kept)."""
    fix_mojibake: bool = False
    """Repair UTF-8-read-as-Latin-1 text with ftfy (the ``quality`` extra)."""


@dataclass(frozen=True)
class LangIdStage:
    """fastText language ID (``lid.176.ftz``): sets ``lang``/``lang_score``, drops other languages."""

    languages: list[str] | None = None
    """Languages to keep (fastText codes: ``en``, ``de``...); ``None`` keeps every language."""
    min_score: float = 0.0
    """Drop rows whose language probability is below this, in [0, 1]."""
    model: str | None = path_field(None)
    """The fastText LID model; ``None`` means ``ZEPHYR_LID_MODEL`` or the cache (``scripts/setup`` fills it)."""
    max_chars: int = 10_000
    """Predict on the first N characters of each text."""
    overwrite: bool = False
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
class HeuristicFilterStage:
    """Gopher / C4 / FineWeb heuristic rules; dropped rows are kept aside under ``_dropped/`` with reasons."""

    rules: list[str] = field(default_factory=lambda: ["gopher", "c4", "fineweb"])
    """Rule families, applied in order; each row gets the first rule it fails."""
    overrides: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Thresholds per family, e.g. ``{c4: {min_sentences: 3}}`` (see docs/quality.md)."""
    default_lang: str = "en"
    """Language assumed for rows without a ``lang`` value (stop words, word splitting)."""
    keep_dropped: bool = True
    """Write the dropped rows (with ``drop_reason``) to ``_dropped/``; needed by ``quality.train_from``."""
    overwrite: bool = False
    """Replace a ``drop_reason`` column the data already has (kept rows then lose it); ``false``: refuse."""
    output_column: str | None = None
    """Name of the reason column of ``_dropped/`` rows; a ``drop_reason`` the data has then passes unchanged.
    ``null``: ``drop_reason``."""

    def __post_init__(self) -> None:
        require_column_name("output_column", self.output_column)
        from zephyr.pipelines.quality.filters import RULE_SETS

        if not self.rules:
            raise FieldError("rules", f"give at least one rule family; allowed: {', '.join(sorted(RULE_SETS))}")
        bad = [r for r in self.rules if r not in RULE_SETS]
        if bad:
            raise FieldError("rules", f"unknown rule family {bad[0]!r}; allowed: {', '.join(sorted(RULE_SETS))}")
        try:
            from zephyr.pipelines.quality.filters import build_rule_families

            build_rule_families(self.rules, **self.overrides)
        except TypeError as exc:
            raise FieldError("overrides", f"{exc}") from None
        except ConfigError as exc:
            raise FieldError("overrides", str(exc)) from None


_NORMALIZATIONS = ("none", "default", "simplify")


@dataclass(frozen=True)
class ExactDedupStage:
    """Document-level exact dedup: 128-bit xxh3 of the normalized text; the smallest id of a cluster stays."""

    normalize: Literal["none", "default", "simplify"] = "default"
    """``default``: NFC + lower case + collapsed whitespace; ``none``: byte-exact; ``simplify``: also
    punctuation → space and digits → 0."""
    priority_column: str | None = None
    """Keep the row with the largest value of this column in each cluster (ties: smallest id)."""


@dataclass(frozen=True)
class FuzzyDedupStage:
    """MinHash-LSH near-duplicate removal with verified (true Jaccard) clusters (``zephyr.dedup``)."""

    preset: Literal["datatrove", "nemo", "redpajama"] | None = None
    """Shingling/banding of a known pipeline; the other keys below override it."""
    threshold: float = 0.8
    """Jaccard similarity of shingle sets at or above which two documents are duplicates, in (0, 1]."""
    shingle: Literal["word", "char"] | None = None
    """``word`` or ``char`` n-grams (default: the preset's, else ``word``)."""
    ngram: int | None = None
    """Shingle length (default: the preset's, else 5)."""
    normalize: Literal["none", "default", "simplify"] | None = None
    """Text normalization before shingling (default: the preset's, else ``default``)."""
    bands: int | None = None
    """LSH bands (give with ``rows``); ``None`` derives them from ``threshold``."""
    rows: int | None = None
    """Signature values per band."""
    num_perm: int | None = None
    """MinHash permutations; ``None`` means bands × rows, or 112."""
    seed: int = 1
    """Permutation seed."""
    verify: bool = True
    """Check candidate pairs with the true Jaccard before they join clusters (Marin #6854: always on)."""
    signature_device: Literal["auto", "cpu", "cuda", "xpu", "torch-cpu"] = "auto"
    """Where MinHash signatures are computed (same integers on every device; see ``zephyr.dedup``)."""
    clusters: Literal["anchored", "components"] = "anchored"
    """``anchored``: a row is removed only if its true Jaccard to its cluster's kept row reaches
    ``threshold``; ``components``: transitive clusters (a chain of near-duplicates becomes one)."""
    priority_column: str | None = None
    """Keep the row with the largest value of this column in each cluster (ties: smallest id)."""
    index: str | None = None
    """Signature index (a folder or fsspec URL) of earlier runs' kept rows: rows near them are duplicates too
    (``zephyr.dedup.index``; its MinHash settings must equal this stage's)."""
    update_index: bool = False
    """Append this stage's kept rows to ``index`` (created on the first run)."""

    def __post_init__(self) -> None:
        if self.update_index and not self.index:
            raise FieldError("update_index", "update_index needs index: (the folder to add to)")
        require_within("threshold", self.threshold, 0.0, 1.0, low_open=True)
        require_at_least("ngram", self.ngram, 1)
        require_at_least("bands", self.bands, 1)
        require_at_least("rows", self.rows, 1)
        require_at_least("num_perm", self.num_perm, 1)
        if (self.bands is None) != (self.rows is None):
            raise FieldError("bands", f"give both bands and rows or neither (bands={self.bands}, rows={self.rows})")
        try:
            self.build()
        except ConfigError as exc:
            raise FieldError("threshold" if "threshold" in str(exc) else "bands", str(exc)) from None

    def build(self) -> Any:
        """The ``zephyr.dedup.FuzzyDedupConfig`` this stage runs with."""
        from zephyr.dedup.config import FuzzyDedupConfig

        given = {
            k: getattr(self, k)
            for k in (
                "threshold", "shingle", "ngram", "normalize", "bands", "rows", "num_perm", "seed", "verify",
                "clusters", "signature_device",
            )
            if getattr(self, k) is not None
        }
        if self.preset is not None:
            return FuzzyDedupConfig.from_preset(self.preset, **given)
        return FuzzyDedupConfig(**given)


@dataclass(frozen=True)
class QualityStage:
    """fastText quality classifier: score every row (``quality_score``) and drop rows below ``min_score``.

    Exactly one of ``model``, ``train`` or ``train_from`` says where the classifier comes from."""

    model: str | None = path_field(None)
    """A trained fastText classifier (``.bin``) with labels ``positive_label``/``negative_label``."""
    train: list[str] | None = path_field(None)
    """Labelled Parquet file(s) (``text`` + ``label_column``) to train the classifier on, inside the job."""
    train_from: str | None = None
    """Name of an earlier ``heuristic_filter`` stage: train on its kept rows (positive) against its dropped
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
    overwrite: bool = False
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

        allowed = {f.name for f in dataclasses.fields(ClassifierConfig)} - {"positive_label", "negative_label"}
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
class TokenizeStage:
    """Globally shuffled token shards (``zephyr.tokenize``); trains a byte-level BPE when no tokenizer is given."""

    tokenizer: str | None = path_field(None)
    """A HF ``tokenizer.json`` (one from ``zephyr tokenizer train``, or a model folder's); ``None`` trains a
    byte-level BPE of ``vocab_size`` on the stage input, as ``zephyr tokenizer train`` does (the same function,
    ``zephyr.tokenize.train_tokenizer``), and saves it as ``tokenizer.json`` in the stage folder."""
    vocab_size: int = 8192
    """Vocabulary of the trained tokenizer, special tokens included (only without ``tokenizer``)."""
    tokenizer_train_bytes: str = "32MB"
    """Most text the trainer sees: an equal share of the first bytes of every input part, streamed (the
    trainer's ``sample_bytes``; lowered to fit the job's ``--memory-budget``)."""
    shard_size: str = "512MB"
    """Target bytes of tokens per shard."""
    seed: int = 0
    """Document shuffle seed."""
    bos: Literal["never", "always"] = "never"
    engine: Literal["auto", "hf", "tiktoken"] = "auto"
    batch_rows: int = 1024
    """Documents per tokenize batch (bounds worker memory)."""
    megatron: bool = False
    """Also write Megatron ``.bin``/``.idx`` per shard."""

    def __post_init__(self) -> None:
        from zephyr.sizes import parse_bytes

        require_at_least("vocab_size", self.vocab_size, 258)
        require_at_least("batch_rows", self.batch_rows, 1)
        for key in ("tokenizer_train_bytes", "shard_size"):
            try:
                parse_bytes(getattr(self, key))
            except (ConfigError, ValueError) as exc:
                raise FieldError(key, f"not a byte size ({exc}); e.g. 64MB") from None


_TRAIN_MANAGED = ("data", "log", "checkpoint_dir", "tensorboard_dir")


@dataclass(frozen=True)
class TrainStage:
    """Train the MoE language model on the token shards (``zephyr.trainer``).

    Any ``TrainConfig`` key is accepted (``preset``, ``steps``, ``batch_size``, ``seq_len``, ``device``,
    ``model: {...}``, ``optim: {...}``...), except ``data``, ``log`` and ``checkpoint_dir``, which the
    pipeline sets (the tokenize output, ``train.jsonl`` and ``checkpoints/`` in the stage folder)."""

    settings: dict[str, Any] = field(default_factory=dict)
    """The ``TrainConfig`` keys given in the stage."""

    def __post_init__(self) -> None:
        self.build(data=None, log=None, checkpoint_dir=None)

    @staticmethod
    def allowed_keys() -> list[str]:
        from zephyr.trainer.config import TrainConfig

        return sorted({f.name for f in dataclasses.fields(TrainConfig)} - set(_TRAIN_MANAGED))

    def build(self, *, data: str | None, log: str | None, checkpoint_dir: str | None) -> Any:
        """The ``TrainConfig`` to run."""
        from zephyr.trainer.config import TrainConfig, model_config_from_dict
        from zephyr.trainer.presets import get_preset

        allowed = self.allowed_keys()
        for key in self.settings:
            if key not in allowed:
                raise FieldError(key, f"unknown key; allowed: {', '.join(['enabled', 'name', 'stage', *allowed])}")
        raw = {"checkpoint_every": 50, **self.settings, "data": data, "log": log, "checkpoint_dir": checkpoint_dir}
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
class MapStage:
    """A user transform: ``function(table: pa.Table) -> pa.Table | zephyr.BatchOutput`` on every batch.

    Rows it returns go on; rows it drops are counted (by reason, through ``BatchOutput.dropped``) and rows it
    rejects are quarantined. The function is imported by the driver before any work starts."""

    function: str = field(default="", metadata={"required": True})
    """``package.module:attribute`` — a function, or a class instantiated with no arguments."""
    batch_rows: int | None = None
    """Rows per call; ``None`` passes the engine's batches as they come."""

    def __post_init__(self) -> None:
        require_at_least("batch_rows", self.batch_rows, 1)
        self.load()

    def load(self) -> Any:
        """The callable named by ``function``."""
        import importlib

        module_name, sep, attr = self.function.partition(":")
        if not sep or not module_name or not attr:
            raise FieldError("function", f"must look like package.module:function, got {self.function!r}")
        try:
            target = getattr(importlib.import_module(module_name), attr)
        except (ImportError, AttributeError) as exc:
            raise FieldError("function", f"cannot import {self.function!r}: {exc}") from None
        if isinstance(target, type):
            target = target()
        if not callable(target):
            raise FieldError("function", f"{self.function!r} is not callable")
        return target


STAGE_TYPES: dict[str, type] = {
    "read": ReadStage,
    "normalize": NormalizeStage,
    "langid": LangIdStage,
    "heuristic_filter": HeuristicFilterStage,
    "exact_dedup": ExactDedupStage,
    "fuzzy_dedup": FuzzyDedupStage,
    "quality": QualityStage,
    "map": MapStage,
    "tokenize": TokenizeStage,
    "train": TrainStage,
    "extract": ExtractStage,
    "url_filter": UrlFilterStage,
    "url_dedup": UrlDedupStage,
    "substring_dedup": SubstringDedupStage,
}
"""Stage type name → its config dataclass."""

SOURCE_STAGES = ("read", "extract")
"""Stage types that start a pipeline from files (exactly one, first)."""

DATA_STAGES = ("read", "extract", "url_filter", "url_dedup", "substring_dedup", "normalize", "langid", "heuristic_filter", "exact_dedup", "fuzzy_dedup", "quality", "map")
"""Stage types whose output is a set of Parquet parts (the input of the next stage)."""

_COMMON_KEYS = ("stage", "name", "enabled")
_DISPLAY_ONLY = {"train": ("log_every",)}
"""Keys that change only what a person sees, not the outputs: changing one never reruns (or clears) a stage."""


@dataclass(frozen=True)
class StageEntry:
    """One stage of a pipeline: its type, unique name, whether it runs, and its typed config."""

    type: str
    name: str
    config: Any
    enabled: bool = True

    def to_dict(self) -> dict[str, Any]:
        body = dict(self.config.settings) if isinstance(self.config, TrainStage) else dataclasses.asdict(self.config)
        return {"stage": self.type, "name": self.name, "enabled": self.enabled, **body}

    def fingerprint(self, upstream: str) -> str:
        """Hash of this stage's config and its upstream fingerprint: a changed config never reuses outputs."""
        stage = {k: v for k, v in self.to_dict().items() if k not in _DISPLAY_ONLY.get(self.type, ())}
        payload = json.dumps({"stage": stage, "upstream": upstream, "version": CONFIG_VERSION},
                             sort_keys=True, default=str)
        return hashlib.sha256(payload.encode()).hexdigest()


@dataclass(frozen=True)
class PipelineConfig:
    """A whole pipeline. Plain data: change it with ``dataclasses.replace``."""

    name: str
    stages: tuple[StageEntry, ...]
    text_column: str = "text"
    """The document text."""
    id_column: str = "id"
    """Document ids (dedup keeps the smallest id of a cluster, and tells rows that share an id apart by their
    position; the token shuffle keys on it)."""
    source_column: str = "source"
    """Where each document comes from (per-source retention in the report, source mix in the manifest)."""
    lang_column: str = "lang"
    """Language code column (written by ``langid``; per-language retention in the report)."""
    description: str = ""
    path: str | None = None
    """The file this config was loaded from (informational)."""

    def stage(self, name: str) -> StageEntry:
        for entry in self.stages:
            if entry.name == name:
                return entry
        raise ConfigError(f"no stage named {name!r}; stages: {', '.join(s.name for s in self.stages)}")

    def to_dict(self) -> dict[str, Any]:
        return {
            "version": CONFIG_VERSION,
            "name": self.name,
            "description": self.description,
            "text_column": self.text_column,
            "id_column": self.id_column,
            "source_column": self.source_column,
            "lang_column": self.lang_column,
            "stages": [s.to_dict() for s in self.stages],
        }


_TOP_KEYS = ("version", "name", "description", "text_column", "id_column", "source_column", "lang_column", "stages")


# -- loading ---------------------------------------------------------------------------------------------
def builtin_config(name: str) -> Path:
    """The path of a ready-made config shipped in ``zephyr.pipelines`` (``quickstart``, ``web``, ``code``)."""
    path = Path(__file__).with_name("configs") / f"{name}.yaml"
    if not path.is_file():
        names = sorted(p.stem for p in path.parent.glob("*.yaml"))
        raise ConfigError(f"no built-in pipeline {name!r}; built-ins: {', '.join(names)}")
    return path


def load_config(path: str | os.PathLike[str], overrides: list[str] | None = None) -> PipelineConfig:
    """Read, override and validate a pipeline file (or a built-in name such as ``quickstart``)."""
    import yaml

    path = Path(path)
    if not path.exists() and path.suffix == "" and "/" not in str(path):
        path = builtin_config(str(path))
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read pipeline config {path}: {exc.strerror or exc}") from None
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML: {exc}") from None
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: a pipeline config must be a mapping with a 'stages' list")
    base = path.resolve().parent
    raw = _resolve_paths(_expand_env(raw, ""), base)
    if overrides:
        raw = apply_overrides(raw, overrides, base=Path.cwd())
    return parse_config(raw, path=str(path))


_ENV = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")


def _expand_env(value: Any, where: str) -> Any:
    if isinstance(value, dict):
        return {k: _expand_env(v, f"{where}.{k}" if where else str(k)) for k, v in value.items()}
    if isinstance(value, list):
        return [_expand_env(v, f"{where}[{i}]") for i, v in enumerate(value)]
    if isinstance(value, str) and "${" in value:

        def sub(match: re.Match[str]) -> str:
            name, default = match.group(1), match.group(2)
            if name in os.environ:
                return os.environ[name]
            if default is not None:
                return default
            raise ConfigError(f"{where}: environment variable {name} is not set (and ${{{name}}} has no :-default)")

        return _ENV.sub(sub, value)
    return value


def _path_fields(stage_type: str) -> set[str]:
    cls = STAGE_TYPES.get(stage_type)
    if cls is None:
        return set()
    return {f.name for f in dataclasses.fields(cls) if f.metadata.get("path")}


def _resolve_one(value: Any, base: Path) -> Any:
    if isinstance(value, list):
        return [_resolve_one(v, base) for v in value]
    if isinstance(value, str) and value and "://" not in value and not os.path.isabs(os.path.expanduser(value)):
        return os.path.normpath(base / value)
    if isinstance(value, str):
        return os.path.expanduser(value)
    return value


def _resolve_paths(raw: dict[str, Any], base: Path) -> dict[str, Any]:
    stages = raw.get("stages")
    if not isinstance(stages, list):
        return raw
    out = []
    for stage in stages:
        if isinstance(stage, dict):
            stage = dict(stage)
            for key in _path_fields(str(stage.get("stage"))):
                if key in stage:
                    stage[key] = _resolve_one(stage[key], base)
        out.append(stage)
    return {**raw, "stages": out}


def apply_overrides(raw: dict[str, Any], overrides: list[str], *, base: Path | None = None) -> dict[str, Any]:
    """Apply ``KEY=VALUE`` overrides to a raw config mapping (see the module docstring for the syntax)."""
    import copy

    import yaml

    raw = copy.deepcopy(raw)
    for item in overrides:
        key, sep, text = item.partition("=")
        if not sep or not key:
            raise ConfigError(f"--set {item!r}: expected KEY=VALUE, e.g. stages.fuzzy_dedup.threshold=0.7")
        try:
            value = yaml.safe_load(text) if text.strip() else ""
        except yaml.YAMLError:
            value = text
        parts = key.split(".")
        if parts[0] != "stages":
            if len(parts) != 1:
                raise ConfigError(f"--set {item!r}: top-level keys are not nested; allowed: {', '.join(_TOP_KEYS)}")
            raw[parts[0]] = value
            continue
        if len(parts) < 3:
            raise ConfigError(f"--set {item!r}: address a stage key as stages.NAME.KEY or stages.INDEX.KEY")
        stages = raw.get("stages")
        if not isinstance(stages, list):
            raise ConfigError(f"--set {item!r}: the config has no stages list")
        target = _find_stage(stages, parts[1], item)
        if base is not None and parts[2] in _path_fields(str(target.get("stage"))) and len(parts) == 3:
            value = _resolve_one(value, base)
        node = target
        for part in parts[2:-1]:
            child = node.get(part)
            if not isinstance(child, dict):
                child = {}
                node[part] = child
            node = child
        node[parts[-1]] = value
    return raw


def _find_stage(stages: list[Any], ref: str, item: str) -> dict[str, Any]:
    if ref.isdigit():
        index = int(ref)
        if index >= len(stages) or not isinstance(stages[index], dict):
            raise ConfigError(f"--set {item!r}: no stage at index {index} (the pipeline has {len(stages)})")
        return stages[index]
    names = []
    for stage in stages:
        if isinstance(stage, dict):
            name = stage.get("name") or stage.get("stage")
            names.append(str(name))
            if name == ref:
                return stage
    raise ConfigError(f"--set {item!r}: no stage named {ref!r}; stages: {', '.join(names)}")


# -- validation ------------------------------------------------------------------------------------------
def parse_config(raw: dict[str, Any], *, path: str | None = None) -> PipelineConfig:
    """Validate a raw mapping into a ``PipelineConfig``; every problem is reported, each with its key path."""
    errors: list[str] = []
    unknown = sorted(set(raw) - set(_TOP_KEYS))
    for key in unknown:
        errors.append(f"{key}: unknown key; allowed: {', '.join(_TOP_KEYS)}")
    version = raw.get("version", CONFIG_VERSION)
    if version != CONFIG_VERSION:
        errors.append(f"version: this zephyr reads version {CONFIG_VERSION}, got {version!r}")
    top: dict[str, str] = {}
    for key in ("name", "description", "text_column", "id_column", "source_column", "lang_column"):
        if key in raw:
            if not isinstance(raw[key], str) or (key != "description" and not raw[key]):
                errors.append(f"{key}: must be a non-empty string, got {raw[key]!r}")
            else:
                top[key] = raw[key]
    stages_raw = raw.get("stages")
    entries: list[StageEntry] = []
    if not isinstance(stages_raw, list) or not stages_raw:
        errors.append("stages: must be a non-empty list of stages, each a mapping with a 'stage' key")
        stages_raw = []
    for i, item in enumerate(stages_raw):
        entry = _parse_stage(item, f"stages[{i}]", errors)
        if entry is not None:
            entries.append(entry)
            _check_output_column(entry, top, f"stages[{i}]", errors)
    if len(entries) == len(stages_raw):
        _check_order(entries, errors)
    if errors:
        where = f"{path}: " if path else ""
        raise ConfigError(f"{where}invalid pipeline config ({len(errors)} problem(s)):\n  " + "\n  ".join(errors))
    name = top.pop("name", None) or (Path(path).stem if path else "pipeline")
    return PipelineConfig(name=name, stages=tuple(entries), path=path, **top)


def _parse_stage(item: Any, where: str, errors: list[str]) -> StageEntry | None:
    if not isinstance(item, dict):
        errors.append(f"{where}: must be a mapping with a 'stage' key, got {item!r}")
        return None
    kind = item.get("stage")
    if kind not in STAGE_TYPES:
        errors.append(f"{where}.stage: must be one of {', '.join(STAGE_TYPES)}, got {kind!r}")
        return None
    cls = STAGE_TYPES[kind]
    name = item.get("name", kind)
    if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z0-9_\-]+", name):
        errors.append(f"{where}.name: must be letters, digits, '_' or '-', got {name!r}")
        return None
    enabled = item.get("enabled", True)
    if not isinstance(enabled, bool):
        errors.append(f"{where}.enabled: must be true or false, got {enabled!r}")
        return None
    body = {k: v for k, v in item.items() if k not in _COMMON_KEYS}
    if cls is TrainStage:
        values: dict[str, Any] | None = {"settings": body}
    else:
        values = _typed_fields(cls, body, where, errors)
        if values is None:
            return None
    try:
        config = cls(**values)
    except FieldError as exc:
        errors.append(f"{where}.{exc.key}: {exc.detail}")
        return None
    except ConfigError as exc:
        errors.append(f"{where}: {exc}")
        return None
    return StageEntry(kind, name, config, enabled)


def _typed_fields(cls: type, body: dict[str, Any], where: str, errors: list[str]) -> dict[str, Any] | None:
    fields = {f.name: f for f in dataclasses.fields(cls)}
    hints = typing.get_type_hints(cls)
    ok = True
    values: dict[str, Any] = {}
    for key, value in body.items():
        if key not in fields:
            allowed = sorted([*fields, *_COMMON_KEYS])
            errors.append(f"{where}.{key}: unknown key for a {cls.__name__} stage; allowed: {', '.join(allowed)}")
            ok = False
            continue
        try:
            values[key] = _coerce(value, hints[key], f"{where}.{key}")
        except ConfigError as exc:
            errors.append(str(exc))
            ok = False
    for name, f in fields.items():
        if f.metadata.get("required") and name not in body:
            errors.append(f"{where}.{name}: required")
            ok = False
    return values if ok else None


def _describe(hint: Any) -> str:
    origin = typing.get_origin(hint)
    if origin is Literal:
        return "one of " + ", ".join(repr(a) for a in typing.get_args(hint))
    if origin in (typing.Union, types.UnionType):
        return " or ".join(_describe(a) for a in typing.get_args(hint))
    if origin is list:
        return f"a list of {_describe(typing.get_args(hint)[0])}"
    if origin is dict:
        return "a mapping"
    if hint is type(None):
        return "null"
    return {bool: "true/false", int: "an integer", float: "a number", str: "a string"}.get(hint, str(hint))


def _coerce(value: Any, hint: Any, where: str) -> Any:
    """Check ``value`` against a type hint (bool/int/float/str, Literal, list, dict, Optional)."""
    origin = typing.get_origin(hint)
    fail = ConfigError(f"{where}: must be {_describe(hint)}, got {value!r}")
    if origin in (typing.Union, types.UnionType):
        for arm in typing.get_args(hint):
            try:
                return _coerce(value, arm, where)
            except ConfigError:
                continue
        raise fail
    if hint is type(None):
        if value is None:
            return None
        raise fail
    if origin is Literal:
        if value in typing.get_args(hint):
            return value
        raise fail
    if origin is list:
        if isinstance(value, str):
            value = [value]
        if not isinstance(value, list):
            raise fail
        (inner,) = typing.get_args(hint)
        return [_coerce(v, inner, f"{where}[{i}]") for i, v in enumerate(value)]
    if origin is dict:
        if not isinstance(value, dict):
            raise fail
        return value
    if hint is bool:
        if isinstance(value, bool):
            return value
        raise fail
    if hint is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        raise fail
    if hint is float:
        if isinstance(value, int | float) and not isinstance(value, bool):
            return float(value)
        raise fail
    if hint is str:
        if isinstance(value, str):
            return value
        if isinstance(value, int | float) and not isinstance(value, bool):
            return str(value)
        raise fail
    return value


def _check_order(entries: list[StageEntry], errors: list[str]) -> None:
    seen: dict[str, int] = {}
    for i, entry in enumerate(entries):
        if entry.name in seen:
            errors.append(f"stages[{i}].name: {entry.name!r} is already the name of stages[{seen[entry.name]}]")
        seen[entry.name] = i
    active = [(i, e) for i, e in enumerate(entries) if e.enabled]
    if not active or active[0][1].type not in SOURCE_STAGES:
        errors.append("stages[0].stage: the first (enabled) stage must be 'read' or 'extract'")
    for i, entry in active[1:]:
        if entry.type in SOURCE_STAGES:
            errors.append(f"stages[{i}].stage: only the first stage may be {entry.type!r}")
    tokenize_at = next((i for i, e in active if e.type == "tokenize"), None)
    for i, entry in active:
        if entry.type in DATA_STAGES and tokenize_at is not None and i > tokenize_at:
            errors.append(f"stages[{i}].stage: {entry.type!r} cannot come after the tokenize stage")
        if entry.type == "train" and (tokenize_at is None or i < tokenize_at):
            errors.append(f"stages[{i}].stage: 'train' needs an enabled tokenize stage before it")
        if entry.type == "tokenize" and i != tokenize_at:
            errors.append(f"stages[{i}].stage: only one tokenize stage is allowed")
        if entry.type == "quality" and entry.config.train_from:
            ref = entry.config.train_from
            prior = {e.name: e for j, e in active if j < i}
            if ref not in prior or prior[ref].type != "heuristic_filter":
                errors.append(
                    f"stages[{i}].train_from: must name an enabled heuristic_filter stage before it, got {ref!r}"
                )
            elif not prior[ref].config.keep_dropped:
                errors.append(f"stages[{i}].train_from: stage {ref!r} must have keep_dropped: true")


def _check_output_column(entry: StageEntry, top: dict[str, str], where: str, errors: list[str]) -> None:
    """A stage's ``output_column`` may not be one of the columns every stage works on: replacing the text or
    the ids is never what a person meant, whatever ``overwrite`` says."""
    name = getattr(entry.config, "output_column", None)
    for key in ("text_column", "id_column", "source_column"):
        if name is not None and name == top.get(key, PipelineConfig.__dataclass_fields__[key].default):
            errors.append(f"{where}.output_column: {name!r} is the pipeline's {key}; choose another name")


def check_inputs(config: PipelineConfig) -> None:
    """Fail before any work when local input paths match no file (globs, files and directories)."""
    problems: list[str] = []
    for i, entry in enumerate(config.stages):
        if not entry.enabled:
            continue
        cls = type(entry.config)
        for f in dataclasses.fields(cls):
            if not f.metadata.get("path"):
                continue
            value = getattr(entry.config, f.name)
            for j, p in enumerate(value if isinstance(value, list) else [value]):
                if p is None or "://" in p:
                    continue
                key = f"stages[{i}].{f.name}" + (f"[{j}]" if isinstance(value, list) else "")
                if glob.has_magic(p):
                    if not glob.glob(p, recursive=True):
                        problems.append(f"{key}: the pattern {p!r} matches no file")
                elif not os.path.exists(p):
                    problems.append(f"{key}: no such file or directory: {p}")
    if problems:
        raise ConfigError("input paths not found:\n  " + "\n  ".join(problems))
