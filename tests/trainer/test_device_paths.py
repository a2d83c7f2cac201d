"""The XPU and XLA code paths, forced on the CPU (``resolve_device(kind, emulate=True)``): a few real steps each.

What runs is the path's own code: XPU — no grouped GEMM (the per-expert loop), bf16 autocast, fused AdamW,
xccl as the collective backend; XLA — capacity dispatch with static shapes and one step mark per step. What
cannot run here is the vendor runtime (kernels, collectives, the lazy tensor), so ``mark_step`` is a no-op
on an emulated device.
"""

from __future__ import annotations

import importlib.util

import pytest
import torch
from zephyr.trainer import train as train_mod
from zephyr.trainer.config import OptimConfig, TrainConfig
from zephyr.trainer.devices import DeviceInfo, resolve_device, resolve_dispatch
from zephyr.trainer.moe import GroupedExperts, MoE

from zephyr.errors import ConfigError

STEPS = 3


def _spy(monkeypatch: pytest.MonkeyPatch) -> dict[str, list]:
    """Record which dispatch ran (and under which autocast dtype), the optimizer built and the step marks."""
    seen: dict[str, list] = {"route": [], "optimizer": [], "marks": []}
    route = MoE.route

    def spy_route(self, x_TD, weights_TK, experts_TK):  # noqa: ANN001, ANN202
        autocast = torch.get_autocast_dtype("cpu") if torch.is_autocast_enabled("cpu") else None
        seen["route"].append((self.dispatch, autocast))
        return route(self, x_TD, weights_TK, experts_TK)

    build = train_mod.build_optimizer

    def spy_build(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        optimizer = build(*args, **kwargs)
        seen["optimizer"].append(optimizer)
        return optimizer

    mark = DeviceInfo.mark_step

    def spy_mark(self) -> None:  # noqa: ANN001
        seen["marks"].append(self.type)
        mark(self)

    monkeypatch.setattr(MoE, "route", spy_route)
    monkeypatch.setattr(train_mod, "build_optimizer", spy_build)
    monkeypatch.setattr(DeviceInfo, "mark_step", spy_mark)
    return seen


def _train(info: DeviceInfo):
    cfg = TrainConfig(
        preset="tiny", steps=STEPS, batch_size=2, seq_len=32, optim=OptimConfig(lr=1e-3, warmup_steps=1)
    )
    return train_mod.train(cfg, device=info)


def test_xpu_path_runs_without_grouped_mm_in_bf16(monkeypatch: pytest.MonkeyPatch) -> None:
    info = resolve_device("xpu", emulate=True)
    assert (info.type, info.device.type, info.dist_backend, info.bf16) == ("xpu", "cpu", "xccl", True)
    assert info.default_dispatch() == "loop" and info.default_attention() == "sdpa"
    seen = _spy(monkeypatch)
    grouped = []
    monkeypatch.setattr(GroupedExperts, "run_grouped_mm", lambda *a: grouped.append(a))
    result = _train(info)
    assert result.step == STEPS and all(torch.isfinite(torch.tensor(result.losses)))
    assert seen["route"] and set(seen["route"]) == {("loop", torch.bfloat16)}
    assert not grouped
    (optimizer,) = seen["optimizer"]
    assert optimizer.defaults["fused"] is True  # the XPU path's fused AdamW, here its CPU kernel
    assert seen["marks"] == ["xpu"] * STEPS


def test_xla_path_runs_capacity_dispatch_with_a_mark_per_step(monkeypatch: pytest.MonkeyPatch) -> None:
    info = resolve_device("xla", emulate=True)
    assert (info.type, info.device.type, info.dist_backend) == ("xla", "cpu", "xla")
    assert info.default_dispatch() == "capacity"
    seen = _spy(monkeypatch)
    result = _train(info)
    assert result.step == STEPS and all(torch.isfinite(torch.tensor(result.losses)))
    assert {dispatch for dispatch, _ in seen["route"]} == {"capacity"}
    assert seen["marks"] == ["xla"] * STEPS
    assert all("dropped_tokens" in record for record in result.records)


def test_emulated_cuda_takes_grouped_mm() -> None:
    info = resolve_device("cuda", emulate=True)
    assert info.default_dispatch() == "grouped_mm" and info.autocast().device == "cpu"


@pytest.mark.skipif(importlib.util.find_spec("torch_xla") is not None, reason="torch_xla is installed")
def test_xla_without_torch_xla_names_the_install() -> None:
    with pytest.raises(ConfigError, match="pip install torch_xla"):
        resolve_device("xla")


def test_a_compiled_fp32_run_takes_the_loop_and_refuses_grouped_mm() -> None:
    """torch._grouped_mm compiles only for bf16 inputs (``zephyr train check --device cpu`` found it)."""
    cpu = resolve_device("cpu")
    assert resolve_dispatch("auto", cpu, compile=False, bf16=False) == "grouped_mm"
    assert resolve_dispatch("auto", cpu, compile=True, bf16=False) == "loop"
    assert (
        resolve_dispatch("auto", resolve_device("cuda", emulate=True), compile=True, bf16=True)
        == "grouped_mm"
    )
    with pytest.raises(ConfigError, match="add --dtype bf16, or use --dispatch loop"):
        resolve_dispatch("grouped_mm", cpu, compile=True, bf16=False)
