"""zephyr.trainer: a torch MoE language model and its training loop (imports with torch, numpy, fsspec only).

>>> from zephyr.trainer import TrainConfig, train          # doctest: +SKIP
>>> result = train(TrainConfig(preset="tiny", steps=20, device="cpu", log="train.jsonl"))  # doctest: +SKIP

Modules: ``config`` (the dataclasses and the model presets), ``model`` (the transformer and its layers),
``moe`` (the feed-forward layers: SwiGLU, the experts, their balancing), ``devices`` (devices, FSDP2, compile),
``data`` (batching the TokenLoader), ``checkpoint`` (atomic DCP), ``metrics`` (JSONL, MFU, alarms, progress),
``train`` (the optimizer, one step, the loop), ``cli`` (``zephyr train`` and ``zephyr train check``), ``check``
(what the check measures: graph breaks, host syncs, FLOPs, memory). See docs/trainer.md.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from zephyr._lazy import lazy_exports as _lazy_exports

_LAZY = {
    "TrainConfig": "zephyr.trainer.config",
    "ModelConfig": "zephyr.trainer.config",
    "MoEConfig": "zephyr.trainer.config",
    "OptimConfig": "zephyr.trainer.config",
    "PRESETS": "zephyr.trainer.config",
    "get_preset": "zephyr.trainer.config",
    "Transformer": "zephyr.trainer.model",
    "build_model": "zephyr.trainer.model",
    "count_params": "zephyr.trainer.model",
    "flops_per_token": "zephyr.trainer.model",
    "train": "zephyr.trainer.train",
    "TrainResult": "zephyr.trainer.train",
    "CheckpointManager": "zephyr.trainer.checkpoint",
    "NonFiniteLossError": "zephyr.trainer.metrics",
}
__all__ = sorted(_LAZY)

if TYPE_CHECKING:  # names for type checkers and IDEs; loaded lazily at run time
    from zephyr.trainer.checkpoint import CheckpointManager  # noqa: F401
    from zephyr.trainer.config import PRESETS, ModelConfig, MoEConfig, OptimConfig, TrainConfig, get_preset  # noqa: F401
    from zephyr.trainer.metrics import NonFiniteLossError  # noqa: F401
    from zephyr.trainer.model import Transformer, build_model, count_params, flops_per_token  # noqa: F401
    from zephyr.trainer.train import TrainResult, train  # noqa: F401


__getattr__, __dir__ = _lazy_exports(__name__, _LAZY, globals())
