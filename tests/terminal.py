"""Run the ``zephyr`` command with its stderr on a pseudo-terminal, as a user at a terminal sees it: the
progress line is drawn only when stderr is a terminal, so tests of it need a pty, not a pipe. And read the
progress bar's frames back."""

from __future__ import annotations

import os
import pty
import re
import subprocess
import sys
from collections.abc import Sequence


def cli_under_pty(argv: Sequence[str], *, env: dict[str, str], timeout_s: float) -> tuple[int, bytes, str]:
    """(exit status, stdout, what stderr showed on the pty) of ``python -m zephyr.cli ARGV`` under ``env``."""
    leader, follower = pty.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-m", "zephyr.cli", *argv], stdout=subprocess.PIPE, stderr=follower, env=env
    )
    os.close(follower)
    shown = b""
    while True:
        try:
            chunk = os.read(leader, 4096)
        except OSError:  # the pty closes when the process exits
            break
        if not chunk:
            break
        shown += chunk
    out, _ = proc.communicate(timeout=timeout_s)
    os.close(leader)
    return proc.returncode, out, shown.decode(errors="replace")


def frames(err: str, label: str) -> list[str]:
    """The progress line's successive states as drawn (tqdm redraws it after a carriage return)."""
    return [line for line in err.replace("\r", "\n").splitlines() if line.startswith(label)]


def bytes_done(frame: str) -> tuple[float, float]:
    """The bar's ``5.98M/15.3M`` (done/total) as bytes."""
    scale = {"": 1, "k": 1e3, "M": 1e6, "G": 1e9}
    n, n_unit, t, t_unit = re.search(r"\| *([0-9.]+)([kMG]?)/([0-9.]+)([kMG]?) \[", frame).groups()
    return float(n) * scale[n_unit], float(t) * scale[t_unit]
