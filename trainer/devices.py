"""Devices and how a run spreads over them: device selection and per-device capabilities (through device-agnostic
torch APIs), process groups, FSDP2 sharding and per-block compilation.

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

Process groups, FSDP2 sharding and per-block compilation: ``init_distributed(info)`` joins the process group that ``torchrun`` describes (``RANK``, ``WORLD_SIZE``,
``MASTER_ADDR``...) with the device's backend (nccl, xccl, gloo); a plain ``python`` run stays single-process.
``parallelize(model, ...)`` applies, in torchtitan's order: ``torch.compile`` per transformer block (in place,
so state-dict keys do not change), then FSDP2 ``fully_shard`` per block and on the root. With bf16 on an
accelerator, FSDP's mixed-precision policy gathers parameters in bf16 and reduces gradients in fp32; each
router's gate is sharded as its own unit with an fp32 policy, so routing is computed from fp32 weights.
"""

from __future__ import annotations

import contextlib
import logging
import os
from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch import nn
from zephyr.trainer.moe import MoE

from zephyr.errors import ConfigError

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

    def autocast(self, bf16: bool | None = None) -> contextlib.AbstractContextManager:
        """bf16 autocast when ``bf16`` (default: where the device trains in bf16), for the device type
        ``torch.autocast`` needs: where the tensors are, not whose code path runs (an emulated device's CPU)."""
        if self.bf16 if bf16 is None else bf16:
            return torch.autocast(self.device.type, dtype=torch.bfloat16)
        return contextlib.nullcontext()

    def default_dispatch(self) -> str:
        """grouped_mm where it runs, capacity on torch_xla (static shapes), the loop otherwise (XPU)."""
        if self.type == "xla":
            return "capacity"
        if self.type in ("cuda", "cpu") and grouped_mm_supported(self.device):
            return "grouped_mm"
        return "loop"

    def default_attention(self) -> str:
        return "flex" if self.type == "cuda" else "sdpa"

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


def resolve_device(kind: str = "auto", *, emulate: bool = False) -> DeviceInfo:
    """The device this process trains on; ``$LOCAL_RANK`` (default 0) picks the accelerator.

    ``emulate=True`` returns ``kind``'s code path with tensors on the CPU (see the module docstring).
    """
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
    index = int(os.environ.get("LOCAL_RANK", "0")) % module.device_count()
    device = torch.device(kind, index)
    torch.accelerator.set_device_index(index)
    name = module.get_device_name(index)
    return DeviceInfo(kind, device, _BACKENDS[kind], True, name, peak_flops_for(name))


@dataclass(frozen=True)
class DistInfo:
    rank: int
    world_size: int

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.world_size > 1


def init_distributed(info: DeviceInfo) -> DistInfo:
    """Join the torchrun process group if one is described in the environment (and not joined yet)."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    if world > 1 and not dist.is_initialized():
        kwargs = {}
        if info.device.type in ("cuda", "xpu"):
            kwargs["device_id"] = info.device
        dist.init_process_group(backend=info.dist_backend, rank=rank, world_size=world, **kwargs)
        log.info("joined process group: rank %d of %d (%s)", rank, world, info.dist_backend)
    if dist.is_initialized():
        rank, world = dist.get_rank(), dist.get_world_size()
    return DistInfo(rank=rank, world_size=world)


def dynamo_options(model: nn.Module) -> dict[str, object]:
    """The ``torch._dynamo.config`` settings compiling ``model`` needs.

    The per-expert loop reads its group sizes with ``.tolist()``; with ``capture_scalar_outputs`` dynamo
    keeps that in the graph (as unbacked sizes) instead of breaking the block in two. The read itself still
    waits for the device: ``zephyr train check`` reports it as a host sync of the loop dispatch.
    """
    loop = any(isinstance(m, MoE) and m.dispatch == "loop" for m in model.modules())
    return {"capture_scalar_outputs": True} if loop else {}


def parallelize(
    model: nn.Module, *, compile: bool, fsdp: bool, bf16: bool, activation_checkpointing: bool = False
) -> nn.Module:
    """Checkpoint, compile and/or shard the blocks with FSDP2, in place; returns ``model``."""
    for block in model.layers:
        block.checkpoint_activations = activation_checkpointing
    if compile:
        for key, value in dynamo_options(model).items():
            log.info(
                "torch._dynamo.config.%s = %r (loop dispatch: the group sizes stay in the graph)", key, value
            )
            setattr(torch._dynamo.config, key, value)
        for block in model.layers:
            block.compile()
    if not fsdp:
        return model
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    mp = (
        MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
        if bf16
        else MixedPrecisionPolicy()
    )
    fp32 = MixedPrecisionPolicy(param_dtype=torch.float32, reduce_dtype=torch.float32)
    n = len(model.layers)
    for i, block in enumerate(model.layers):
        if isinstance(block.ffn, MoE) and bf16:
            fully_shard(block.ffn.router.gate, mp_policy=fp32)
        # The last block's parameters are needed again right away by the backward pass: keep them gathered.
        fully_shard(block, mp_policy=mp, reshard_after_forward=i < n - 1)
    fully_shard(model, mp_policy=mp)
    return model
