"""The Python API from every entry point a user has: a script with no ``__main__`` guard, code piped on stdin,
``python -c``, a notebook and pytest.

The README's own snippet (README.md, "Using it from Python") is what runs, on a corpus big enough that the job
goes to the ``local`` executor's worker processes (not the small-job in-process path). Its functions are defined
in ``__main__``, so they reach the workers by value; the workers never import the user's main module
(``zephyr/executors/worker.py``). Each run's output must equal the same snippet's output in-process.
"""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

REPO = Path(__file__).resolve().parents[2]

# What IPython (and so a Jupyter notebook's kernel) does before it runs a cell: the user's namespace is a module
# named __main__ with no __file__ and no spec, installed as sys.modules["__main__"]; each cell is compiled with a
# made-up file name and run in it (IPython.core.interactiveshell: prepare_user_module, init_sys_modules).
NOTEBOOK = textwrap.dedent(
    """
    import sys, types
    cell = sys.stdin.read()
    user_module = types.ModuleType("__main__")
    sys.modules["__main__"] = user_module
    exec(compile(cell, "<ipython-input-1-0123456789ab>", "exec"), user_module.__dict__)
    """
)


def readme_snippet() -> str:
    """The Python block under README.md's "Using it from Python"."""
    section = (REPO / "README.md").read_text().split("## Using it from Python", 1)[1]
    match = re.search(r"```python\n(.*?)```", section, re.S)
    assert match, "README.md's 'Using it from Python' section has no ```python block"
    return match.group(1)


def _write_corpus(folder: Path) -> None:
    """corpus/*.parquet with the columns the snippet uses, over the small-job limit (4 MiB in memory), so the
    job runs on worker processes."""
    from zephyr.options import ExecutionOptions
    from zephyr.physical import plan_read

    corpus = folder / "corpus"
    corpus.mkdir(parents=True)
    for part in range(4):
        ids = [f"{part}-{i}" for i in range(1500)]
        pq.write_table(
            pa.table(
                {
                    "id": ids,
                    "url": [
                        f"https://site{(i * 7919 + part) % 53}.example/{i * 104729 % 99991}/{part}"
                        for i in range(1500)
                    ],
                    "source": [("web", "books", "wiki")[(i + part) % 3] for i in range(1500)],
                    "text": [f"{'lorem ipsum ' * 90}{i}" for i in range(1500)],
                }
            ),
            corpus / f"part-{part}.parquet",
        )
    plan = plan_read(str(corpus / "*.parquet"), ExecutionOptions(executor="local", workers=2))
    assert not plan.small, "the fixture must be big enough for the job to use worker processes"


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> pa.Table:
    """The snippet's output when it runs in this process (executor "inprocess")."""
    snippet = readme_snippet()
    assert 'executor="local"' in snippet
    folder = tmp_path_factory.mktemp("reference")
    _write_corpus(folder)
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(folder)
        exec(compile(snippet.replace('executor="local"', 'executor="inprocess"'), "README.md", "exec"), {})
    return pq.read_table(folder / "sorted")


@pytest.fixture
def workdir(tmp_path) -> Path:
    _write_corpus(tmp_path)
    return tmp_path


