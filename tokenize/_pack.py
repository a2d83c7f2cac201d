"""The pack job of ``write_token_shards``: one sorted partition of document references → one token shard, read
back from the token spill files the tokenize job wrote.

``PackPartition`` reads its partition's references (``zephyr.tokenize._encode``) ``batch_rows`` at a
time, gathers each document's ids from the spill files into one buffer with a one-token gap before (BOS
policy ``"always"``) and after (EOS) every document, stores the special tokens into the gaps, and streams the
batch to ``write_shard`` (hashed while written). Memory: one batch of documents' tokens.

Token spill files: where the tokenize job leaves each batch's token bytes until the pack job gathers them.

The writer's global shuffle sorts small *references* (shuffle key, token count, spill file, byte offset: ~50
bytes a document) instead of the token bytes themselves; the bytes are written once by the tokenize job and
read once by the pack job. Layout (version 2), in the writer's scratch directory::

    <dir>/<32 hex digits>.tokens    the batch's documents' token ids *without* EOS/BOS, concatenated,
                                    little-endian, in the shard dtype, no header: the encoder's flat buffer
                                    as it comes (cast to the shard dtype); a document is the byte range at
                                    ``spill_offset``, ``(num_tokens - specials) * itemsize`` bytes long

Version 1 stored EOS (and BOS) too, which took one scatter pass over every token of every batch to insert
them; now ``gather`` leaves a gap of ``before``/``after`` bytes around each document in its output, and the
pack job writes the special tokens into the gaps (one store per document).

A spill file is named by the xxh3-128 of the layout version and its batch's shuffle keys and token counts, so a retried or resumed
task rewrites the same name with the same bytes, and no task or worker identity is needed to name it. It is
written to a temporary name and renamed, so a reader never sees a partial file.

The spill directory may be any fsspec URL (the job's ``work_dir`` on object storage, so that workers on
several machines see each other's spills). ``gather`` reads the documents of one pack batch: on local disk
with one ``preadv`` per document straight into the output buffer, ``GATHER_THREADS`` in flight; elsewhere with one ``cat_ranges`` call per
file (s3fs and gcsfs fetch the ranges concurrently). Reads go through the page cache, not a memory map: a map of randomly touched spill pages would count
in the packer's RSS until unmapped, and the point of packing in batches is a peak RSS bounded by the batch.

Arrow arrays to and from numpy and Python values through their buffers, for the writer's jobs (``numeric_values``,
``string_array``; numeric arrays: ``zephyr.shuffle.writer.numpy_to_arrow``): pyarrow's convenient paths probe for pandas and import it on first use (``pa.array(ndarray)``,
``Array.to_numpy``, ``Table.from_pylist``): ~0.3-0.4 s in a process that has not imported it, which is the
driver when the writer runs there (``writer.DRIVER_MAX_WORKERS``). These build the same arrays from buffers.
"""

from __future__ import annotations

import contextlib
import os
from typing import TYPE_CHECKING, Any

import numpy as np
import xxhash
from zephyr.tokenize.shards import join_path, write_shard

from zephyr.errors import InputError
from zephyr.io.checksum import Checksummed, record_side_file

if TYPE_CHECKING:
    import pyarrow as pa


def numeric_values(array: pa.Array) -> np.ndarray:
    """The values of a null-free fixed-width Arrow array as a read-only numpy view, without a copy. pyarrow's
    ``Array.to_numpy`` imports pandas on first use (~0.3 s in a process that has not: the driver, where the
    writer runs on up to 2 workers)."""
    if array.null_count:
        raise ValueError(f"numeric_values: {array.null_count} nulls in a {array.type} array")
    dtype = np.dtype(array.type.to_pandas_dtype())
    return np.frombuffer(
        array.buffers()[1], dtype=dtype, count=len(array), offset=array.offset * dtype.itemsize
    )


