"""The core install (no extras) runs the engine and every dedup; a command that needs an extra refuses in one
line naming it, before any task; a module missing inside a task fails the job at once, never retried."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import zephyr
from zephyr.errors import TaskError

EXTRAS = (
    "torch",
    "matplotlib",
    "fasttext",
    "fasttext_numpy2_wheel",
    "vortex",
    "dask",
    "distributed",
    "warcio",
    "resiliparse",
    "trafilatura",
    "tldextract",
    "ftfy",
    "fastokens",
)

BLOCKER = f"""
import importlib.abc, importlib.util, sys

BLOCK = {set(EXTRAS)!r}


class Blocker(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name.split(".")[0] in BLOCK:
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
        return None


sys.meta_path.insert(0, Blocker())
_find_spec = importlib.util.find_spec
importlib.util.find_spec = lambda name, package=None: (
    None if name.split(".")[0] in BLOCK else _find_spec(name, package)
)
"""


def _zephyr(tmp_path, *args: str) -> subprocess.CompletedProcess:
    """``zephyr ARGS`` in an interpreter (and its workers) where no extra can be imported."""
    site = tmp_path / "no_extras"
    site.mkdir(exist_ok=True)
    (site / "sitecustomize.py").write_text(BLOCKER)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")])}
    code = textwrap.dedent(
        """
        import sys
        from zephyr.cli import main
        code = main(sys.argv[1:])
        assert not [m for m in sys.modules if m.split(".")[0] in {blocked}], "an extra was imported"
        sys.exit(code)
        """
    ).format(blocked=set(EXTRAS))
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, env=env)


def _corpus(tmp_path) -> str:
    texts = ["the same text", "another text", "the same text", "a third one"]
    pq.write_table(pa.table({"id": range(4), "text": texts}), tmp_path / "in.parquet")
    return str(tmp_path / "in.parquet")


def test_dedup_exact_runs_without_any_extra(tmp_path):
    out = tmp_path / "out"
    result = _zephyr(
        tmp_path,
        "dedup",
        "exact",
        _corpus(tmp_path),
        "--output",
        str(out),
        "--mode",
        "remove",
        "--executor",
        "local",
    )
    assert result.returncode == 0, result.stderr
    kept = pa.concat_tables(pq.read_table(p) for p in sorted(out.glob("*.parquet")))
    assert sorted(kept.column("id").to_pylist()) == [0, 1, 3]


@pytest.mark.parametrize(
    ("args", "extra"),
    [
        (("convert", "{src}", "--output", "{out}", "--to", "vortex", "--executor", "inprocess"), "vortex"),
        (("count", "{src}", "--executor", "dask"), "dask"),
    ],
    ids=["vortex", "dask"],
)
def test_a_missing_extra_is_one_line_naming_it(tmp_path, args, extra):
    src, out = _corpus(tmp_path), str(tmp_path / "out")
    result = _zephyr(tmp_path, *(a.format(src=src, out=out) for a in args))
    assert result.returncode == 1
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and f"pip install 'zephyr-data[{extra}]'" in lines[0], result.stderr


def test_a_module_missing_in_a_task_is_not_retried(tmp_path):
    calls = tmp_path / "calls"  # ops travel pickled: count the tries in a file

    def needs_a_module(table: pa.Table) -> pa.Table:
        with open(calls, "a") as f:
            f.write("try\n")
        raise ModuleNotFoundError("No module named 'not_installed'", name="not_installed")

    ds = zephyr.from_arrow(pa.table({"a": [1, 2]})).map_batches(needs_a_module)
    with pytest.raises(TaskError, match="not retried"):
        ds.to_arrow(executor="inprocess", max_retries=3)
    assert calls.read_text().count("try") == 1
