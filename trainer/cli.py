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


def handler(args: argparse.Namespace) -> int:
    from zephyr.trainer.train import train

    cfg = config_from_args(args)
    result = train(cfg)
    if result.losses:
        first = result.step - len(result.losses) + 1
        print(f"trained steps {first}..{result.step}: loss {result.losses[0]:.4f} -> {result.losses[-1]:.4f}")
    return 0
