"""Per-step metrics: JSONL (always), TensorBoard (when installed), MFU, loss alarms, and the progress shown.

JSONL record (one object per optimizer step, format version 1)::

    {"step": 12, "loss": 3.91, "aux_loss": 0.0, "grad_norm": 0.84, "lr": 3e-4, "tokens": 4096,
     "tokens_per_s": 51234.0, "mfu": 0.31 | null, "step_time_s": 0.08, "data_loading_s": 0.0004,
     "expert_load": [per-expert share of routed slots, averaged over MoE layers],
     "load_entropy": 0.99, "load_max_over_mean": 1.2, "bias_abs_mean": 0.004, "bias_abs_max": 0.01,
     "dropped_tokens": 0, "loss_spike": false}

MFU follows torchtitan / PaLM (appendix B): ``tokens_per_s · flops_per_token / (world_size · peak_flops)`` with
``flops_per_token = 6 · active non-embedding params (incl. router and output head) + 12 · layers · d_model ·
seq_len`` (``zephyr.trainer.model.flops_per_token``); the peak is the device's dense bf16 figure (H100: 989
TFLOPS). ``null`` when the device's peak is unknown (CPU).

``data_loading_s`` is the host time the step spent getting its micro-batches from the loader (and issuing
their copy to the device), torchtitan's ``data_loading(s)``; over ``step_time_s`` it is the share of the step
spent waiting for data. The host issues a step while the device still runs the previous one, so the device
itself waits less (not at all while the loader is quicker than that lead): the share is an upper bound.

Resume: the log holds each step exactly once, in order. When a run starts at step S (S = the step of the
checkpoint it resumes, 0 for a fresh run), ``TrainLog(..., start_step=S)`` first rewrites the file to the
records of steps 1..S (``trim_log``): records a killed run logged after its last checkpoint are dropped (the
resumed run logs those steps again), and so is a line cut short by the kill. Readers need no deduplication.

Alarms: a non-finite loss stops the run with ``NonFiniteLossError`` naming the step; a loss above
``spike_factor`` × the running mean of the last 50 steps logs a warning and sets ``loss_spike``.

Progress (shown by ``TrainLog`` too), what a person watching a training run sees: a line every ``log_every`` steps
and, on a terminal, a bar.

The line (on stderr, rank 0 only)::

    zephyr train: step 40/200 | loss 5.2714 | 18.3k tok/s | MFU 21.4% | lr 3.00e-04 | ETA 1m52s

- ``loss`` is the loss of that step; ``tok/s`` the tokens of the steps since the previous line over their step
  time (checkpoint saves excluded, as in ``train.jsonl``); ``MFU`` at that rate (PaLM / torchtitan convention,
  ``mfu``), left out where the device's peak is unknown (the CPU, unless
  ``--peak-tflops``); ``lr`` the step's learning rate; ``ETA`` the wall time per step since this run's first
  step (saves included) times the steps left.
- The prefix is the label of the display the run is in: ``zephyr train`` for the command, the stage
  (``[9/9] train``) under ``zephyr run``, ``train`` from Python.

The bar is the installed ``zephyr.progress`` display (``--progress/--no-progress``; by default only when stderr
is a terminal): it counts optimizer steps, a resumed run from its checkpoint's step, with the latest loss and
tokens/s beside it. Without a display that draws, there is no bar and the lines are printed plainly.

Nothing here touches the device. Each step's metrics reach the host one step late, when the trainer reads them
for ``train.jsonl`` (``zephyr.trainer.train``); ``TrainLog.write`` gets that record, so showing
progress adds no host synchronization to any step.
"""

from __future__ import annotations

import collections
import json
import logging
import math
import os
import time
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any

from zephyr import progress as _display
from zephyr.errors import ZephyrError

if TYPE_CHECKING:
    from zephyr.trainer.config import TrainConfig

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


def _record_step(line: bytes) -> int | None:
    """The ``step`` of one JSONL line, or None for a line that is not a whole record (cut by a kill)."""
    try:
        record = json.loads(line)
    except (json.JSONDecodeError, UnicodeDecodeError):
        return None
    step = record.get("step") if isinstance(record, dict) else None
    return step if isinstance(step, int) and not isinstance(step, bool) else None


def trim_log(path: str | os.PathLike[str], start_step: int) -> int:
    """Rewrite the JSONL log at ``path`` to hold each step up to ``start_step`` once (a record's ``step`` is the
    steps done after it: 1 for the first, S for the last one a checkpoint of step S holds); return the lines
    dropped.

    A run killed after its last checkpoint has logged steps the resumed run will run (and log) again; the last
    line may be cut mid-write. Both go, so the log reads as one uninterrupted run. A record whose step is not
    above the one before it marks a restart appended without a trim (a log written by hand, or by other
    code): the records it supersedes go too (the later run's values are the ones the checkpoints hold).

    The kept prefix replaces the log through ``replace_synced`` (as ``zephyr.io.paths.write_json_atomic``
    writes), so a kill during the trim leaves the old log or the new one. (That helper is not imported: ``zephyr.tasks`` needs pyarrow, and the trainer imports with torch, numpy
    and fsspec alone. The log is a local file: the logger appends to it with ``open``.)
    """
    path = Path(path)
    if not path.exists():
        return 0
    with open(path, "rb") as f:
        lines = f.read().split(b"\n")
    ends_whole = lines[-1] == b""
    if ends_whole:
        lines.pop()
    steps = [_record_step(line) for line in lines]
    kept: list[tuple[int, int]] = []  # (step, line index), steps strictly increasing
    for index, step in enumerate(steps):
        if step is None:
            continue
        while kept and kept[-1][0] >= step:
            kept.pop()
        kept.append((step, index))
    kept = [(step, index) for step, index in kept if step <= start_step]
    if len(kept) == len(lines) and ends_whole:
        return 0
    unreadable = steps.count(None)
    later = [step for step in steps if step is not None and step > start_step]
    log.info(
        "%s: the run starts at step %d: kept %d records, dropped %d of steps %s and %d superseded",
        path,
        start_step,
        len(kept),
        len(later),
        f"{min(later)}..{max(later)}" if later else "-",
        len(lines) - len(kept) - len(later) - unreadable,
    )
    if start_step == 0 and later:
        log.warning(
            "%s: held %d records of an earlier run with no checkpoint to resume; logging afresh",
            path,
            len(later),
        )
    if unreadable:
        log.warning("%s: dropped %d unreadable line(s) (a write cut short by a kill?)", path, unreadable)
    replace_synced(path, b"".join(lines[index] + b"\n" for _, index in kept))
    return len(lines) - len(kept)


