"""The trainer's configuration: the model (``ModelConfig``, its mixture of experts ``MoEConfig``), the named
model presets, the optimizer (``OptimConfig``), one training run (``TrainConfig``) and ``zephyr train check``'s
own settings (``CheckConfig``).

Configs are plain, frozen, serializable data; change them with ``dataclasses.replace``, never by mutation.
Every field documents itself where it is declared, and that text is the help of its ``zephyr train`` flag
(``zephyr.flags``: ``--batch-size`` for ``batch_size``, ``--lr`` for ``optim.lr``, ``--top-k`` for
``model.moe.top_k``).

Validation happens before any work, in ``__post_init__`` (so ``dataclasses.replace`` and direct construction are
checked too; ``zephyr.config``): every field's type against its annotation, ranges declared on the
field (``ranged_field``), then cross-field rules naming both sides. All problems are reported at once in one
``ConfigProblems`` (a ``ConfigError``), one line each, led by the key path as written in a config file::

    invalid training config (3 problems):
      steps must be an integer, got 'ten' (str)
      optim.lr must be a number, got [0.1] (list)
      model.moe.top_k must be >= 1, got 0

A wrong type would otherwise surface later as a ``TypeError`` from a comparison (``'<' not supported between
instances of 'str' and 'int'``) that names neither the key nor the file.

Named model presets, from ``tiny`` (CPU tests, milliseconds per step) to ``moe-1b`` (≈1.1B total parameters).
Parameter counts (``count_params`` builds each model on the meta device; tests/trainer/test_model.py checks
moe-785m):

============ ======= ====== ====== ======= ===== ============ =============
preset       d_model layers heads  experts top-k total params active params
============ ======= ====== ====== ======= ===== ============ =============
tiny         64      2      4      8 (+1)  2     0.32M        0.14M
tiny-dense   64      2      4      dense   –     0.17M        0.14M
small        256     4      4      16      2     39.4M        15.5M
moe-785m     768     12     12     32      4     785.4M       152.2M
moe-1b       1024    12     16     32 (+1) 4     1.09B        243.8M
============ ======= ====== ====== ======= ===== ============ =============

(+1) = one shared expert.
"Active" counts what one token touches, excluding the input embedding table (a lookup, no FLOPs) but
including the output head: the convention of torchtitan's ``get_nparams_and_flops``, used for MFU.

Standard library only (and ``zephyr.config``): ``zephyr --help`` builds the flags from these classes, and the
trainer imports with torch, numpy and fsspec alone; a YAML config file is read with PyYAML (``zephyr.config.read_mapping``).
``ModelConfig.build()``'s consumer is ``zephyr.trainer.model.build_model``; ``TrainConfig``'s is
``zephyr.trainer.train.train``.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Literal

from zephyr.config import (
    ConfigProblems,
    check_fields,
    describe_value,
    field_hints,
    field_problems,
    parse_value,
    ranged_field,
    unknown_keys,
)
from zephyr.errors import ConfigError

Dispatch = Literal["auto", "grouped_mm", "loop", "capacity"]


@dataclass(frozen=True)
class MoEConfig:
    """The mixture-of-experts feed-forward layer (token-choice top-k routing)."""

    num_experts: int = ranged_field(1, default=8)
    """Routed experts per MoE layer (E)."""
    top_k: int = ranged_field(1, default=2)
    """Experts each token is sent to (K)."""
    expert_ffn_dim: int = ranged_field(1, default=64)
    """Hidden width of one SwiGLU expert."""
    num_shared_experts: int = ranged_field(0, default=0)
    """Experts every token passes through (DeepSeek-style); 0 disables them. They share one SwiGLU of width
    ``num_shared_experts * expert_ffn_dim``."""
    score_func: Literal["softmax", "sigmoid"] = "softmax"
    """Router scoring: ``softmax`` over experts or an independent ``sigmoid`` per expert (DeepSeek-V3)."""
    route_norm: bool = False
    """Renormalize the K selected scores to sum to 1 (DeepSeek-V3 does this with sigmoid scoring)."""
    route_scale: float = ranged_field(0, low_open=True, default=1.0)
    """Multiplier on the routing weights."""
    balance: Literal["bias", "quantile", "aux"] = "bias"
    """How expert load is balanced. ``bias``: aux-loss-free balancing (DeepSeek-V3), each step every expert bias
    moves by ``bias_update_rate`` towards balance. ``quantile``: Quantile Balancing (``zephyr.trainer.moe``),
    each step the bias is set to the one that would have balanced that step's tokens; no rate to tune.
    ``aux``: no bias, the sequence-level balance loss alone (needs ``balance_loss_weight`` > 0). The balance
    loss can be added to ``bias`` and ``quantile`` too."""
    bias_update_rate: float = ranged_field(0, default=1e-3)
    """``balance: bias`` only: after each optimizer step every expert bias moves by this amount towards balance,
    ``bias += rate * sign(mean_load - load)``. 0 disables it (the bias stays 0)."""
    balance_loss_weight: float = ranged_field(0, default=0.0)
    """Weight α of the sequence-level balance loss (DeepSeek-V3 eq. 17-20); 0 disables it. Keep it tiny (1e-4)."""
    dispatch: Dispatch = "auto"
    """``grouped_mm`` (dropless, one ``torch._grouped_mm`` per projection), ``loop`` (dropless, one matmul per
    expert; the exact fallback for devices without grouped_mm such as XPU), ``capacity`` (fixed expert capacity,
    static shapes for torch_xla; overflow tokens are dropped and counted) or ``auto`` (chosen by device)."""
    capacity_factor: float = ranged_field(0, low_open=True, default=1.25)
    """``capacity`` dispatch only: slots per expert = ceil(capacity_factor * tokens * K / E)."""

    def __post_init__(self) -> None:
        check_fields(self, "model.moe.", self._rules)

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

    vocab_size: int = ranged_field(1, default=256)
    """Ids of the vocabulary (embedding rows, output columns); a preset's is widened to cover the data's
    tokenizer unless it is given."""
    d_model: int = ranged_field(1, default=64)
    """Model width (D)."""
    n_layers: int = ranged_field(1, default=2)
    """Transformer blocks."""
    n_heads: int = ranged_field(1, default=4)
    """Query heads of each attention layer; ``d_model`` must be a multiple of it."""
    n_kv_heads: int = ranged_field(1, sentinel=-1, default=-1)
    """Key/value heads (grouped-query attention); -1 means ``n_heads`` (plain multi-head attention)."""
    qk_norm: bool = False
    """RMSNorm on queries and keys per head before RoPE (stabilizes attention logits)."""
    rope_theta: float = ranged_field(0, low_open=True, default=10000.0)
    """Base of the rotary embedding's frequencies."""
    norm_eps: float = ranged_field(0, low_open=True, default=1e-6)
    """Epsilon of every RMSNorm."""
    dense_ffn_dim: int = ranged_field(1, default=256)
    """SwiGLU width of dense layers (all layers when ``moe`` is None, else the first ``n_dense_layers``)."""
    n_dense_layers: int = ranged_field(0, default=0)
    """Leading layers that use a dense FFN even when ``moe`` is set (DeepSeek keeps the first few dense)."""
    moe: MoEConfig | None = field(default_factory=MoEConfig)
    """The MoE FFN; None makes every layer dense."""
    tie_embeddings: bool = False
    """Share the input embedding table with the output head."""
    init_std: float = ranged_field(0, low_open=True, default=0.02)
    """Standard deviation of the normal initialization (each block's output projections: divided by
    sqrt(2 * n_layers))."""
    attention: Literal["auto", "flex", "sdpa"] = "auto"
    """``flex`` (FlexAttention block mask; CUDA), ``sdpa`` (SDPA with an explicit boolean mask; any device) or
    ``auto`` (flex on CUDA, sdpa elsewhere)."""

    def __post_init__(self) -> None:
        check_fields(self, "model.", self._rules)

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


