"""Atomic saves, safe loading, refusal of a checkpoint written for another model."""

from __future__ import annotations

import dataclasses
import pickle
from pathlib import Path

import pytest
import torch
from zephyr.trainer import checkpoint as ckpt_mod
from zephyr.trainer.checkpoint import CheckpointManager
from zephyr.trainer.config import OptimConfig, get_preset
from zephyr.trainer.model import build_model
from zephyr.trainer.train import build_optimizer

from zephyr.errors import InputError, ResumeError


def _setup(seed: int = 0):
    torch.manual_seed(seed)
    cfg = get_preset("tiny")
    model = build_model(cfg)
    opt = build_optimizer(model, OptimConfig(), "cpu")
    logits, _ = model(torch.randint(0, 500, (1, 8)), torch.arange(8)[None])
    logits.sum().backward()
    opt.step()
    model.layers[1].ffn.router.expert_bias.fill_(0.25)
    return cfg, model, opt


def _save(mgr: CheckpointManager, step: int, model, opt, cfg) -> Path:
    return mgr.save(
        step,
        model,
        opt,
        loader_state={"consumed": step},
        model_config=dataclasses.asdict(cfg),
        schedule={"step": step},
    )


def test_round_trip_restores_weights_optimizer_and_router_bias(tmp_path: Path) -> None:
    cfg, model, opt = _setup()
    mgr = CheckpointManager(tmp_path)
    _save(mgr, 3, model, opt, cfg)
    _, fresh, fresh_opt = _setup(seed=1)
    step, loader_state = mgr.load(mgr.latest(), fresh, fresh_opt, model_config=dataclasses.asdict(cfg))
    assert step == 3 and loader_state == {"consumed": 3}
    for (name, a), b in zip(model.state_dict().items(), fresh.state_dict().values()):
        assert torch.equal(a, b), name
    assert fresh.layers[1].ffn.router.expert_bias.eq(0.25).all()
    sa, sb = opt.state_dict()["state"], fresh_opt.state_dict()["state"]
    assert all(torch.equal(sa[k]["exp_avg_sq"], sb[k]["exp_avg_sq"]) for k in sa)


def test_crash_mid_save_keeps_the_previous_checkpoint(tmp_path: Path, monkeypatch) -> None:
    cfg, model, opt = _setup()
    mgr = CheckpointManager(tmp_path)
    _save(mgr, 1, model, opt, cfg)

    def dies(*args, **kwargs):
        Path(kwargs["storage_writer"].path).mkdir(parents=True)
        Path(kwargs["storage_writer"].path, "__0_0.distcp").write_bytes(b"partial")
        raise KeyboardInterrupt("power cut")

    monkeypatch.setattr(ckpt_mod.dcp, "save", dies)
    with pytest.raises(KeyboardInterrupt):
        _save(mgr, 2, model, opt, cfg)
    monkeypatch.undo()
    assert mgr.latest().name == "step-00000001"
    assert (tmp_path / "step-00000002.tmp").exists() and not (tmp_path / "step-00000002").exists()
    _, fresh, fresh_opt = _setup(seed=1)
    assert mgr.load(mgr.latest(), fresh, fresh_opt, model_config=dataclasses.asdict(cfg))[0] == 1
    _save(mgr, 2, model, opt, cfg)  # the next save clears the stale .tmp
    assert mgr.latest().name == "step-00000002" and not (tmp_path / "step-00000002.tmp").exists()


def test_keeps_only_the_newest(tmp_path: Path) -> None:
    cfg, model, opt = _setup()
    mgr = CheckpointManager(tmp_path, keep=2)
    for step in (1, 2, 3):
        _save(mgr, step, model, opt, cfg)
    assert sorted(p.name for p in tmp_path.glob("step-*")) == ["step-00000002", "step-00000003"]


class _Evil:
    def __reduce__(self):
        return (Path.touch, (Path("/tmp/zephyr-pwned-marker"),))


def test_malicious_metadata_is_refused_not_executed(tmp_path: Path) -> None:
    cfg, model, opt = _setup()
    mgr = CheckpointManager(tmp_path)
    path = _save(mgr, 1, model, opt, cfg)
    marker = Path("/tmp/zephyr-pwned-marker")
    marker.unlink(missing_ok=True)
    (path / ".metadata").write_bytes(pickle.dumps(_Evil()))
    with pytest.raises(InputError, match="not allowed"):
        mgr.load(path, model, opt, model_config=dataclasses.asdict(cfg))
    assert not marker.exists()


def test_other_model_config_is_refused(tmp_path: Path) -> None:
    cfg, model, opt = _setup()
    mgr = CheckpointManager(tmp_path)
    _save(mgr, 1, model, opt, cfg)
    other = dataclasses.asdict(dataclasses.replace(cfg, qk_norm=True))
    with pytest.raises(ResumeError, match="qk_norm"):
        mgr.load(mgr.latest(), model, opt, model_config=other)


def test_dangling_latest_pointer_is_reported(tmp_path: Path) -> None:
    (tmp_path / "latest").write_text("step-00000009\n")
    with pytest.raises(InputError, match="step-00000009"):
        CheckpointManager(tmp_path).latest()


@pytest.mark.parametrize("name", ["../elsewhere/step-00000001", "/tmp/step-00000001", "step-1"])
def test_a_latest_pointer_outside_the_folder_is_refused(tmp_path: Path, name: str) -> None:
    """``latest`` may be written by others (a shared checkpoint folder): it names a checkpoint of this
    folder or nothing, never a directory elsewhere."""
    cfg, model, opt = _setup()
    elsewhere = CheckpointManager(tmp_path / "elsewhere")
    _save(elsewhere, 1, model, opt, cfg)
    (tmp_path / "ck").mkdir()
    (tmp_path / "ck" / "latest").write_text(name.replace("/tmp", str(tmp_path / "elsewhere")) + "\n")
    with pytest.raises(InputError, match="not a step-NNNNNNNN checkpoint of this folder"):
        CheckpointManager(tmp_path / "ck").latest()
