"""Peak device memory of a training step, estimated on fake tensors, and checked against a measured CPU run.

Estimate: the full model is built and stepped under ``FakeTensorMode`` (real shapes and dtypes, no memory),
with a dispatch mode that follows every storage the step allocates, from the op that creates it until it is
freed (views and in-place results share their input's storage and are not counted again). The first step
creates the AdamW state; the second is measured. The peak is the most bytes alive at once:

    parameters + AdamW state (alive between steps) + the second step's largest live set

and at that moment the live set splits into gradients (the storages that become ``.grad``) and activations
(saved for the backward pass, plus temporaries). ``saved_activations`` is what the forward pass leaves alive
for the backward (logits included), the figure activation checkpointing shrinks; the check runs the step
both ways.

What the estimate leaves out: the CUDA context (~0.5 GiB), the caching allocator's rounding and
fragmentation (typically a few percent of the peak), NCCL buffers and kernel workspaces. The attention is
SDPA's (its ``[B, 1, L, L]`` boolean document mask is counted; FlexAttention, the CUDA default, needs no such
mask).

Measured: ``measure_cpu_peak`` runs the same step for real in a child process whose C library returns every
allocation above 64 KiB to the OS when it is freed (``MALLOC_MMAP_THRESHOLD_``), and reads the resident-set
high-water mark of the second step (``/proc/self/clear_refs`` resets it first). Linux only.
"""

from __future__ import annotations

import dataclasses
import gc
import json
import os
import re
import subprocess
import sys
import weakref
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten
from zephyr.trainer.check.harness import Target, build, run_step, synthetic_batch
from zephyr.trainer.config import ModelConfig, model_config_from_dict
from zephyr.trainer.devices import resolve_device

from zephyr.errors import ZephyrError

GIB = 1024**3


def _key(t: torch.Tensor) -> int:
    return t.untyped_storage()._cdata


class _LiveBytes(TorchDispatchMode):
    """Bytes of the storages created by ops since it started, as they are allocated and freed.

    Each storage gets a serial number when it is first seen (a freed storage's address may be reused).
    """

    def __init__(self) -> None:
        super().__init__()
        self.live: dict[int, tuple[int, int]] = {}  # storage address -> (serial, bytes)
        self.serial = 0
        self.current = 0
        self.peak = 0
        self.peak_serials: frozenset[int] = frozenset()

    def _free(self, key: int, serial: int) -> None:
        if key in self.live and self.live[key][0] == serial:
            self.current -= self.live.pop(key)[1]

    def serial_of(self, t: torch.Tensor) -> int | None:
        entry = self.live.get(_key(t))
        return entry[0] if entry is not None else None

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN204
        out = func(*args, **(kwargs or {}))
        inputs = {_key(t) for t in tree_flatten((args, kwargs))[0] if isinstance(t, torch.Tensor)}
        for t in tree_flatten(out)[0]:
            if not isinstance(t, torch.Tensor):
                continue
            key = _key(t)
            if key in inputs or key in self.live:
                continue
            storage = t.untyped_storage()
            self.serial += 1
            self.live[key] = (self.serial, storage.nbytes())
            self.current += storage.nbytes()
            weakref.finalize(storage, self._free, key, self.serial)
        if self.current > self.peak:
            self.peak = self.current
            self.peak_serials = frozenset(serial for serial, _ in self.live.values())
        return out


@dataclass
class StepPeak:
    """One traced step: its peak above the between-steps state, and how that peak splits."""

    peak_bytes: int
    gradient_bytes: int
    """Gradients alive at the peak."""
    saved_activation_bytes: int
    """Alive when the model's forward returned (kept for the backward pass)."""

    @property
    def activation_bytes(self) -> int:
        """Everything else alive at the peak: saved activations still needed, and temporaries."""
        return self.peak_bytes - self.gradient_bytes


