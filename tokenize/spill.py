"""Token spill files: where the tokenize step leaves each batch's token bytes until the pack step gathers them.

The writer's global shuffle sorts small *references* (shuffle key, token count, spill file, byte offset: ~50
bytes a document) instead of the token bytes themselves; the bytes are written once by the tokenize step and
read once by the pack step. Layout (version 2), in the writer's scratch directory::

    <dir>/<32 hex digits>.tokens    the batch's documents' token ids *without* EOS/BOS, concatenated,
                                    little-endian, in the shard dtype, no header: the encoder's flat buffer
                                    as it comes (cast to the shard dtype); a document is the byte range at
                                    ``spill_offset``, ``(num_tokens - specials) * itemsize`` bytes long

Version 1 stored EOS (and BOS) too, which took one scatter pass over every token of every batch to insert
them; now ``gather`` leaves a gap of ``before``/``after`` bytes around each document in its output, and the
pack step writes the special tokens into the gaps (one store per document).

A spill file is named by the xxh3-128 of the layout version and its batch's shuffle keys and token counts, so a retried or resumed
task rewrites the same name with the same bytes, and no task or worker identity is needed to name it. It is
written to a temporary name and renamed, so a reader never sees a partial file.

The spill directory may be any fsspec URL (the job's ``work_dir`` on object storage, so that workers on
several machines see each other's spills). ``gather`` reads the documents of one pack batch: on local disk
with one ``preadv`` per document straight into the output buffer; elsewhere with one ``cat_ranges`` call per
file (s3fs and gcsfs fetch the ranges concurrently). Reads go through the page cache, not a memory map: a map of randomly touched spill pages would count
in the packer's RSS until unmapped, and the point of packing in batches is a peak RSS bounded by the batch.
"""

from __future__ import annotations

import os

import numpy as np
import xxhash

from zephyr.errors import InputError
from zephyr.io.checksum import Checksummed, record_side_file

__all__ = ["SPILL_VERSION", "SpillFiles", "spill_name", "write_spill", "gather"]

SPILL_VERSION = 2
_SUFFIX = ".tokens"
OPEN_FILES = 128
"""Spill files a pack task keeps open at once (``SpillFiles``). A shard's documents come from every batch of the
tokenize step in shuffled order, so consecutive pack batches touch mostly the same files; reopening one per
document cost an ``open``/``close`` pair per document (~40% of the gather)."""


def spill_name(*arrays: np.ndarray) -> str:
    """A content-derived file name for a batch: xxh3-128 over the layout version and the raw bytes of
    ``arrays`` (keys, counts), so a file of another layout version is never taken for this one."""
    digest = xxhash.xxh3_128()
    digest.update(SPILL_VERSION.to_bytes(4, "little"))
    for array in arrays:
        digest.update(np.ascontiguousarray(array).view(np.uint8))
    return digest.hexdigest() + _SUFFIX


def write_spill(directory: str, name: str, data: np.ndarray) -> None:
    """Write ``data``'s bytes to ``directory/name`` atomically (temporary name, then rename)."""
    from zephyr.io.paths import atomic_write

    url = os.path.join(directory, name)
    with atomic_write(url) as handle:
        hashed = Checksummed(handle)
        hashed.write(memoryview(np.ascontiguousarray(data)).cast("B"))
    record_side_file(url, hashed.record())  # a resumed tokenize task's spills are checked like its output


