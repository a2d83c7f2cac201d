"""``zephyr train [CONFIG.yaml] [--flags]``: train the MoE language model on token shards; ``zephyr train check``
(same flags, and its own): is this training run ready for the accelerator?

Every ``TrainConfig`` key is also a flag, its help the field's docstring (``zephyr.flags``): ``--batch-size`` for
``batch_size``, nested configs without a prefix (``--lr`` for ``optim.lr``, ``--top-k`` for ``model.moe.top_k``,
every ``ModelConfig`` field over the preset's). Flags override the file; ``--set KEY=VALUE`` sets a model field
in the file's place (dotted for the MoE), e.g.::

    zephyr train --data shards/ --preset tiny --steps 200 --batch-size 8 --seq-len 256 --device cpu \\
        --checkpoint-dir ckpt/ --checkpoint-every 50 --log train.jsonl --log-every 20
    zephyr train run.yaml --steps 1000 --lr 6e-4
    zephyr train --data web/=0.7 --data code/=0.3 ...          # a weighted mixture
    zephyr train --data web/ --data code/ --mix unimax:epochs=4 --packing best-fit ...
    zephyr train ... --max-epochs code/=2 --instance-filter repetition --reweight
    zephyr train ... --top-k 2 --qk-norm --set moe=null          # any model field
    torchrun --nproc-per-node 8 -m zephyr.cli train run.yaml     # FSDP2 over 8 devices
    zephyr train check --preset moe-785m --batch-size 16 --seq-len 2048   # before booking a GPU

Rerunning with the same ``--checkpoint-dir`` resumes from its latest checkpoint. The global execution options
(``--workers``, ``--executor``...) are accepted and ignored: training is not an engine job.

``zephyr train check`` measures on this machine's CPU, in minutes, the accelerator whose code path ``--device``
names (default ``cuda``; ``xpu`` and ``xla`` too; always bf16, as they train)::

    zephyr train check run.yaml --device-memory 80GiB --json          # the training config itself
    zephyr train check --preset moe-1b --batch-size 8 --seq-len 4096 --activation-checkpointing
    zephyr train check ... --dispatch grouped_mm,capacity --step-time 0.15

It reports graph breaks and host syncs (per MoE dispatch), FLOPs per token counted against the MFU formula,
the peak memory (with and without activation checkpointing, and the estimator checked against a measured CPU
run), and the step time a target MFU needs (``CheckConfig``; ``zephyr.trainer.check``). Exit status 0 when the
run is ready (0 graph breaks, 0 host syncs, FLOPs within 5%, fits the device memory), 1 otherwise, with the
problems listed; ``--json`` prints the report as one JSON object.

Both are ``zephyr.cli.Command``s; only configs are imported to build them (standard library): ``zephyr
--help`` loads no torch.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from typing import Any, ClassVar

from zephyr.trainer.config import CheckConfig, TrainConfig, per_source

from zephyr.cli import Command
from zephyr.config import embedded_field, parse_value, read_mapping
from zephyr.errors import ConfigError
from zephyr.flags import config_from_flags
from zephyr.options import ExecutionOptions


@dataclass(frozen=True)
class TrainRun:
    """The training run a ``zephyr train`` command line asks for: a config file, ``--set`` values in it, and
    every ``TrainConfig`` flag over it (``train_config``)."""

    what: ClassVar[str] = "training config"
    config: str | None = field(default=None, metadata={"positional": True})
    """YAML/JSON training config (flags override it)."""
    overrides: list[str] = field(
        default_factory=list, metadata={"flag": "--set", "repeat": True, "metavar": "KEY=VALUE"}
    )
    """Set a model field in the config file's place, dotted for the MoE (moe.top_k=2, moe=null); VALUE is read
    as in zephyr run --set: JSON, else YAML, else text."""
    train: TrainConfig = embedded_field(TrainConfig)
    """The run: the file's keys with the flags over them."""

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> TrainRun:
        return cls(raw.get("config"), list(raw.get("overrides") or []), train_config(raw))


def train_config(raw: dict[str, Any]) -> TrainConfig:
    """The ``TrainConfig`` of a command line's values, nested by key path as a file writes them (``config``:
    the config file; ``overrides``: the ``--set`` items): the file with the ``--set`` values in it, then the
    flags over it, built and checked once by ``zephyr.flags.config_from_flags`` (every problem listed, each by
    its key, or by its flag where a flag gave it; the file is not checked alone, so a flag can replace a bad
    value)."""
    # the file's raw mapping, unchecked: a value a flag replaces is never checked (and never refused)
    base = read_mapping(raw["config"], TrainRun.what) if raw.get("config") else {}
    _set_model_fields(base, raw.get("overrides") or [])
    if "data" in raw:
        raw = {**raw, "data": _data(raw["data"], mix="mix" in raw or bool(base.get("mix")))}
    return config_from_flags(TrainConfig, raw, base=base, what=TrainRun.what)  # raw: the flags, nested


