"""Spill runs: the on-disk format a map task leaves for the reducers.

A map task buffers its output until the buffer reaches its byte budget (measured from Arrow buffers), then
*spills* one run. A run is two files in the task's attempt directory:

``run-NNNNN.data``
    The concatenation of self-contained Parquet files ("blobs", zstd), one per non-empty target partition, in
    partition order. Inside a blob the rows are sorted by the shuffle's sort key (``ShuffleSpec.sort_columns``).
``run-NNNNN.index``
    16-byte header — magic ``b"ZSHX"``, format version (uint32 LE, currently 1), number of partitions P
    (uint64 LE) — then P fixed-width entries of three uint64 LE: byte offset of the blob in the data file,
    its length, and its row count (0/0/0 for an empty partition).

A reducer for partition p reads the header and the 24 bytes of its entry (at ``16 + 24 * p``) of each run's
index, and then exactly its own blob's byte range from the data file: its I/O is its own bytes plus two tiny
reads per run, never a scan of other partitions' footers (Marin's reducers read 46 GB of footers before any
payload, #8267). The header, the index file's length (must be ``16 + 24 * P``), the blob's range within the
data file and its row count are checked against each other: a damaged run is an ``InputError`` naming the
file, never silently wrong rows (tests/shuffle/test_runs.py injects each fault).
"""

from __future__ import annotations

import io
import struct
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import fsspec
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from zephyr.budget import Budget
from zephyr.errors import InputError
from zephyr.io.checksum import Checksummed

__all__ = ["RunPart", "RunWriter", "read_index_entry", "read_run_part", "INDEX_VERSION"]

INDEX_MAGIC = b"ZSHX"
INDEX_VERSION = 1
_HEADER = struct.Struct("<4sIQ")
_ENTRY = struct.Struct("<QQQ")


def row_group_bytes_for(budget_bytes: int) -> int:
    """Row-group size of spilled blobs: small enough that a reducer can stream many parts within its budget."""
    return Budget(budget_bytes).spill_row_group_bytes


@dataclass(frozen=True)
class RunPart:
    """Where partition p's rows of one run lie."""

    data_path: str
    offset: int
    length: int
    rows: int


