"""Device selection and per-device capabilities, through device-agnostic torch APIs.

``resolve_device("auto")`` picks the current accelerator (``torch.accelerator``: CUDA, XPU, ...) or CPU;
``xla`` (torch_xla) is experimental and never picked automatically. ``DeviceInfo`` says which collective backend
the device uses (nccl, xccl, gloo, xla), whether bf16 autocast is worth it, which MoE dispatch and attention
backend suit it, and its peak dense bf16 FLOPS for MFU.

Peak FLOPS table (dense bf16, no sparsity; vendor data sheets): H100 SXM 989 TFLOPS (the torchtitan value),
H100 PCIe 756, H200 989, A100 312, B200 2250, L40S 362, MI300X 1307, Intel Data Center GPU Max 1550 ≈ 832.
An unknown device gets no MFU (``None``), never a made-up one.

Emulation: ``resolve_device("xpu" | "xla" | "cuda", emulate=True)`` takes that device's code path (its MoE
dispatch and attention defaults, bf16 autocast, fused AdamW, step marks for torch_xla) with tensors on the CPU.
Tests and ``zephyr train check`` use it to run the accelerator paths where no accelerator exists; what it
cannot reach is the vendor runtime itself (kernels, collectives, the torch_xla lazy tensor).
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass

import torch

from zephyr.errors import ConfigError

__all__ = ["DeviceInfo", "resolve_device", "resolve_dispatch", "grouped_mm_supported", "peak_flops_for"]

log = logging.getLogger(__name__)

_PEAK_BF16_TFLOPS = (  # (substring of the device name, TFLOPS); first match wins, most specific first
    ("H100 PCIe", 756.0),
    ("H100", 989.0),
    ("H200", 989.0),
    ("GH200", 989.0),
    ("B200", 2250.0),
    ("A100", 312.0),
    ("L40S", 362.0),
    ("MI300X", 1307.0),
    ("MI250X", 383.0),
    ("Max 1550", 832.0),
)

_BACKENDS = {"cuda": "nccl", "xpu": "xccl", "cpu": "gloo", "xla": "xla"}


@dataclass(frozen=True)
class DeviceInfo:
    type: str
    """``cuda``, ``xpu``, ``cpu`` or ``xla``."""
    device: torch.device
    dist_backend: str
    bf16: bool
    """bf16 autocast is supported and worthwhile (accelerators; not CPU, where fp32 is faster and exact)."""
    name: str
    peak_flops: float | None
    """Peak dense bf16 FLOPS of one device, for MFU; None when unknown."""
    emulated: bool = False
    """The code path of ``type`` with tensors on the CPU (``device`` is the CPU); see the module docstring."""

    @property
    def autocast_type(self) -> str:
        """The device type ``torch.autocast`` needs: where the tensors are, not whose code path runs."""
        return self.device.type

    def default_dispatch(self) -> str:
        """grouped_mm where it runs, capacity on torch_xla (static shapes), the loop otherwise (XPU)."""
        if self.type == "xla":
            return "capacity"
        if self.type in ("cuda", "cpu") and grouped_mm_supported(self.device):
            return "grouped_mm"
        return "loop"

    def default_attention(self) -> str:
        return "flex" if self.type == "cuda" else "sdpa"

    def synchronize(self) -> None:
        """Wait for the device's queued work (a no-op on the CPU, emulated devices included)."""
        if self.emulated or self.type == "cpu":
            return
        if self.type in ("cuda", "xpu"):
            torch.accelerator.synchronize()
        elif self.type == "xla":  # pragma: no cover - needs torch_xla
            import torch_xla.core.xla_model as xm

            xm.wait_device_ops()

    def mark_step(self) -> None:
        """End of an optimizer step: torch_xla compiles and runs the lazily traced step here; elsewhere nothing.

        One mark per step keeps the XLA program the same every step (static shapes, no data-dependent ones:
        capacity dispatch), so it is compiled once.
        """
        if self.type != "xla" or self.emulated:
            return
        import torch_xla.core.xla_model as xm  # pragma: no cover - needs torch_xla

        xm.mark_step()  # pragma: no cover - needs torch_xla


