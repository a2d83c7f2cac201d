"""Run a ``zephyr`` command in a subprocess that stops at a chosen point, holding what it claimed, until the test
lets it go: the second command of a "two commands, one output" test meets the first mid-run, with no timing.

``held_command(argv, at, tmp_path)`` starts ``zephyr ARGV`` (``zephyr.cli.main`` in a fresh interpreter) and
waits until it reached ``at``, where it writes its pid to ``READY`` and waits for ``GO``:

- ``claim``: right after the command claimed its output and work dir (``zephyr.cli._claim``), before any work;
- ``step``: inside a ``zephyr run`` step, when the step writes its rows (``StepContext.finish``), with the
  job folder locked and the step's engine work under way.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

_CHILD = """
import sys, time
from pathlib import Path

ready, go, at, *argv = sys.argv[1:]


def hold():
    Path(ready).write_text(str(__import__("os").getpid()))
    while not Path(go).exists():
        time.sleep(0.02)


if at == "claim":
    import zephyr.cli as target
    original = target._claim

    def held(args, claims):
        original(args, claims)
        hold()

    target._claim = held
else:
    from zephyr.pipelines.step import StepContext
    original = StepContext.finish

    def held(*args, **kwargs):
        hold()
        return original(*args, **kwargs)

    StepContext.finish = held
from zephyr.cli import main

sys.exit(main(argv))
"""

START_TIMEOUT_S = 120
"""A failure guard, not a timing assertion: how long the child may take to reach its hold point."""


@dataclass
class Held:
    proc: subprocess.Popen
    go: Path

    def release(self) -> subprocess.CompletedProcess:
        """Let the command go on and wait for it; its exit code and output."""
        self.go.write_text("")
        out, err = self.proc.communicate(timeout=600)
        return subprocess.CompletedProcess(self.proc.args, self.proc.returncode, out, err)


@contextlib.contextmanager
def held_command(argv: list[str], at: str, tmp_path: Path, env: dict | None = None) -> Iterator[Held]:
    """``zephyr ARGV`` held at ``at`` (see the module docstring) for the block; killed if the block leaves it
    running."""
    ready, go = tmp_path / f"held-{at}-ready", tmp_path / f"held-{at}-go"
    proc = subprocess.Popen(
        [sys.executable, "-c", _CHILD, str(ready), str(go), at, *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, **(env or {})},
    )
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while not ready.exists():
            if proc.poll() is not None:
                raise AssertionError(
                    f"the held command ended before its hold point: {proc.stderr.read()[-3000:]}"
                )
            if time.monotonic() > deadline:
                raise AssertionError(f"the held command did not reach {at!r} within {START_TIMEOUT_S} s")
            time.sleep(0.02)
        yield Held(proc, go)
    finally:
        if proc.poll() is None:
            go.write_text("")
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