class SpillFiles:
    """Read-only descriptors of the local spill files of ``directory``, kept open across ``gather`` calls (at most
    ``limit``, least recently used closed first). Use as a context manager: every descriptor closes at exit."""

    def __init__(self, directory: str, limit: int = OPEN_FILES):
        from collections import OrderedDict

        self.directory, self.limit = directory, max(1, limit)
        self._open: OrderedDict[str, int] = OrderedDict()

    def fd(self, name: str) -> int:
        """The descriptor of spill file ``name`` (opened on first use); a missing file names the fix."""
        fd = self._open.get(name)
        if fd is not None:
            self._open.move_to_end(name)
            return fd
        path = os.path.join(self.directory, name)
        try:
            fd = os.open(path, os.O_RDONLY)
        except FileNotFoundError as exc:
            raise InputError(
                f"token spill file {path} is missing: the scratch directory was changed while the set was "
                "being written; rerun without the work_dir (or with a fresh one)"
            ) from exc
        self._open[name] = fd
        if len(self._open) > self.limit:
            os.close(self._open.popitem(last=False)[1])
        return fd

    def close(self) -> None:
        while self._open:
            os.close(self._open.popitem()[1])

    def __enter__(self) -> SpillFiles:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def gather(
    directory: str,
    files: np.ndarray,
    names: list[str],
    starts: np.ndarray,
    nbytes: np.ndarray,
    *,
    before: int = 0,
    after: int = 0,
    spill_files: SpillFiles | None = None,
) -> np.ndarray:
    """The bytes of each referenced document, concatenated in reference order (a ``uint8`` array).

    ``files[i]`` indexes ``names`` (the spill file of document ``i``), ``starts[i]`` is its byte offset there
    and ``nbytes[i]`` its length. Reads are grouped by file and ordered by offset; each lands at its
    document's place in the output. ``before``/``after``: bytes left *unwritten* before/after every
    document (where the caller puts BOS/EOS), so document ``i`` spans ``before + nbytes[i] + after`` bytes.
    """
    import fsspec

    from zephyr.io.paths import is_local

    ends = np.zeros(len(nbytes) + 1, dtype=np.int64)
    np.cumsum(nbytes + (before + after), out=ends[1:])
    positions = ends[:-1] + before  # where each document's own bytes land
    out = np.empty(int(ends[-1]), dtype=np.uint8)
    view = memoryview(out)
    order = np.lexsort((starts, files))
    bounds = np.flatnonzero(np.diff(files[order])) + 1
    fs, root = fsspec.core.url_to_fs(directory)
    opened = spill_files if spill_files is not None else SpillFiles(directory)
    try:
        for group in np.split(order, bounds):
            if not len(group):
                continue
            name = names[int(files[group[0]])]
            if is_local(fs):
                _read_local(opened, name, group, starts, nbytes, positions, view)
            else:
                _gather_remote(fs, f"{root}/{name}", group, starts, nbytes, positions, view)
    finally:
        if spill_files is None:
            opened.close()
    return out


def _read_local(opened: SpillFiles, name: str, group, starts, nbytes, positions, view: memoryview) -> None:
    """One local file's documents: one ``preadv`` each, straight into the output (no batched positional read
    exists, and a map would grow RSS: see the module docstring)."""
    fd = opened.fd(name)
    for at, start, size in zip(positions[group].tolist(), starts[group].tolist(), nbytes[group].tolist()):
        if size and os.preadv(fd, [view[at : at + size]], start) != size:
            raise InputError(
                f"token spill file {os.path.join(opened.directory, name)} is truncated (document at byte "
                f"{start}, {size} bytes); rerun without the work_dir (or with a fresh one)"
            )


def _gather_remote(fs, path: str, group, starts, nbytes, positions, view: memoryview) -> None:
    """One file's documents from an object store: their byte ranges in one ``cat_ranges`` call."""
    begin = starts[group]
    size = nbytes[group]
    wanted = size > 0
    if not wanted.any():
        return
    try:
        blobs = fs.cat_ranges(
            [path] * int(wanted.sum()),
            begin[wanted].tolist(),
            (begin + size)[wanted].tolist(),
            on_error="raise",
        )
    except FileNotFoundError as exc:
        raise InputError(
            f"token spill file {path} is missing: the scratch directory was changed while the set was "
            "being written; rerun without the work_dir (or with a fresh one)"
        ) from exc
    for i, n, blob in zip(group[wanted].tolist(), size[wanted].tolist(), blobs):
        if len(blob) != n:
            raise InputError(
                f"token spill file {path} is truncated ({len(blob)} of {n} bytes of a document); "
                "rerun without the work_dir (or with a fresh one)"
            )
        view[positions[i] : positions[i] + n] = blob
