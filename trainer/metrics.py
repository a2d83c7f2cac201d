"""Per-step metrics: JSONL (always), TensorBoard (when installed), MFU, and loss alarms.

JSONL record (one object per optimizer step, format version 1)::

    {"step": 12, "loss": 3.91, "aux_loss": 0.0, "grad_norm": 0.84, "lr": 3e-4, "tokens": 4096,
     "tokens_per_s": 51234.0, "mfu": 0.31 | null, "step_time_s": 0.08,
     "expert_load": [per-expert share of routed slots, averaged over MoE layers],
     "load_entropy": 0.99, "load_max_over_mean": 1.2, "bias_abs_mean": 0.004, "bias_abs_max": 0.01,
     "dropped_tokens": 0, "loss_spike": false}

MFU follows torchtitan / PaLM (appendix B): ``tokens_per_s · flops_per_token / (world_size · peak_flops)`` with
``flops_per_token = 6 · active non-embedding params (incl. router and output head) + 12 · layers · d_model ·
seq_len`` (``zephyr.trainer.model.flops_per_token``); the peak is the device's dense bf16 figure (H100: 989
TFLOPS). ``null`` when the device's peak is unknown (CPU).

Alarms: a non-finite loss stops the run with ``NonFiniteLossError`` naming the step; a loss above
``spike_factor`` × the running mean of the last 50 steps logs a warning and sets ``loss_spike``.
"""

from __future__ import annotations

import collections
import json
import logging
import math
from pathlib import Path
from typing import Any

from zephyr.errors import ZephyrError

__all__ = ["MetricsLogger", "NonFiniteLossError", "LossAlarm", "mfu"]

log = logging.getLogger(__name__)


class NonFiniteLossError(ZephyrError):
    """The loss became NaN or infinite; the message names the step."""


def mfu(
    tokens_per_s: float, flops_per_token: float, peak_flops: float | None, world_size: int = 1
) -> float | None:
    """Model FLOPs utilization (torchtitan convention); None when the peak is unknown."""
    if not peak_flops:
        return None
    return tokens_per_s * flops_per_token / (peak_flops * world_size)


class LossAlarm:
    """NaN/inf stop the run; spikes (loss > factor × recent mean) are flagged and logged."""

    def __init__(self, spike_factor: float = 3.0, window: int = 50) -> None:
        self.spike_factor = spike_factor
        self.recent: collections.deque[float] = collections.deque(maxlen=window)

    def check(self, step: int, loss: float) -> bool:
        if not math.isfinite(loss):
            raise NonFiniteLossError(
                f"loss is {loss} at step {step}; lower the learning rate, check the data around this step, "
                "or resume from an earlier checkpoint"
            )
        spike = False
        if len(self.recent) >= 10:
            mean = sum(self.recent) / len(self.recent)
            if self.spike_factor > 0 and loss > self.spike_factor * mean:
                spike = True
                log.warning(
                    "loss spike at step %d: %.4f > %.1f x running mean %.4f",
                    step,
                    loss,
                    self.spike_factor,
                    mean,
                )
        self.recent.append(loss)
        return spike


class MetricsLogger:
    """Writes one JSON object per step (rank 0 only) and mirrors scalars to TensorBoard if it is installed."""

    def __init__(
        self, jsonl: str | None, tensorboard_dir: str | None = None, *, enabled: bool = True
    ) -> None:
        self.enabled = enabled
        self._file = None
        self._tb: Any = None
        if not enabled:
            return
        if jsonl:
            Path(jsonl).parent.mkdir(parents=True, exist_ok=True)
            self._file = open(jsonl, "a")  # noqa: SIM115 - lives as long as the logger; append continues a resumed log
        if tensorboard_dir:
            try:
                from torch.utils.tensorboard import SummaryWriter
            except ImportError:
                log.warning(
                    "tensorboard is not installed; metrics go to the JSONL log only (pip install tensorboard)"
                )
            else:
                self._tb = SummaryWriter(tensorboard_dir)

    def write(self, record: dict[str, Any]) -> None:
        if not self.enabled:
            return
        if self._file is not None:
            self._file.write(json.dumps(record) + "\n")
            self._file.flush()
        if self._tb is not None:
            for key, value in record.items():
                if isinstance(value, (int, float)) and not isinstance(value, bool) and key != "step":
                    self._tb.add_scalar(key, value, record["step"])

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
        if self._tb is not None:
            self._tb.close()
            self._tb = None
