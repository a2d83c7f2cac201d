"""Spill runs: the on-disk format a map task leaves for the reducers, and the coalescing of many runs into one.

A map task buffers its output until the buffer reaches its byte budget (measured from Arrow buffers), then
*spills* one run. A run is two files in the task's attempt directory:

``run-NNNNN.data``
    Self-contained Parquet files ("blobs", zstd) back to back: for each partition in order, its blobs.
    Inside a blob the rows are sorted by the shuffle's sort key (``ShuffleSpec.sort_columns``).
``run-NNNNN.index``
    One block per partition p, at ``p * (24 + 24 * K)``: a 24-byte header — magic ``b"ZSHX"``, format version
    (uint32 LE, currently 2), p and the number of partitions P (uint32 LE each), K (uint64 LE) — then K
    entries of three uint64 LE: a blob's byte offset in the data file, its length and its row count (0/0/0:
    no blob).

K, the run's *slots*, is 1 for a map task's spill. ``coalesce_runs`` concatenates the runs of a group of map
tasks into one run of K = the number of runs it read, without decoding a byte: partition p's slots hold the
blobs of those runs, in their order, back to back — so a reducer still sees every blob as its own sorted
source, in (map task, run) order, and its output does not depend on whether runs were coalesced.

A reducer for partition p reads one block of each run's index (one ranged read of 24 + 24·K bytes) and then
its own blobs, consecutive ones together, up to ``chunk_bytes`` a read (``part_sources``): its requests are
about two per run it reads, never a scan of other partitions' footers (Marin's reducers read 46 GB of footers
before any payload, #8267). Every block's header is checked against the partition and the run's K and P, a
blob's range against the bytes actually read and its row count against its footer: a damaged run is an
``InputError`` naming the file, never silently wrong rows (tests/shuffle/test_runs.py injects each fault).

When to coalesce (``coalesce_plan``): on an object store, when a run's share of one partition is so small that
its two requests cost more than one more read and write of its bytes (``COALESCE_PART_BYTES``). The request
model behind the rule, checked against a real S3 server, is benchmarks/shuffle_model.py.
"""

from __future__ import annotations

import io
import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass

import fsspec
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from zephyr.budget import Budget
from zephyr.errors import InputError
from zephyr.io.checksum import ALGORITHM, Checksummed, hasher

INDEX_MAGIC = b"ZSHX"
INDEX_VERSION = 2
_HEADER = [("magic", "S4"), ("version", "<u4"), ("partition", "<u4"), ("partitions", "<u4"), ("slots", "<u8")]
_ENTRY_BYTES = 24  # (offset, length, rows), uint64 each


def block_bytes(slots: int) -> int:
    """Bytes of one partition's index block in a run of ``slots`` slots."""
    return _block_dtype(slots).itemsize


def index_path(data_path: str) -> str:
    return data_path[: -len(".data")] + ".index"


@dataclass(frozen=True)
class Run:
    """A run as a reader needs it: its data file and its number of slots (1 for a map task's spill)."""

    path: str
    slots: int = 1


@dataclass(frozen=True)
class RunPart:
    """Where one blob of a partition lies."""

    data_path: str
    offset: int
    length: int
    rows: int


