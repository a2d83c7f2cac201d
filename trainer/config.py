"""Configuration dataclasses for the MoE language model and its training run.

Configs are plain, frozen, serializable data; change them with ``dataclasses.replace``, never by mutation.

Validation happens before any work, in ``__post_init__`` (so ``dataclasses.replace`` and direct construction are
checked too): every field's type against its annotation, ranges declared on the field (``_range``), then
cross-field rules naming both sides. All problems are reported at once in one ``ConfigProblems`` (a
``ConfigError``), one line each, led by the key path as written in a config file::

    invalid training config (3 problems):
      steps must be an integer, got 'ten' (str)
      optim.lr must be a number, got [0.1] (list)
      model.moe.top_k must be >= 1, got 0

A wrong type would otherwise surface later as a ``TypeError`` from a comparison (``'<' not supported between
instances of 'str' and 'int'``) that names neither the key nor the file. ``ModelConfig.build()`` and ``TrainConfig`` are
consumed by ``zephyr.trainer.model.build_model`` and ``zephyr.trainer.train.train``.

YAML is optional: ``TrainConfig.from_yaml`` imports PyYAML lazily, so the trainer imports with torch, numpy and
fsspec alone.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

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

ScoreFunc = Literal["softmax", "sigmoid"]
Dispatch = Literal["auto", "grouped_mm", "loop", "capacity"]
AttentionBackend = Literal["auto", "flex", "sdpa"]
Schedule = Literal["cosine", "wsd", "constant"]
Balance = Literal["bias", "quantile", "aux"]


class ConfigProblems(ConfigError):
    """Every problem found in one config, one line each, each led by its key path (``optim.lr must be ...``).

    One problem reads as that line alone; several as ``invalid training config (N problems):`` and the lines.
    """

    def __init__(self, problems: list[str]):
        self.problems = list(problems)
        if len(self.problems) == 1:
            super().__init__(self.problems[0])
        else:
            super().__init__(
                f"invalid training config ({len(self.problems)} problems):\n  " + "\n  ".join(self.problems)
            )


def _range(
    low: float | None = None,
    high: float | None = None,
    *,
    low_open: bool = False,
    high_open: bool = False,
    sentinel: int | None = None,
    **kw: Any,
) -> Any:
    """A field whose value must lie within [low, high] (open ends as flagged); ``sentinel`` is also allowed."""
    limits = {"low": low, "high": high, "low_open": low_open, "high_open": high_open, "sentinel": sentinel}
    return field(metadata={"range": limits}, **kw)


def _range_problem(key: str, value: float, limits: dict[str, Any]) -> str | None:
    low, high = limits["low"], limits["high"]
    if value == limits["sentinel"]:
        return None
    ok = (
        not math.isnan(value)
        and (low is None or (value > low if limits["low_open"] else value >= low))
        and (high is None or (value < high if limits["high_open"] else value <= high))
    )
    if ok:
        return None
    if high is None:
        wanted = f"{'>' if limits['low_open'] else '>='} {low:g}"
    else:
        wanted = f"within {'(' if limits['low_open'] else '['}{low:g}, {high:g}{')' if limits['high_open'] else ']'}"
    if limits["sentinel"] is not None:
        wanted = f"{limits['sentinel']} or {wanted}"
    return f"{key} must be {wanted}, got {value!r}"


def _describe(hint: Any) -> str:
    """A type annotation in words, as a config file's author writes values (the pipelines config's wording)."""
    origin = typing.get_origin(hint)
    if origin is Literal:
        return "one of " + ", ".join(repr(a) for a in typing.get_args(hint))
    if origin in (typing.Union, types.UnionType):
        *arms, last = [_describe(a) for a in typing.get_args(hint)]
        return f"{', '.join(arms)} or {last}"
    if origin is dict:
        key, value = typing.get_args(hint)
        words = {str: "string", float: "number", int: "integer"}
        return "a mapping" if value is Any else f"a mapping {{{words[key]}: {words[value]}}}"
    if hint is type(None):
        return "null"
    if hint is list:
        return "a list"
    if dataclasses.is_dataclass(hint):
        return f"a mapping of {hint.__name__} keys"
    return {bool: "true or false", int: "an integer", float: "a number", str: "a string"}.get(hint, str(hint))


def _fits(value: Any, hint: Any) -> bool:
    """Whether ``value`` is of the annotated type: bool is not an integer, an integer is a number."""
    origin = typing.get_origin(hint)
    if hint is Any:
        return True
    if origin in (typing.Union, types.UnionType):
        return any(_fits(value, arm) for arm in typing.get_args(hint))
    if hint is type(None):
        return value is None
    if origin is Literal:
        return isinstance(value, str) and value in typing.get_args(hint)
    if origin is dict:
        key, item = typing.get_args(hint)
        return isinstance(value, dict) and all(_fits(k, key) and _fits(v, item) for k, v in value.items())
    if hint is list:
        return isinstance(value, list)
    if hint is bool:
        return isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if hint is float:
        return isinstance(value, int | float) and not isinstance(value, bool)
    return isinstance(value, hint)


def _got(value: Any) -> str:
    text = repr(value)
    if len(text) > 60:
        text = text[:57] + "..."
    hint = ""
    if isinstance(value, str):
        try:
            float(value)
        except ValueError:
            pass
        else:
            hint = "; write numbers unquoted"
            if "e" in value.lower() and "." not in value:  # YAML 1.1 (PyYAML) reads 3e-4 as text
                hint += ", with a dot before the exponent (3.0e-4)"
    return f"{text} ({type(value).__name__}){hint}"


@functools.cache
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _field_problems(obj: Any, prefix: str) -> list[str]:
    """Type and range problems of each field of the dataclass instance ``obj``, keys prefixed with ``prefix``."""
    problems = []
    hints = _hints(type(obj))
    for f in dataclasses.fields(obj):
        value, key = getattr(obj, f.name), prefix + f.name
        if not _fits(value, hints[f.name]):
            problems.append(f"{key} must be {_describe(hints[f.name])}, got {_got(value)}")
        elif "range" in f.metadata and (problem := _range_problem(key, value, f.metadata["range"])):
            problems.append(problem)
    return problems


def _unknown_keys(raw: dict[str, Any], cls: type, prefix: str) -> list[str]:
    known = [f.name for f in dataclasses.fields(cls)]
    return [
        f"{prefix}{key} is not a known key; allowed: {', '.join(sorted(known))}"
        for key in raw
        if key not in known
    ]


def _check(obj: Any, prefix: str, rules: Any) -> None:
    """Raise ``ConfigProblems`` with the field problems of ``obj``, or else those its cross-field ``rules`` find."""
    problems = _field_problems(obj, prefix)
    if not problems:
        problems = rules()
    if problems:
        raise ConfigProblems(problems)


@dataclass(frozen=True)
class MoEConfig:
    """The mixture-of-experts feed-forward layer (token-choice top-k routing)."""

    num_experts: int = _range(1, default=8)
    """Routed experts per MoE layer (E)."""
    top_k: int = _range(1, default=2)
    """Experts each token is sent to (K)."""
    expert_ffn_dim: int = _range(1, default=64)
    """Hidden width of one SwiGLU expert."""
    num_shared_experts: int = _range(0, default=0)
    """Experts every token passes through (DeepSeek-style); 0 disables them. They share one SwiGLU of width
    ``num_shared_experts * expert_ffn_dim``."""
    score_func: ScoreFunc = "softmax"
    """Router scoring: ``softmax`` over experts or an independent ``sigmoid`` per expert (DeepSeek-V3)."""
    route_norm: bool = False
    """Renormalize the K selected scores to sum to 1 (DeepSeek-V3 does this with sigmoid scoring)."""
    route_scale: float = _range(0, low_open=True, default=1.0)
    """Multiplier on the routing weights."""
    balance: Balance = "bias"
    """How expert load is balanced. ``bias``: aux-loss-free balancing (DeepSeek-V3), each step every expert bias
    moves by ``bias_update_rate`` towards balance. ``quantile``: Quantile Balancing (``zephyr.trainer.balance``),
    each step the bias is set to the one that would have balanced that step's tokens; no rate to tune.
    ``aux``: no bias, the sequence-level balance loss alone (needs ``balance_loss_weight`` > 0). The balance
    loss can be added to ``bias`` and ``quantile`` too."""
    bias_update_rate: float = _range(0, default=1e-3)
    """``balance: bias`` only: after each optimizer step every expert bias moves by this amount towards balance,
    ``bias += rate * sign(mean_load - load)``. 0 disables it (the bias stays 0)."""
    balance_loss_weight: float = _range(0, default=0.0)
    """Weight α of the sequence-level balance loss (DeepSeek-V3 eq. 17-20); 0 disables it. Keep it tiny (1e-4)."""
    dispatch: Dispatch = "auto"
    """``grouped_mm`` (dropless, one ``torch._grouped_mm`` per projection), ``loop`` (dropless, one matmul per
    expert; the exact fallback for devices without grouped_mm such as XPU), ``capacity`` (fixed expert capacity,
    static shapes for torch_xla; overflow tokens are dropped and counted) or ``auto`` (chosen by device)."""
    capacity_factor: float = _range(0, low_open=True, default=1.25)
    """``capacity`` dispatch only: slots per expert = ceil(capacity_factor * tokens * K / E)."""

    def __post_init__(self) -> None:
        _check(self, "model.moe.", self._rules)

    def _rules(self) -> list[str]:
        if self.top_k > self.num_experts:
            return [f"model.moe.top_k ({self.top_k}) must be <= model.moe.num_experts ({self.num_experts})"]
        if self.balance == "quantile" and self.top_k == self.num_experts:
            return [
                f"model.moe.balance=quantile needs model.moe.top_k ({self.top_k}) < model.moe.num_experts "
                f"({self.num_experts}): with every expert chosen there is nothing to balance"
            ]
        if self.balance == "aux" and self.balance_loss_weight == 0:
            return [
                "model.moe.balance=aux needs model.moe.balance_loss_weight > 0 (it is the only balancing), "
                "e.g. --balance-loss-weight 1.0e-3"
            ]
        return []


@dataclass(frozen=True)
class ModelConfig:
    """A decoder-only transformer: RMSNorm, RoPE, attention with document masks, SwiGLU or MoE FFN."""

    vocab_size: int = _range(1, default=256)
    d_model: int = _range(1, default=64)
    n_layers: int = _range(1, default=2)
    n_heads: int = _range(1, default=4)
    n_kv_heads: int = _range(1, sentinel=-1, default=-1)
    """Key/value heads (grouped-query attention); -1 means ``n_heads`` (plain multi-head attention)."""
    qk_norm: bool = False
    """RMSNorm on queries and keys per head before RoPE (stabilizes attention logits)."""
    rope_theta: float = _range(0, low_open=True, default=10000.0)
    norm_eps: float = _range(0, low_open=True, default=1e-6)
    dense_ffn_dim: int = _range(1, default=256)
    """SwiGLU width of dense layers (all layers when ``moe`` is None, else the first ``n_dense_layers``)."""
    n_dense_layers: int = _range(0, default=0)
    """Leading layers that use a dense FFN even when ``moe`` is set (DeepSeek keeps the first few dense)."""
    moe: MoEConfig | None = field(default_factory=MoEConfig)
    """The MoE FFN; None makes every layer dense."""
    tie_embeddings: bool = False
    init_std: float = _range(0, low_open=True, default=0.02)
    attention: AttentionBackend = "auto"
    """``flex`` (FlexAttention block mask; CUDA), ``sdpa`` (SDPA with an explicit boolean mask; any device) or
    ``auto`` (flex on CUDA, sdpa elsewhere)."""

    def __post_init__(self) -> None:
        _check(self, "model.", self._rules)

    def _rules(self) -> list[str]:
        problems = []
        if self.d_model % self.n_heads:
            problems.append(
                f"model.d_model ({self.d_model}) must be divisible by model.n_heads ({self.n_heads})"
            )
        elif self.head_dim % 2:
            problems.append(
                f"model.d_model / model.n_heads ({self.d_model} / {self.n_heads} = {self.head_dim}) must be even "
                "for RoPE"
            )
        if self.n_heads % self.kv_heads:
            problems.append(
                f"model.n_heads ({self.n_heads}) must be a multiple of model.n_kv_heads ({self.n_kv_heads})"
            )
        if self.n_dense_layers > self.n_layers:
            problems.append(
                f"model.n_dense_layers ({self.n_dense_layers}) must be <= model.n_layers ({self.n_layers})"
            )
        return problems

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_heads

    @property
    def kv_heads(self) -> int:
        return self.n_heads if self.n_kv_heads == -1 else self.n_kv_heads

    def is_moe_layer(self, layer: int) -> bool:
        return self.moe is not None and layer >= self.n_dense_layers


@dataclass(frozen=True)
class OptimConfig:
    """AdamW with warmup and a cosine or warmup-stable-decay (WSD) schedule."""

    lr: float = _range(0, low_open=True, default=3e-4)
    min_lr_ratio: float = _range(0, 1, default=0.1)
    """The final learning rate as a fraction of ``lr`` (cosine floor, WSD end point)."""
    warmup_steps: int = _range(0, default=100)
    schedule: Schedule = "cosine"
    decay_fraction: float = _range(0, 1, low_open=True, default=0.2)
    """WSD only: the last fraction of the steps decays linearly to ``min_lr_ratio * lr``."""
    weight_decay: float = _range(0, default=0.1)
    beta1: float = _range(0, 1, high_open=True, default=0.9)
    beta2: float = _range(0, 1, high_open=True, default=0.95)
    eps: float = _range(0, low_open=True, default=1e-8)
    grad_clip: float = _range(0, default=1.0)
    """Clip the global gradient norm to this; 0 disables clipping (the norm is still logged)."""

    def __post_init__(self) -> None:
        _check(self, "optim.", list)


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
    steps: int = _range(1, default=100)
    batch_size: int = _range(1, default=8)
    """Sequences per micro-batch per rank."""
    seq_len: int = _range(1, default=256)
    grad_accum: int = _range(1, default=1)
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
    seed: int = _range(0, default=0)
    """Seeds initialization and data order (numpy seeds must be >= 0)."""
    checkpoint_dir: str | None = None
    """Where step-N checkpoints go; an existing ``latest`` there is resumed."""
    checkpoint_every: int = _range(0, default=0)
    """Save every K steps (and at the end); 0 saves only at the end (when checkpoint_dir is set)."""
    keep_checkpoints: int = _range(0, default=2)
    """Checkpoints kept on disk; older ones are deleted after a successful save. 0 keeps all."""
    log: str | None = None
    """JSONL metrics file, one object per step."""
    log_every: int = _range(0, default=10)
    """Print a progress line on stderr every N steps and after the last (step, loss, tokens/s, MFU, lr, ETA;
    ``zephyr.trainer.progress``); 0 prints none. The JSONL log still gets every step."""
    tensorboard_dir: str | None = None
    spike_factor: float = _range(0, default=3.0)
    """Warn when a step's loss exceeds this multiple of the running mean; 0 disables the warning."""
    peak_tflops: float = _range(0, default=0.0)
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
    mix_window: int = _range(1, default=100)
    """Steps over which train.jsonl's ``mix_share`` (the realized share per source) is measured."""
    reweight: bool = False
    """On resume, apply this run's mixture weights from the resume step (without it a mismatch is an error)."""
    instance_filter: Literal["repetition"] | None = None
    """Mask the loss of samples with a token pattern repeated more than ``repetition_max_count`` times."""
    repetition_min_period: int = _range(1, default=1)
    repetition_max_period: int = _range(1, default=13)
    repetition_max_count: int = _range(1, default=32)
    prefetch_shards: int = _range(0, default=0)
    """Remote shards copied ahead of use into the cache by a background thread (0: none)."""
    cache_limit_bytes: int | None = None
    """Bound on the local cache of remote shards (least recently used verified copies are evicted)."""

    def __post_init__(self) -> None:
        problems = _field_problems(self, "")
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
            raise ConfigProblems([f"a training config must be a mapping of keys to values, got {_got(raw)}"])
        problems = _unknown_keys(raw, cls, "")
        values = {k: v for k, v in raw.items() if k in _hints(cls)}
        optim_problems = []
        if isinstance(values.get("optim"), dict):
            optim_problems = _unknown_keys(values["optim"], OptimConfig, "optim.")
            try:
                values["optim"] = OptimConfig(
                    **{k: v for k, v in values["optim"].items() if k in _hints(OptimConfig)}
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
                    f"{sorted(sources)}], got {_got(entry)}"
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
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise ConfigError(f"cannot read training config {path}: {exc.strerror or exc}") from None
    if str(path).endswith(".json"):
        try:
            raw = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ConfigError(f"{path}: not valid JSON ({exc})") from None
    else:
        try:
            import yaml
        except ImportError as exc:  # pragma: no cover - pyyaml is a project dependency
            raise ConfigError(f"reading {path} needs PyYAML: pip install pyyaml") from exc
        try:
            raw = yaml.safe_load(text) or {}
        except yaml.YAMLError as exc:
            raise ConfigError(f"{path}: not valid YAML ({' '.join(str(exc).split())})") from None
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: a training config must be a mapping of keys to values")
    return raw


def _model_problems(preset: str, overrides: dict[str, Any]) -> list[str]:
    from zephyr.trainer.presets import get_preset  # presets imports this module

    try:
        base = get_preset(preset)
    except ConfigError as exc:
        return [str(exc)]
    try:
        model_config_from_dict(overrides, base)
    except ConfigProblems as exc:
        return exc.problems
    return []


def model_config_from_dict(raw: dict[str, Any], base: ModelConfig) -> ModelConfig:
    """Apply plain-data overrides (nested ``moe`` dict allowed; ``moe: null`` makes the model dense); raises one
    ``ConfigProblems`` listing every bad key."""
    problems = _unknown_keys(raw, ModelConfig, "model.")
    values = {k: v for k, v in raw.items() if k in _hints(ModelConfig)}
    if isinstance(values.get("moe"), dict):
        moe = values["moe"]
        problems += _unknown_keys(moe, MoEConfig, "model.moe.")
        try:
            values["moe"] = dataclasses.replace(
                base.moe or MoEConfig(), **{k: v for k, v in moe.items() if k in _hints(MoEConfig)}
            )
        except ConfigProblems as exc:
            problems += exc.problems
            values["moe"] = base.moe  # stands in, so the other keys are still checked
    try:
        model = dataclasses.replace(base, **values)
    except ConfigProblems as exc:
        problems += exc.problems
    if problems:
        raise ConfigProblems(problems)
    return model