def string_array(values: list[str]) -> pa.Array:
    """A ``large_string`` Arrow array from Python strings, built from buffers (no pandas probe)."""
    import pyarrow as pa

    raw = [v.encode("utf-8") for v in values]
    offsets = np.zeros(len(raw) + 1, dtype=np.int64)
    np.cumsum([len(r) for r in raw], out=offsets[1:])
    return pa.Array.from_buffers(
        pa.large_string(), len(raw), [None, pa.py_buffer(offsets), pa.py_buffer(b"".join(raw))]
    )


SPILL_VERSION = 2
_SUFFIX = ".tokens"
OPEN_FILES = 128
"""Spill files a pack task keeps open at once (``SpillFiles``). A shard's documents come from every batch of the
tokenize job in shuffled order, so consecutive pack batches touch mostly the same files; reopening one per
document cost an ``open``/``close`` pair per document (~40% of the gather)."""

GATHER_THREADS = 16
"""Reads a local ``gather`` keeps in flight. Once the spills outgrow the page cache, a pack batch's documents
come from about as many spill files as it has documents (fuzzy K = 24 in ``benchmarks/scale.py``: ~2,000 files,
~1 document of a batch in each), so every read is a random disk read and the disk's queue depth sets the pace.
``benchmarks/pack_gather.py`` on the benchmark VM, 14.6 GB of spills in a 3 GiB cgroup: one read at a time
~100 µs a document, 4 at a time ~48 µs, 16 ~29 µs, 64 ~35 µs."""