def grouped_mm_supported(device: torch.device) -> bool:
    """Whether ``torch._grouped_mm`` runs on ``device`` (tried once on a tiny problem; XPU lacks it)."""
    if not hasattr(torch, "_grouped_mm"):
        return False
    if device.type == "cuda":
        major, _ = torch.cuda.get_device_capability(device)
        if major < 8:  # the CUDA kernels need sm80+ (sm90 for the CUTLASS path)
            return False
    try:
        x = torch.randn(32, 16, device=device)
        w = torch.randn(2, 16, 16, device=device)
        torch._grouped_mm(x, w, offs=torch.tensor([16, 32], dtype=torch.int32, device=device))
        return True
    except (RuntimeError, NotImplementedError) as exc:
        log.info("torch._grouped_mm unavailable on %s (%s); MoE uses the per-expert loop", device, exc)
        return False


def resolve_dispatch(chosen: str, info: DeviceInfo, *, compile: bool, bf16: bool) -> str:
    """The MoE dispatch a run uses: ``auto`` takes the device's default, except that ``torch._grouped_mm``
    compiles only for bf16 inputs (its fake-tensor kernel checks the dtype; the CPU's eager kernel takes fp32),
    so a compiled fp32 run takes the loop instead. Asking for grouped_mm there is a config error."""
    dispatch = info.default_dispatch() if chosen == "auto" else chosen
    if dispatch == "grouped_mm" and compile and not bf16:
        if chosen == "grouped_mm":
            raise ConfigError(
                "moe.dispatch=grouped_mm with --compile needs bf16 (torch._grouped_mm compiles only for bf16 "
                "inputs): add --dtype bf16, or use --dispatch loop"
            )
        log.info("compiled fp32 run: MoE dispatch loop (torch._grouped_mm compiles only for bf16)")
        return "loop"
    return dispatch


def peak_flops_for(name: str) -> float | None:
    for key, tflops in _PEAK_BF16_TFLOPS:
        if key in name:
            return tflops * 1e12
    return None


def resolve_device(kind: str = "auto", local_rank: int | None = None, *, emulate: bool = False) -> DeviceInfo:
    """The device this process trains on; ``local_rank`` (default ``$LOCAL_RANK`` or 0) picks the accelerator.

    ``emulate=True`` returns ``kind``'s code path with tensors on the CPU (see the module docstring).
    """
    if local_rank is None:
        local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    if kind == "auto":
        acc = torch.accelerator.current_accelerator() if torch.accelerator.is_available() else None
        kind = acc.type if acc is not None and acc.type in ("cuda", "xpu") else "cpu"
    if kind not in _BACKENDS:
        raise ConfigError(f"unknown device {kind!r}; choose auto, cuda, xpu, cpu or xla")
    if emulate and kind != "cpu":
        name = f"{kind} (emulated on the cpu)"
        return DeviceInfo(kind, torch.device("cpu"), _BACKENDS[kind], True, name, None, emulated=True)
    if kind == "xla":
        try:
            import torch_xla.core.xla_model as xm
        except ImportError as exc:
            raise ConfigError("--device xla needs torch_xla: pip install torch_xla") from exc
        device = xm.xla_device()  # pragma: no cover - needs torch_xla
        return DeviceInfo("xla", device, "xla", True, "xla", None)  # pragma: no cover - needs torch_xla
    if kind == "cpu":
        return DeviceInfo("cpu", torch.device("cpu"), "gloo", False, "cpu", None)
    module = getattr(torch, kind)
    if not module.is_available():
        raise ConfigError(
            f"--device {kind} requested but torch.{kind}.is_available() is False on this machine"
        )
    index = local_rank % module.device_count()
    device = torch.device(kind, index)
    torch.accelerator.set_device_index(index)
    name = module.get_device_name(index)
    return DeviceInfo(kind, device, _BACKENDS[kind], True, name, peak_flops_for(name))
