"""The training run's flags, shared by ``zephyr train`` and ``zephyr train check``: every ``TrainConfig`` key as
a flag, and their merge over a config file into one validated ``TrainConfig``.

Apart from ``zephyr.trainer.cli`` because ``zephyr train`` registers ``zephyr train check``
(``zephyr.trainer.check.cli``) and both parse the same flags: with the flags in the train CLI, the two CLI
modules imported each other. ``TrainConfig`` is imported inside ``config_from_args``, so ``zephyr --help``
loads no torch.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from zephyr.config import parse_value
from zephyr.errors import ConfigError

__all__ = ["add_run_arguments", "config_from_args"]

_TOP = {  # flag dest -> (type, help)
    "preset": (str, "model preset: tiny, tiny-dense, small, moe-785m, moe-1b"),
    "steps": (int, "optimizer steps in total (a resumed run continues up to this)"),
    "batch_size": (int, "sequences per micro-batch per device"),
    "seq_len": (int, "tokens per sequence"),
    "grad_accum": (int, "micro-batches per optimizer step"),
    "device": (str, "auto, cuda, xpu, cpu or xla (experimental)"),
    "dtype": (str, "auto (bf16 on accelerators, fp32 on CPU), bf16 or fp32"),
    "seed": (int, "seed for initialization and data order"),
    "checkpoint_dir": (str, "checkpoint directory; an existing checkpoint there is resumed"),
    "checkpoint_every": (int, "save every K steps (0: only at the end)"),
    "keep_checkpoints": (int, "checkpoints kept on disk (0: all)"),
    "log": (str, "JSONL metrics file, one object per step"),
    "log_every": (int, "a progress line on stderr every N steps: loss, tokens/s, MFU, lr, ETA (0: none)"),
    "tensorboard_dir": (str, "TensorBoard log directory (needs tensorboard installed)"),
    "spike_factor": (float, "warn when loss > this x running mean"),
    "peak_tflops": (float, "peak TFLOPS per device for MFU (default: looked up, H100 = 989)"),
    "packing": (str, "tokens (concatenate and cut), documents (padded) or best-fit (bins; docs/tokenize.md)"),
    "mix": (str, "mixture weights from token counts: temperature:T or unimax:epochs=N"),
    "mix_window": (int, "steps over which the realized mix share is logged"),
    "instance_filter": (str, "repetition: mask the loss of samples with a repeated token pattern"),
    "repetition_min_period": (int, "repetition filter: shortest pattern (tokens)"),
    "repetition_max_period": (int, "repetition filter: longest pattern (tokens)"),
    "repetition_max_count": (int, "repetition filter: more repeats than this flag a sample"),
    "prefetch_shards": (int, "remote shards copied ahead of use (0: none)"),
    "cache_limit_bytes": (int, "bound on the local cache of remote shards"),
}
_OPTIM = {
    "lr": (float, "peak learning rate"),
    "min_lr_ratio": (float, "final lr as a fraction of --lr"),
    "warmup_steps": (int, "linear warmup steps"),
    "schedule": (str, "cosine, wsd or constant"),
    "decay_fraction": (float, "WSD: fraction of steps in the final decay"),
    "weight_decay": (float, "AdamW weight decay (matrices only)"),
    "beta1": (float, "AdamW beta1"),
    "beta2": (float, "AdamW beta2"),
    "eps": (float, "AdamW epsilon"),
    "grad_clip": (float, "clip the global grad norm to this (0: no clipping)"),
}
_MODEL = {
    "vocab_size": (int, "model vocabulary (default: the preset's, widened to the data's tokenizer)"),
    "attention": (str, "auto, flex or sdpa"),
}
_MOE = {
    "dispatch": (str, "MoE dispatch: auto, grouped_mm, loop or capacity"),
    "capacity_factor": (float, "capacity dispatch: slots per expert relative to an even split"),
    "balance": (
        str,
        "router load balancing: bias (aux-loss-free, the default), quantile (Quantile Balancing) or aux",
    ),
    "bias_update_rate": (float, "--balance bias: bias step per optimizer step"),
    "balance_loss_weight": (float, "weight of the sequence-level balance loss (needed by --balance aux)"),
}


def add_run_arguments(p: argparse.ArgumentParser, *, skip: tuple[str, ...] = ()) -> None:
    """The config file and every ``TrainConfig`` flag (those in ``skip`` left out), for train and check."""
    p.add_argument("config", nargs="?", default=None, help="YAML/JSON training config (flags override it)")
    S = argparse.SUPPRESS
    p.add_argument(
        "--data",
        action="append",
        default=S,
        metavar="DIR[=WEIGHT]",
        help="token-shard directory; repeat with =WEIGHT for a mixture; omit for synthetic tokens",
    )
    p.add_argument(
        "--max-epochs",
        dest="max_epochs",
        action="append",
        default=S,
        metavar="EPOCHS|DIR=EPOCHS",
        help="cap on each source's repetition: one number, or DIR=EPOCHS (repeatable)",
    )
    p.add_argument(
        "--mix-schedule",
        dest="mix_schedule",
        default=S,
        metavar="JSON",
        help='weights by step, e.g. \'[[0, {"web/": 0.9, "code/": 0.1}], [1000, {"web/": 0.5, "code/": 0.5}]]\'',
    )
    p.add_argument(
        "--reweight",
        dest="reweight",
        action=argparse.BooleanOptionalAction,
        default=S,
        help="on resume, apply this run's mixture weights (else a mismatch with the checkpoint is an error)",
    )
    for table in (_TOP, _OPTIM, _MODEL, _MOE):
        for dest, (typ, text) in table.items():
            if dest not in skip:
                p.add_argument("--" + dest.replace("_", "-"), dest=dest, type=typ, default=S, help=text)
    flags = {
        "compile": "torch.compile each transformer block",
        "activation_checkpointing": "recompute each block's activations in the backward pass (less memory, "
        "~1 more forward)",
        "qk_norm": "RMSNorm on queries and keys",
    }
    for dest, text in flags.items():
        if dest not in skip:
            flag = "--" + dest.replace("_", "-")
            p.add_argument(flag, dest=dest, action=argparse.BooleanOptionalAction, default=S, help=text)
    p.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a model field, dotted for the MoE (moe.top_k=2, n_layers=4); VALUE is read as in "
        "zephyr run --set: JSON, else YAML, else text",
    )


def _parse_data(values: list[str], *, mix: bool = False) -> str | dict[str, float]:
    if len(values) == 1 and "=" not in values[0] and not mix:
        return values[0]
    mixture: dict[str, float] = {}
    for item in values:
        path, sep, weight = item.rpartition("=")
        if not sep and mix:  # --mix derives the weights from token counts
            mixture[item] = 1.0
            continue
        if not sep:
            raise ConfigError(f"--data {item!r}: a mixture needs DIR=WEIGHT for every source (or --mix)")
        try:
            mixture[path] = float(weight)
        except ValueError:
            raise ConfigError(f"--data {item!r}: weight {weight!r} is not a number") from None
    return mixture


def _parse_max_epochs(values: list[str]) -> float | dict[str, float]:
    """``--max-epochs 4`` (every source) or ``--max-epochs code/=2 --max-epochs web/=1``."""
    caps: dict[str, float] = {}
    for item in values:
        path, sep, epochs = item.rpartition("=")
        try:
            if not sep:
                if len(values) > 1:
                    raise ConfigError(
                        f"--max-epochs {item!r}: give one number, or DIR=EPOCHS for each source"
                    )
                return float(item)
            caps[path] = float(epochs)
        except ValueError:
            raise ConfigError(f"--max-epochs {item!r}: {epochs or item!r} is not a number") from None
    return caps


def config_from_args(args: argparse.Namespace):  # noqa: ANN201 - TrainConfig (imported lazily)
    """Merge the config file (if any) with the flags given on the command line, then validate the result once
    (every problem listed, each by its key); the file is not validated alone, so a flag can replace a bad value."""
    from zephyr.trainer.config import TrainConfig, read_config_file

    raw: dict[str, Any] = {}
    if args.config:
        raw = read_config_file(args.config)
    given = vars(args)
    for dest in _TOP:
        if dest in given:
            raw[dest] = given[dest]
    for flag in ("compile", "activation_checkpointing"):
        if flag in given:
            raw[flag] = given[flag]
    if "data" in given:
        raw["data"] = _parse_data(given["data"], mix="mix" in given or bool(raw.get("mix")))
    if "max_epochs" in given:
        raw["max_epochs"] = _parse_max_epochs(given["max_epochs"])
    if "mix_schedule" in given:
        try:
            raw["mix_schedule"] = json.loads(given["mix_schedule"])
        except json.JSONDecodeError as exc:
            raise ConfigError(
                f"--mix-schedule is not JSON ({exc}); write [[STEP, {{DIR: WEIGHT}}], ...]"
            ) from None
    if "reweight" in given:
        raw["reweight"] = given["reweight"]
    # a section that is not a mapping is left as it is for TrainConfig.from_dict to report by its key
    if isinstance(optim := raw.get("optim", {}), dict):
        raw["optim"] = {**optim, **{k: given[k] for k in _OPTIM if k in given}}
    model = raw.get("model", {})
    if not isinstance(model, dict):
        return TrainConfig.from_dict(raw)
    model = {**model, **{k: given[k] for k in _MODEL if k in given}}
    if "qk_norm" in given:
        model["qk_norm"] = given["qk_norm"]
    moe = model.get("moe", {})
    if moe is not None and not isinstance(moe, dict):
        raw["model"] = model
        return TrainConfig.from_dict(raw)
    moe = dict(moe) if moe is not None else None
    for item in given.get("overrides", []):
        key, sep, value = item.partition("=")
        if not sep:
            raise ConfigError(f"--set {item!r}: expected KEY=VALUE")
        if key.startswith("moe."):
            if moe is None:
                raise ConfigError(f"--set {item!r}: the model has moe disabled")
            moe[key[4:]] = parse_value(value)
        else:
            model[key] = parse_value(value)
    if moe is not None:
        moe.update({k: given[k] for k in _MOE if k in given})
        if moe:
            model["moe"] = moe
    raw["model"] = model
    return TrainConfig.from_dict(raw)
