"""``zephyr train [CONFIG.yaml] [--flags]``: train the MoE language model on token shards.

Every ``TrainConfig`` key is also a flag (flags override the file), e.g.::

    zephyr train --data shards/ --preset tiny --steps 200 --batch-size 8 --seq-len 256 --device cpu \\
        --checkpoint-dir ckpt/ --checkpoint-every 50 --log train.jsonl --log-every 20
    zephyr train run.yaml --steps 1000 --lr 6e-4
    zephyr train --data web/=0.7 --data code/=0.3 ...          # a weighted mixture
    zephyr train --data web/ --data code/ --mix unimax:epochs=4 --packing best-fit ...
    zephyr train ... --max-epochs code/=2 --instance-filter repetition --reweight
    zephyr train ... --set moe.top_k=2 --set qk_norm=true        # any model field (dotted for moe.*)
    torchrun --nproc-per-node 8 -m zephyr.cli train run.yaml     # FSDP2 over 8 devices
    zephyr train check --preset moe-785m --batch-size 16 --seq-len 2048   # before booking a GPU

Rerunning with the same ``--checkpoint-dir`` resumes from its latest checkpoint. The global execution options
(``--workers``, ``--executor``...) are accepted and ignored: training is not an engine job.
"""

from __future__ import annotations

import argparse
import logging
from typing import Any

from zephyr.trainer.check.cli import build_check_parser
from zephyr.trainer.run_args import add_run_arguments, config_from_args

__all__ = ["register", "handler", "config_from_args", "add_run_arguments"]

log = logging.getLogger(__name__)


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
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="\n\n".join(__doc__.split("\n\n")[1:]),
    )
    add_run_arguments(p)
    p.set_defaults(func=handler)
    p.__class__ = _TrainParser
    p.check_parser = build_check_parser(common)


def handler(args: argparse.Namespace):
    """Train, then return the run's ``Summary``: rows are the training sequences of the steps this call ran,
    dropped the ones the instance filter masked (``zephyr.summary``)."""
    import sys

    from zephyr.trainer.train import train

    from zephyr.summary import Summary

    cfg = config_from_args(args)
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
    sequences = tokens // max(cfg.seq_len, 1)
    masked = sum(int(r.get("instances_filtered", 0)) for r in result.records)
    details["tokens"] = tokens
    return Summary(
        rows_in=sequences,
        rows_kept=sequences - masked,
        rows_dropped=masked,
        dropped_by_reason={"instance_filter": masked} if masked else {},
        output=cfg.checkpoint_dir or None,
        stats=cfg.log or None,
        bytes_in=_data_bytes(cfg.data),
        details=details,
    )


def _data_bytes(data: Any) -> int:
    """Bytes of the token shards trained on (0 for synthetic tokens)."""
    from zephyr.summary import bytes_under

    if not data:
        return 0
    return bytes_under([data] if isinstance(data, str) else list(data))
