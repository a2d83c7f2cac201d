"""Fault injection for CLI subprocess tests: put this folder on PYTHONPATH and set ZEPHYR_FAULT.

Python imports ``sitecustomize`` at start-up in every process, worker processes included, so the fault is in
place wherever a task runs. ``ZEPHYR_FAULT=errno:NAME`` (e.g. ``errno:ENOSPC``) registers the fsspec protocol
``faulty://``: a local filesystem whose files open for writing raise ``OSError(NAME)`` on their first write
with data, without a file name (as ``write(2)`` does), after appending a line to ``ZEPHYR_FAULT_LOG``.
Empty files (a probe) can be written.
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
