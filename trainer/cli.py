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

Only configs are imported at registration (standard library): ``zephyr --help`` loads no torch.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from zephyr.trainer.config import CheckConfig, TrainConfig, read_config_file

from zephyr.config import parse_value
from zephyr.errors import ConfigError
from zephyr.flags import add_flags, config_from_flags

_DOC = __doc__.split("\n\n")


class _TrainParser(argparse.ArgumentParser):
    """``zephyr train``'s parser: a first word ``check`` hands the rest of the line to ``zephyr train check``
    (``train`` takes an optional config file as its first word, so the check cannot be a plain subcommand)."""

    check_parser: argparse.ArgumentParser | None = None

    def parse_known_args(self, args=None, namespace=None):  # noqa: ANN001, ANN201 - argparse's signature
        if self.check_parser is not None and args and args[0] == "check":
            return self.check_parser.parse_known_args(args[1:], namespace)
        return super().parse_known_args(args, namespace)


def register(subparsers: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    p = subparsers.add_parser(
        "train",
        parents=[common],
        help="train the MoE language model on token shards (zephyr train check: is it ready for the GPU?)",
        description=_DOC[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="\n\n".join(_DOC[1:4]),
    )
    _add_run_flags(p)
    p.set_defaults(func=handler)
    p.__class__ = _TrainParser
    p.check_parser = build_check_parser(common)


def build_check_parser(common: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """``zephyr train check``'s parser: the training run's flags, but ``--dispatch``, which names the MoE
    dispatches to trace (``CheckConfig``), and the check's own."""
    p = argparse.ArgumentParser(
        prog="zephyr train check",
        parents=[common],
        description=_DOC[4],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="\n\n".join(_DOC[5:7]),
    )
    _add_run_flags(p, skip=("model.moe.dispatch",))
    add_flags(p, CheckConfig, group="the check")
    # --json comes from ``common``: the summary object of every command, the check's report under ``details``
    p.set_defaults(func=check_handler, train_command="check")  # the summary names "zephyr train check"
    return p


def _add_run_flags(p: argparse.ArgumentParser, *, skip: tuple[str, ...] = ()) -> None:
    p.add_argument("config", nargs="?", default=None, help="YAML/JSON training config (flags override it)")
    add_flags(p, TrainConfig, skip=skip)
    p.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="set a model field in the config file's place, dotted for the MoE (moe.top_k=2, moe=null); VALUE "
        "is read as in zephyr run --set: JSON, else YAML, else text",
    )


def train_config(given: dict[str, Any]) -> TrainConfig:
    """The ``TrainConfig`` of a parsed command line (``vars(args)``): the config file (``config``) with the
    ``--set`` values in it, then the flags over it, built and checked once (every problem listed, each by its
    flag or its key; the file is not checked alone, so a flag can replace a bad value)."""
    base = read_config_file(given["config"]) if given.get("config") else {}
    _set_model_fields(base, given.get("overrides") or [])
    if "data" in given:
        given = {**given, "data": _data(given["data"], mix="mix" in given or bool(base.get("mix")))}
    return config_from_flags(TrainConfig, given, base=base, what="training config")


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
    mixture: dict[str, float] = {}
    for item in values:
        path, sep, weight = item.rpartition("=")
        if not sep and mix:
            mixture[item] = 1.0
            continue
        if not sep:
            raise ConfigError(f"--data {item!r}: a mixture needs DIR=WEIGHT for every source (or --mix)")
        try:
            mixture[path] = float(weight)
        except ValueError:
            raise ConfigError(f"--data {item!r}: weight {weight!r} is not a number") from None
    return mixture


def handler(args: argparse.Namespace):
    """Train, then return the run's ``Summary`` in samples (the training sequences of the steps this call ran;
    dropped: the ones the instance filter masked) and tokens; its output bytes are the checkpoints'."""
    from zephyr.trainer.train import train

    from zephyr.summary import Summary, bytes_under

    cfg = train_config(vars(args))
    result = train(cfg)
    details: dict[str, Any] = {"step": result.step, "resumed_from": result.resumed_from}
    if result.losses:
        first = result.step - len(result.losses) + 1
        details.update(first_step=first, loss_first=result.losses[0], loss_last=result.losses[-1])
        if not args.json:  # the line a person looks for; with --json the same numbers are in details
            sys.stderr.write(
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


def check_handler(args: argparse.Namespace):
    """``zephyr train check``: the report on stdout, and exit 0 when ready, else 1. With ``--json`` the report
    is the ``details`` of the one summary object every command prints (``zephyr.summary``: the check reads
    no rows and writes nothing, so its rows are 0 and its figures are all under ``details``)."""
    from zephyr.trainer.check.report import render, run_check

    from zephyr.summary import Summary

    given = vars(args)
    report = run_check(train_config(given), config_from_flags(CheckConfig, given, what="check config"))
    code = 0 if report["ok"] else 1
    if args.json:
        return Summary(rows_in=0, rows_kept=0, details=report, exit_code=code)
    print(render(report))
    return code
