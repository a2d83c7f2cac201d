"""Process groups, FSDP2 sharding and per-block compilation.

``init_distributed(info)`` joins the process group that ``torchrun`` describes (``RANK``, ``WORLD_SIZE``,
``MASTER_ADDR``...) with the device's backend (nccl, xccl, gloo); a plain ``python`` run stays single-process.
``parallelize(model, ...)`` applies, in torchtitan's order: ``torch.compile`` per transformer block (in place,
so state-dict keys do not change), then FSDP2 ``fully_shard`` per block and on the root. With bf16 on an
accelerator, FSDP's mixed-precision policy gathers parameters in bf16 and reduces gradients in fp32; each
router's gate is sharded as its own unit with an fp32 policy, so routing is computed from fp32 weights.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch import nn
from zephyr.trainer.devices import DeviceInfo
from zephyr.trainer.moe import MoE

__all__ = ["DistInfo", "init_distributed", "destroy_distributed", "parallelize", "dynamo_options"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class DistInfo:
    rank: int
    world_size: int
    local_rank: int

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
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    if world > 1 and not dist.is_initialized():
        kwargs = {}
        if info.device.type in ("cuda", "xpu"):
            kwargs["device_id"] = info.device
        dist.init_process_group(backend=info.dist_backend, rank=rank, world_size=world, **kwargs)
        log.info("joined process group: rank %d of %d (%s)", rank, world, info.dist_backend)
    if dist.is_initialized():
        rank, world = dist.get_rank(), dist.get_world_size()
    return DistInfo(rank=rank, world_size=world, local_rank=local_rank)


def destroy_distributed() -> None:
    if dist.is_initialized():
        dist.destroy_process_group()


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