def _run(argv: list[str], cwd: Path, stdin: str | None = None) -> None:
    proc = subprocess.run(argv, cwd=cwd, input=stdin, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, f"exit {proc.returncode}; stderr ends:\n{proc.stderr[-3000:]}"


@pytest.mark.parametrize("entry", ["script", "stdin", "dash-c", "notebook"])
def test_readme_snippet_runs_from_every_entry_point(workdir, reference, entry):
    snippet = readme_snippet()
    if entry == "script":  # no `if __name__ == "__main__":` guard, as the README shows it
        (workdir / "snippet.py").write_text(snippet)
        _run([sys.executable, "snippet.py"], workdir)
    elif entry == "stdin":
        _run([sys.executable, "-"], workdir, stdin=snippet)
    elif entry == "dash-c":
        _run([sys.executable, "-c", snippet], workdir)
    else:
        _run([sys.executable, "-c", NOTEBOOK], workdir, stdin=snippet)
    assert pq.read_table(workdir / "sorted").equals(reference)


@pytest.mark.dask
@pytest.mark.parametrize("entry", ["script", "stdin"])
def test_readme_snippet_on_a_dask_cluster_zephyr_starts(workdir, reference, entry):
    """``executor="dask"`` with no address: zephyr starts the scheduler here and its workers as ``dask worker``
    processes with the driver's ``sys.path`` (dask's LocalCluster would spawn them by re-running the script)."""
    pytest.importorskip("distributed")
    snippet = readme_snippet().replace('executor="local"', 'executor="dask"')
    if entry == "script":
        (workdir / "snippet.py").write_text(snippet)
        _run([sys.executable, "snippet.py"], workdir)
    else:
        _run([sys.executable, "-"], workdir, stdin=snippet)
    assert pq.read_table(workdir / "sorted").equals(reference)


def test_readme_snippet_runs_under_pytest(workdir, reference, monkeypatch):
    """In this process, with pytest as ``__main__`` and the snippet's function defined in this test module's
    name (cloudpickle ships it by value: its module has no such attribute)."""
    monkeypatch.chdir(workdir)
    exec(compile(readme_snippet(), "README.md", "exec"), {"__name__": __name__})
    assert pq.read_table(workdir / "sorted").equals(reference)


USER_MODULE = textwrap.dedent(
    """
    import pyarrow.compute as pc

    def shout(batch):
        return batch.set_column(batch.schema.get_field_index("source"), "source", pc.utf8_upper(batch["source"]))
    """
)

SCRIPT = textwrap.dedent(
    """
    import sys
    import zephyr
    from userlib import shout  # a module beside this script: on sys.path in the driver, so in the workers

    result = (
        zephyr.read_parquet("corpus/*.parquet")
        .map_batches(shout)
        .filter(lambda row: row["source"] != "WIKI")
        .write_parquet("out/", executor="local", workers=2)
    )
    assert result.stats["executor"] == "LocalExecutor", result.stats["executor"]
    """
)


def test_a_function_from_a_module_beside_the_script(workdir):
    """The script lives in another folder than the current directory: only the driver's ``sys.path`` (whose
    first entry is the script's folder) lets a worker import ``userlib``."""
    scripts = workdir / "scripts"
    scripts.mkdir()
    (scripts / "userlib.py").write_text(USER_MODULE)
    (scripts / "job.py").write_text(SCRIPT)
    _run([sys.executable, str(scripts / "job.py")], workdir)
    sources = pq.read_table(workdir / "out").column("source").to_pylist()
    assert sorted(set(sources)) == ["BOOKS", "WEB"] and len(sources) == 4000


EXECUTOR_DIRECT = textwrap.dedent(
    """
    import sys
    from dataclasses import dataclass
    from zephyr.executors.local import LocalExecutor

    @dataclass
    class Point:
        x: int

    def make(n):
        return Point(n * 10)

    sys.path.insert(0, "hidden")
    import ghost  # the driver has it; the workers cannot import it (no longer on sys.path when they start)
    sys.path.pop(0)

    with LocalExecutor(1) as pool:
        made = dict(pool.run(make, [1, 2]))
        squares = dict(pool.run(lambda n: n * n, [3]))
        lost = dict(pool.run(ghost.double, [4]))
        again = dict(pool.run(make, [5]))
    assert all(outcome.ok for outcome in [*made.values(), *squares.values()]), made
    assert {i: o.value for i, o in made.items()} == {0: Point(10), 1: Point(20)}
    assert all(type(o.value) is Point for o in made.values())  # the driver's own class comes back
    assert squares[0].value == 9
    # a task whose function does not import in the worker fails with that error; the worker lives on
    assert not lost[0].ok and not lost[0].worker_died and "No module named 'ghost'" in lost[0].error, lost
    assert again[0].value == Point(50)
    """
)


def test_executor_ships_main_functions_and_results_by_value(tmp_path):
    """``LocalExecutor.run`` itself: a task function defined in ``__main__`` (a def, a lambda) reaches the worker,
    and a value of a ``__main__`` class comes back as that class; a function whose module the worker cannot
    import fails its own task with that error and leaves the worker serving."""
    (tmp_path / "hidden").mkdir()
    (tmp_path / "hidden" / "ghost.py").write_text("def double(n):\n    return 2 * n\n")
    _run([sys.executable, "-c", EXECUTOR_DIRECT], tmp_path)
