"""Run the ``zephyr`` command with its stderr on a pseudo-terminal, as a user at a terminal sees it: the
progress line is drawn only when stderr is a terminal, so tests of it need a pty, not a pipe."""

from __future__ import annotations

import os
import pty
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