_DOCS_PER_THREAD = 16
"""Fewer documents than this per thread are read on fewer threads (a small batch is one chunk)."""


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
    ``limit``, least recently used closed first, and never one of the batch being read), and the threads that
    read them (``GATHER_THREADS``). ``close`` (``contextlib.closing``) closes every descriptor and ends the
    threads."""

    def __init__(self, directory: str, limit: int = OPEN_FILES, threads: int = GATHER_THREADS):
        from collections import OrderedDict

        self.directory, self.limit, self.threads = directory, max(1, limit), max(1, threads)
        self._open: OrderedDict[str, int] = OrderedDict()
        self._pool: Any = None

    def fd(self, name: str, keep: int = 0) -> int:
        """The descriptor of spill file ``name`` (opened on first use); a missing file names the fix. Keeps at
        most ``max(limit, keep)`` open, closing the least recently used."""
        fd = self._open.get(name)
        if fd is not None:
            self._open.move_to_end(name)
        else:
            path = os.path.join(self.directory, name)
            try:
                fd = self._open[name] = os.open(path, os.O_RDONLY)
            except FileNotFoundError as exc:
                raise _missing(path) from exc
        while len(self._open) > max(self.limit, keep):
            os.close(self._open.popitem(last=False)[1])
        return fd

    def fds(self, names: list[str]) -> np.ndarray:
        """The descriptors of one batch's files, all open at once: past ``limit`` when the batch reads more
        files, and the descriptors closed to make room are never the batch's own (they are the most recent)."""
        return np.array([self.fd(name, len(names)) for name in names], dtype=np.int64)

    def map(self, fn: Any, chunks: list[np.ndarray]) -> None:
        """``fn`` over ``chunks``, ``threads`` at a time (``preadv`` releases the GIL); errors propagate."""
        if self._pool is None:
            from concurrent.futures import ThreadPoolExecutor

            self._pool = ThreadPoolExecutor(self.threads, thread_name_prefix="zephyr-gather")
        list(self._pool.map(fn, chunks))

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown()
            self._pool = None
        while self._open:
            os.close(self._open.popitem()[1])


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
    and ``nbytes[i]`` its length. Reads are ordered by file and offset; each lands at its document's place in
    the output. ``before``/``after``: bytes left *unwritten* before/after every document (where the caller puts
    BOS/EOS), so document ``i`` spans ``before + nbytes[i] + after`` bytes.
    """
    import fsspec

    from zephyr.io.paths import is_local

    ends = np.zeros(len(nbytes) + 1, dtype=np.int64)
    np.cumsum(nbytes + (before + after), out=ends[1:])
    positions = ends[:-1] + before  # where each document's own bytes land
    out = np.empty(int(ends[-1]), dtype=np.uint8)
    view = memoryview(out)
    order = np.lexsort((starts, files))
    fs, root = fsspec.core.url_to_fs(directory)
    opened = spill_files if spill_files is not None else SpillFiles(directory)
    try:
        if is_local(fs):
            used = np.unique(files)  # ``names`` may list files this batch does not read
            fds = np.zeros(len(names), dtype=np.int64)
            fds[used] = opened.fds([names[i] for i in used.tolist()])
            fds = fds[files]
            chunks = np.array_split(order, max(1, min(opened.threads, len(order) // _DOCS_PER_THREAD)))

            def read(chunk: np.ndarray) -> None:
                _read_local(opened.directory, names, files, fds, chunk, starts, nbytes, positions, view)

            opened.map(read, chunks)
        else:
            bounds = np.flatnonzero(np.diff(files[order])) + 1
            for group in np.split(order, bounds):
                if len(group):
                    name = names[int(files[group[0]])]
                    _gather_remote(fs, f"{root}/{name}", group, starts, nbytes, positions, view)
    finally:
        if spill_files is None:
            opened.close()
    return out


def _read_local(
    directory: str, names, files, fds, chunk, starts, nbytes, positions, view: memoryview
) -> None:
    """Local documents: one ``preadv`` each, straight into the output (no batched positional read exists, and
    a map would grow RSS: see the module docstring)."""
    for i, fd, at, start, size in zip(
        chunk.tolist(),
        fds[chunk].tolist(),
        positions[chunk].tolist(),
        starts[chunk].tolist(),
        nbytes[chunk].tolist(),
    ):
        if size and os.preadv(fd, [view[at : at + size]], start) != size:
            raise InputError(
                f"token spill file {os.path.join(directory, names[int(files[i])])} is truncated (document at "
                f"byte {start}, {size} bytes); rerun without the work_dir (or with a fresh one)"
            )


def _missing(path: str) -> InputError:
    return InputError(
        f"token spill file {path} is missing: the scratch directory was changed while the set was being "
        "written; rerun without the work_dir (or with a fresh one)"
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
        raise _missing(path) from exc
    for i, n, blob in zip(group[wanted].tolist(), size[wanted].tolist(), blobs):
        if len(blob) != n:
            raise InputError(
                f"token spill file {path} is truncated ({len(blob)} of {n} bytes of a document); "
                "rerun without the work_dir (or with a fresh one)"
            )
        view[positions[i] : positions[i] + n] = blob


class PackPartition:
    """The ``map`` function of the pack job: one sorted partition of references → one shard.

    ``eos_id``/``bos_id``: the special tokens the pack job adds around each document's spilled ids
    (``bos_id`` is None unless the BOS policy is ``"always"``). ``threads``: partitions of one task packed at
    once (``zephyr.tokenize.writer.pack_threads``), each on its own thread with its own batch.
    """

    def __init__(
        self,
        output: str,
        dtype: str,
        megatron: bool,
        spill_dir: str,
        batch_rows: int,
        *,
        eos_id: int,
        bos_id: int | None,
        threads: int = 1,
    ):
        self.output, self.dtype, self.megatron = output, dtype, megatron
        self.spill_dir, self.batch_rows = spill_dir, batch_rows
        self.eos_id, self.bos_id = eos_id, bos_id
        self.threads = max(1, threads)

    @property
    def side_folder(self) -> str:
        """Where this function writes its shards (``zephyr.io.checksum.record_side_file``): a rerun skips a
        finished pack task only while its shards still have the size and sha256 recorded in its marker."""
        return self.output

    def _tokens(self, batch: Any, spill_files: SpillFiles) -> Any:
        """The batch's documents as one ``large_binary`` column: spilled ids framed by BOS/EOS."""
        import pyarrow as pa
        import pyarrow.compute as pc

        dtype = np.dtype(self.dtype).newbyteorder("<")
        before = int(self.bos_id is not None)
        specials = before + 1
        files = pc.dictionary_encode(batch.column("spill_file"))
        num_tokens = numeric_values(batch.column("num_tokens"))
        data = gather(
            self.spill_dir,
            numeric_values(files.indices),
            files.dictionary.to_pylist(),
            numeric_values(batch.column("spill_offset")),
            (num_tokens - specials) * dtype.itemsize,
            before=before * dtype.itemsize,
            after=dtype.itemsize,
            spill_files=spill_files,
        )
        ends = np.cumsum(num_tokens)
        tokens = data.view(dtype)
        tokens[ends - 1] = self.eos_id
        if self.bos_id is not None:
            tokens[ends - num_tokens] = self.bos_id
        offsets = np.zeros(len(num_tokens) + 1, dtype=np.int64)
        offsets[1:] = ends * dtype.itemsize
        return pa.LargeBinaryArray.from_buffers(
            pa.large_binary(), len(num_tokens), [None, pa.py_buffer(offsets), pa.py_buffer(data)]
        )

    def _batches(self, parquet: Any, columns: list[str]) -> Any:
        """The partition's documents as tables with a ``tokens`` column (and ``source`` when the references
        have one), ``batch_rows`` documents at a time."""
        import pyarrow as pa

        # open once per task, not once per document
        with contextlib.closing(SpillFiles(self.spill_dir)) as spill_files:
            for batch in parquet.iter_batches(batch_size=self.batch_rows, columns=columns):
                out = {"tokens": self._tokens(batch, spill_files)}
                if "source" in batch.schema.names:
                    out["source"] = batch.column("source")
                yield pa.Table.from_arrays(list(out.values()), names=list(out))

    def __call__(self, table: Any) -> Any:
        """The ``map_batches`` function: one output row per partition (``index``, ``shard`` and ``per_source``
        as JSON), built from buffers: the engine's row ``map`` builds its output with ``Table.from_pylist``,
        which imports pandas (~0.3 s in the driver, where the writer runs on up to 2 workers). Rows are packed
        ``threads`` at a time: reading spills, writing and hashing the shard release the GIL."""
        import pyarrow as pa
        from zephyr.shuffle.writer import numpy_to_arrow

        rows = table.to_pylist()
        if self.threads > 1 and len(rows) > 1:
            import contextvars
            from concurrent.futures import ThreadPoolExecutor

            with ThreadPoolExecutor(min(self.threads, len(rows)), thread_name_prefix="zephyr-pack") as pool:
                # each in a copy of this thread's context: the side-file records reach the task's marker
                packing = [pool.submit(contextvars.copy_context().run, self.pack, row) for row in rows]
                rows = [future.result() for future in packing]
        else:
            rows = [self.pack(row) for row in rows]
        return pa.Table.from_arrays(
            [
                numpy_to_arrow(np.array([r["index"] for r in rows], dtype=np.int64)),
                string_array([r["shard"] for r in rows]),
                string_array([r["per_source"] for r in rows]),
            ],
            names=["index", "shard", "per_source"],
        )

    def pack(self, row: dict[str, Any]) -> dict[str, Any]:
        """Write the shard of one partition row (``index``, ``name``, ``path`` of its sorted references)."""
        import json

        import fsspec
        import pyarrow.parquet as pq

        fs, path = fsspec.core.url_to_fs(row["path"])
        with fs.open(path, "rb") as handle:
            parquet = pq.ParquetFile(handle)
            total = int(
                sum(
                    numeric_values(b["num_tokens"]).sum()
                    for b in parquet.iter_batches(columns=["num_tokens"])
                )
            )
            columns = ["num_tokens", "spill_file", "spill_offset"]
            if "source" in parquet.schema_arrow.names:
                columns.append("source")
            info, per_source = write_shard(
                self.output,
                row["name"],
                self._batches(parquet, columns),
                dtype=np.dtype(self.dtype),
                num_tokens=total,
                megatron=self.megatron,
            )
        for file in info.files.values():
            record_side_file(join_path(self.output, file.path), {"bytes": file.bytes, "sha256": file.sha256})
        return {
            "index": row["index"],
            "shard": json.dumps(info.to_json()),
            "per_source": json.dumps(per_source),
        }
