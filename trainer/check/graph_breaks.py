"""Graph breaks of the training step under ``torch.compile``, from ``torch._dynamo.explain``.

The step is traced region by region, as a compiled trainer runs it, on a reduced-width model with the same
code paths (``harness.reduced_width``), once per MoE dispatch, with the dynamo settings the trainer's compile
uses (``distributed.dynamo_options``):

* ``forward``: model and loss (``step.forward_loss``), the region ``torch.compile`` captures; explain traces
  it with the eager backend (nothing is compiled, seconds).
* ``backward``: the same region compiled through AOTAutograd with compilers that only count, then
  differentiated: every forward graph must yield one backward graph (an op without a backward formula, or
  one AOTAutograd cannot trace, shows up here).
* ``optimizer``: clipping, AdamW and the router-bias update (``step.apply_gradients``).

``Tensor.backward()`` itself is the boundary between the forward and backward regions, not a break. In the
optimizer region torch puts two breaks of its own around ``Optimizer.step``'s ``no_grad`` body, and the
fused AdamW kernel (CUDA, XPU) is called as is (``torch.compiler.disable``d, already one fused kernel): these
are listed as ``boundaries``. Every other break is a graph break to fix, with dynamo's reason and the source
line that caused it.
"""

from __future__ import annotations

import collections
import re
import traceback
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import torch
from zephyr.trainer.check.harness import Target, autocast_for, build, source_line, synthetic_batch
from zephyr.trainer.devices import dynamo_options
from zephyr.trainer.train import apply_gradients, forward_loss


@dataclass(frozen=True)
class Break:
    region: str
    """``forward``, ``backward`` or ``optimizer``."""
    reason: str
    """The first line of dynamo's explanation."""
    where: str
    """``file:line: code`` of the innermost frame in zephyr's trainer (else the innermost frame)."""


@dataclass
class GraphBreaks:
    dispatch: str
    graphs: dict[str, int] = field(default_factory=dict)
    """Graphs per region (``forward``, ``backward``, ``optimizer``; boundaries included)."""
    breaks: list[Break] = field(default_factory=list)
    boundaries: list[Break] = field(default_factory=list)

    @property
    def count(self) -> int:
        return len(self.breaks)


def _is_boundary(reason: str, stack: list[traceback.FrameSummary]) -> bool:
    innermost = Path(stack[-1].filename).as_posix() if stack else ""
    in_optim = "/torch/optim/" in innermost
    return in_optim and ("graph_break" in reason or "disable" in reason)


def _failure(region: str, exc: Exception) -> Break:
    """A region dynamo could not trace at all: reported as a break, with dynamo's user-code stack if any."""
    root: BaseException = exc
    while root.__cause__ is not None or (root.__context__ is not None and not root.__suppress_context__):
        root = root.__cause__ or root.__context__  # type: ignore[assignment]
    text = " ".join(str(root).split())
    inner = re.search(r"got (\w+(?:Error|Exception))\('(.+?)'\)", text)  # dynamo wraps the op's own error
    detail = f"{inner.group(1)}: {inner.group(2)}" if inner else f"{type(root).__name__}: {text[:300]}"
    stack = list(getattr(exc, "real_stack", None) or traceback.extract_tb(exc.__traceback__))
    return Break(region, f"tracing failed: {detail}", source_line(stack))


def _explain(region: str, fn, *args, report: GraphBreaks) -> None:  # noqa: ANN001
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    before = collections.Counter(counters["graph_break"])
    try:
        explained = torch._dynamo.explain(fn)(*args)
    except Exception as exc:  # noqa: BLE001 - whatever dynamo raises is the finding
        report.breaks.append(_failure(region, exc))
        return
    report.graphs[region] = explained.graph_count
    # every break dynamo counted, by reason
    unexplained = collections.Counter(counters["graph_break"]) - before
    for info in explained.break_reasons:
        text = info.reason.strip()
        stack = list(info.user_stack)
        item = Break(region=region, reason=text.splitlines()[0] if text else "?", where=source_line(stack))
        (report.boundaries if _is_boundary(text, stack) else report.breaks).append(item)
        unexplained[text] -= 1
    missing = explained.graph_break_count - len(explained.break_reasons)
    # Breaks dynamo counted without a break record (torch 2.13 keeps one per site): named from its counters.
    for text in [t for t, n in unexplained.items() for _ in range(n)][:missing]:
        first = text.strip().splitlines()[0] if text.strip() else "?"
        torch_inserted = region == "optimizer" and "graph_break()" in first
        item = Break(region, first, "torch/optim/optimizer.py (no_grad boundary)" if torch_inserted else "?")
        (report.boundaries if torch_inserted else report.breaks).append(item)
        missing -= 1
    if missing > 0:
        report.breaks += [Break(region, "graph break without a recorded reason", "?")] * missing


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


def find_graph_breaks(target: Target, *, backward: bool = True, optimizer_region: bool = True) -> GraphBreaks:
    """Trace one training step of ``target`` (a reduced-width model) region by region; classify the breaks.

    ``optimizer_region=False`` skips the optimizer region, which does not depend on the MoE dispatch.
    """
    import torch._dynamo  # here: importing dynamo probes for optional packages (pandas...) a trainer may lack

    model, optimizer = build(target)
    batch = synthetic_batch(target.model, target.batch_size, target.seq_len)
    autocast = autocast_for(target.device)
    report = GraphBreaks(dispatch=target.dispatch)

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
            if backward and not report.breaks:
                try:
                    fw, bw = _count_backward_graphs(forward, *args)
                except Exception as exc:  # noqa: BLE001 - whatever AOTAutograd raises is the finding
                    report.breaks.append(_failure("backward", exc))
                    fw = bw = 0
                report.graphs["backward"] = bw
                if bw != fw:
                    reason = f"{fw} forward graph(s) compiled to {bw} backward graph(s)"
                    report.breaks.append(Break("backward", reason, "AOTAutograd"))
            else:
                forward(*args).backward()
            if optimizer_region:
                _explain("optimizer", update, report=report)
    finally:
        torch._dynamo.reset()
    return report
