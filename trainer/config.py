"""Configuration dataclasses for the MoE language model and its training run.

Configs are plain, frozen, serializable data; change them with ``dataclasses.replace``, never by mutation.

Validation happens before any work, in ``__post_init__`` (so ``dataclasses.replace`` and direct construction are
checked too; ``zephyr.config``): every field's type against its annotation, ranges declared on the
field (``ranged_field``), then cross-field rules naming both sides. All problems are reported at once in one
``ConfigProblems`` (a ``ConfigError``), one line each, led by the key path as written in a config file::

    invalid training config (3 problems):
      steps must be an integer, got 'ten' (str)
      optim.lr must be a number, got [0.1] (list)
      model.moe.top_k must be >= 1, got 0

A wrong type would otherwise surface later as a ``TypeError`` from a comparison (``'<' not supported between
instances of 'str' and 'int'``) that names neither the key nor the file. ``ModelConfig``, ``MoEConfig`` and
``model_config_from_dict`` live in ``zephyr.trainer.model_config`` and are re-exported here. ``TrainConfig`` is
consumed by ``zephyr.trainer.model.build_model`` and ``zephyr.trainer.train.train``.

YAML is optional: ``TrainConfig.from_yaml`` imports PyYAML lazily, so the trainer imports with torch, numpy and
fsspec alone.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from zephyr.trainer.model_config import (
    AttentionBackend,
    Balance,
    Dispatch,
    ModelConfig,
    MoEConfig,
    ScoreFunc,
    model_config_from_dict,
)
from zephyr.trainer.presets import get_preset

from zephyr.config import (
    ConfigProblems,
    check_fields,
    describe_value,
    field_hints,
    field_problems,
    ranged_field,
    read_mapping,
    unknown_keys,
)
from zephyr.errors import ConfigError

__all__ = [
    "MoEConfig",
    "ModelConfig",
    "OptimConfig",
    "TrainConfig",
    "ScoreFunc",
    "Dispatch",
    "AttentionBackend",
    "Schedule",
    "Balance",
    "ConfigProblems",
    "model_config_from_dict",
    "read_config_file",
]

Schedule = Literal["cosine", "wsd", "constant"]


@dataclass(frozen=True)
class OptimConfig:
    """AdamW with warmup and a cosine or warmup-stable-decay (WSD) schedule."""

    lr: float = ranged_field(0, low_open=True, default=3e-4)
    min_lr_ratio: float = ranged_field(0, 1, default=0.1)
    """The final learning rate as a fraction of ``lr`` (cosine floor, WSD end point)."""
    warmup_steps: int = ranged_field(0, default=100)
    schedule: Schedule = "cosine"
    decay_fraction: float = ranged_field(0, 1, low_open=True, default=0.2)
    """WSD only: the last fraction of the steps decays linearly to ``min_lr_ratio * lr``."""
    weight_decay: float = ranged_field(0, default=0.1)
    beta1: float = ranged_field(0, 1, high_open=True, default=0.9)
    beta2: float = ranged_field(0, 1, high_open=True, default=0.95)
    eps: float = ranged_field(0, low_open=True, default=1e-8)
    grad_clip: float = ranged_field(0, default=1.0)
    """Clip the global gradient norm to this; 0 disables clipping (the norm is still logged)."""

    def __post_init__(self) -> None:
        check_fields(self, "optim.", list)


@dataclass(frozen=True)
class TrainConfig:
    """One training run. Every field is also a ``zephyr train`` flag (``--batch-size`` for ``batch_size``)."""

    data: str | dict[str, float] | None = None
    """Token-shard directory, or a mixture ``{dir: weight}``; None trains on a synthetic token stream."""
    preset: str = "tiny"
    """Named model preset (see ``zephyr.trainer.presets``); ``model`` overrides its fields."""
    model: dict[str, Any] = field(default_factory=dict)
    """Overrides of the preset's ``ModelConfig`` fields, e.g. ``{"moe": {"top_k": 2}, "qk_norm": True}``."""
    optim: OptimConfig = field(default_factory=OptimConfig)
    steps: int = ranged_field(1, default=100)
    batch_size: int = ranged_field(1, default=8)
    """Sequences per micro-batch per rank."""
    seq_len: int = ranged_field(1, default=256)
    grad_accum: int = ranged_field(1, default=1)
    """Micro-batches per optimizer step; the global batch is batch_size * grad_accum * world_size sequences."""
    device: str = "auto"
    """``auto``, ``cuda``, ``xpu``, ``cpu`` or ``xla`` (experimental)."""
    dtype: Literal["auto", "bf16", "fp32"] = "auto"
    """Autocast dtype: ``auto`` means bf16 where the device supports it, fp32 on CPU."""
    compile: bool = False
    """``torch.compile`` each transformer block separately."""
    activation_checkpointing: bool = False
    """Recompute each block's activations in the backward pass instead of keeping them (``Block``): less
    memory (``zephyr train check`` estimates both), about one more forward pass of compute."""
    seed: int = ranged_field(0, default=0)
    """Seeds initialization and data order (numpy seeds must be >= 0)."""
    checkpoint_dir: str | None = None
    """Where step-N checkpoints go; an existing ``latest`` there is resumed."""
    checkpoint_every: int = ranged_field(0, default=0)
    """Save every K steps (and at the end); 0 saves only at the end (when checkpoint_dir is set)."""
    keep_checkpoints: int = ranged_field(0, default=2)
    """Checkpoints kept on disk; older ones are deleted after a successful save. 0 keeps all."""
    log: str | None = None
    """JSONL metrics file, one object per step."""
    log_every: int = ranged_field(0, default=10)
    """Print a progress line on stderr every N steps and after the last (step, loss, tokens/s, MFU, lr, ETA;
    ``zephyr.trainer.progress``); 0 prints none. The JSONL log still gets every step."""
    tensorboard_dir: str | None = None
    spike_factor: float = ranged_field(0, default=3.0)
    """Warn when a step's loss exceeds this multiple of the running mean; 0 disables the warning."""
    peak_tflops: float = ranged_field(0, default=0.0)
    """Peak dense TFLOPS per device for MFU; 0 looks it up from the device name (H100: 989 bf16)."""
    # ---- data loading (zephyr.tokenize.TokenLoader; docs/tokenize.md) ----
    packing: Literal["tokens", "documents", "best-fit"] = "tokens"
    """How documents become samples: concatenate and cut, whole documents padded, or best-fit bins."""
    mix: str | None = None
    """Mixture weights from token counts instead of ``data``'s: ``temperature:T`` or ``unimax:epochs=N``."""
    max_epochs: float | dict[str, float] | None = None
    """Cap on each source's repetition (one number, or ``{dir: epochs}``); capped sources stop being drawn."""
    mix_schedule: list | None = None
    """Weights by step, piecewise constant: ``[[step, {dir: weight}], ...]``."""
    mix_window: int = ranged_field(1, default=100)
    """Steps over which train.jsonl's ``mix_share`` (the realized share per source) is measured."""
    reweight: bool = False
    """On resume, apply this run's mixture weights from the resume step (without it a mismatch is an error)."""
    instance_filter: Literal["repetition"] | None = None
    """Mask the loss of samples with a token pattern repeated more than ``repetition_max_count`` times."""
    repetition_min_period: int = ranged_field(1, default=1)
    repetition_max_period: int = ranged_field(1, default=13)
    repetition_max_count: int = ranged_field(1, default=32)
    prefetch_shards: int = ranged_field(0, default=0)
    """Remote shards copied ahead of use into the cache by a background thread (0: none)."""
    cache_limit_bytes: int | None = None
    """Bound on the local cache of remote shards (least recently used verified copies are evicted)."""

    def __post_init__(self) -> None:
        problems = field_problems(self, "")
        problems += _data_problems(self)
        if isinstance(self.preset, str) and isinstance(self.model, dict):
            problems += _model_problems(self.preset, self.model)
        if problems:
            raise ConfigProblems(problems)

    # ---- construction ------------------------------------------------------------------------------------
    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> TrainConfig:
        """Build from plain data (parsed YAML/JSON); raises one ``ConfigProblems`` listing every bad key."""
        if not isinstance(raw, dict):
            raise ConfigProblems(
                [f"a training config must be a mapping of keys to values, got {describe_value(raw)}"]
            )
        problems = unknown_keys(raw, cls, "")
        values = {k: v for k, v in raw.items() if k in field_hints(cls)}
        optim_problems = []
        if isinstance(values.get("optim"), dict):
            optim_problems = unknown_keys(values["optim"], OptimConfig, "optim.")
            try:
                values["optim"] = OptimConfig(
                    **{k: v for k, v in values["optim"].items() if k in field_hints(OptimConfig)}
                )
            except ConfigProblems as exc:
                optim_problems += exc.problems
                values["optim"] = OptimConfig()  # stands in, so the other keys are still checked
        try:
            cfg = cls(**values)
        except ConfigProblems as exc:
            problems += exc.problems
        problems += optim_problems
        if problems:
            raise ConfigProblems(problems)
        return cfg

    @classmethod
    def from_yaml(cls, path: str | Path) -> TrainConfig:
        """Read a YAML (or JSON) config file; PyYAML is imported only here."""
        return cls.from_dict(read_config_file(path))

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def _data_problems(cfg: TrainConfig) -> list[str]:
    """Cross-field rules of the data-loading keys, each naming both sides."""
    problems = []
    sources = cfg.data if isinstance(cfg.data, dict) else {}
    if cfg.mix is not None and isinstance(cfg.mix, str) and not sources:
        problems.append("mix needs a mixture in data ({dir: weight}, or --data DIR repeated)")
    if isinstance(cfg.mix_schedule, list):
        for i, entry in enumerate(cfg.mix_schedule):
            ok = isinstance(entry, list | tuple) and len(entry) == 2 and isinstance(entry[0], int)
            if not ok or entry[0] < 0 or not isinstance(entry[1], dict) or set(entry[1]) != set(sources):
                problems.append(
                    f"mix_schedule[{i}] must be [step >= 0, {{dir: weight}} naming every data source "
                    f"{sorted(sources)}], got {describe_value(entry)}"
                )
    if isinstance(cfg.max_epochs, dict) and set(cfg.max_epochs) - set(sources):
        problems.append(f"max_epochs names {sorted(set(cfg.max_epochs) - set(sources))}, not in data")
    low, high = cfg.repetition_min_period, cfg.repetition_max_period
    if isinstance(low, int) and isinstance(high, int) and low > high:
        problems.append(f"repetition_min_period ({low}) must be <= repetition_max_period ({high})")
    return problems


def read_config_file(path: str | Path) -> dict[str, Any]:
    """The raw mapping in a YAML (or ``.json``) training config, unvalidated: the CLI lays its flags over it
    first, so a value a flag replaces is never checked (and never refused)."""
    return read_mapping(path, "training config")


def _model_problems(preset: str, overrides: dict[str, Any]) -> list[str]:
    try:
        base = get_preset(preset)
    except ConfigError as exc:
        return [str(exc)]
    try:
        model_config_from_dict(overrides, base)
    except ConfigProblems as exc:
        return exc.problems
    return []