def _parquet_blob(table: pa.Table, row_group_bytes: int) -> bytes:
    """One partition's rows as a standalone zstd Parquet file, with row groups small enough to stream."""
    row_bytes = max(1, table.nbytes // max(1, table.num_rows))
    rows_per_group = max(256, row_group_bytes // row_bytes)
    sink = io.BytesIO()
    pq.write_table(
        table,
        sink,
        compression="zstd",
        row_group_size=rows_per_group,
        write_statistics=False,
        use_dictionary=False,  # shuffle keys are mostly high-cardinality: dictionary attempts only cost time
        store_schema=True,
    )
    return sink.getvalue()


class RunWriter:
    """Writes one run (data + index) from a table already sorted by (partition, sort key)."""

    def __init__(self, fs: fsspec.AbstractFileSystem, prefix: str, num_partitions: int, row_group_bytes: int):
        self.fs = fs
        self.row_group_bytes = row_group_bytes
        self.data_path = prefix + ".data"
        self.index_path = prefix + ".index"
        self.num_partitions = num_partitions
        self.checksums: dict[str, dict] = {}

    def write(self, table: pa.Table, partitions: np.ndarray) -> tuple[int, int]:
        """Write ``table`` whose rows belong to the (non-decreasing) ``partitions``; returns (rows, bytes).
        ``checksums`` then holds both files' checksum records (``zephyr.io.checksum``), made while writing."""
        starts = np.searchsorted(partitions, np.arange(self.num_partitions + 1), side="left")
        entries = np.zeros((self.num_partitions, 3), dtype="<u8")
        offset = 0
        with Checksummed(self.fs.open(self.data_path, "wb")) as data:
            for p in np.flatnonzero(np.diff(starts)):
                start, stop = int(starts[p]), int(starts[p + 1])
                blob = _parquet_blob(table.slice(start, stop - start), self.row_group_bytes)
                data.write(blob)
                entries[p] = (offset, len(blob), stop - start)
                offset += len(blob)
        with Checksummed(self.fs.open(self.index_path, "wb")) as index:
            index.write(_HEADER.pack(INDEX_MAGIC, INDEX_VERSION, self.num_partitions))
            index.write(entries.tobytes())
        self.checksums = {self.data_path: data.record(), self.index_path: index.record()}
        return table.num_rows, offset


def read_index_entry(
    fs: fsspec.AbstractFileSystem, data_path: str, partition: int, num_partitions: int | None = None
) -> RunPart:
    """The byte range of ``partition`` in the run whose data file is ``data_path``.

    Reads the 16-byte header and the one 24-byte entry (two ranged reads) and the index file's size, and
    checks them against each other, so a foreign, truncated or padded index is an ``InputError`` naming the
    file — never a silently wrong byte range. ``num_partitions``, when the caller knows it, must match the
    header's (a run written by another plan)."""
    index_path = data_path[: -len(".data")] + ".index"
    start = _HEADER.size + _ENTRY.size * partition
    try:
        header, raw = fs.cat_ranges(
            [index_path, index_path], [0, start], [_HEADER.size, start + _ENTRY.size], on_error="raise"
        )
        size = fs.size(index_path)
    except FileNotFoundError as exc:
        raise InputError(
            "shuffle index missing (was the work directory cleaned mid-job?)", path=index_path
        ) from exc
    if len(header) != _HEADER.size:
        raise InputError(
            f"shuffle index truncated: {size} bytes, not even the {_HEADER.size}-byte header", path=index_path
        )
    magic, version, partitions = _HEADER.unpack(header)
    if magic != INDEX_MAGIC:
        raise InputError(f"not a shuffle index: magic {magic!r}, expected {INDEX_MAGIC!r}", path=index_path)
    if version != INDEX_VERSION:
        raise InputError(
            f"shuffle index version {version}, this zephyr reads version {INDEX_VERSION}: rerun the job "
            "without the old work directory",
            path=index_path,
        )
    expected_size = _HEADER.size + _ENTRY.size * partitions
    if size != expected_size:
        raise InputError(
            f"shuffle index has the wrong length: {size} bytes, but its header says {partitions} partitions "
            f"({expected_size} bytes); the run is damaged: rerun the job",
            path=index_path,
        )
    if num_partitions is not None and partitions != num_partitions:
        raise InputError(
            f"shuffle index holds {partitions} partitions, the job expects {num_partitions}", path=index_path
        )
    if not 0 <= partition < partitions:
        raise InputError(f"partition {partition} out of range: the index holds {partitions}", path=index_path)
    offset, length, rows = _ENTRY.unpack(raw)
    return RunPart(data_path, offset, length, rows)


class _Range(io.RawIOBase):
    """A read-only window [offset, offset + length) of a file: lets Parquet read one blob's row groups
    with ranged reads instead of loading the whole blob."""

    def __init__(self, file, offset: int, length: int):
        self._file = file
        self._offset = offset
        self._length = length
        self._pos = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, pos: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: self._length}[whence]
        self._pos = max(0, min(self._length, base + pos))
        return self._pos

    def readinto(self, buffer) -> int:
        n = min(len(buffer), self._length - self._pos)
        if n <= 0:
            return 0
        self._file.seek(self._offset + self._pos)
        data = self._file.read(n)
        buffer[: len(data)] = data
        self._pos += len(data)
        return len(data)

    def close(self) -> None:
        self._file.close()
        super().close()


def read_run_part(
    fs: fsspec.AbstractFileSystem, part: RunPart, columns: Sequence[str] | None = None
) -> Iterator[pa.Table]:
    """Yield a run part's rows one row group at a time (sorted, as written), reading only its byte range.

    A blob that is cut short (a truncated data file) or holds another row count than its index entry is an
    ``InputError`` naming the data file and the byte range."""
    if part.rows == 0:
        return
    where = f"shuffle blob at bytes {part.offset}-{part.offset + part.length}"
    data_size = fs.size(part.data_path)
    if part.offset + part.length > data_size:
        raise InputError(
            f"{where} lies past the end of the data file ({data_size} bytes): the run is truncated; rerun the job",
            path=part.data_path,
        )
    window = _Range(fs.open(part.data_path, "rb"), part.offset, part.length)
    try:
        reader = pq.ParquetFile(window)
        if reader.metadata.num_rows != part.rows:
            raise InputError(
                f"{where} holds {reader.metadata.num_rows} rows, its index entry says {part.rows}; rerun the job",
                path=part.data_path,
            )
        for group in range(reader.num_row_groups):
            yield reader.read_row_group(group, columns=columns)
    except (pa.ArrowInvalid, OSError) as exc:
        raise InputError(f"corrupt {where}: {exc}", path=part.data_path) from exc
    finally:
        window.close()