def model_config_from_dict(raw: dict[str, Any], base: ModelConfig) -> ModelConfig:
    """Apply plain-data overrides (nested ``moe`` dict allowed; ``moe: null`` makes the model dense); raises one
    ``ConfigProblems`` listing every bad key."""
    return _overridden(base, raw, "model.")


def _overridden(base: Any, raw: dict[str, Any], prefix: str, problems: list[str] | None = None) -> Any:
    """``base`` with the keys of ``raw`` over it; a mapping given for a field whose default is a config
    (``model.moe``, ``optim``) overrides that config the same way (its defaults where ``base`` has None).
    Unknown keys and bad values go to ``problems`` (then ``base`` stands in, so the keys around it are still
    checked); without ``problems``, they are raised at once in one ``ConfigProblems``."""
    found: list[str] = [] if problems is None else problems
    cls, nested = type(base), []  # the nested configs' problems are listed after this one's
    found += unknown_keys(raw, field_hints(cls), prefix)
    values = {k: v for k, v in raw.items() if k in field_hints(cls)}
    for f in dataclasses.fields(cls):
        default = f.default_factory() if f.default_factory is not dataclasses.MISSING else None
        if isinstance(values.get(f.name), dict) and dataclasses.is_dataclass(default):
            inner = getattr(base, f.name) or default
            values[f.name] = _overridden(inner, values[f.name], f"{prefix}{f.name}.", nested)
    try:
        result = dataclasses.replace(base, **values)
    except ConfigProblems as exc:
        found += exc.problems
        result = base
    found += nested
    if problems is None and found:
        raise ConfigProblems(found)
    return result