def group_rows(table: pa.Table, row_group_bytes: int) -> int:
    """Rows per row group of about ``row_group_bytes`` of ``table`` (256 at least): small enough to stream."""
    return max(256, row_group_bytes // max(1, table.nbytes // max(1, table.num_rows)))


def _parquet_blob(table: pa.Table, row_group_bytes: int) -> bytes:
    """One partition's rows as a standalone zstd Parquet file, with row groups small enough to stream."""
    sink = io.BytesIO()
    pq.write_table(
        table,
        sink,
        compression="zstd",
        row_group_size=group_rows(table, row_group_bytes),
        write_statistics=False,
        use_dictionary=False,  # shuffle keys are mostly high-cardinality: dictionary attempts only cost time
        store_schema=True,
    )
    return sink.getvalue()


def _block_dtype(slots: int) -> np.dtype:
    return np.dtype([*_HEADER, ("entries", "<u8", (slots, 3))])


def _blocks(first: int, count: int, partitions: int, slots: int) -> np.ndarray:
    """Index blocks ``first``, ``first + 1``, … of a run of ``partitions`` × ``slots``: headers set, entries 0.
    The writer fills in the entries; a reader compares what it read with these headers."""
    blocks = np.zeros(count, dtype=_block_dtype(slots))
    blocks["magic"], blocks["version"], blocks["slots"] = INDEX_MAGIC, INDEX_VERSION, slots
    blocks["partition"], blocks["partitions"] = np.arange(first, first + count), partitions
    return blocks


def _decode_blocks(raw: bytes, path: str, first: int, run: Run, partitions: int | None) -> np.ndarray:
    """Entries (n × K × 3) of the whole index blocks in ``raw``, which should be blocks ``first``,
    ``first + 1``, … of the index ``path`` of a run of ``partitions`` (when the caller knows) × ``run.slots``:
    every header must be the one ``_blocks`` writes."""
    blocks = np.frombuffer(raw, dtype=_block_dtype(run.slots))
    head = blocks[0]
    partitions = head["partitions"] if partitions is None else partitions
    expected = _blocks(first, len(blocks), partitions, run.slots)
    expected["entries"] = blocks["entries"]
    if expected.tobytes() != raw:
        raise InputError(
            f"shuffle index block of partition {first} does not match: it says {bytes(head['magic'])!r} version "
            f"{head['version']}, partition {head['partition']} of {head['partitions']} with {head['slots']} "
            f"slots, the job reads {INDEX_MAGIC!r} version {INDEX_VERSION}, partition {first} of "
            f"{partitions} with {run.slots} slots: the run is damaged or another zephyr's; rerun "
            "the job without the old work directory",
            path=path,
        )
    return blocks["entries"]


def _cat(fs: fsspec.AbstractFileSystem, path: str, start: int, end: int | None) -> bytes:
    """Bytes [start, end) of a run file (to its end when ``end`` is None): a file that is missing or ends
    before ``end`` is an ``InputError`` naming it."""
    try:
        data = fs.cat_file(path, start=start, end=end)
    except FileNotFoundError as exc:
        raise InputError(
            "shuffle run file missing: was the work directory cleaned mid-job?", path=path
        ) from exc
    if end is not None and len(data) != end - start:
        what = "data file" if path.endswith(".data") else "index"
        raise InputError(
            f"shuffle run bytes {start}-{end} lie past the end of the {what} (it ends at byte {start + len(data)}): "
            "the run is truncated; rerun the job",
            path=path,
        )
    return data


def read_index_block(
    fs: fsspec.AbstractFileSystem, run: Run | str, partition: int, num_partitions: int | None = None
) -> list[RunPart]:
    """The K blobs of ``partition`` in ``run`` (empty ones included, length 0), from one ranged read of its
    index block, checked (``_decode_blocks``). ``num_partitions``, when the caller knows it, must match the
    index's (a run written by another plan)."""
    run = run if isinstance(run, Run) else Run(run)
    path = index_path(run.path)
    size = block_bytes(run.slots)
    if num_partitions is not None and not 0 <= partition < num_partitions:
        raise InputError(f"partition {partition} out of range: the job has {num_partitions}", path=path)
    raw = _cat(fs, path, partition * size, (partition + 1) * size)
    entries = _decode_blocks(raw, path, partition, run, num_partitions)[0]
    return [RunPart(run.path, int(o), int(n), int(r)) for o, n, r in entries.tolist()]


def read_index(fs: fsspec.AbstractFileSystem, run: Run, partitions: int) -> tuple[bytes, np.ndarray]:
    """A whole index (one read) and its entries (P × K × 3), its length and headers checked. Its writers lay
    the blobs back to back from byte 0 in (partition, slot) order; ``coalesce_runs`` copies partitions by byte
    ranges and relies on it, having checked the index against its writer's checksum."""
    path = index_path(run.path)
    raw = _cat(fs, path, 0, None)
    if len(raw) != partitions * block_bytes(run.slots):
        raise InputError(
            f"shuffle index has the wrong length: {len(raw)} bytes, {partitions} partitions of "
            f"{run.slots} slots take {partitions * block_bytes(run.slots)}; the run is damaged: rerun the job",
            path=path,
        )
    return raw, _decode_blocks(raw, path, 0, run, partitions)


@dataclass(frozen=True)
class Written:
    """A run as written (``write_run``, ``coalesce_runs``): the run, its rows and data bytes, and both files'
    checksum records (``zephyr.io.checksum``), made while writing."""

    run: Run
    rows: int
    bytes: int
    checksums: dict[str, dict]


def write_run(
    fs: fsspec.AbstractFileSystem,
    prefix: str,
    table: pa.Table,
    partitions: np.ndarray,
    num_partitions: int,
    row_group_bytes: int,
) -> Written:
    """Write one run (``prefix`` + ``.data``/``.index``) from ``table``, sorted by (partition, sort key), whose
    rows belong to the (non-decreasing) ``partitions``."""
    starts = np.searchsorted(partitions, np.arange(num_partitions + 1), side="left")
    entries = np.zeros((num_partitions, 1, 3), dtype=np.int64)
    offset = 0
    with Checksummed(fs.open(prefix + ".data", "wb")) as data:
        for p in np.flatnonzero(np.diff(starts)):
            start, stop = int(starts[p]), int(starts[p + 1])
            blob = _parquet_blob(table.slice(start, stop - start), row_group_bytes)
            data.write(blob)
            entries[p, 0] = (offset, len(blob), stop - start)
            offset += len(blob)
    return _write_index(fs, prefix, entries, data)


def _write_index(
    fs: fsspec.AbstractFileSystem, prefix: str, entries: np.ndarray, data: Checksummed
) -> Written:
    """Write the index of the run ``prefix`` whose data file (``data``, written and closed) holds the blobs
    ``entries`` (P × K × (offset, length, rows)); the run as written."""
    blocks = _blocks(0, entries.shape[0], entries.shape[0], entries.shape[1])
    blocks["entries"] = entries
    with Checksummed(fs.open(prefix + ".index", "wb")) as index:
        index.write(blocks.tobytes())
    checksums = {prefix + ".data": data.record(), prefix + ".index": index.record()}
    run = Run(prefix + ".data", entries.shape[1])
    return Written(run, int(entries[:, :, 2].sum()), int(entries[:, :, 1].sum()), checksums)


# -- reading a partition's blobs ----------------------------------------------------------------------------
class _Chunk:
    """Bytes [start, end) of one data file: a read group's blobs (``read_groups``). A group that fits
    ``piece_bytes`` is fetched whole with one ranged read when its first blob is read; a larger one (one large
    blob) a piece of ``piece_bytes`` at a time from where Parquet reads, so it streams row group by row group.
    The bytes are dropped when the group's last blob is done."""

    def __init__(self, fs: fsspec.AbstractFileSystem, group: Sequence[RunPart], piece_bytes: int):
        self.fs, self.path, self.piece_bytes = fs, group[0].data_path, piece_bytes
        self.start, self.end = group[0].offset, group[-1].offset + group[-1].length
        self.waiting = len(group)
        self.lo, self.data = self.start, b""

    def read(self, offset: int, n: int) -> memoryview:
        """``n`` bytes at ``offset`` of the data file (within the group), fetched if not held."""
        if not self.lo <= offset <= offset + n <= self.lo + len(self.data):
            lo, hi = self.start, self.end
            if hi - lo > self.piece_bytes:  # one large blob: a piece from where Parquet reads
                lo, hi = offset, min(self.end, offset + max(n, self.piece_bytes))
            self.data, self.lo = _cat(self.fs, self.path, lo, hi), lo
        return memoryview(self.data)[offset - self.lo : offset - self.lo + n]

    def done(self) -> None:
        self.waiting -= 1
        if self.waiting <= 0:
            self.data = b""


class _Blob(io.RawIOBase):
    """One blob of a chunk as a read-only file, so Parquet reads its footer and row groups from the chunk."""

    def __init__(self, chunk: _Chunk, part: RunPart):
        self.chunk, self.part, self.pos = chunk, part, 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def seek(self, pos: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self.pos, io.SEEK_END: self.part.length}[whence]
        self.pos = max(0, min(self.part.length, base + pos))
        return self.pos

    def readinto(self, buffer) -> int:
        n = min(len(buffer), self.part.length - self.pos)
        if n <= 0:
            return 0
        buffer[:n] = self.chunk.read(self.part.offset + self.pos, n)
        self.pos += n
        return n


def _blob_tables(chunk: _Chunk, part: RunPart, columns: Sequence[str] | None) -> Iterator[pa.Table]:
    """A blob's row groups, its row count checked against the index entry."""
    where = f"shuffle blob at bytes {part.offset}-{part.offset + part.length}"
    try:
        reader = pq.ParquetFile(_Blob(chunk, part))
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
        chunk.done()


def read_groups(parts: Sequence[RunPart], chunk_bytes: int) -> list[list[RunPart]]:
    """The non-empty ``parts`` as the reads that fetch them: consecutive parts that lie back to back in one
    data file (a partition's slots in a coalesced run), ``chunk_bytes`` at most a read; a part larger than that
    alone (it is streamed)."""
    groups: list[list[RunPart]] = []
    for part in (part for part in parts if part.rows):
        last = groups[-1] if groups else None
        if (
            last is None
            or part.data_path != last[0].data_path
            or part.offset != last[-1].offset + last[-1].length
            or part.offset + part.length - last[0].offset > chunk_bytes
        ):
            groups.append([part])
        else:
            last.append(part)
    return groups


def part_sources(
    fs: fsspec.AbstractFileSystem,
    parts: Sequence[RunPart],
    chunk_bytes: int,
    columns: Sequence[str] | None = None,
) -> list[Iterator[pa.Table]]:
    """One lazy source of tables per non-empty part, in order, a row group at a time (sorted, as written),
    fetched a group of consecutive parts at a time (``read_groups``, ``_Chunk``; a part larger than
    ``chunk_bytes`` is fetched ``chunk_bytes`` a read). So a reducer makes about one request per run and
    ``chunk_bytes``, and holds, per open source, at most one chunk it has not decoded.

    A blob that is cut short (a truncated data file) or holds another row count than its index entry is an
    ``InputError`` naming the data file and the byte range."""
    sources: list[Iterator[pa.Table]] = []
    for group in read_groups(parts, chunk_bytes):
        chunk = _Chunk(fs, group, chunk_bytes)
        sources.extend(_blob_tables(chunk, part, columns) for part in group)
    return sources


# -- coalescing ---------------------------------------------------------------------------------------------
# -- when to coalesce (the request model behind it: benchmarks/shuffle_model.py) -----------------------
MIB = 1 << 20
COALESCE_PART_BYTES = 1 * MIB
"""Runs are coalesced (``coalesce="auto"``, on an object store) when their mean part — the stored bytes of one
run's share of one partition — is below this. Break-even: a part costs a reducer two requests (index block and
blob), coalescing costs its bytes one more read and one more write; at a request latency L and a per-stream
throughput T the two are equal at a part of L × T: 20–50 ms × 50–100 MB/s ≈ 1–5 MB on S3. On a local disk a
"request" is a system call (L ≈ 20 µs) and the pass never pays: ``auto`` coalesces on object stores only."""


def max_slots(partitions: int, budget: Budget) -> int:
    """Runs one coalesce task may read: it holds their indexes and its own (48 bytes per run and partition)
    within an eighth of the budget."""
    return max(1, budget.bytes // 8 // (2 * _ENTRY_BYTES * max(1, partitions)))


def group_count(runs: int, stored_bytes: int, partitions: int, workers: int, budget: Budget) -> int:
    """Coalesced runs for ``runs`` map runs: one per worker (the combine runs on every worker at once), more
    when the shuffle is so big that a reducer's share of one group passes a chunk (``spill_row_group_bytes``:
    then its reads are as many as its bytes need anyway), or when a group's indexes would not fit
    ``max_slots``."""
    by_bytes = math.ceil(stored_bytes / (max(1, partitions) * budget.spill_row_group_bytes))
    by_memory = math.ceil(runs / max_slots(partitions, budget))
    return max(1, workers, by_bytes, by_memory)


def coalesce_plan(
    task_runs: Sequence[int],
    stored_bytes: int,
    partitions: int,
    workers: int,
    budget: Budget,
    *,
    mode: str = "auto",
    remote: bool = True,
) -> list[range]:
    """The groups of consecutive map tasks whose runs are coalesced into one run each, or ``[]`` to read the
    map runs as they are. ``task_runs``: runs per map task, in task order; ``mode`` ``auto`` coalesces on an
    object store (``remote``) when the mean part is under ``COALESCE_PART_BYTES``, ``always`` whenever that
    leaves fewer runs, ``never`` never. Groups follow map task indices, never which worker ran what, so a
    rerun map task invalidates exactly its group; outputs are identical whatever the groups (a reducer reads
    every blob as before, in the same order).

    >>> [(g.start, g.stop) for g in coalesce_plan([2] * 10, 10 << 20, 8, 3, Budget(1 << 30))]
    [(0, 3), (3, 6), (6, 10)]
    >>> coalesce_plan([2] * 10, 10 << 30, 8, 3, Budget(1 << 30))  # parts of 64 MiB: coalescing does not pay
    []
    """
    tasks, runs = len(task_runs), sum(task_runs)
    if mode == "never" or tasks == 0:
        return []
    groups = min(tasks, group_count(runs, stored_bytes, partitions, workers, budget))
    if groups >= runs:
        return []
    if mode == "auto" and (not remote or stored_bytes / (runs * max(1, partitions)) >= COALESCE_PART_BYTES):
        return []
    bounds = [i * tasks // groups for i in range(groups + 1)]  # even: sizes differ by one at most
    return [range(a, b) for a, b in zip(bounds[:-1], bounds[1:])]


def windows(sizes: Sequence[int], window_bytes: int) -> Iterator[tuple[int, int]]:
    """Consecutive partition ranges [p0, p1) of at most ``window_bytes`` in all (one partition at least)."""
    p0, total = 0, 0
    for p, size in enumerate(sizes):
        if p > p0 and total + size > window_bytes:
            yield p0, p
            p0, total = p, 0
        total += size
    if p0 < len(sizes):
        yield p0, len(sizes)


def coalesce_runs(
    fs: fsspec.AbstractFileSystem,
    runs: Sequence[Run],
    prefix: str,
    num_partitions: int,
    *,
    window_bytes: int,
    upload_bytes: int,
    expected: Mapping[str, dict],
) -> Written:
    """Concatenate ``runs`` into one run at ``prefix`` (``.data``/``.index``) whose partition p holds the
    blobs of every input's partition p, input by input: bytes are copied, never decoded.

    Each input's index is read whole (one read), then its data in partition *windows* of ``window_bytes`` in
    all inputs (one ranged read per input and window; a partition larger than a window is copied input by
    input, ``window_bytes`` a read), so a combine holds one window of fetched bytes and one upload part
    (``upload_bytes``) of output. The windows of one input are consecutive byte ranges, so every input file is
    hashed whole while it is read and checked against ``expected`` (path → checksum record, from the map
    tasks' markers; an index before its entries are used): an input that no longer holds the bytes its writer
    wrote, or has no record, is an ``InputError`` naming it. So the copy trusts the inputs' layout."""
    indexes, sizes = [], np.zeros((num_partitions, len(runs)), np.int64)  # sizes[p, i]: input i's bytes of p
    for i, run in enumerate(runs):
        raw, entries = read_index(fs, run, num_partitions)
        digest = hasher()
        digest.update(raw)
        _check(index_path(run.path), len(raw), digest, expected)
        indexes.append(entries.astype(np.int64))
        sizes[:, i] = indexes[-1][:, :, 1].sum(axis=1)
    # Input i's partition p lies at bytes starts[p][i]-starts[p + 1][i] of its data file (``read_index``); in
    # the output, at out_starts[p, i]: partition by partition, input by input. Its blobs move by the difference.
    starts = np.vstack([np.zeros((1, len(runs)), np.int64), np.cumsum(sizes, axis=0)])
    out_starts = (np.cumsum(sizes.ravel()) - sizes.ravel()).reshape(sizes.shape)
    for i, e in enumerate(indexes):
        e[:, :, 0] += np.where(e[:, :, 1] > 0, out_starts[:, i, None] - starts[:-1, i, None], 0)
    entries = np.concatenate(indexes, axis=1) if runs else np.zeros((num_partitions, 0, 3), np.int64)
    digests, starts = [hasher() for _ in runs], starts.tolist()
    with Checksummed(_Parts(fs.open(prefix + ".data", "wb", block_size=upload_bytes), upload_bytes)) as out:
        for p0, p1 in windows(sizes.sum(axis=1).tolist(), window_bytes):
            held = [  # one read per input and window; one partition alone: copied below, a window a read
                _fetch(fs, run.path, starts[p0][i], starts[p1][i], digests[i]) if p1 - p0 > 1 else b""
                for i, run in enumerate(runs)
            ]
            for p in range(p0, p1):
                for i, run in enumerate(runs):
                    lo, hi = starts[p][i], starts[p + 1][i]
                    if p1 - p0 > 1:
                        out.write(memoryview(held[i])[lo - starts[p0][i] : hi - starts[p0][i]])
                        continue
                    for piece in range(lo, hi, window_bytes):
                        out.write(_fetch(fs, run.path, piece, min(hi, piece + window_bytes), digests[i]))
    for i, run in enumerate(runs):
        _check(run.path, starts[-1][i], digests[i], expected)
    return _write_index(fs, prefix, entries, out)


class _Parts:
    """A writable file handed its bytes in pieces of exactly ``size`` (the last one shorter), so an s3fs file of
    that block size uploads parts of exactly that size: ``ceil(bytes / size)`` of them, whatever the sizes of
    the writes (benchmarks/shuffle_model.py ``upload``)."""

    def __init__(self, handle, size: int):
        self._handle, self._size, self._pending = handle, size, bytearray()

    def write(self, data) -> None:  # ``Checksummed`` counts what it is handed
        self._pending += data
        while len(self._pending) >= self._size:
            self._handle.write(bytes(self._pending[: self._size]))
            del self._pending[: self._size]

    def flush(self) -> None:  # ``Checksummed`` flushes before it closes; a part goes out only when whole
        pass

    def close(self) -> None:
        if self._pending:
            self._handle.write(bytes(self._pending))
            self._pending.clear()
        self._handle.close()

    @property
    def closed(self) -> bool:
        return self._handle.closed


def _check(path: str, size: int, digest, expected: Mapping[str, dict]) -> None:
    """``path`` read as ``size`` bytes hashing to ``digest`` must match the record its writer made."""
    record = expected.get(path) or {}
    if record.get("bytes") != size or record.get(ALGORITHM) != digest.hexdigest():
        raise InputError(
            f"shuffle run file does not hold the bytes its map task wrote ({size} bytes read, {record.get('bytes')} "
            "written, or another checksum, or none recorded); rerun the job",
            path=path,
        )


def _fetch(fs: fsspec.AbstractFileSystem, path: str, start: int, end: int, digest) -> bytes:
    """Bytes [start, end) of an input being coalesced (no request when empty), added to its ``digest``."""
    data = _cat(fs, path, start, end) if end > start else b""
    digest.update(data)
    return data
