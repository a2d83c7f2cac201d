"""The training loop: wiring of model, data, optimizer, checkpoints and metrics.

``train(cfg)`` runs ``cfg.steps`` optimizer steps (resuming from ``cfg.checkpoint_dir`` when it holds a
checkpoint) and returns a ``TrainResult``. One step = ``grad_accum`` micro-batches of ``batch_size`` sequences
per rank → clip → AdamW → router-bias update → metrics → maybe checkpoint.

The step issues no host synchronization of its own: metric scalars are packed into one device tensor and read
one step later (while the device works on the next step), so tokens/s in steady state is the device's rate.
Before a checkpoint is written the pending metrics are read, so a NaN loss is caught before it is saved.
Progress (a line every ``cfg.log_every`` steps, a bar on a terminal: ``zephyr.trainer.metrics``) is shown
from those same records, so it adds no synchronization either.

Run it with ``zephyr train`` (``zephyr.trainer.cli``) or ``torchrun --nproc-per-node N -m zephyr.cli train ...``
for FSDP2 across devices.

One optimizer step (``train_step``): ``grad_accum`` micro-batches forward and backward, clip, AdamW, router-bias update.

``train_step`` is the step that ``train`` runs and that ``zephyr train check`` inspects (graph
breaks, host syncs, FLOPs, memory), so what the check reports is what training does. It issues no host
synchronization of its own: everything it returns is a device tensor, read later by the caller.

AdamW and the learning-rate schedule: ``build_optimizer`` makes AdamW (fused kernels on CUDA/XPU, foreach elsewhere) with weight decay on matrices
only (norm scales are 1-D and not decayed). ``lr_at(step, ...)`` is a pure function of the step, so the schedule's
whole state is the step counter kept in the checkpoint:

* ``cosine``: linear warmup to ``lr``, then cosine to ``min_lr_ratio · lr`` at the last step;
* ``wsd`` (warmup-stable-decay, Hu et al. 2024 "MiniCPM"): warmup, flat at ``lr``, then a linear decay over the
  last ``decay_fraction`` of the steps to ``min_lr_ratio · lr``;
* ``constant``: warmup, then flat.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn
from zephyr.trainer.checkpoint import CheckpointManager
from zephyr.trainer.config import ModelConfig, OptimConfig, TrainConfig, get_preset, model_config_from_dict
from zephyr.trainer.data import Batcher, MixTracker, build_source, schedule_samples
from zephyr.trainer.devices import (
    DeviceInfo,
    DistInfo,
    init_distributed,
    parallelize,
    resolve_device,
    resolve_dispatch,
)
from zephyr.trainer.metrics import TrainLog, mfu
from zephyr.trainer.model import Transformer, build_model, count_params, flops_per_token
from zephyr.trainer.moe import update_expert_bias


def build_optimizer(model: nn.Module, cfg: OptimConfig, device_type: str) -> torch.optim.AdamW:
    decay, no_decay = [], []
    for p in model.parameters():
        if p.requires_grad:
            (decay if p.ndim >= 2 else no_decay).append(p)
    groups = [{"params": decay, "weight_decay": cfg.weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    fused = device_type in ("cuda", "xpu")
    return torch.optim.AdamW(
        groups,
        lr=cfg.lr,
        betas=(cfg.beta1, cfg.beta2),
        eps=cfg.eps,
        fused=fused or None,
        foreach=None if fused else True,
    )


def lr_at(step: int, cfg: OptimConfig, total_steps: int) -> float:
    """Learning rate for optimizer step ``step`` (0-based) of ``total_steps``."""
    floor = cfg.lr * cfg.min_lr_ratio
    if cfg.warmup_steps > 0 and step < cfg.warmup_steps:
        return cfg.lr * (step + 1) / cfg.warmup_steps
    if cfg.schedule == "constant":
        return cfg.lr
    if cfg.schedule == "cosine":
        span = max(1, total_steps - cfg.warmup_steps - 1)
        progress = min(1.0, (step - cfg.warmup_steps) / span)
        return floor + (cfg.lr - floor) * 0.5 * (1.0 + math.cos(math.pi * progress))
    decay_steps = max(1, round(total_steps * cfg.decay_fraction))
    decay_start = total_steps - decay_steps
    if step < decay_start:
        return cfg.lr
    progress = min(1.0, (step - decay_start + 1) / decay_steps)
    return cfg.lr + (floor - cfg.lr) * progress


@dataclass
class StepOutput:
    """The step's results as device tensors (nothing here has been read by the host)."""

    loss: torch.Tensor
    """Mean cross-entropy over the micro-batches (scalar)."""
    aux: torch.Tensor
    """Mean auxiliary (balance) loss over the micro-batches (scalar)."""
    grad_norm: torch.Tensor
    """Global gradient norm before clipping (scalar)."""
    moe: dict[str, torch.Tensor]
    """``update_expert_bias``'s load, bias and dropped-token tensors; empty for a dense model."""


