"""``zephyr train check``: graph breaks, host syncs, FLOPs, memory and MFU of the training step, on the CPU."""

from __future__ import annotations

import json

import pytest
import zephyr.trainer.check as check_module
from zephyr.trainer.check import (
    Target,
    count_flops,
    estimate_memory,
    find_graph_breaks,
    find_host_syncs,
    measure_cpu_peak,
    mfu_bounds,
    reduced_width,
)
from zephyr.trainer.config import get_preset
from zephyr.trainer.devices import resolve_device
from zephyr.trainer.model import count_params

from zephyr.summary import KEYS

TINY = get_preset("tiny")
CUDA = resolve_device("cuda", emulate=True)
XLA = resolve_device("xla", emulate=True)


def _target(dispatch: str, device=CUDA, model=TINY, batch: int = 2, seq: int = 32, **kw) -> Target:  # noqa: ANN001
    return Target(model, batch, seq, device, dispatch, **kw)


# ---- graph breaks --------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("dispatch", "device"), [("grouped_mm", CUDA), ("capacity", XLA)], ids=["cuda", "xla"]
)
def test_tiny_step_has_no_graph_break(dispatch: str, device) -> None:  # noqa: ANN001
    report = find_graph_breaks(_target(dispatch, device, reduced_width(TINY)))
    assert report["breaks"] == [], report["breaks"]
    assert report["graphs"]["forward"] == 1 and report["graphs"]["backward"] == 1
    # the optimizer's own no_grad breaks are boundaries, not breaks
    assert report["boundaries"] and all(b["region"] == "optimizer" for b in report["boundaries"])


