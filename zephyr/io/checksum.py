"""Checksums of the files a task writes: computed while the bytes are written, checked again on resume.

Every file an engine task leaves for later (a sink part, a shuffle run's data and index, a sort sample, a
quarantine file) is recorded in its marker with its size and a fast checksum, ``xxh3_128`` (``xxhash``), so a
rerun that would skip the task first checks the file still holds those bytes (``zephyr.resume.check_files``).

Why while writing: reading a file back after writing it costs a second pass over its bytes; the hash is
updated from the very buffers handed to ``write`` (``Checksummed``), at xxh3's speed (several GB/s a core),
well under the cost of encoding the data. The one exception is Vortex, whose writer (Rust) writes its file
itself: that file is hashed in one read after it is finished (``file_checksum``).

A record is ``{"bytes": N, "xxh3_128": "<32 hex>"}``; the same shape with ``"sha256"`` is accepted where a
file's digest was recorded as sha256 (token shards, ``zephyr.tokenize.shards``).

A ``map_batches`` function that writes files of its own for a later stage (the tokenize step's token spills)
records each with ``record_side_file`` and names their folder as its ``side_folder`` attribute: the task's
marker then lists them (``side_files``) with their checksums, and a resume checks them like the task's output.
"""

from __future__ import annotations

import hashlib
import io
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import IO, Any

import fsspec
import xxhash

ALGORITHM = "xxh3_128"
"""The checksum zephyr records for the files it writes."""

_READ_BYTES = 8 << 20
_HASHERS: dict[str, Callable[[], Any]] = {"xxh3_128": xxhash.xxh3_128, "sha256": hashlib.sha256}


def hasher(algorithm: str = ALGORITHM) -> Any:
    """A fresh streaming hasher (``update``/``hexdigest``) of ``algorithm`` (``xxh3_128`` or ``sha256``)."""
    return _HASHERS[algorithm]()


def checksum_record(size: int, digest: str, algorithm: str = ALGORITHM) -> dict[str, Any]:
    """What a marker holds for one file.

    >>> checksum_record(3, "ab")
    {'bytes': 3, 'xxh3_128': 'ab'}
    """
    return {"bytes": int(size), algorithm: digest}


class Checksummed(io.RawIOBase):
    """A writable file that hashes and counts every byte passed to ``write`` before handing it on.

    Wraps the handle a writer already uses (pyarrow's ``ParquetWriter`` and ``write_table`` accept any Python
    file with ``write``/``tell``/``flush``/``close``), so no byte is read back.

    >>> f = Checksummed(io.BytesIO())
    >>> f.write(b"abc")
    3
    >>> f.record() == checksum_record(3, xxhash.xxh3_128(b"abc").hexdigest())
    True
    """

    def __init__(self, handle: IO[bytes], algorithm: str = ALGORITHM):
        super().__init__()
        self._handle = handle
        self.algorithm = algorithm
        self._hash = hasher(algorithm)
        self.size = 0

    def write(self, data: Any) -> int:
        self._hash.update(data)
        written = self._handle.write(data)
        n = memoryview(data).nbytes
        self.size += n
        return written if written is not None else n

    def tell(self) -> int:
        return self.size

    def flush(self) -> None:
        if not self._handle.closed:  # the handle's owner may have closed it (``atomic_write``)
            self._handle.flush()

    def close(self) -> None:
        super().close()  # flushes first
        self._handle.close()

    def writable(self) -> bool:
        return True

    def hexdigest(self) -> str:
        return self._hash.hexdigest()

    def record(self) -> dict[str, Any]:
        """The checksum record of the bytes written so far."""
        return checksum_record(self.size, self.hexdigest(), self.algorithm)


def file_checksum(url: str, algorithm: str = ALGORITHM) -> tuple[int, str]:
    """(size, hex digest) of the file ``url``, read once in 8 MiB pieces (bounded memory)."""
    fs, path = fsspec.core.url_to_fs(url)
    digest = hasher(algorithm)
    size = 0
    with fs.open(path, "rb") as f:
        while chunk := f.read(_READ_BYTES):
            digest.update(chunk)
            size += len(chunk)
    return size, digest.hexdigest()


# Per thread (context), like the counters: a dask worker or the threads executor runs several tasks at once.
_side_files: ContextVar[dict[str, dict] | None] = ContextVar("zephyr_side_files", default=None)


def record_side_file(url: str, record: dict[str, Any]) -> None:
    """Record a file the running task wrote besides its output (no-op outside a task)."""
    active = _side_files.get()
    if active is not None:
        active[url] = record


@contextmanager
def collecting_side_files() -> Iterator[dict[str, dict]]:
    """Collect ``record_side_file`` calls made while the block runs (used by the task runner)."""
    active: dict[str, dict] = {}
    token = _side_files.set(active)
    try:
        yield active
    finally:
        _side_files.reset(token)
