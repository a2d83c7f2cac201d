"""Fault injection for CLI subprocess tests: put this folder on PYTHONPATH and set ZEPHYR_FAULT.

Python imports ``sitecustomize`` at start-up in every process, worker processes included, so the fault is in
place wherever a task runs. ``ZEPHYR_FAULT=errno:NAME`` (e.g. ``errno:ENOSPC``) registers the fsspec protocol
``faulty://``: a local filesystem whose files open for writing raise ``OSError(NAME)`` on their first write
with data, without a file name (as ``write(2)`` does), after appending a line to ``ZEPHYR_FAULT_LOG``.
Empty files (a probe) can be written.

``ZEPHYR_FAULT=hold:DIR`` holds every task that opens a file of ``DIR`` for reading (through fsspec's local
filesystem, on a worker process or a task thread, so the driver's own peeks pass):
``DIR/.held-<pid>-<thread>`` is created (a hidden name: no input listing takes it) and the open sleeps for
ten minutes. A test waits for that file, and then knows a task is running.
"""

import os

if os.environ.get("ZEPHYR_FAULT", "").startswith("errno:"):
    import errno

    import fsspec
    from fsspec.implementations.local import LocalFileSystem

    _CODE = getattr(errno, os.environ["ZEPHYR_FAULT"].split(":", 1)[1])

    class _FailingFile:
        def __init__(self, inner, path):
            self._inner = inner
            self._path = path

        def write(self, data):
            if len(data):
                with open(os.environ["ZEPHYR_FAULT_LOG"], "a") as log:
                    log.write(f"{os.getpid()} {self._path}\n")
                raise OSError(_CODE, os.strerror(_CODE))
            return 0

        def __getattr__(self, name):
            return getattr(self._inner, name)

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self._inner.close()

    class FaultyFileSystem(LocalFileSystem):
        protocol = ("faulty",)

        @classmethod
        def _strip_protocol(cls, path):
            return LocalFileSystem._strip_protocol(str(path).replace("faulty://", "file://", 1))

        def _open(self, path, mode="rb", **kwargs):
            handle = super()._open(path, mode, **kwargs)
            return _FailingFile(handle, path) if "w" in mode or "a" in mode else handle

    fsspec.register_implementation("faulty", FaultyFileSystem, clobber=True)

if os.environ.get("ZEPHYR_FAULT", "").startswith("hold:"):
    import multiprocessing
    import threading
    import time

    from fsspec.implementations.local import LocalFileSystem

    _HOLD_DIR = os.path.realpath(os.environ["ZEPHYR_FAULT"].split(":", 1)[1])
    _open = LocalFileSystem._open

    def _held_open(self, path, mode="rb", **kwargs):
        in_a_task = (  # a worker process (zephyr's local workers are daemonic, as dask's are), or a task
            # thread of the threads executor (zephyr.executors.base)
            multiprocessing.current_process().daemon
            or multiprocessing.parent_process() is not None
            or threading.current_thread().name.startswith("zephyr-task")
        )
        if "r" in mode and in_a_task and os.path.dirname(os.path.realpath(path)) == _HOLD_DIR:
            with open(os.path.join(_HOLD_DIR, f".held-{os.getpid()}-{threading.get_ident()}"), "w"):
                pass
            time.sleep(600)
        return _open(self, path, mode, **kwargs)

    LocalFileSystem._open = _held_open
    import faulthandler
    import signal

    faulthandler.register(signal.SIGUSR1, all_threads=True)  # a stuck test can show where every thread is
