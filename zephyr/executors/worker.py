"""The entry point of a ``local`` executor's worker process (``executors/local.py`` starts it).

A worker is a fresh interpreter that runs this module and nothing of the user's: it never imports the driver's
``__main__``, so a script without an ``if __name__ == "__main__":`` guard, code piped on stdin, ``python -c``,
a notebook and pytest all start the same workers. What a task needs of the user's code comes down the pipe as
cloudpickle bytes, which carry functions defined in ``__main__`` (a lambda, a def in a script, a notebook cell)
by value, and functions of importable modules by reference: the worker imports those from the driver's
``sys.path`` (a script's own folder is on it), installed by ``BOOTSTRAP`` before anything else is imported.

The driver starts ``python -P -c BOOTSTRAP PATH_JSON CONFIG_JSON`` rather than ``python -m`` this module:
``-m`` puts the current directory first on ``sys.path`` and imports the ``zephyr`` package from there before
this code could install the driver's path; ``-P`` leaves it out. ``BOOTSTRAP`` ignores SIGINT first (the
driver handles Ctrl-C and stops its workers), so a Ctrl-C during start-up prints no worker traceback.

The pipe carries, driver to worker, ``cloudpickle.dumps((fn, task, key, blob))`` per task (``blob``: a
``Shared`` value's bytes, sent once per worker, see ``executors.base.shared_value``) or ``None`` to stop;
worker to driver, ``cloudpickle.dumps(Outcome)`` per task (``executors.base.call``), so that a value of a
class defined in ``__main__`` goes back as it came (cloudpickle maps it to the driver's own class). A message
that does not unpickle here (a module the driver has and the worker cannot import) fails its task with that
error, not the worker.
"""

from __future__ import annotations

import contextlib
import json
import multiprocessing
import os
import pickle
import signal
import sys
import threading
from multiprocessing.connection import Connection

BOOTSTRAP = (
    "import signal, sys; signal.signal(signal.SIGINT, signal.SIG_IGN); "
    "import json; sys.path[:] = json.loads(sys.argv.pop(1)); "
    "from zephyr.executors.worker import main; main(json.loads(sys.argv.pop(1)))"
)
"""What ``python -P -c`` runs in a new worker (see the module docstring); argv: the driver's ``sys.path`` and
the worker's configuration (``main``), each as JSON."""

_PR_SET_PDEATHSIG = 1  # from <linux/prctl.h>


def _die_with_parent(parent_pid: int, lifeline: int, pdeathsig: bool) -> None:
    """Exit this worker as soon as the driver ``parent_pid`` is gone (see ``executors/local.py``)."""
    if pdeathsig and sys.platform.startswith("linux"):
        import ctypes

        with contextlib.suppress(OSError, AttributeError):  # no libc / no prctl: the lifeline still works
            ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent_pid:  # the driver died before we got here: nobody will send us work
        os._exit(1)

    def watch() -> None:
        with contextlib.suppress(OSError):
            os.read(lifeline, 1)  # the driver never writes: this returns only at end-of-file
        os._exit(1)

    threading.Thread(target=watch, name="zephyr-lifeline", daemon=True).start()


def main(config: dict) -> None:
    """Serve tasks on the pipe until the driver says stop or goes away.

    ``config``: ``conn`` (this worker's end of the task pipe), ``lifeline`` (the read end of a pipe only the
    driver can write), ``sentinel`` (a pipe end the driver watches for this process's exit), ``parent_pid``,
    ``pdeathsig`` (ask Linux for SIGKILL when the driver's starting thread ends), ``preload``."""
    fds = (config["conn"], config["lifeline"], config["sentinel"])
    for fd in fds:  # the task's own subprocesses must not hold them (a held sentinel hides this one's death)
        os.set_inheritable(fd, False)
    # first, before the imports below (~1 s): a driver killed meanwhile must not leave this one behind
    _die_with_parent(config["parent_pid"], config["lifeline"], config["pdeathsig"])
    # A worker is what a multiprocessing daemon is: no children of its own (they would outlive a killed
    # worker), and code that asks (the quality classifier's trainer) gets the answer a dask worker gives.
    multiprocessing.current_process().daemon = True
    conn = Connection(config["conn"])
    from zephyr.executors.base import call_preloads, fix_mmap_threshold

    fix_mmap_threshold()  # before the imports' first large allocations
    import zephyr.tasks  # noqa: F401  (pyarrow, polars: imported while the driver is still planning)

    with contextlib.suppress(ImportError):  # pyarrow imports pandas (if installed) on first use: pay now
        import pandas  # noqa: F401
    call_preloads(config["preload"])
    _serve(conn)


def _serve(conn: Connection) -> None:
    import cloudpickle

    from zephyr.executors.base import Outcome, call, failure, shared_value

    while True:
        try:
            data = conn.recv_bytes()
        except (EOFError, OSError):
            return
        try:  # a module the function names may not import here: that is the task's error
            message = pickle.loads(data)
        except BaseException as exc:
            conn.send_bytes(cloudpickle.dumps(failure(exc)))
            continue
        if message is None:
            # every result went back and every task closed its files: skip the interpreter teardown
            # (~0.4 s with pyarrow/polars/numba loaded), which the driver would otherwise wait for
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(0)
        fn, task, key, blob = message
        try:
            outcome = call(lambda: fn(shared_value(key, blob), task))  # noqa: B023 (called at once)
        except BaseException as exc:  # a task's sys.exit() is its error: the worker lives on
            outcome = failure(exc)
        try:
            data = cloudpickle.dumps(outcome)
        except Exception as exc:  # e.g. an unpicklable return value
            text = f"could not send the task result back: {exc!r}"
            data = cloudpickle.dumps(Outcome(False, error=text, retryable=False, summary=text))
        conn.send_bytes(data)


def command(code: str, *args: str) -> list[str]:
    """``python -P -c code PATH_JSON *args`` with this interpreter and its flags, ``PATH_JSON`` the driver's
    ``sys.path`` for ``code`` to install first: how a local worker starts (``BOOTSTRAP``, its configuration as
    JSON) and the dask workers of a cluster zephyr starts (``zephyr.executors.dask``)."""
    import subprocess

    flags = subprocess._args_from_interpreter_flags()  # -O, -X, -W ...: what multiprocessing passes on too
    if "-P" not in flags:
        flags.append("-P")
    path = [entry for entry in sys.path if isinstance(entry, str)]  # the import system skips other entries
    return [sys.executable, *flags, "-c", code, json.dumps(path), *args]
