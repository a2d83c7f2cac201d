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

if TYPE_CHECKING:  # names for type checkers and IDEs; loaded lazily at run time
    from zephyr.trainer.checkpoint import CheckpointManager
    from zephyr.trainer.config import PRESETS, ModelConfig, MoEConfig, OptimConfig, TrainConfig, get_preset
    from zephyr.trainer.metrics import NonFiniteLossError
    from zephyr.trainer.model import Transformer, build_model, count_params, flops_per_token
    from zephyr.trainer.train import TrainResult, train


__getattr__, __dir__, __all__ = _lazy_exports(__name__, globals())