def trace_step(
    target: Target, model: torch.nn.Module, optimizer: torch.optim.Optimizer, batch: dict
) -> StepPeak:
    """Run one step of ``target`` under the live-bytes tracker and split its peak."""
    tracker = _LiveBytes()
    grads: dict[int, int] = {}  # serial -> bytes
    saved: list[int] = []

    def note_grads(opt: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        for p in model.parameters():
            if p.grad is not None and (serial := tracker.serial_of(p.grad)) is not None:
                grads[serial] = p.grad.untyped_storage().nbytes()

    def note_saved(module: torch.nn.Module, args: Any, output: Any) -> None:
        saved.append(tracker.current)

    hooks = [optimizer.register_step_pre_hook(note_grads), model.register_forward_hook(note_saved)]
    try:
        with tracker:
            run_step(target, model, optimizer, batch)
    finally:
        for hook in hooks:
            hook.remove()
    at_peak = sum(n for serial, n in grads.items() if serial in tracker.peak_serials)
    return StepPeak(tracker.peak, at_peak, saved[0] if saved else 0)


def _state_bytes(model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> tuple[int, int, int]:
    """Bytes of parameters (+ buffers), of gradients (one per trainable parameter) and of optimizer state."""
    params = sum(p.untyped_storage().nbytes() for p in model.parameters())
    params += sum(b.untyped_storage().nbytes() for b in model.buffers())
    grads = sum(p.untyped_storage().nbytes() for p in model.parameters() if p.requires_grad)
    state = sum(
        t.untyped_storage().nbytes()
        for per_param in optimizer.state.values()
        for t in per_param.values()
        if isinstance(t, torch.Tensor)
    )
    return params, grads, state


@dataclass
class MemoryEstimate:
    activation_checkpointing: bool
    parameter_bytes: int
    optimizer_bytes: int
    gradient_bytes: int
    """All gradients (fp32, one per trainable parameter)."""
    step: StepPeak

    @property
    def peak_bytes(self) -> int:
        return self.parameter_bytes + self.optimizer_bytes + self.step.peak_bytes

    def to_dict(self) -> dict[str, object]:
        return {
            "activation_checkpointing": self.activation_checkpointing,
            "peak_memory_gib": round(self.peak_bytes / GIB, 4),
            "breakdown_gib": {
                "parameters": round(self.parameter_bytes / GIB, 4),
                "optimizer_state": round(self.optimizer_bytes / GIB, 4),
                "gradients_at_peak": round(self.step.gradient_bytes / GIB, 4),
                "activations_at_peak": round(self.step.activation_bytes / GIB, 4),
            },
            "gradients_gib": round(self.gradient_bytes / GIB, 4),
            "saved_activations_gib": round(self.step.saved_activation_bytes / GIB, 4),
        }


def estimate_memory(target: Target) -> MemoryEstimate:
    """Estimate the peak of ``target``'s training step on fake tensors (see the module docstring)."""
    if target.dispatch == "loop":  # the loop's split sizes need real data: grouped_mm has its shapes
        target = target.replace(dispatch="grouped_mm")
    mode = FakeTensorMode()
    with mode:
        model, optimizer = build(target)
    batches = [
        {
            k: mode.from_tensor(v)
            for k, v in synthetic_batch(target.model, target.batch_size, target.seq_len, seed).items()
        }
        for seed in (0, 1)
    ]
    with mode:
        run_step(target, model, optimizer, batches[0])  # creates the AdamW state
        step = trace_step(target, model, optimizer, batches[1])
    params, grads, state = _state_bytes(model, optimizer)
    return MemoryEstimate(target.activation_checkpointing, params, state, grads, step)


# ---- measured on the CPU --------------------------------------------------------------------------------
def _status_bytes(field: str) -> int:
    match = re.search(rf"^{field}:\s+(\d+) kB", Path("/proc/self/status").read_text(), re.MULTILINE)
    if match is None:
        raise ZephyrError(f"/proc/self/status has no {field}: measuring memory needs Linux")
    return int(match.group(1)) * 1024


def _measure_here(spec: dict[str, Any]) -> int:
    """In this process: build ``spec``'s target for real, run a step, then return the second step's RSS peak."""
    model_cfg = model_config_from_dict(spec["model"], ModelConfig())
    device = resolve_device(spec["device"], emulate=spec["device"] != "cpu")
    target = Target(**{**spec, "model": model_cfg, "device": device})
    model, optimizer = build(target)
    batches = [synthetic_batch(model_cfg, target.batch_size, target.seq_len, seed) for seed in (0, 1)]
    run_step(target, model, optimizer, batches[0])
    gc.collect()
    before = _status_bytes("VmRSS")
    Path("/proc/self/clear_refs").write_text("5")  # reset the high-water mark to the current RSS
    run_step(target, model, optimizer, batches[1])
    return _status_bytes("VmHWM") - before


def measure_cpu_peak(target: Target) -> int:
    """Bytes the second training step of ``target`` adds to the resident set at its peak, run for real in a
    child process (one thread, large allocations returned to the OS when freed)."""
    spec = {**vars(target), "model": dataclasses.asdict(target.model), "device": target.device.type}
    code = (
        "import json, sys, torch\n"
        "torch.set_num_threads(1)\n"
        "from zephyr.trainer.check.memory import _measure_here\n"
        "print(json.dumps(_measure_here(json.loads(sys.argv[1]))))\n"
    )
    env = dict(os.environ, MALLOC_MMAP_THRESHOLD_="65536", OMP_NUM_THREADS="1")
    result = subprocess.run(
        [sys.executable, "-c", code, json.dumps(spec)], env=env, capture_output=True, text=True, check=False
    )
    if result.returncode != 0:
        tail = result.stderr.strip().splitlines()[-1:] or ["no output"]
        raise ZephyrError(f"measuring the CPU peak failed: {tail[0]}")
    return int(json.loads(result.stdout.strip().splitlines()[-1]))
