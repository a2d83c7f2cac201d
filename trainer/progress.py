"""What a person watching a training run sees: a line every ``log_every`` steps and, on a terminal, a bar.

The line (on stderr, rank 0 only)::

    zephyr train: step 40/200 | loss 5.2714 | 18.3k tok/s | MFU 21.4% | lr 3.00e-04 | ETA 1m52s

- ``loss`` is the loss of that step; ``tok/s`` the tokens of the steps since the previous line over their step
  time (checkpoint saves excluded, as in ``train.jsonl``); ``MFU`` at that rate (PaLM / torchtitan convention,
  ``zephyr.trainer.metrics.mfu``), left out where the device's peak is unknown (the CPU, unless
  ``--peak-tflops``); ``lr`` the step's learning rate; ``ETA`` the wall time per step since this run's first
  step (saves included) times the steps left.
- The prefix is the label of the display the run is in: ``zephyr train`` for the command, the stage
  (``[9/9] train``) under ``zephyr run``, ``train`` from Python.

The bar is the installed ``zephyr.progress`` display (``--progress/--no-progress``; by default only when stderr
is a terminal): it counts optimizer steps, a resumed run from its checkpoint's step, with the latest loss and
tokens/s beside it. Without a display that draws, there is no bar and the lines are printed plainly.

Nothing here touches the device. Each step's metrics reach the host one step late, when the trainer reads them
for ``train.jsonl`` (``zephyr.trainer.train._PendingMetrics``); ``update`` gets that record, so showing
progress adds no host synchronization to any step.
"""

from __future__ import annotations

import time
from typing import Any

from zephyr import progress as _display

__all__ = ["TrainProgress", "format_line"]


def _duration(seconds: float) -> str:
    """``12s``, ``3m05s``, ``2h07m``: what an ETA needs, no more."""
    seconds = max(int(round(seconds)), 0)
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"


def _rate(tokens_per_s: float) -> str:
    for scale, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if tokens_per_s >= scale:
            return f"{tokens_per_s / scale:.1f}{suffix}"
    return f"{tokens_per_s:.0f}"


def format_line(
    *,
    step: int,
    total: int,
    loss: float,
    tokens_per_s: float,
    mfu: float | None,
    lr: float,
    eta_s: float | None,
) -> str:
    """One progress line; ``step`` counts finished steps (1-based), MFU and ETA only where known."""
    fields = [f"step {step}/{total}", f"loss {loss:.4f}", f"{_rate(tokens_per_s)} tok/s"]
    if mfu is not None:
        fields.append(f"MFU {mfu:.1%}")
    fields.append(f"lr {lr:.2e}")
    if eta_s is not None:
        fields.append(f"ETA {_duration(eta_s)}")
    return " | ".join(fields)


class TrainProgress:
    """Shows the steps of one ``train`` call: ``update`` with every metric record, in order (see the module
    docstring for what is shown). ``enabled=False`` (ranks other than 0) shows nothing."""

    def __init__(self, *, total_steps: int, start_step: int, log_every: int, enabled: bool = True) -> None:
        self.total = total_steps
        self.log_every = log_every
        self.enabled = enabled
        self.display = _display.current() if enabled else None
        self.label = self.display.label if self.display is not None else "train"
        self._window_tokens = 0
        self._window_time = 0.0
        self._first: tuple[int, float] | None = None  # (steps done, wall time) at this run's first record
        if self.display is not None:
            self.display.count("train", total_steps, done=start_step)

    def update(self, record: dict[str, Any]) -> str | None:
        """Take the metric record of step ``record["step"]`` (0-based); return the line printed, if any."""
        if not self.enabled:
            return None
        done = int(record["step"]) + 1
        now = time.perf_counter()
        self._window_tokens += int(record["tokens"])
        self._window_time += float(record["step_time_s"])
        if self._first is None:
            self._first = (done, now)
        if self.display is not None:
            self.display.count_to(done, f"loss {record['loss']:.4f}, {_rate(record['tokens_per_s'])} tok/s")
        due = self.log_every > 0 and (done % self.log_every == 0 or done == self.total)
        if not due:
            return None
        tokens_per_s = self._window_tokens / max(self._window_time, 1e-9)
        mfu = record.get("mfu")
        line = format_line(
            step=done,
            total=self.total,
            loss=float(record["loss"]),
            tokens_per_s=tokens_per_s,
            mfu=mfu * tokens_per_s / record["tokens_per_s"]
            if mfu is not None and record["tokens_per_s"]
            else None,
            lr=float(record["lr"]),
            eta_s=self._eta(done, now, float(record["step_time_s"])),
        )
        self._window_tokens, self._window_time = 0, 0.0
        line = f"{self.label}: {line}"
        _display.write(line)
        return line

    def _eta(self, done: int, now: float, step_time_s: float) -> float | None:
        """Wall time per step since this run's first step (saves and data waits included) × steps left; the
        last step's time while only one step has been seen."""
        left = self.total - done
        if left <= 0:
            return None
        first_done, first_time = self._first
        per_step = (now - first_time) / (done - first_done) if done > first_done else step_time_s
        return per_step * left
