"""Host syncs and data-dependent shapes in the training step, found by tracing the ops it runs.

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
"""

from __future__ import annotations

import collections
import contextlib
import traceback
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten
from zephyr.trainer.check.harness import Target, build, run_step, source_line, synthetic_batch

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


@dataclass(frozen=True)
class Sync:
    op: str
    reason: str
    where: str
    count: int


@dataclass
class HostSyncs:
    dispatch: str
    syncs: list[Sync] = field(default_factory=list)
    static_shapes: bool = True
    first_dynamic_shape: str | None = None
    """``op at file:line`` where the second run's shapes first differed (None when static)."""
    ops: int = 0
    """Ops the traced step dispatched."""

    @property
    def count(self) -> int:
        return sum(s.count for s in self.syncs)


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


def _host_step_counters(optimizer: torch.optim.Optimizer) -> set[int]:
    """Ids of the optimizer's step counters that torch keeps on the host (not fused, not capturable)."""
    out = set()
    for group in optimizer.param_groups:
        if group.get("fused") or group.get("capturable"):
            continue
        for p in group["params"]:
            step = optimizer.state.get(p, {}).get("step")
            if isinstance(step, torch.Tensor):
                out.add(id(step))
    return out


def find_host_syncs(target: Target) -> HostSyncs:
    """Trace a step of ``target`` (a reduced-width model) for host syncs, then compare shapes on other data."""
    model, optimizer = build(target)
    run_step(
        target, model, optimizer, synthetic_batch(target.model, target.batch_size, target.seq_len, seed=2)
    )
    host = _host_step_counters(optimizer)
    first = _Tracer(host)
    with first, _host_reads(first):
        run_step(
            target, model, optimizer, synthetic_batch(target.model, target.batch_size, target.seq_len, seed=0)
        )
    second = _Tracer(host, reference=first.sequence)
    with second:
        run_step(
            target, model, optimizer, synthetic_batch(target.model, target.batch_size, target.seq_len, seed=1)
        )
    if second.first_difference is None and len(second.sequence) != len(first.sequence):
        second.first_difference = f"{len(second.sequence)} ops on other data, {len(first.sequence)} before"
    return HostSyncs(
        dispatch=target.dispatch,
        syncs=[Sync(op, reason, where, n) for (op, reason, where), n in sorted(first.syncs.items())],
        static_shapes=second.first_difference is None,
        first_dynamic_shape=second.first_difference,
        ops=len(first.sequence),
    )