def replace_synced(path: Path, data: bytes) -> None:
    """Write ``data`` to ``<path>.tmp-<random>``, fsync it and rename it over ``path`` (``os.replace``): a kill
    at any point leaves the old file or the new one, never a torn one."""
    tmp = path.with_name(f"{path.name}.tmp-{uuid.uuid4().hex[:8]}")
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


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


class TrainLog:
    """Where the metric records of one ``train`` call (``cfg``) go, in order (``write``): one JSON object per step
    to the JSONL log (``cfg.log``), the scalars to TensorBoard if it is installed, and the progress (module docstring).
    ``enabled=False`` (ranks other than 0) writes and shows nothing.

    ``start_step``: the steps done when this run starts (the resumed checkpoint's step); the existing log is
    first trimmed to those steps (``trim_log``), so a resumed run continues the log without repeating steps.
    """

    def __init__(self, cfg: TrainConfig, start_step: int = 0, *, enabled: bool = True) -> None:
        self.total, self.log_every, self.enabled = cfg.steps, cfg.log_every, enabled
        self.spike_factor, self._recent = cfg.spike_factor, collections.deque(maxlen=50)
        self._file = None
        self._tb: Any = None
        self.display = _display.current() if enabled else None
        self.label = self.display.label if self.display is not None else "train"
        self._window_tokens = 0
        self._window_time = 0.0
        self._first: tuple[int, float] | None = None  # (steps done, wall time) at this run's first record
        if not enabled:
            return
        if self.display is not None:
            self.display.count("train", cfg.steps, done=start_step)
        if cfg.log:
            Path(cfg.log).parent.mkdir(parents=True, exist_ok=True)
            trim_log(cfg.log, start_step)
            self._file = open(cfg.log, "a")  # noqa: SIM115 - lives as long as the log; append continues a resumed log
        if cfg.tensorboard_dir:
            try:
                from torch.utils.tensorboard import SummaryWriter
            except ImportError:
                log.warning(
                    "tensorboard is not installed; metrics go to the JSONL log only (pip install tensorboard)"
                )
            else:
                # purge_step hides events a killed run wrote after the resumed checkpoint's step
                self._tb = SummaryWriter(
                    cfg.tensorboard_dir, purge_step=start_step + 1 if start_step else None
                )

    def check_loss(self, step: int, loss: float) -> bool:
        """The alarms (module docstring), on every rank: NaN/inf raise ``NonFiniteLossError`` naming the step; a
        loss above ``spike_factor`` × the mean of the last 50 (once there are 10) is a spike, logged, and True."""
        recent, spike_factor = self._recent, self.spike_factor
        if not math.isfinite(loss):
            raise NonFiniteLossError(
                f"loss is {loss} at step {step}; lower the learning rate, check the data around this step, "
                "or resume from an earlier checkpoint"
            )
        mean = sum(recent) / len(recent) if len(recent) >= 10 else math.inf
        spike = spike_factor > 0 and loss > spike_factor * mean
        if spike:
            log.warning(
                "loss spike at step %d: %.4f > %.1f x running mean %.4f", step, loss, spike_factor, mean
            )
        recent.append(loss)
        return spike

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
        if self._tb is not None:
            self._tb.close()
            self._tb = None

    def write(self, record: dict[str, Any]) -> str | None:
        """Take the metric record of step ``record["step"]`` (steps done: 1 for the first); return the progress
        line printed, if any."""
        if not self.enabled:
            return None
        if self._file is not None:
            self._file.write(json.dumps(record) + "\n")
            self._file.flush()
        if self._tb is not None:
            for key, value in record.items():
                if isinstance(value, (int, float)) and not isinstance(value, bool) and key != "step":
                    self._tb.add_scalar(key, value, record["step"])
        done = int(record["step"])
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
        fields = [
            f"step {done}/{self.total}",
            f"loss {float(record['loss']):.4f}",
            f"{_rate(tokens_per_s)} tok/s",
        ]
        if record.get("mfu") is not None and record["tokens_per_s"]:  # the MFU at the window's rate
            fields.append(f"MFU {record['mfu'] * tokens_per_s / record['tokens_per_s']:.1%}")
        fields.append(f"lr {float(record['lr']):.2e}")
        eta = self._eta(done, now, float(record["step_time_s"]))
        if eta is not None:  # MFU and ETA only where known
            fields.append(f"ETA {_duration(eta)}")
        self._window_tokens, self._window_time = 0, 0.0
        line = f"{self.label}: {' | '.join(fields)}"
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