def test_a_graph_break_is_reported_with_its_source_line(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without the trainer's dynamo settings the loop's ``.tolist()`` breaks the graph: named, with its line."""
    monkeypatch.setattr(check_module, "dynamo_options", lambda model: {})
    report = find_graph_breaks(
        _target("loop", model=reduced_width(TINY)), backward=False, optimizer_region=False
    )
    assert len(report["breaks"]) >= 1
    assert any("moe.py" in b["where"] and "tolist()" in b["where"] for b in report["breaks"]), report
    assert report["graphs"]["forward"] > 1


# ---- host syncs ----------------------------------------------------------------------------------------------
def test_grouped_mm_and_the_xla_path_have_no_host_sync_and_static_shapes() -> None:
    for target in (_target("grouped_mm"), _target("capacity", XLA)):
        report = find_host_syncs(target)
        assert report["syncs"] == [] and report["static_shapes"], report
        assert report["ops"] > 100


def test_the_loop_syncs_once_per_moe_layer_and_its_shapes_follow_the_data() -> None:
    report = find_host_syncs(_target("loop", resolve_device("xpu", emulate=True)))
    (sync,) = report["syncs"]
    assert sync["count"] == TINY.n_layers
    assert sync["op"] == "Tensor.tolist" and "moe.py" in sync["where"]
    assert not report["static_shapes"] and "split" in report["first_dynamic_shape"]


def test_an_item_in_the_step_is_a_host_sync(monkeypatch: pytest.MonkeyPatch) -> None:
    from zephyr.trainer.moe import Router

    forward = Router.forward

    def chatty(self, x):  # noqa: ANN001, ANN202
        out = forward(self, x)
        if out[0].sum() > 0:  # Python branching on a device value
            pass
        return out

    monkeypatch.setattr(Router, "forward", chatty)
    report = find_host_syncs(_target("grouped_mm"))
    assert sum(s["count"] for s in report["syncs"]) == TINY.n_layers
    (sync,) = report["syncs"]
    assert sync["op"] == "aten._local_scalar_dense" and "if out[0].sum() > 0" in sync["where"]


# ---- FLOPs ---------------------------------------------------------------------------------------------------
def test_counted_flops_match_the_formula_for_moe_785m() -> None:
    flops = count_flops(_target("grouped_mm", model=get_preset("moe-785m"), batch=16, seq=2048))
    assert abs(flops["measured_over_formula"] - 1) < 0.05, flops
    assert set(flops["by_op"]) >= {"mm", "_grouped_mm"}


def test_real_and_fake_counts_agree_and_padding_is_counted() -> None:
    """The per-expert loop computes exactly the routed rows: its real count is the formula's (to the norm
    weights, which the formula counts and no matmul does). grouped_mm adds its alignment padding; on fake
    tensors the whole static buffer is counted."""
    loop = count_flops(_target("loop", batch=4, seq=64), fake=False)
    norm_weights = 2 * TINY.n_layers * TINY.d_model + TINY.d_model
    assert loop["flops_per_token_measured"] == loop["flops_per_token_formula"] - 6 * norm_weights
    real = count_flops(_target("grouped_mm", batch=4, seq=64), fake=False)
    fake = count_flops(_target("grouped_mm", batch=4, seq=64))
    measured = [c["flops_per_token_measured"] for c in (loop, real, fake)]
    assert measured[0] < measured[1] <= measured[2]


# ---- memory --------------------------------------------------------------------------------------------------
def test_estimate_splits_parameters_adamw_and_activations() -> None:
    estimate = estimate_memory(_target("grouped_mm", batch=4, seq=64))
    params = count_params(TINY).total
    assert estimate["gradient_bytes"] == 4 * params
    # AdamW: exp_avg and exp_avg_sq in fp32, plus one step counter per parameter tensor
    assert 8 * params <= estimate["optimizer_bytes"] < 8 * params + 4096
    assert estimate["parameter_bytes"] >= 4 * params
    checkpointed = estimate_memory(_target("grouped_mm", batch=4, seq=64, activation_checkpointing=True))
    assert checkpointed["saved_activation_bytes"] < estimate["saved_activation_bytes"] / 2
    assert checkpointed["peak_bytes"] < estimate["peak_bytes"]


@pytest.mark.slow  # a child process importing torch and stepping a model: ~30 s on a shared 2-core machine
@pytest.mark.parametrize("ac", [False, True], ids=["plain", "checkpointed"])
def test_estimate_matches_a_measured_cpu_step(ac: bool) -> None:
    import dataclasses

    model = dataclasses.replace(reduced_width(get_preset("moe-785m")), d_model=192, vocab_size=8192)
    target = _target("grouped_mm", model=model, batch=4, seq=512, activation_checkpointing=ac)
    estimated = estimate_memory(target)["step_peak_bytes"]
    measured = measure_cpu_peak(target)
    assert estimated == pytest.approx(measured, rel=0.15), (estimated / 2**20, measured / 2**20)


# ---- MFU -----------------------------------------------------------------------------------------------------
def test_mfu_bounds_for_moe_785m_on_an_h100() -> None:
    bounds = mfu_bounds(
        measured_flops_per_token=1.1415e9,
        formula_flops_per_token=1.1397e9,
        tokens_per_step=16 * 2048,
        peak_flops=989e12,
        step_time_s=0.15,
    )
    assert bounds["step_time_s_for_target_mfu"] == pytest.approx(16 * 2048 * 1.1397e9 / (0.3 * 989e12))
    assert (
        0.125 < bounds["step_time_s_for_target_mfu"] < 0.127
        and 260_000 < bounds["tokens_per_s_for_target_mfu"] < 261_000
    )
    assert bounds["mfu_upper_bound"] == pytest.approx(1.1397 / 1.1415)
    assert bounds["mfu_at_step_time"] == pytest.approx(0.3 * bounds["step_time_s_for_target_mfu"] / 0.15)


# ---- command line --------------------------------------------------------------------------------------------
def test_cli_check_tiny_json(capsys: pytest.CaptureFixture[str]) -> None:
    from zephyr.cli import main

    args = ["train", "check", "--preset", "tiny", "--batch-size", "8", "--seq-len", "256"]  # padding < 5%
    assert main([*args, "--dispatch", "grouped_mm", "--no-measure-memory", "--json"]) == 0
    record = json.loads(capsys.readouterr().out)  # the summary every command prints, the report in details
    assert list(record) == list(KEYS) and record["command"] == "zephyr train check"
    assert (record["rows_in"], record["output"]) == (0, None)
    report = record["details"]
    assert report["ok"] and report["problems"] == []
    assert (report["graph_breaks"], report["host_syncs"], report["static_shapes"]) == (0, 0, True)
    assert report["default_dispatch"] == "grouped_mm" and list(report["dispatch"]) == ["grouped_mm"]
    assert report["peak_memory_gib"] < report["device_memory_gib"]
    assert report["memory"]["with_activation_checkpointing"]["peak_memory_gib"] < report["peak_memory_gib"]


def test_cli_check_says_what_does_not_fit(capsys: pytest.CaptureFixture[str]) -> None:
    from zephyr.cli import main

    args = ["train", "check", "--preset", "tiny", "--batch-size", "2", "--seq-len", "64", "--device", "xla"]
    args += ["--dispatch", "capacity", "--no-measure-memory", "--device-memory", "1MiB"]
    assert main(args) == 1
    out = capsys.readouterr().out
    assert "NOT READY" in out and "exceeds --device-memory" in out and "capacity (default): 0" in out
    assert main([*args, "--json"]) == 1  # not ready: exit 1 after the summary object
    record = json.loads(capsys.readouterr().out)
    assert not record["details"]["ok"] and any("exceeds" in p for p in record["details"]["problems"])


def test_cli_check_rejects_an_unknown_dispatch(capsys: pytest.CaptureFixture[str]) -> None:
    from zephyr.cli import main

    assert main(["train", "check", "--preset", "tiny", "--dispatch", "grouped_mm,magic"]) == 1
    assert "--dispatch 'grouped_mm,magic': choose among grouped_mm, loop, capacity" in capsys.readouterr().err


def test_a_region_dynamo_cannot_trace_is_reported_not_raised() -> None:
    """grouped_mm in fp32 (the CPU's dtype) has no compilable kernel: the check names the failure and the line."""
    report = find_graph_breaks(
        _target("grouped_mm", resolve_device("cpu"), reduced_width(TINY)), optimizer_region=False
    )
    (failure,) = report["breaks"]
    assert failure["region"] == "forward" and failure["reason"].startswith("tracing failed")
    assert "BF16" in failure["reason"] and "moe.py" in failure["where"], failure