def _set_model_fields(base: dict[str, Any], items: list[str]) -> None:
    """``--set KEY=VALUE`` into the file's ``model`` section (``moe.KEY`` into its ``moe``); a section that is
    not a mapping is left for ``TrainConfig.from_dict`` to report by its key."""
    model = base.setdefault("model", {}) if items else {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep:
            raise ConfigError(f"--set {item!r}: expected KEY=VALUE")
        section = model
        if key.startswith("moe.") and isinstance(model, dict):
            key, section = key[4:], model.setdefault("moe", {})
            if section is None:
                raise ConfigError(f"--set {item!r}: the model has moe disabled")
        if isinstance(section, dict):
            section[key] = parse_value(value)


def _data(values: list[str], *, mix: bool) -> str | dict[str, float]:
    """``--data DIR`` once, or a mixture: ``DIR=WEIGHT`` repeated (``DIR`` alone with ``--mix``, which derives
    the weights from token counts)."""
    if len(values) == 1 and "=" not in values[0] and not mix:
        return values[0]
    try:
        return per_source(values, "WEIGHT", alone=1.0 if mix else None, hint=" (or --mix)")
    except ConfigError as exc:
        raise ConfigError(f"--data {exc}") from None


def train(run: TrainRun, execution: ExecutionOptions) -> Any:
    """Train the MoE language model on token shards (zephyr train check: is it ready for the GPU?). Flags
    override the config file; rerunning with the same --checkpoint-dir resumes from its latest checkpoint. The
    execution options (--workers, --executor...) are accepted and ignored: training is not an engine job.

    Returns the run's ``Summary`` in samples (the training sequences of the steps this call ran; dropped: the
    ones the instance filter masked) and tokens; its output bytes are the checkpoints'."""
    from zephyr.trainer.train import train

    from zephyr.summary import Summary, bytes_under

    cfg = run.train
    result = train(cfg)
    details: dict[str, Any] = {"step": result.step, "resumed_from": result.resumed_from}
    if result.losses:
        first = result.step - len(result.losses) + 1
        details.update(first_step=first, loss_first=result.losses[0], loss_last=result.losses[-1])
        sys.stderr.write(  # the line a person looks for (with --json the same numbers are in details)
            f"trained steps {first}..{result.step}: loss {result.losses[0]:.4f} -> {result.losses[-1]:.4f}\n"
        )
    tokens = sum(int(r.get("tokens", 0)) for r in result.records)
    samples = tokens // max(cfg.seq_len, 1)
    masked = sum(int(r.get("instances_filtered", 0)) for r in result.records)
    details.update(tokens=tokens, steps=len(result.records))
    data = [cfg.data] if isinstance(cfg.data, str) else list(cfg.data or [])
    return Summary(
        rows_in=samples,
        rows_kept=samples - masked,
        rows_dropped=masked,
        dropped_by_reason={"instance_filter": masked} if masked else {},
        output=cfg.checkpoint_dir or None,
        stats=cfg.log or None,
        bytes_in=bytes_under(data) if data else 0,
        details=details,
        unit="samples",
        shown=("steps", "tokens"),
    )


def check(run: TrainRun, check: CheckConfig, execution: ExecutionOptions) -> Any:
    """Is this training run ready for the accelerator? Measured on this machine's CPU, in minutes, for the
    accelerator whose code path --device names (default cuda; xpu and xla too; always bf16, as they train):
    graph breaks and host syncs per MoE dispatch, FLOPs per token against the MFU formula, the peak memory
    (with and without activation checkpointing), the step time a target MFU needs.

    The report goes to stdout (with ``--json``: it is the ``details`` of the one summary object every command
    prints; the check reads no rows and writes nothing, so its rows are 0); the exit status is 0 when the run is
    ready, else 1."""
    from zephyr.trainer.check import render, run_check

    from zephyr.summary import Summary

    report = run_check(run.train, check)
    return Summary(0, 0, details=report, exit_code=0 if report["ok"] else 1, printed=render(report))


COMMANDS = [
    Command("train", train, {"run": TrainRun}),
    Command("train check", check, {"run": TrainRun, "check": CheckConfig}, skip=("model.moe.dispatch",)),
]
