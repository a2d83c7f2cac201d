"""``zephyr run --check`` validates a ``map`` step's ``module:function`` without importing the module: a
"validate only" command runs none of the user's code (nor that of the packages above the module), and a
missing module is still reported. The run itself imports it, before any work."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

SIDE_EFFECT = "from pathlib import Path\nPath({marker!r}).write_text('imported')\n"
FUNCTION = "def upper(table):\n    return table\n"


@pytest.fixture
def project(tmp_path) -> Path:
    """``mods/`` with a module and a package whose imports write marker files, and an input file."""
    mods = tmp_path / "mods"
    (mods / "sidefx_pkg").mkdir(parents=True)
    (mods / "sidefx_mod.py").write_text(SIDE_EFFECT.format(marker=str(tmp_path / "mod-ran")) + FUNCTION)
    (mods / "sidefx_pkg" / "__init__.py").write_text(SIDE_EFFECT.format(marker=str(tmp_path / "pkg-ran")))
    (mods / "sidefx_pkg" / "sub.py").write_text(
        SIDE_EFFECT.format(marker=str(tmp_path / "sub-ran")) + FUNCTION
    )
    pq.write_table(
        pa.table({"id": ["a", "b"], "text": ["one text", "another text"]}), tmp_path / "in.parquet"
    )
    return tmp_path


def _run(project: Path, function: str, *extra: str) -> subprocess.CompletedProcess:
    config = project / "pipeline.yaml"
    config.write_text(
        f"name: sidefx\nsteps:\n  - step: read\n    paths: [{project / 'in.parquet'}]\n"
        f"  - step: map\n    function: {function}\n"
    )
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(project / "mods"), os.environ.get("PYTHONPATH", "")]),
    }
    return subprocess.run(
        [sys.executable, "-m", "zephyr.cli", "run", str(config), "--job-dir", str(project / "job"), *extra],
        capture_output=True,
        text=True,
        env=env,
        cwd=project,
    )


def _ran(project: Path) -> list[str]:
    return sorted(p.name for p in project.glob("*-ran"))


@pytest.mark.parametrize("function", ["sidefx_mod:upper", "sidefx_pkg.sub:upper"])
def test_check_runs_no_code_of_the_map_module(project, function):
    run = _run(project, function, "--check")
    assert run.returncode == 0, run.stderr
    assert "01-map: map" in run.stdout
    assert _ran(project) == []  # neither the module nor its package ran


@pytest.mark.parametrize(
    ("function", "missing"),
    [("no_such_mod_xyz:f", "no_such_mod_xyz"), ("sidefx_pkg.nope:f", "sidefx_pkg.nope")],
)
def test_check_still_finds_a_missing_module(project, function, missing):
    run = _run(project, function, "--check")
    assert run.returncode == 1
    assert f"steps[1].function: cannot import '{function}': no module named '{missing}'" in run.stderr
    assert _ran(project) == []


def test_check_refuses_a_malformed_name_and_the_run_imports_before_any_work(project):
    run = _run(project, "sidefx_pkg..sub:upper", "--check")
    assert run.returncode == 1 and "must look like package.module:function" in run.stderr
    run = _run(project, "sidefx_pkg.sub:no_such_function", "--executor", "inprocess")
    assert run.returncode == 1
    assert (
        "cannot import 'sidefx_pkg.sub:no_such_function'" in run.stderr and "no_such_function" in run.stderr
    )
    assert _ran(project) == ["pkg-ran", "sub-ran"] and not (project / "job" / "00-read").exists()
    run = _run(project, "sidefx_pkg.sub:upper", "--executor", "inprocess")
    assert run.returncode == 0, run.stderr