PRESETS: dict[str, ModelConfig] = {
    "tiny": ModelConfig(
        vocab_size=512,
        d_model=64,
        n_layers=2,
        n_heads=4,
        dense_ffn_dim=128,
        moe=MoEConfig(num_experts=8, top_k=2, expert_ffn_dim=64, num_shared_experts=1),
    ),
    "tiny-dense": ModelConfig(vocab_size=512, d_model=64, n_layers=2, n_heads=4, dense_ffn_dim=192, moe=None),
    "small": ModelConfig(
        vocab_size=50304,
        d_model=256,
        n_layers=4,
        n_heads=4,
        qk_norm=True,
        moe=MoEConfig(num_experts=16, top_k=2, expert_ffn_dim=256),
    ),
    # 785.3M total / 152.1M active: attention 4·768² and 32 SwiGLU experts of 3·768² per layer, untied head.
    "moe-785m": ModelConfig(
        vocab_size=50304,
        d_model=768,
        n_layers=12,
        n_heads=12,
        moe=MoEConfig(num_experts=32, top_k=4, expert_ffn_dim=768, score_func="softmax"),
    ),
    "moe-1b": ModelConfig(
        vocab_size=50304,
        d_model=1024,
        n_layers=12,
        n_heads=16,
        qk_norm=True,
        moe=MoEConfig(
            num_experts=32,
            top_k=4,
            expert_ffn_dim=768,
            num_shared_experts=1,
            score_func="sigmoid",
            route_norm=True,
        ),
    ),
}


def get_preset(name: str) -> ModelConfig:
    """The preset called ``name``; an unknown name raises listing the known ones."""
    try:
        return PRESETS[name]
    except KeyError:
        raise ConfigError(f"unknown model preset {name!r}; choose one of {sorted(PRESETS)}") from None


@dataclass(frozen=True)
class OptimConfig:
    """AdamW with warmup and a cosine or warmup-stable-decay (WSD) schedule."""

    lr: float = ranged_field(0, low_open=True, default=3e-4)
    """Peak learning rate, reached at the end of the warmup."""
    min_lr_ratio: float = ranged_field(0, 1, default=0.1)
    """The final learning rate as a fraction of ``lr`` (cosine floor, WSD end point)."""
    warmup_steps: int = ranged_field(0, default=100)
    """Steps of linear warmup to ``lr``."""
    schedule: Literal["cosine", "wsd", "constant"] = "cosine"
    """After the warmup: ``cosine`` to ``min_lr_ratio * lr``, ``wsd`` (warmup-stable-decay) or ``constant``."""
    decay_fraction: float = ranged_field(0, 1, low_open=True, default=0.2)
    """WSD only: the last fraction of the steps decays linearly to ``min_lr_ratio * lr``."""
    weight_decay: float = ranged_field(0, default=0.1)
    """AdamW weight decay, on matrices only (norm scales are not decayed)."""
    beta1: float = ranged_field(0, 1, high_open=True, default=0.9)
    """AdamW beta1."""
    beta2: float = ranged_field(0, 1, high_open=True, default=0.95)
    """AdamW beta2."""
    eps: float = ranged_field(0, low_open=True, default=1e-8)
    """AdamW epsilon."""
    grad_clip: float = ranged_field(0, default=1.0)
    """Clip the global gradient norm to this; 0 disables clipping (the norm is still logged)."""

    def __post_init__(self) -> None:
        check_fields(self, "optim.", list)