def forward_loss(
    model: nn.Module, batch: dict[str, torch.Tensor], autocast: contextlib.AbstractContextManager
) -> tuple[torch.Tensor, torch.Tensor]:
    """Cross-entropy and auxiliary loss of one micro-batch: the region ``torch.compile`` captures (its backward
    is derived from it by AOTAutograd)."""
    with autocast:
        logits, aux = model(batch["input_ids"], batch["positions"])
        loss = Transformer.loss(logits, batch["labels"])
    return loss, aux


def apply_gradients(
    model: nn.Module, optimizer: torch.optim.Optimizer, *, grad_clip: float, all_reduce: bool
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Clip, AdamW step, drop the gradients, balance the routers; returns the pre-clip norm and the MoE stats."""
    params = [p for p in model.parameters() if p.requires_grad]
    max_norm = grad_clip if grad_clip > 0 else math.inf
    grad_norm = torch.nn.utils.clip_grad_norm_(params, max_norm, foreach=True)
    if hasattr(grad_norm, "full_tensor"):  # DTensor under FSDP2
        grad_norm = grad_norm.full_tensor()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return grad_norm, update_expert_bias(model, all_reduce=all_reduce)


def train_step(
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    next_batch: Callable[[], dict[str, torch.Tensor]],
    *,
    grad_accum: int = 1,
    grad_clip: float = 1.0,
    autocast: contextlib.AbstractContextManager | None = None,
    all_reduce: bool = False,
) -> StepOutput:
    """Run one optimizer step on ``grad_accum`` batches from ``next_batch()`` (each already on the device).

    ``grad_clip`` <= 0 only measures the norm. ``all_reduce`` sums the router loads over the process group
    before the bias update, so every data-parallel rank applies the same bias.
    """
    autocast = autocast if autocast is not None else contextlib.nullcontext()
    device = next(model.parameters()).device
    loss_sum = torch.zeros((), device=device)
    aux_sum = torch.zeros((), device=device)
    for _ in range(grad_accum):
        loss, aux = forward_loss(model, next_batch(), autocast)
        ((loss + aux) / grad_accum).backward()
        loss_sum += loss.detach()
        aux_sum += aux.detach()
    grad_norm, moe_stats = apply_gradients(model, optimizer, grad_clip=grad_clip, all_reduce=all_reduce)
    return StepOutput(loss_sum / grad_accum, aux_sum / grad_accum, grad_norm, moe_stats)


log = logging.getLogger(__name__)


@dataclass
class TrainResult:
    step: int
    """Optimizer steps completed in total (including those before a resume)."""
    losses: list[float] = field(default_factory=list)
    """Loss of each step run by this call, in order."""
    records: list[dict[str, Any]] = field(default_factory=list)
    """The metric records of this call (what went to the JSONL log)."""
    resumed_from: int | None = None


def resolve_model_config(cfg: TrainConfig, data_vocab: int | None = None) -> ModelConfig:
    """The preset with ``cfg.model`` overrides; a data vocabulary larger than the preset's widens the model
    (rounded up to a multiple of 64) unless ``vocab_size`` was given explicitly."""
    model_cfg = model_config_from_dict(cfg.model, get_preset(cfg.preset))
    if data_vocab and "vocab_size" not in cfg.model and data_vocab > model_cfg.vocab_size:
        vocab = (data_vocab + 63) // 64 * 64
        log.info("widening vocab_size %d -> %d to cover the data's tokenizer", model_cfg.vocab_size, vocab)
        model_cfg = dataclasses.replace(model_cfg, vocab_size=vocab)
    return model_cfg


def train(cfg: TrainConfig, *, device: DeviceInfo | None = None) -> TrainResult:
    """Train (or resume) according to ``cfg``: setup, resume, the step loop and the last metrics flush (see
    the module docstring for the step's anatomy).

    ``device`` replaces ``resolve_device(cfg.device)``, e.g. ``resolve_device("xla", emulate=True)`` runs the
    XLA code path (capacity dispatch, step marks) on the CPU.
    """
    info = device if device is not None else resolve_device(cfg.device)
    dinfo = init_distributed(info)
    try:
        run = _build_run(cfg, info, dinfo)
        ckpt = (
            CheckpointManager(cfg.checkpoint_dir, keep=cfg.keep_checkpoints) if cfg.checkpoint_dir else None
        )
        start, resumed_from = _resume(run, ckpt)
        result = TrainResult(step=start, resumed_from=resumed_from)
        if start >= cfg.steps:
            log.info("nothing to do: checkpoint is at step %d and --steps is %d", start, cfg.steps)
            return result
        metrics = _StepMetrics(run, start, result)
        try:
            _step_loop(run, ckpt, start, metrics, result)
            metrics.flush()
        finally:
            metrics.log.close()
        return result
    finally:
        if torch.distributed.is_initialized():
            torch.distributed.destroy_process_group()


@dataclass
class _Run:
    """What the step loop works on, built once per ``train`` call (``_build_run``)."""

    cfg: TrainConfig
    info: DeviceInfo
    dinfo: DistInfo
    model: torch.nn.Module
    model_cfg_dict: dict[str, Any]
    optimizer: torch.optim.Optimizer
    source: Any
    """The sample source (``TokenLoader`` or synthetic); the batcher draws from it."""
    batcher: Batcher
    autocast: contextlib.AbstractContextManager
    samples_per_step: int
    """Sequences per optimizer step over all ranks."""
    flops_per_token: float
    peak_flops: float
    """Per device, for MFU."""


def _build_run(cfg: TrainConfig, info: DeviceInfo, dinfo: DistInfo) -> _Run:
    """Data source, model (parallelized), optimizer and batcher; logs the model's size on the main rank."""
    bf16 = info.bf16 if cfg.dtype == "auto" else cfg.dtype == "bf16"
    samples_per_step = cfg.batch_size * cfg.grad_accum * dinfo.world_size
    vocab_size = resolve_model_config(cfg).vocab_size
    source, data_vocab = build_source(
        cfg,
        vocab_size=vocab_size,
        rank=dinfo.rank,
        world_size=dinfo.world_size,
        samples_per_step=samples_per_step,
    )
    model_cfg = resolve_model_config(cfg, data_vocab)
    chosen = model_cfg.moe.dispatch if model_cfg.moe is not None else "loop"
    dispatch = resolve_dispatch(chosen, info, compile=cfg.compile, bf16=bf16)
    attention = info.default_attention() if model_cfg.attention == "auto" else model_cfg.attention
    torch.manual_seed(cfg.seed)
    model = build_model(model_cfg, device=info.device, dispatch=dispatch, attention=attention)
    counts = count_params(model_cfg)
    fpt = flops_per_token(model_cfg, cfg.seq_len)
    peak = cfg.peak_tflops * 1e12 if cfg.peak_tflops > 0 else info.peak_flops
    if dinfo.is_main:
        log.info(
            "model %s: %.1fM total / %.1fM active params, dispatch=%s, attention=%s, device=%s (%s), bf16=%s, "
            "world=%d, %.3g FLOPs/token",
            cfg.preset,
            counts.total / 1e6,
            counts.active / 1e6,
            dispatch,
            attention,
            info.type,
            info.name,
            bf16,
            dinfo.world_size,
            fpt,
        )
    parallelize(
        model,
        compile=cfg.compile,
        fsdp=dinfo.distributed,
        bf16=bf16 and info.type != "cpu",
        activation_checkpointing=cfg.activation_checkpointing,
    )
    optimizer = build_optimizer(model, cfg.optim, info.type)
    batcher = Batcher(source, cfg.batch_size, vocab_size=model_cfg.vocab_size)
    return _Run(
        cfg=cfg,
        info=info,
        dinfo=dinfo,
        model=model,
        model_cfg_dict=dataclasses.asdict(model_cfg),
        optimizer=optimizer,
        source=source,
        batcher=batcher,
        autocast=info.autocast(bf16 and not dinfo.distributed),  # FSDP2 casts itself (parallelize)
        samples_per_step=samples_per_step,
        flops_per_token=fpt,
        peak_flops=peak,
    )


def _resume(run: _Run, ckpt: CheckpointManager | None) -> tuple[int, int | None]:
    """(first step to run, the checkpoint step resumed from or None): model, optimizer and loader position
    restored from the latest checkpoint; a mix schedule is re-anchored at the resume point."""
    cfg = run.cfg
    if ckpt is None or (latest := ckpt.latest()) is None:
        return 0, None
    step, loader_state = ckpt.load(latest, run.model, run.optimizer, model_config=run.model_cfg_dict)
    if cfg.mix_schedule and "consumed" in loader_state:  # steps from here map from the resume point
        run.source.set_schedule(
            schedule_samples(
                cfg.mix_schedule,
                run.samples_per_step,
                origin_step=step,
                origin_sample=int(loader_state["consumed"]),
            )
        )
    run.batcher.load_state_dict(loader_state, reweight=cfg.reweight)
    if run.dinfo.is_main:
        log.info("resumed from %s at step %d", latest, step)
    return step, step


class _StepMetrics:
    """A step's metrics: issued as device tensors whose copy to the host does not block the step (``issue``),
    read one step late (see the module docstring) and written to the log, the progress display and the
    ``TrainResult`` (``flush``; with nothing pending it does nothing)."""

    def __init__(self, run: _Run, start: int, result: TrainResult):
        cfg, main = run.cfg, run.dinfo.is_main
        self.log = TrainLog(cfg, start, enabled=main)
        self.result, self.run = result, run
        self.tokens_per_step = run.samples_per_step * cfg.seq_len
        self.pending: tuple | None = None
        self.last_time = time.perf_counter()
        self.filtering = getattr(run.source, "instance_filter", None) is not None
        self.filtered_total = 0

    def issue(
        self, step: int, scalars: torch.Tensor, moe: dict[str, torch.Tensor], data: dict[str, Any]
    ) -> None:
        """Step ``step``'s ``scalars`` (loss, aux, grad norm, dropped, lr, filtered) and router tensors, copied
        to the host without blocking; ``data``: the record's host-side entries (realized mix, data loading)."""
        host = [
            t.detach().to("cpu", non_blocking=True)
            for t in (scalars, moe.get("load"), moe.get("bias"))
            if t is not None
        ]
        event = None  # synchronous devices (CPU) have finished the step by now
        if scalars.device.type in ("cuda", "xpu"):
            event = torch.Event(device=scalars.device)
            event.record()
        self.pending = (step, host, event, data, time.perf_counter())

    def flush(self) -> None:
        if self.pending is None:
            return
        step, host, event, data, done_at = self.pending
        if event is not None:
            event.synchronize()  # returns when the device finished the step (the host runs ahead)
            done_at = time.perf_counter()
        loss, aux, grad_norm, dropped, lr, filtered = host[0].tolist()
        elapsed = max(done_at - self.last_time, 1e-9)
        self.last_time = done_at
        spike = self.log.check_loss(step, loss)
        tps = self.tokens_per_step / elapsed
        record: dict[str, Any] = {
            "step": step + 1,  # steps done, as the progress line and the checkpoints count them
            "loss": loss,
            "aux_loss": aux,
            "grad_norm": grad_norm,
            "lr": lr,
            "tokens": self.tokens_per_step,
            "tokens_per_s": tps,
            "mfu": mfu(tps, self.run.flops_per_token, self.run.peak_flops, self.run.dinfo.world_size),
            "step_time_s": elapsed,
            "data_loading_s": data.pop("data_loading_s"),
        }
        if len(host) > 1:
            record.update(_router_record(*host[1:], dropped))
        record["loss_spike"] = spike
        record.update(data)
        if self.filtering:  # samples whose loss the instance filter masked, over all ranks
            self.filtered_total += int(filtered)
            record.update(instances_filtered=int(filtered), instances_filtered_total=self.filtered_total)
        self.log.write(record)
        self.result.losses.append(loss)
        self.result.records.append(record)
        self.pending = None


def _router_record(load: torch.Tensor, bias: torch.Tensor, dropped: float) -> dict[str, Any]:
    """The MoE router's entries of a step record: mean expert load, its entropy and peak, the bias size."""
    mean_load = load.mean(dim=0)
    entropy = -(load * load.clamp_min(1e-12).log()).sum(dim=-1) / math.log(load.shape[-1])
    return dict(
        expert_load=[round(v, 5) for v in mean_load.tolist()],
        load_entropy=float(entropy.mean()) if load.shape[-1] > 1 else 1.0,
        load_max_over_mean=float((load.max(dim=-1).values * load.shape[-1]).max()),
        bias_abs_mean=float(bias.abs().mean()),
        bias_abs_max=float(bias.abs().max()),
        dropped_tokens=int(dropped),
    )


def _step_loop(
    run: _Run, ckpt: CheckpointManager | None, start: int, metrics: _StepMetrics, result: TrainResult
) -> None:
    """Steps ``start`` .. ``cfg.steps - 1``: each step's metrics stay on the device until the next step has
    been issued (``_StepMetrics``), and a due checkpoint is saved after its step's metrics were read."""
    cfg, info, source = run.cfg, run.info, run.source
    mix = MixTracker(source, cfg.seq_len, cfg.mix_window)
    filtered_before = getattr(source, "filtered", 0)
    run.model.train()
    data_loading_s = 0.0

    def next_batch() -> dict[str, torch.Tensor]:
        # torchtitan's data_loading(s): host time in the loader and the copy's issue. The host runs one step
        # ahead of the device, so the device waits for data only when this exceeds that lead.
        nonlocal data_loading_s
        began = time.perf_counter()
        batch = {k: v.to(info.device, non_blocking=True) for k, v in run.batcher.next_batch().items()}
        data_loading_s += time.perf_counter() - began
        return batch

    for step in range(start, cfg.steps):
        lr = lr_at(step, cfg.optim, cfg.steps)
        for group in run.optimizer.param_groups:
            group["lr"] = lr
        data_loading_s = 0.0
        out = train_step(
            run.model,
            run.optimizer,
            next_batch,
            grad_accum=cfg.grad_accum,
            grad_clip=cfg.optim.grad_clip,
            autocast=run.autocast,
            all_reduce=run.dinfo.distributed,
        )
        info.mark_step()  # torch_xla: cut the lazy graph here, one compiled program per step
        scalars = torch.stack(
            [
                out.loss,
                out.aux,
                out.grad_norm.float().to(info.device),
                out.moe.get("dropped", torch.zeros((), device=info.device)).float(),
                torch.tensor(lr, device=info.device),
                torch.tensor(float(getattr(source, "filtered", 0) - filtered_before), device=info.device),
            ]
        )
        filtered_before = getattr(source, "filtered", 0)
        if run.dinfo.distributed:  # the loss terms averaged over ranks, the filtered samples summed (last)
            picked = scalars[[0, 1, -1]].clone()
            torch.distributed.all_reduce(picked)  # one SUM then a division: gloo lacks AVG
            scalars[:2] = picked[:2] / run.dinfo.world_size
            scalars[-1] = picked[2]
        metrics.flush()  # the previous step's metrics; this step keeps running on the device meanwhile
        metrics.issue(step, scalars, out.moe, {"data_loading_s": data_loading_s, **mix.record()})
        result.step = step + 1
        due = ckpt is not None and (
            (cfg.checkpoint_every and (step + 1) % cfg.checkpoint_every == 0) or step + 1 == cfg.steps
        )
        if due:
            metrics.flush()  # never save a step whose loss was NaN
            ckpt.save(
                step + 1,
                run.model,
                run.optimizer,
                loader_state=run.batcher.state_dict(),
                model_config=run.model_cfg_dict,
                schedule={"name": cfg.optim.schedule, "step": step + 1, "total_steps": cfg.steps},
            )
            metrics.last_time = time.perf_counter()  # saving is not training time
