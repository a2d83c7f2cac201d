"""``zephyr train check``: every measurement for one configuration, and the verdict (``run_check``).

The verdict concerns the run's dispatch (``moe.dispatch``; with ``auto``, the device's default): 0 graph
breaks, 0 host syncs, counted FLOPs within ``FLOP_TOLERANCE`` of the MFU formula, the estimated peak within
``device_memory``, and the memory estimator within ``MEMORY_TOLERANCE`` of a measured CPU run of the same
step at a small size. Other dispatches are measured and reported, not judged.

``render`` is the report's human-readable form (``zephyr train check`` without ``--json``).

The harness
-----------
What every measurement of ``zephyr train check`` runs: the trainer's own step on the target device's path.

``Target`` names the run being checked (model, batch, sequence length, device path, dispatch, attention,
activation checkpointing). ``build`` makes its model and optimizer with the trainer's builders, and
``run_step`` runs ``zephyr.trainer.train.train_step`` on them, with bf16 autocast where the device uses it.
Tensors live on the CPU, real or fake (``FakeTensorMode``: shapes and dtypes without memory or compute);
the device's code path is taken through ``resolve_device(kind, emulate=True)``.

``reduced_width`` shrinks a model for the measurements that need real compute or a compiler trace: every
width becomes small (8 per head, expert FFN 32, vocabulary 256) and the depth one MoE block (after one dense
block if the model has any; every block runs the same code), while everything that selects a code path is kept: experts, top-k, shared
experts, scoring, GQA heads, QK-norm, tied embeddings, balancing.

Graph breaks
------------
Graph breaks of the training step under ``torch.compile``, from ``torch._dynamo.explain``.

The step is traced region by region, as a compiled trainer runs it, on a reduced-width model with the same
code paths (``reduced_width``), once per MoE dispatch, with the dynamo settings the trainer's compile
uses (``zephyr.trainer.devices.dynamo_options``):

* ``forward``: model and loss (``train.forward_loss``), the region ``torch.compile`` captures; explain traces
  it with the eager backend (nothing is compiled, seconds).
* ``backward``: the same region compiled through AOTAutograd with compilers that only count, then
  differentiated: every forward graph must yield one backward graph (an op without a backward formula, or
  one AOTAutograd cannot trace, shows up here).
* ``optimizer``: clipping, AdamW and the router-bias update (``train.apply_gradients``).

``Tensor.backward()`` itself is the boundary between the forward and backward regions, not a break. In the
optimizer region torch puts two breaks of its own around ``Optimizer.step``'s ``no_grad`` body, and the
fused AdamW kernel (CUDA, XPU) is called as is (``torch.compiler.disable``d, already one fused kernel): these
are listed as ``boundaries``. Every other break is a graph break to fix, with dynamo's reason and the source
line that caused it.

The record (``find_graph_breaks``): ``dispatch``; ``graphs``, graphs per region (boundaries included);
``breaks`` and ``boundaries``, each a list of ``{region, reason, where}``: the region, the first line of
dynamo's explanation, and ``file:line: code`` of the innermost frame in zephyr's trainer (else the innermost).

Host syncs
----------
Host syncs and data-dependent shapes in the training step, found by tracing the ops it runs.

A *host sync* is a call that makes the host wait for the device: it reads a device value (``.item()``,
``.tolist()``, ``int(t)``, ``if t:``, ``.cpu()``), or it runs an op whose output size depends on the data
(``nonzero``, boolean-mask indexing, ``masked_select``, ``unique``, ``repeat_interleave`` without
``output_size``...) — the device must finish before the host knows the size. Inside a compiled region both
stall the device pipeline; on torch_xla a data-dependent size also forces a new program.

How: one real step (forward, backward, clipping, AdamW, router-bias update: ``train_step``) of a
reduced-width model on the target device's code path, under a ``TorchDispatchMode`` that sees every op the
step dispatches, with ``Tensor.tolist`` / ``numpy`` / ``cpu`` (which read memory without dispatching an op)
wrapped for the duration. Each sync is reported with the source line that made it. Reads of tensors that
torch keeps on the host by design are not syncs: the step counters of a non-fused, non-capturable optimizer.
The grouped-GEMM offsets stay on the device (``torch._grouped_mm`` takes them as a tensor).

Static shapes: the step runs again on other data, and the sequence of (op, output shapes) must repeat exactly;
the first op whose shape differs is reported with its source line (the per-expert loop's group sizes, for
instance). Static shapes are what torch_xla and CUDA graphs need.

The record (``find_host_syncs``): ``dispatch``; ``syncs``, a list of ``{op, reason, where, count}``;
``static_shapes``; ``first_dynamic_shape``, ``op at file:line`` where the second run's shapes first differed
(None when static); ``ops``, the ops the traced step dispatched.

FLOPs and MFU
-------------
FLOPs the training step really does, counted by ``torch.utils.flop_counter.FlopCounterMode``, against the
MFU formula the trainer logs (``zephyr.trainer.model.flops_per_token``).

The step (``train_step``: forward, backward, AdamW) of the full model at the full batch runs on fake tensors
(``FakeTensorMode``: every op with its real shapes and dtypes, no memory, no arithmetic), so the count is the
one of the configuration being checked, in seconds on a CPU. The counter sees the matrix products: ``mm``,
``bmm``, attention, and — formulas added here, torch has none — ``torch._grouped_mm`` and the CPU attention
kernel. Elementwise work (norms, softmax, AdamW) is not counted, as the MFU convention does not count it.

The record (``count_flops``): ``dispatch`` (whose shapes were counted: ``grouped_mm`` stands in for
``loop``), ``flops_per_token_measured`` (forward + backward), ``flops_per_token_formula``
(``flops_per_token(model, seq_len)``, the MFU numerator), ``measured_over_formula`` and ``by_op`` (counted
FLOPs per token by op).

Grouped GEMM rows: on the device ``torch._grouped_mm`` computes the rows up to the last group offset,
including each group's alignment padding. With real offsets the count uses them; on fake tensors it counts
the whole static buffer (T·K + E·16 rows), an upper bound by at most E·16 rows (0.4% of the expert FLOPs of
``moe-785m`` at 16×2048). The per-expert loop needs real group sizes, so it is counted with grouped_mm's
shapes (the same products without padding). Capacity dispatch computes E·C slots (C = capacity_factor ·
T·K/E), so it does capacity_factor × the routed-expert FLOPs: work, but not model FLOPs.

The formula (PaLM appendix B, as in torchtitan): ``6 · N_active + 12 · layers · d_model · seq_len``, the
attention term for full (non-causal) score matrices, which is what SDPA with a mask computes.

What MFU the step can reach (``mfu_bounds``), from the counted FLOPs, the MFU formula and the device's peak: MFU credits ``flops_per_token_formula`` per token (``zephyr.trainer.metrics.mfu``). If the step does more
matrix work than that (alignment padding, capacity slack), a device running at its peak still reaches only
``formula / measured``: the ``mfu_upper_bound``. The step time a target MFU needs follows from the formula:
``tokens · formula / (mfu · peak)``; with a measured step time the MFU is ``tokens · formula / (time · peak)``.

Peak memory
-----------
Peak device memory of a training step, estimated on fake tensors, and checked against a measured CPU run.

Estimate: the full model is built and stepped under ``FakeTensorMode`` (real shapes and dtypes, no memory),
with a dispatch mode that follows every storage the step allocates, from the op that creates it until it is
freed (views and in-place results share their input's storage and are not counted again). The first step
creates the AdamW state; the second is measured. The peak is the most bytes alive at once:

    parameters + AdamW state (alive between steps) + the second step's largest live set

and at that moment the live set splits into gradients (the storages that become ``.grad``) and activations
(saved for the backward pass, plus temporaries). ``saved_activations`` is what the forward pass leaves alive
for the backward (logits included), the figure activation checkpointing shrinks; the check runs the step
both ways.

The record (``estimate_memory``, in bytes; ``memory_gib`` gives the report's GiB form):
``activation_checkpointing``; ``parameter_bytes`` (parameters and buffers), ``optimizer_bytes`` and
``gradient_bytes`` (all gradients: fp32, one per trainable parameter); ``step_peak_bytes``, the traced step's
peak above the between-steps state, of which ``gradients_at_peak_bytes`` are gradients (the rest is
activations: saved ones still needed, and temporaries); ``saved_activation_bytes``, alive when the model's
forward returned; ``peak_bytes`` = parameters + optimizer state + the step's peak.

What the estimate leaves out: the CUDA context (~0.5 GiB), the caching allocator's rounding and
fragmentation (typically a few percent of the peak), NCCL buffers and kernel workspaces. The attention is
SDPA's (its ``[B, 1, L, L]`` boolean document mask is counted; FlexAttention, the CUDA default, needs no such
mask).

Measured: ``measure_cpu_peak`` runs the same step for real in a child process whose C library returns every
allocation above 64 KiB to the OS when it is freed (``MALLOC_MMAP_THRESHOLD_``), and reads the resident-set
high-water mark of the second step (``/proc/self/clear_refs`` resets it first). Linux only.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import gc
import json
import logging
import os
import re
import subprocess
import sys
import sysconfig
import time
import traceback
import warnings
import weakref
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten
from torch.utils.flop_counter import FlopCounterMode
from zephyr.trainer.config import CheckConfig, ModelConfig, OptimConfig, TrainConfig, model_config_from_dict
from zephyr.trainer.data import Batcher, SyntheticTokens
from zephyr.trainer.devices import (
    DeviceInfo,
    dynamo_options,
    parallelize,
    peak_flops_for,
    resolve_device,
    resolve_dispatch,
)
from zephyr.trainer.model import Transformer, build_model, count_params, flops_per_token
from zephyr.trainer.train import (
    StepOutput,
    apply_gradients,
    build_optimizer,
    forward_loss,
    resolve_model_config,
    train_step,
)

from zephyr.config import format_bytes
from zephyr.errors import ConfigError, ZephyrError

# ---- The harness ------------------------------------------------------------
_LIBRARY_DIRS = tuple(
    str(Path(p).resolve())
    for p in {sysconfig.get_paths()["stdlib"], str(Path(torch.__file__).parent), __file__}
)


def source_line(stack: list[traceback.FrameSummary]) -> str:
    """``file:line: code`` of the innermost frame outside torch, the standard library and this check: the
    line of the trainer (or of the caller's code) that led to what is reported."""
    ours = [f for f in stack if not str(Path(f.filename).resolve()).startswith(_LIBRARY_DIRS)]
    frame = (ours or stack)[-1] if (ours or stack) else None
    if frame is None:
        return "?"
    return f"{'/'.join(Path(frame.filename).parts[-2:])}:{frame.lineno}: {(frame.line or '').strip()}"


@dataclass(frozen=True)
class Target:
    """One configuration to check: what the step would be on ``device``."""

    model: ModelConfig
    batch_size: int
    seq_len: int
    device: DeviceInfo
    """An emulated device (``resolve_device(kind, emulate=True)``) or the CPU."""
    dispatch: str
    """A resolved MoE dispatch: ``grouped_mm``, ``loop`` or ``capacity``."""
    attention: str = "sdpa"
    activation_checkpointing: bool = False

    def replace(self, **changes: object) -> Target:
        return dataclasses.replace(self, **changes)

    @property
    def tokens(self) -> int:
        return self.batch_size * self.seq_len


def reduced_width(cfg: ModelConfig) -> ModelConfig:
    """``cfg`` at a width and depth that trace and run in seconds, with the same code paths (module doc)."""
    dense = min(cfg.n_dense_layers, 1)
    layers = min(cfg.n_layers, dense + 1) if cfg.moe is not None else 1
    moe = dataclasses.replace(cfg.moe, expert_ffn_dim=32) if cfg.moe is not None else None
    return dataclasses.replace(
        cfg,
        d_model=8 * cfg.n_heads,
        vocab_size=256,
        dense_ffn_dim=64,
        n_layers=layers,
        n_dense_layers=dense if cfg.moe is not None else 0,
        moe=moe,
    )


def synthetic_batch(target: Target, seed: int = 0) -> dict[str, torch.Tensor]:
    """``target.batch_size`` packed sequences of the trainer's synthetic token stream (documents of random
    length, so the document mask and the within-document positions are exercised)."""
    vocab = target.model.vocab_size
    batch = Batcher(
        SyntheticTokens(max(vocab, 16), target.seq_len, seed=seed), target.batch_size
    ).next_batch()
    return {k: v % vocab if k != "positions" else v for k, v in batch.items()} if vocab < 16 else batch


def build(target: Target, *, seed: int = 0) -> tuple[Transformer, torch.optim.Optimizer]:
    """The model (initialized, on ``target.device.device``) and AdamW as ``zephyr train`` builds them."""
    torch.manual_seed(seed)
    model = build_model(
        target.model, device=target.device.device, dispatch=target.dispatch, attention=target.attention
    )
    parallelize(
        model, compile=False, fsdp=False, bf16=False, activation_checkpointing=target.activation_checkpointing
    )
    model.train()
    optimizer = build_optimizer(model, OptimConfig(), target.device.type)
    return model, optimizer


def run_step(
    target: Target, model: Transformer, optimizer: torch.optim.Optimizer, batch: dict[str, torch.Tensor]
) -> StepOutput:
    """One ``train_step`` on ``batch`` (one micro-batch), under the target's autocast."""
    return train_step(model, optimizer, lambda: batch, autocast=target.device.autocast())


def _built(
    target: Target, *, fake: bool = True, seeds: tuple[int, ...] = (0,)
) -> tuple[Any, Target, Any, Any, list]:
    """(the tensor mode to step in, the target, its model, optimizer and a synthetic batch per seed), built on
    fake tensors (``FakeTensorMode``: the full size in seconds, no memory), the loop dispatch with grouped_mm's
    shapes (its split sizes need real data); ``fake=False``: built for real, stepped in a null context."""
    if fake and target.dispatch == "loop":
        target = target.replace(dispatch="grouped_mm")
    mode = FakeTensorMode() if fake else contextlib.nullcontext()
    with mode:
        model, optimizer = build(target)
    batches = [synthetic_batch(target, seed) for seed in seeds]
    if fake:
        batches = [{k: mode.from_tensor(v) for k, v in batch.items()} for batch in batches]
    return mode, target, model, optimizer, batches


# ---- FLOPs and MFU ------------------------------------------------------------
def mfu_bounds(
    *,
    measured_flops_per_token: float,
    formula_flops_per_token: float,
    tokens_per_step: int,
    peak_flops: float,
    target_mfu: float = 0.30,
    step_time_s: float | None = None,
) -> dict[str, float | None]:
    """The module docstring's bounds for one device with ``peak_flops`` (dense bf16 FLOPS), named as
    ``zephyr train check --json`` reports them: ``peak_tflops``, ``target_mfu``, ``mfu_upper_bound`` (the MFU
    at the device's peak FLOPS: formula / measured, at most 1), ``step_time_s_for_target_mfu`` and
    ``tokens_per_s_for_target_mfu`` (what ``target_mfu`` needs per optimizer step, per second), and
    ``mfu_at_step_time`` (the MFU at a given step time; ``None`` when none was given)."""
    step_flops = tokens_per_step * formula_flops_per_token
    return {
        "peak_tflops": peak_flops / 1e12,
        "target_mfu": target_mfu,
        "mfu_upper_bound": min(1.0, formula_flops_per_token / measured_flops_per_token),
        "step_time_s_for_target_mfu": step_flops / (target_mfu * peak_flops),
        "tokens_per_s_for_target_mfu": target_mfu * peak_flops / formula_flops_per_token,
        "mfu_at_step_time": None if step_time_s is None else step_flops / (step_time_s * peak_flops),
    }


def _grouped_mm_flops(a: torch.Tensor, b: torch.Tensor, offs: Any = None, *args: Any, **kwargs: Any) -> int:
    """``torch._grouped_mm``: 2·rows·K·N for a 2-D × 3-D product (rows up to the last offset), 2·M·N·K for the
    2-D × 2-D weight-gradient form (K grouped), 2·G·M·K·N batched."""
    offs = kwargs.get("offs", offs)
    used = None
    if isinstance(offs, torch.Tensor) and not isinstance(offs, FakeTensor) and offs.numel():
        used = int(offs[-1])
    if a.dim() == 2 and b.dim() == 3:
        rows = a.shape[0] if used is None else min(used, a.shape[0])
        return 2 * rows * a.shape[1] * b.shape[2]
    if a.dim() == 2 and b.dim() == 2:
        k = a.shape[1] if used is None else min(used, a.shape[1])
        return 2 * a.shape[0] * b.shape[1] * k
    if a.dim() == 3 and b.dim() == 3:
        return 2 * a.shape[0] * a.shape[1] * a.shape[2] * b.shape[2]
    out = kwargs.get("out_val")
    return 2 * (out.numel() if isinstance(out, torch.Tensor) else 0) * a.shape[-1]


_grouped_mm_flops._get_raw = True  # type: ignore[attr-defined]  # FlopCounterMode passes tensors, not shapes


def _attention_flops(query: Any, key: Any, value: Any, *args: Any, **kwargs: Any) -> int:
    """QKᵀ and AV over full score matrices: 2·B·H·Lq·Lk·(Dqk + Dv) (query heads; GQA shares keys)."""
    b, h, lq, dqk = query
    lk, dv = key[-2], value[-1]
    return 2 * b * h * lq * lk * (dqk + dv)


FLOP_FORMULAS = {
    torch.ops.aten._grouped_mm: _grouped_mm_flops,
    torch.ops.aten._scaled_dot_product_flash_attention_for_cpu: _attention_flops,
    # the backward's dQ, dK, dV and dP: four products, twice the forward
    torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward: (
        lambda grad_out, *shapes, **kwargs: 2 * _attention_flops(*shapes)
    ),
}
"""Formulas for ops FlopCounterMode does not count (torch 2.11–2.13)."""


def count_flops(target: Target, *, fake: bool = True) -> dict[str, Any]:
    """Count one training step of ``target`` (fake tensors by default; ``fake=False`` runs it for real): the
    module docstring's "FLOPs" record, as ``zephyr train check --json`` reports it."""
    target = target.replace(activation_checkpointing=False)  # model FLOPs: recomputation is not counted
    mode, target, model, optimizer, (batch,) = _built(target, fake=fake)
    counter = FlopCounterMode(display=False, custom_mapping=FLOP_FORMULAS)
    with mode, counter:
        run_step(target, model, optimizer, batch)
    measured = counter.get_total_flops() / target.tokens
    formula = flops_per_token(target.model, target.seq_len)
    by_op = {str(op).removeprefix("aten."): n for op, n in counter.get_flop_counts()["Global"].items()}
    return {
        "dispatch": target.dispatch,
        "flops_per_token_measured": measured,
        "flops_per_token_formula": formula,
        "measured_over_formula": round(measured / formula, 4),
        "by_op": {op: round(n / target.tokens) for op, n in sorted(by_op.items())},
    }


# ---- Graph breaks ------------------------------------------------------------
def _break(region: str, reason: str, where: str) -> dict[str, str]:
    return {"region": region, "reason": reason, "where": where}


def _failure(region: str, exc: Exception) -> dict[str, str]:
    """A region dynamo could not trace at all: reported as a break, with dynamo's user-code stack if any."""
    root: BaseException = exc
    while root.__cause__ is not None or (root.__context__ is not None and not root.__suppress_context__):
        root = root.__cause__ or root.__context__  # type: ignore[assignment]
    text = " ".join(str(root).split())
    inner = re.search(r"got (\w+(?:Error|Exception))\('(.+?)'\)", text)  # dynamo wraps the op's own error
    detail = f"{inner.group(1)}: {inner.group(2)}" if inner else f"{type(root).__name__}: {text[:300]}"
    stack = list(getattr(exc, "real_stack", None) or traceback.extract_tb(exc.__traceback__))
    return _break(region, f"tracing failed: {detail}", source_line(stack))


def _explain(region: str, fn, *args, report: dict[str, Any]) -> None:  # noqa: ANN001
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    before = collections.Counter(counters["graph_break"])
    try:
        explained = torch._dynamo.explain(fn)(*args)
    except Exception as exc:  # noqa: BLE001 - whatever dynamo raises is the finding
        report["breaks"].append(_failure(region, exc))
        return
    report["graphs"][region] = explained.graph_count
    # every break dynamo counted, by reason
    unexplained = collections.Counter(counters["graph_break"]) - before
    for info in explained.break_reasons:
        text = info.reason.strip()
        stack = list(info.user_stack)
        item = _break(region, text.splitlines()[0] if text else "?", source_line(stack))
        in_optim = bool(stack) and "/torch/optim/" in Path(stack[-1].filename).as_posix()
        boundary = in_optim and ("graph_break" in text or "disable" in text)  # torch's own, module docstring
        report["boundaries" if boundary else "breaks"].append(item)
        unexplained[text] -= 1
    missing = explained.graph_break_count - len(explained.break_reasons)
    # Breaks dynamo counted without a break record (torch 2.13 keeps one per site): named from its counters.
    for text in [t for t, n in unexplained.items() for _ in range(n)][:missing]:
        first = text.strip().splitlines()[0] if text.strip() else "?"
        torch_inserted = region == "optimizer" and "graph_break()" in first
        item = _break(region, first, "torch/optim/optimizer.py (no_grad boundary)" if torch_inserted else "?")
        report["boundaries" if torch_inserted else "breaks"].append(item)
        missing -= 1
    if missing > 0:
        report["breaks"] += [_break(region, "graph break without a recorded reason", "?")] * missing


def _count_backward_graphs(fn, *args) -> tuple[int, int]:  # noqa: ANN001
    """Compile ``fn`` through AOTAutograd with counting compilers, run it and its backward: (fw, bw) graphs."""
    from torch._dynamo.backends.common import aot_autograd
    from torch._functorch.aot_autograd import make_boxed_func

    counts = {"fw": 0, "bw": 0}

    def compiler(kind: str):  # noqa: ANN202
        def compile_graph(gm: torch.fx.GraphModule, inputs: list) -> object:
            counts[kind] += 1
            return make_boxed_func(gm.forward)

        return compile_graph

    torch._dynamo.reset()
    compiled = torch.compile(fn, backend=aot_autograd(fw_compiler=compiler("fw"), bw_compiler=compiler("bw")))
    compiled(*args).backward()
    torch._dynamo.reset()
    return counts["fw"], counts["bw"]


def find_graph_breaks(
    target: Target, *, backward: bool = True, optimizer_region: bool = True
) -> dict[str, Any]:
    """Trace one training step of ``target`` (a reduced-width model) region by region; classify the breaks
    (the module docstring's "Graph breaks" record).

    ``optimizer_region=False`` skips the optimizer region, which does not depend on the MoE dispatch.
    """
    import torch._dynamo  # here: importing dynamo probes for optional packages (pandas...) a trainer may lack

    model, optimizer = build(target)
    batch = synthetic_batch(target)
    autocast = target.device.autocast()
    report: dict[str, Any] = {"dispatch": target.dispatch, "graphs": {}, "breaks": [], "boundaries": []}

    def forward(input_ids: torch.Tensor, positions: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        loss, aux = forward_loss(
            model, {"input_ids": input_ids, "positions": positions, "labels": labels}, autocast
        )
        return loss + aux

    def update() -> torch.Tensor:
        grad_norm, _ = apply_gradients(model, optimizer, grad_clip=1.0, all_reduce=False)
        return grad_norm

    args = (batch["input_ids"], batch["positions"], batch["labels"])
    try:
        with torch._dynamo.config.patch(**dynamo_options(model)), warnings.catch_warnings():
            # warnings torch raises while tracing its own internals (torch.jit.script_method deprecated, .grad of
            # a non-leaf looked up by dynamo) are not the step's doing
            warnings.filterwarnings("ignore", category=DeprecationWarning, module=r"torch\.")
            warnings.filterwarnings("ignore", category=UserWarning, module=r"torch\.")
            _explain("forward", forward, *args, report=report)
            if backward and not report["breaks"]:
                try:
                    fw, bw = _count_backward_graphs(forward, *args)
                except Exception as exc:  # noqa: BLE001 - whatever AOTAutograd raises is the finding
                    report["breaks"].append(_failure("backward", exc))
                    fw = bw = 0
                report["graphs"]["backward"] = bw
                if bw != fw:
                    reason = f"{fw} forward graph(s) compiled to {bw} backward graph(s)"
                    report["breaks"].append(_break("backward", reason, "AOTAutograd"))
            else:
                forward(*args).backward()
            if optimizer_region:
                _explain("optimizer", update, report=report)
    finally:
        torch._dynamo.reset()
    return report


# ---- Host syncs ------------------------------------------------------------
_DATA_DEPENDENT = {  # op -> why it syncs
    "aten._local_scalar_dense": "reads a device value on the host (.item(), int(), float(), bool(), `if tensor`)",
    "aten.nonzero": "output size depends on the data (nonzero)",
    "aten.masked_select": "output size depends on the data (masked_select)",
    "aten._unique2": "output size depends on the data (unique)",
    "aten.unique_dim": "output size depends on the data (unique)",
    "aten.unique_consecutive": "output size depends on the data (unique_consecutive)",
    "aten.equal": "reads a device value on the host (torch.equal)",
    "aten.is_nonzero": "reads a device value on the host (bool(tensor))",
}
_HOST_READS = {
    "tolist": "reads device memory on the host (.tolist())",
    "numpy": "reads device memory (.numpy())",
}


def _where() -> str:
    return source_line(traceback.extract_stack())


def _shapes(out: Any) -> tuple:
    return tuple(tuple(t.shape) for t in tree_flatten(out)[0] if isinstance(t, torch.Tensor))


def _brief(shapes: tuple) -> str:
    text = str(shapes)
    return text if len(text) <= 60 else text[:57] + "..."


class _Tracer(TorchDispatchMode):
    """Records syncing ops (with their source line) and each op's output shapes, or compares them."""

    def __init__(self, host_tensors: set[int], reference: list[tuple[str, tuple]] | None = None) -> None:
        super().__init__()
        self.host_tensors = host_tensors
        self.reference = reference
        self.sequence: list[tuple[str, tuple]] = []
        self.syncs: collections.Counter[tuple[str, str, str]] = collections.Counter()
        self.first_difference: str | None = None

    def note(self, op: str, reason: str) -> None:
        self.syncs[(op, reason, _where())] += 1

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN204
        kwargs = kwargs or {}
        name = str(func.overloadpacket)
        tensors = [t for t in tree_flatten((args, kwargs))[0] if isinstance(t, torch.Tensor)]
        if name in _DATA_DEPENDENT and not (tensors and all(id(t) in self.host_tensors for t in tensors)):
            self.note(name, _DATA_DEPENDENT[name])
        elif name in ("aten.index", "aten.index_put", "aten.index_put_") and any(
            t.dtype == torch.bool for t in tree_flatten(args[1])[0] if isinstance(t, torch.Tensor)
        ):
            self.note(name, "boolean-mask indexing: output size depends on the data")
        elif name == "aten.repeat_interleave" and kwargs.get("output_size") is None and len(args) < 3:
            self.note(name, "repeat_interleave without output_size: output size depends on the data")
        out = func(*args, **kwargs)
        entry = (name, _shapes(out))
        if self.reference is not None and self.first_difference is None:
            position = len(self.sequence)
            expected = self.reference[position] if position < len(self.reference) else None
            if entry != expected:
                other = _brief(expected[1]) if expected else "no op"
                self.first_difference = f"{name} {_brief(entry[1])} (other data: {other}) at {_where()}"
        self.sequence.append(entry)
        return out


@contextlib.contextmanager
def _host_reads(tracer: _Tracer) -> Iterator[None]:
    """Wrap the Tensor methods that read device memory without dispatching an op."""
    originals = {name: getattr(torch.Tensor, name) for name in (*_HOST_READS, "cpu")}

    def wrap(name: str, original: Any) -> Any:
        def method(self: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
            if name == "cpu":
                tracer.note("Tensor.cpu", "copies to the host and waits for it (.cpu())")
            elif id(self) not in tracer.host_tensors:
                tracer.note(f"Tensor.{name}", _HOST_READS[name])
            return original(self, *args, **kwargs)

        return method

    for name, original in originals.items():
        setattr(torch.Tensor, name, wrap(name, original))
    try:
        yield
    finally:
        for name, original in originals.items():
            setattr(torch.Tensor, name, original)


def find_host_syncs(target: Target) -> dict[str, Any]:
    """Trace a step of ``target`` (a reduced-width model) for host syncs, then compare shapes on other data
    (the module docstring's "Host syncs" record)."""
    model, optimizer = build(target)
    run_step(target, model, optimizer, synthetic_batch(target, 2))
    host = {  # the optimizer's step counters that torch keeps on the host (not fused, not capturable)
        id(step)
        for group in optimizer.param_groups
        if not (group.get("fused") or group.get("capturable"))
        for p in group["params"]
        if isinstance(step := optimizer.state.get(p, {}).get("step"), torch.Tensor)
    }
    first = _Tracer(host)
    with first, _host_reads(first):
        run_step(target, model, optimizer, synthetic_batch(target, 0))
    second = _Tracer(host, reference=first.sequence)
    with second:
        run_step(target, model, optimizer, synthetic_batch(target, 1))
    if second.first_difference is None and len(second.sequence) != len(first.sequence):
        second.first_difference = f"{len(second.sequence)} ops on other data, {len(first.sequence)} before"
    syncs = sorted(first.syncs.items())
    return {
        "dispatch": target.dispatch,
        "syncs": [{"op": op, "reason": why, "where": where, "count": n} for (op, why, where), n in syncs],
        "static_shapes": second.first_difference is None,
        "first_dynamic_shape": second.first_difference,
        "ops": len(first.sequence),
    }


# ---- Peak memory ------------------------------------------------------------
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


def memory_gib(estimate: dict[str, Any]) -> dict[str, Any]:
    """An ``estimate_memory`` record in GiB, split as ``zephyr train check --json`` reports it."""
    gib = {k.removesuffix("_bytes"): round(v / GIB, 4) for k, v in estimate.items() if k.endswith("_bytes")}
    return {
        "activation_checkpointing": estimate["activation_checkpointing"],
        "peak_memory_gib": gib["peak"],
        "breakdown_gib": {
            "parameters": gib["parameter"],
            "optimizer_state": gib["optimizer"],
            "gradients_at_peak": gib["gradients_at_peak"],
            "activations_at_peak": round(
                (estimate["step_peak_bytes"] - estimate["gradients_at_peak_bytes"]) / GIB, 4
            ),
        },
        "gradients_gib": gib["gradient"],
        "saved_activations_gib": gib["saved_activation"],
    }


def estimate_memory(target: Target) -> dict[str, Any]:
    """Estimate the peak of ``target``'s training step on fake tensors (see the module docstring): the second
    step runs under the live-bytes tracker, which splits its peak (the module docstring's "Peak memory"
    record, in bytes)."""
    mode, target, model, optimizer, batches = _built(target, seeds=(0, 1))
    tracker = _LiveBytes()
    grads: dict[int, int] = {}  # serial -> bytes
    saved: list[int] = []

    def note_grads(opt: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        for p in model.parameters():
            if p.grad is not None and (serial := tracker.serial_of(p.grad)) is not None:
                grads[serial] = p.grad.untyped_storage().nbytes()

    def note_saved(module: torch.nn.Module, args: Any, output: Any) -> None:
        saved.append(tracker.current)

    with mode:
        run_step(target, model, optimizer, batches[0])  # creates the AdamW state
        hooks = [optimizer.register_step_pre_hook(note_grads), model.register_forward_hook(note_saved)]
        try:
            with tracker:
                run_step(target, model, optimizer, batches[1])
        finally:
            for hook in hooks:
                hook.remove()
    state = [
        t for per_param in optimizer.state.values() for t in per_param.values() if isinstance(t, torch.Tensor)
    ]
    parameter_bytes = _bytes(model.parameters()) + _bytes(model.buffers())
    return {
        "activation_checkpointing": target.activation_checkpointing,
        "parameter_bytes": parameter_bytes,
        "optimizer_bytes": _bytes(state),
        "gradient_bytes": _bytes(p for p in model.parameters() if p.requires_grad),
        "step_peak_bytes": tracker.peak,
        "gradients_at_peak_bytes": sum(n for serial, n in grads.items() if serial in tracker.peak_serials),
        "saved_activation_bytes": saved[0] if saved else 0,
        "peak_bytes": parameter_bytes + _bytes(state) + tracker.peak,
    }


def _bytes(tensors: Any) -> int:
    return sum(t.untyped_storage().nbytes() for t in tensors)


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
    batches = [synthetic_batch(target, seed) for seed in (0, 1)]
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
        "from zephyr.trainer.check import _measure_here\n"
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


# ---- The check and its report ------------------------------------------------------------
def render(report: dict[str, Any]) -> str:
    """The page a person reads before booking the GPU: per dispatch its graph breaks, host syncs and FLOPs
    against the formula, then the memory and MFU figures and, last, the verdict (every figure and where each
    break or sync comes from: ``--json``)."""
    peak, memory = (format_bytes(report[key] * GIB) for key in ("peak_memory_gib", "device_memory_gib"))
    lines = [
        f"zephyr train check: {report['preset']}, {report['batch_size']} x {report['seq_len']} = "
        f"{report['tokens_per_step']:,} tokens per step, {report['device']}, torch {report['torch']}"
    ]
    for dispatch, data in report["dispatch"].items():
        syncs = data["host_syncs"]
        flops = (
            f", FLOPs x{data['flops']['measured_over_formula']:.4f} of the formula" if "flops" in data else ""
        )
        lines.append(
            f"  {dispatch}{' (default)' if dispatch == report['default_dispatch'] else ''}: "
            f"{len(data['graph_breaks']['breaks'])} graph breaks, {sum(s['count'] for s in syncs['syncs'])} host "
            f"syncs, {'static' if syncs['static_shapes'] else 'data-dependent'} shapes{flops}"
        )
    checkpointing = "on" if report["activation_checkpointing"] else "off"
    lines.append(
        f"  peak memory {peak} of {memory} (activation "
        f"checkpointing {checkpointing}); MFU upper bound {report['mfu_upper_bound']:.1%}; "
        f"{report['target_mfu']:.0%} MFU on an {report['gpu']} needs {report['step_time_s_for_target_mfu']:.3g} s "
        f"per step"
    )
    if report["problems"]:
        return "\n".join([*lines, "  NOT READY:", *(f"    - {p}" for p in report["problems"])])
    ready = f"0 graph breaks, 0 host syncs, FLOPs within 5% of the formula, fits {memory}"
    return "\n".join([*lines, f"  ready: {ready}"])


log = logging.getLogger(__name__)

FLOP_TOLERANCE = 0.05
MEMORY_TOLERANCE = 0.15
ACCELERATORS = ("cuda", "xpu", "xla")
TRACE_BATCH, TRACE_SEQ = 2, 32
"""Batch and sequence length of the reduced-width traces (graph breaks, host syncs)."""
VALIDATE_BATCH, VALIDATE_SEQ, VALIDATE_WIDTH, VALIDATE_VOCAB = 4, 512, 16, 8192
"""The small run measured on the CPU: d_model = 16 per head, a 8192-token vocabulary (~0.25 GiB peak)."""


def _timed(seconds: dict[str, float], name: str, fn: Any, *args: Any, **kwargs: Any) -> Any:
    """``fn(*args, **kwargs)``, its time added to ``seconds[name]`` (the report's time per measurement)."""
    start = time.perf_counter()
    try:
        return fn(*args, **kwargs)
    finally:
        seconds[name] = round(seconds.get(name, 0.0) + time.perf_counter() - start, 1)


def run_check(train: TrainConfig, check: CheckConfig) -> dict[str, Any]:
    """Measure ``train``'s configuration as ``check`` asks (module docstring); the result is plain
    JSON-serializable data."""
    spent: dict[str, float] = {}  # seconds per measurement
    device = "cuda" if train.device == "auto" else train.device
    if device not in ACCELERATORS:
        raise ConfigError(
            f"zephyr train check checks an accelerator's code path: --device {', '.join(ACCELERATORS)}"
        )
    peak_flops = train.peak_tflops * 1e12 if train.peak_tflops > 0 else peak_flops_for(check.gpu)
    if peak_flops is None:
        raise ConfigError(f"--gpu {check.gpu!r}: unknown peak FLOPS; give --peak-tflops (an H100 SXM: 989)")
    model = resolve_model_config(train)
    info = resolve_device(device, emulate=True)
    moe = model.moe  # a compiled bf16 run on the accelerator: the dispatch the trainer would take
    default = "grouped_mm" if moe is None else resolve_dispatch(moe.dispatch, info, compile=True, bf16=True)
    dispatches = [d for d in check.dispatches if model.moe is not None] or [default]
    if default not in dispatches:
        dispatches.insert(0, default)
    full = Target(model, train.batch_size, train.seq_len, info, default, "sdpa")
    small = full.replace(model=reduced_width(model), batch_size=TRACE_BATCH, seq_len=TRACE_SEQ)

    # graph breaks and host syncs (reduced width) and FLOPs (full size; not the loop, whose shapes need real
    # data) of each dispatch; the default first, the only one whose optimizer region is traced (the same in all)
    per_dispatch: dict[str, dict[str, Any]] = {}
    for dispatch in sorted(dispatches, key=lambda d: d != default):
        log.info("graph breaks and host syncs: %s", dispatch)
        traced = small.replace(dispatch=dispatch)
        breaks = _timed(
            spent, "graph_breaks", find_graph_breaks, traced, optimizer_region=dispatch == default
        )
        syncs = _timed(spent, "host_syncs", find_host_syncs, traced)
        per_dispatch[dispatch] = {"graph_breaks": breaks, "host_syncs": syncs}
        if dispatch != "loop":
            flops = _timed(spent, "flops", count_flops, full.replace(dispatch=dispatch))
            per_dispatch[dispatch]["flops"] = flops
    log.info("FLOPs and memory of the full configuration (fake tensors)")
    flop_data = per_dispatch[default].get("flops") or _timed(spent, "flops", count_flops, full)
    memory = {
        ac: _timed(spent, "memory", estimate_memory, full.replace(activation_checkpointing=ac))
        for ac in (False, True)
    }
    run_memory = memory[train.activation_checkpointing]
    validation = _timed(spent, "memory_validation", _validate_memory, small) if check.measure_memory else None
    bounds = mfu_bounds(
        measured_flops_per_token=flop_data["flops_per_token_measured"],
        formula_flops_per_token=flop_data["flops_per_token_formula"],
        tokens_per_step=full.tokens,
        peak_flops=peak_flops,
        target_mfu=check.target_mfu,
        step_time_s=check.step_time,
    )
    counts = count_params(model)
    report: dict[str, Any] = {
        "preset": train.preset,
        "batch_size": train.batch_size,
        "seq_len": train.seq_len,
        "tokens_per_step": full.tokens,
        "device": info.name,
        "default_dispatch": default,
        "attention_traced": "sdpa",
        "torch": torch.__version__,
        "params": {"total": counts.total, "active": counts.active},
        "moe_layers": sum(model.is_moe_layer(i) for i in range(model.n_layers)),
        "traced_moe_layers": sum(small.model.is_moe_layer(i) for i in range(small.model.n_layers)),
        "graph_breaks": len(per_dispatch[default]["graph_breaks"]["breaks"]),
        "host_syncs": sum(s["count"] for s in per_dispatch[default]["host_syncs"]["syncs"]),
        "static_shapes": per_dispatch[default]["host_syncs"]["static_shapes"],
        "flops_per_token_measured": flop_data["flops_per_token_measured"],
        "flops_per_token_formula": flop_data["flops_per_token_formula"],
        "flops_measured_over_formula": flop_data["measured_over_formula"],
        "peak_memory_gib": round(run_memory["peak_bytes"] / GIB, 4),
        "device_memory_gib": round(check.device_memory_bytes / GIB, 3),
        "activation_checkpointing": train.activation_checkpointing,
        "gpu": check.gpu,
        **bounds,
        "dispatch": per_dispatch,
        "memory": {
            "without_activation_checkpointing": memory_gib(memory[False]),
            "with_activation_checkpointing": memory_gib(memory[True]),
            "validation": validation,
        },
    }
    report["problems"] = _problems(report, check.device_memory_bytes, run_memory["peak_bytes"])
    report["ok"] = not report["problems"]
    report["seconds"] = spent
    return report


def _validate_memory(small: Target) -> dict[str, Any]:
    """Estimate and measure one step of a small real run (same code paths) on the CPU."""
    heads = small.model.n_heads
    model = dataclasses.replace(small.model, d_model=VALIDATE_WIDTH * heads, vocab_size=VALIDATE_VOCAB)
    target = small.replace(model=model, batch_size=VALIDATE_BATCH, seq_len=VALIDATE_SEQ)
    estimated = estimate_memory(target)["step_peak_bytes"]
    measured = measure_cpu_peak(target)
    return {
        "batch_size": VALIDATE_BATCH,
        "seq_len": VALIDATE_SEQ,
        "d_model": model.d_model,
        "vocab_size": model.vocab_size,
        "estimated_step_peak_mib": round(estimated / 2**20, 1),
        "measured_step_peak_mib": round(measured / 2**20, 1),
        "estimated_over_measured": round(estimated / measured, 4) if measured > 0 else None,
    }


def _problems(report: dict[str, Any], device_memory_bytes: int, peak_bytes: int) -> list[str]:
    default = report["default_dispatch"]
    problems = []
    if report["graph_breaks"]:
        where = "; ".join(b["where"] for b in report["dispatch"][default]["graph_breaks"]["breaks"])
        problems.append(f"{report['graph_breaks']} graph break(s) with {default} dispatch: {where}")
    if report["host_syncs"]:
        where = "; ".join(s["where"] for s in report["dispatch"][default]["host_syncs"]["syncs"])
        problems.append(f"{report['host_syncs']} host sync(s) with {default} dispatch: {where}")
    ratio = report["flops_measured_over_formula"]
    if abs(ratio - 1) > FLOP_TOLERANCE:
        problems.append(f"counted FLOPs are {ratio:.3f}x the MFU formula (tolerance {FLOP_TOLERANCE:.0%})")
    if peak_bytes > device_memory_bytes:
        problems.append(
            f"estimated peak {peak_bytes / GIB:.1f} GiB exceeds --device-memory {device_memory_bytes / GIB:.0f} "
            "GiB; try --activation-checkpointing or a smaller --batch-size"
        )
    validation = report["memory"]["validation"]
    if validation and validation["estimated_over_measured"] is not None:
        off = abs(validation["estimated_over_measured"] - 1)
        if off > MEMORY_TOLERANCE:
            problems.append(
                f"memory estimator is {off:.0%} off a measured CPU run (tolerance {MEMORY_TOLERANCE:.0%})"
            )
    return problems