def per_source(
    values: list[str], number: str, *, alone: float | None = None, hint: str = ""
) -> dict[str, float]:
    """``DIR=NUMBER`` items (``--data``, ``--max-epochs``) as ``{DIR: NUMBER}``; a ``DIR`` alone counts ``alone``
    (refused when None, the message ending in ``hint``)."""
    out: dict[str, float] = {}
    for item in values:
        path, sep, value = item.rpartition("=")
        if not sep and alone is None:
            raise ConfigError(f"{item!r}: give DIR={number} for every source{hint}")
        try:
            out[path if sep else item] = float(value) if sep else alone
        except ValueError:
            raise ConfigError(f"{item!r}: {number.lower()} {value!r} is not a number") from None
    return out


def _set_value(value: Any) -> Any:
    """A flag's value read as ``--set`` reads one (``zephyr.config.parse_value``: JSON, else YAML, else text);
    a parsed value (the CLI lays the flags over a config file after parsing them) is taken as it is."""
    return parse_value(value) if isinstance(value, str) else value


def _max_epochs_flag(values: list[str]) -> float | dict[str, float]:
    """``--max-epochs 4`` (every source) or ``--max-epochs code/=2 --max-epochs web/=1``; a parsed value (the
    CLI lays the flags over a config file after parsing them) is taken as it is."""
    if not isinstance(values, list):
        return values
    if len(values) == 1 and "=" not in values[0]:
        try:
            return float(values[0])
        except ValueError:
            raise ConfigError(f"{values[0]!r} is not a number") from None
    return per_source(values, "EPOCHS", hint=" (or one number for all)")


