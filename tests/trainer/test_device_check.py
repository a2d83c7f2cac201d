"""benchmarks/device_check.py, the one command of a GPU run, rehearsed on the CPU so it cannot rot: its dry run
covers every phase on the GPU machine's package set (the project from the tree, the data stack hidden), a phase
past its cap is stopped and the rest is kept, and the reference model has zephyr's shape."""

from __future__ import annotations

import json
import subprocess
import sys
import zipfile
from pathlib import Path

import psutil
import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "benchmarks" / "device_check.py"
sys.path.insert(0, str(REPO / "benchmarks"))
from _device_phases import PHASES  # noqa: E402
from _reference_moe import ReferenceMoE, active_params  # noqa: E402

GPU_MACHINE_LACKS = (
    "polars,zstandard,orjson,vortex,fasttext,matplotlib,dask,distributed,duckdb,pandas,datasketch,hypothesis,"
    "scipy,tiktoken,ftfy,moto,s3fs,fastokens,pytest_timeout,datasets,warcio,resiliparse,trafilatura,tldextract"
)
"""The project's and its tests' dependencies that the GPU machine's Python does not have (issue 35)."""


def _wheel(folder: Path, name: str, module: str) -> None:
    """A minimal pure-Python wheel holding ``module`` (what the runner unpacks is what a phase imports)."""
    folder.mkdir(exist_ok=True)
    with zipfile.ZipFile(folder / f"{name}-1.0-py3-none-any.whl", "w") as zf:
        zf.writestr(f"{module}/__init__.py", "__version__ = '1.0'\n")
        zf.writestr(f"{name}-1.0.dist-info/METADATA", f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n")


def _run(tmp: Path, *args: str) -> tuple[subprocess.CompletedProcess, dict]:
    out = tmp / "device.json"
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--out", str(out), *args], capture_output=True, text=True, timeout=600
    )
    assert out.exists(), done.stdout[-2000:] + done.stderr[-2000:]
    return done, json.loads(out.read_text())


@pytest.fixture(scope="module")
def dry_run(tmp_path_factory) -> tuple[subprocess.CompletedProcess, dict, Path]:
    tmp = tmp_path_factory.mktemp("device")
    _wheel(tmp / "wheels", "zephyr_probe", "zephyr_probe")
    _wheel(tmp / "wheels", "torch", "torch_impostor")  # must never be unpacked over the machine's torch
    args = (
        "--dry-run",
        "--from-tree",
        "--simulate-missing",
        GPU_MACHINE_LACKS,
        "--wheels",
        str(tmp / "wheels"),
    )
    done, report = _run(tmp, *args)
    return done, report, tmp


def test_the_dry_run_finishes_every_phase_on_the_gpu_machines_packages(dry_run) -> None:
    done, report, _ = dry_run
    assert done.returncode == 0, done.stdout[-3000:]
    phases = report["phases"]
    assert list(phases) == [s.name for s in PHASES]
    not_ok = {name: (p["status"], p["reason"]) for name, p in phases.items() if p["status"] != "ok"}
    assert not not_ok, not_ok
    assert report["setup"]["zephyr_from"].startswith("this tree")
    assert phases["env"]["result"]["zephyr_imported_from"] != str(REPO)  # the symlinked layout, not the root


def test_each_phase_recorded_its_figures(dry_run) -> None:
    phases = dry_run[1]["phases"]
    mfu = phases["mfu"]["result"]
    for run in (mfu["zephyr"], mfu["reference"]):
        assert run["tokens_per_s"] > 0 and run["steps_timed"] == mfu["timed_steps"]
    assert mfu["reference"]["same_active_params_as_zephyr"] and mfu["zephyr_over_reference"] > 0
    assert phases["profile"]["result"]["top"]
    loader = phases["loader"]["result"]
    assert 0 <= loader["data_wait_fraction"] <= 1 and loader["over_synthetic_tokens_per_s"] > 0
    sig = phases["signatures"]["result"]
    assert sig["identical"] and set(sig["schemes"]) == {"affine64", "mersenne61"}
    check = phases["check"]["result"]
    assert check["check"]["graph_breaks"] == 0 and check["check"]["host_syncs"] == 0
    ran_as = check.get("ran_as")  # only when the zephyr CLI could not start: it names the missing module
    assert ran_as is None or "zstandard" in ran_as or "polars" in ran_as
    pytest_phase = phases["pytest"]["result"]
    assert "tests/trainer/test_gpu.py" in pytest_phase["files"]
    assert set(pytest_phase["tests"].values()) == {"skipped"}  # no CUDA here
    assert "datasketch" in pytest_phase["left_out"]["tests/dedup/test_kernels.py"]


def test_wheels_are_unpacked_for_what_is_missing_but_never_torch(dry_run) -> None:
    done, report, _ = dry_run
    assert report["setup"]["wheels_unpacked"] == ["zephyr_probe-1.0-py3-none-any.whl"]
    assert report["phases"]["env"]["result"]["packages"]["zephyr_probe"] == "1.0"
    assert report["phases"]["env"]["result"]["packages"]["polars"] is None  # hidden, as on the GPU machine
    assert "not unpacking torch-1.0-py3-none-any.whl" in done.stdout


def test_the_markdown_table_has_a_row_per_phase_and_the_targets(dry_run) -> None:
    _, report, tmp = dry_run
    text = (tmp / "device.md").read_text()
    assert text.startswith("### Device check (dry run)")
    for spec in PHASES:
        assert f"| {spec.title} | ok |" in text
    assert "MFU ≥ 30% not measured; signatures identical to the CPU kernel met" in text
    assert (
        report["targets"]["signatures_identical"] is True and report["targets"]["mfu_at_least_30pct"] is None
    )


def test_a_phase_past_its_cap_is_stopped_and_the_other_phases_kept(tmp_path: Path) -> None:
    done, report = _run(
        tmp_path, "--dry-run", "--phases", "env,signatures", "--stall", "env", "--cap", "env=3"
    )
    env, sig = report["phases"]["env"], report["phases"]["signatures"]
    assert env["status"] == "timeout" and "stopped at its 3 s cap" in env["reason"]
    assert env["result"]["python"]  # what it had saved before the cap is kept
    assert sig["status"] == "ok" and sig["result"]["identical"]
    assert done.returncode == 1  # a phase did not finish
    stalled = [
        p for p in psutil.process_iter(["cmdline"]) if str(tmp_path) in " ".join(p.info["cmdline"] or [])
    ]
    assert not stalled, "the stopped phase's process outlived its cap"


def test_a_phase_is_not_started_once_the_budget_is_spent(tmp_path: Path) -> None:
    _, report = _run(tmp_path, "--dry-run", "--phases", "env", "--budget", "0")
    assert report["phases"]["env"]["status"] == "not run"
    assert "budget" in report["phases"]["env"]["reason"]


@pytest.mark.parametrize("preset", ["tiny", "moe-785m"])
def test_the_reference_model_has_zephyrs_parameters(preset: str) -> None:
    """Same parameters, so the MFU formula credits both with the same FLOPs per token."""
    import torch
    from zephyr.trainer.config import get_preset
    from zephyr.trainer.model import count_params

    cfg = get_preset(preset)
    with torch.device("meta"):
        reference = ReferenceMoE(cfg)
    counts = count_params(cfg)
    assert sum(p.numel() for p in reference.parameters()) == counts.total
    assert active_params(reference) == counts.active
