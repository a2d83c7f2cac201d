"""What MFU the step can reach: from the counted FLOPs, the MFU formula and the device's peak.

MFU credits ``flops_per_token_formula`` per token (``zephyr.trainer.metrics.mfu``). If the step does more
matrix work than that (alignment padding, capacity slack), a device running at its peak still reaches only
``formula / measured``: the ``mfu_upper_bound``. The step time a target MFU needs follows from the formula:
``tokens · formula / (mfu · peak)``; with a measured step time the MFU is ``tokens · formula / (time · peak)``.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["MfuBounds", "mfu_bounds"]


@dataclass(frozen=True)
class MfuBounds:
    peak_flops: float
    target_mfu: float
    upper_bound: float
    """MFU at the device's peak FLOPS: formula / measured, at most 1."""
    step_time_s: float
    """Seconds per optimizer step that ``target_mfu`` needs."""
    tokens_per_s: float
    """Tokens per second that ``target_mfu`` needs."""
    mfu_at_step_time: float | None
    """MFU at a given step time (``None`` when none was given)."""

    def to_dict(self) -> dict[str, object]:
        return {
            "peak_tflops": round(self.peak_flops / 1e12, 1),
            "target_mfu": self.target_mfu,
            "mfu_upper_bound": round(self.upper_bound, 4),
            "step_time_s_for_target_mfu": round(self.step_time_s, 4),
            "tokens_per_s_for_target_mfu": round(self.tokens_per_s),
            "mfu_at_step_time": None if self.mfu_at_step_time is None else round(self.mfu_at_step_time, 4),
        }


def mfu_bounds(
    *,
    measured_flops_per_token: float,
    formula_flops_per_token: float,
    tokens_per_step: int,
    peak_flops: float,
    target_mfu: float = 0.30,
    step_time_s: float | None = None,
) -> MfuBounds:
    """The bounds above for one device with ``peak_flops`` (dense bf16 FLOPS)."""
    step_flops = tokens_per_step * formula_flops_per_token
    return MfuBounds(
        peak_flops=peak_flops,
        target_mfu=target_mfu,
        upper_bound=min(1.0, formula_flops_per_token / measured_flops_per_token),
        step_time_s=step_flops / (target_mfu * peak_flops),
        tokens_per_s=target_mfu * peak_flops / formula_flops_per_token,
        mfu_at_step_time=None if step_time_s is None else step_flops / (step_time_s * peak_flops),
    )