@dataclass(frozen=True)
class TrainConfig:
    """One training run. Every field is also a ``zephyr train`` flag (``--batch-size`` for ``batch_size``)."""

    data: str | dict[str, float] | None = field(
        default=None, metadata={"repeat": True, "metavar": "DIR[=WEIGHT]"}
    )
    """Token-shard directory, or a mixture ``{dir: weight}`` (``--data DIR=WEIGHT`` repeated); None trains on
    a synthetic token stream."""
    preset: str = "tiny"
    """Named model preset: tiny, tiny-dense, small, moe-785m or moe-1b (``PRESETS``); ``model`` overrides its
    fields."""
    model: dict[str, Any] = field(default_factory=dict, metadata={"overrides": ModelConfig})
    """Overrides of the preset's ``ModelConfig`` fields, e.g. ``{"moe": {"top_k": 2}, "qk_norm": True}``."""
    optim: OptimConfig = field(default_factory=OptimConfig)
    """The optimizer and its learning-rate schedule."""
    steps: int = ranged_field(1, default=100)
    """Optimizer steps in total (a resumed run continues up to this)."""
    batch_size: int = ranged_field(1, default=8)
    """Sequences per micro-batch per rank."""
    seq_len: int = ranged_field(1, default=256)
    """Tokens per sequence."""
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
    ``zephyr.trainer.metrics``); 0 prints none. The JSONL log still gets every step."""
    tensorboard_dir: str | None = None
    """TensorBoard log directory (needs tensorboard installed)."""
    spike_factor: float = ranged_field(0, default=3.0)
    """Warn when a step's loss exceeds this multiple of the running mean; 0 disables the warning."""
    peak_tflops: float = ranged_field(0, default=0.0)
    """Peak dense TFLOPS per device for MFU; 0 looks it up from the device name (H100: 989 bf16)."""
    # ---- data loading (zephyr.tokenize.TokenLoader; docs/tokenize.md) ----
    packing: Literal["tokens", "documents", "best-fit"] = "tokens"
    """How documents become samples: concatenate and cut, whole documents padded, or best-fit bins."""
    mix: str | None = None
    """Mixture weights from token counts instead of ``data``'s: ``temperature:T`` or ``unimax:epochs=N``."""
    max_epochs: float | dict[str, float] | None = field(
        default=None, metadata={"repeat": True, "parse": _max_epochs_flag, "metavar": "EPOCHS|DIR=EPOCHS"}
    )
    """Cap on each source's repetition (one number, or ``{dir: epochs}``); capped sources stop being drawn."""
    mix_schedule: list | None = field(default=None, metadata={"parse": _set_value, "metavar": "JSON"})
    """Weights by step, piecewise constant: ``[[step, {dir: weight}], ...]``."""
    mix_window: int = ranged_field(1, default=100)
    """Steps over which train.jsonl's ``mix_share`` (the realized share per source) is measured."""
    reweight: bool = False
    """On resume, apply this run's mixture weights from the resume step (without it a mismatch is an error)."""
    instance_filter: Literal["repetition"] | None = None
    """Mask the loss of samples with a token pattern repeated more than ``repetition_max_count`` times."""
    repetition_min_period: int = ranged_field(1, default=1)
    """Repetition filter: the shortest pattern, in tokens."""
    repetition_max_period: int = ranged_field(1, default=13)
    """Repetition filter: the longest pattern, in tokens."""
    repetition_max_count: int = ranged_field(1, default=32)
    """Repetition filter: a pattern repeated more than this many times in a row flags the sample."""
    prefetch_shards: int = ranged_field(0, default=0)
    """Remote shards copied ahead of use into the cache by a background thread (0: none)."""
    cache_limit_bytes: int | None = None
    """Bound on the local cache of remote shards (least recently used verified copies are evicted)."""

    def __post_init__(self) -> None:
        problems = field_problems(self, "")
        problems += _data_problems(self)
        if isinstance(self.preset, str) and isinstance(self.model, dict):
            try:  # the preset's name, then the overrides of its fields
                model_config_from_dict(self.model, get_preset(self.preset))
            except ConfigProblems as exc:
                problems += exc.problems
            except ConfigError as exc:
                problems.append(str(exc))
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
        return _overridden(cls(), raw, "")


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


DISPATCHES = ("grouped_mm", "loop", "capacity")
"""The MoE dispatches ``zephyr train check`` can trace."""


@dataclass(frozen=True)
class CheckConfig:
    """What ``zephyr train check`` measures and judges, beside the training run it checks (a ``TrainConfig``).
    Every field is also a flag of ``zephyr train check``."""

    dispatch: str = field(default=",".join(DISPATCHES), metadata={"metavar": "DISPATCH[,DISPATCH]"})
    """MoE dispatches to trace, comma-separated (default: all three); the device's default is always one."""
    device_memory: str = field(default="80GiB", metadata={"bytes": True})
    """Memory of one device (80GiB: an H100); the run's estimated peak must fit in it."""
    gpu: str = "H100"
    """Device whose peak bf16 FLOPS the MFU uses (H100, H200, A100, B200...); --peak-tflops overrides it."""
    target_mfu: float = ranged_field(0, 1, low_open=True, default=0.30)
    """The MFU whose step time is reported."""
    step_time: float | None = None
    """A measured step time in seconds: report its MFU."""
    measure_memory: bool = True
    """Check the memory estimator against a small real step on the CPU (~30 s)."""

    def __post_init__(self) -> None:
        check_fields(self, "", self._rules)

    def _rules(self) -> list[str]:
        problems = []
        if not self.dispatches or set(self.dispatches) - set(DISPATCHES):
            problems.append(f"dispatch {self.dispatch!r}: choose among {', '.join(DISPATCHES)}")
        if self.step_time is not None and self.step_time <= 0:
            problems.append(f"step_time must be > 0 seconds, got {self.step_time}")
        return problems

    @property
    def dispatches(self) -> tuple[str, ...]:
        """The dispatches of ``dispatch``, in order."""
        return tuple(d.strip() for d in self.dispatch.split(",") if d.strip())

    @property
    def device_memory_bytes(self) -> int:
        from zephyr.config import parse_bytes

        return parse_bytes(self.device_memory)
