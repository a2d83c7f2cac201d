"""Step 5 of ``write_token_shards``: one sorted partition of document references → one token shard.

``PackPartition`` reads its partition's references (``zephyr.tokenize.encode_step``) ``batch_rows`` at a
time, gathers each document's ids from the spill files into one buffer with a one-token gap before (BOS
policy ``"always"``) and after (EOS) every document, stores the special tokens into the gaps, and streams the
batch to ``write_shard`` (hashed while written). Memory: one batch of documents' tokens.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from typing import Any

import numpy as np
from zephyr.tokenize.arrow_buffers import numeric_array, numeric_values, string_array
from zephyr.tokenize.shards import write_shard
from zephyr.tokenize.spill import SpillFiles, gather

__all__ = ["PackPartition", "shard_directory"]


@contextlib.contextmanager
def shard_directory(output: str) -> Iterator[str]:
    """Where a shard's files are written: ``output`` itself on local disk; for any other fsspec URL a local
    temporary directory whose files are uploaded into ``output`` when the block ends (a shard is hashed, and
    exported to Megatron, from local files; the manifest, written last by the driver, is what makes a set
    complete, so a shard's files appearing one by one is never seen as a set)."""
    import fsspec

    from zephyr.io.paths import is_local

    fs, root = fsspec.core.url_to_fs(output)
    if is_local(fs):
        yield root
        return
    staging = tempfile.mkdtemp(prefix="zephyr-shard-")
    try:
        yield staging
        for name in sorted(os.listdir(staging)):
            fs.put_file(os.path.join(staging, name), f"{root}/{name}")
    finally:
        shutil.rmtree(staging, ignore_errors=True)


class PackPartition:
    """The ``map`` function of step 5: one sorted partition of references → one shard.

    ``eos_id``/``bos_id``: the special tokens the pack step adds around each document's spilled ids
    (``bos_id`` is None unless the BOS policy is ``"always"``). ``threads``: partitions of one task packed at
    once (``writer_plan.pack_threads``), each on its own thread with its own batch.
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
        self.attempt = 0
        """Raised by the writer to pack again (a new stage fingerprint) when a resumed shard's bytes changed;
        the shards do not depend on it."""

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
        """The partition's documents as tables with a ``tokens`` column, ``batch_rows`` documents at a time."""
        with SpillFiles(self.spill_dir) as spill_files:  # open once per task, not once per document
            for batch in parquet.iter_batches(batch_size=self.batch_rows, columns=columns):
                yield self._table(batch, spill_files)

    def _table(self, batch: Any, spill_files: SpillFiles) -> Any:
        import pyarrow as pa

        out = {"tokens": self._tokens(batch, spill_files)}
        if "source" in batch.schema.names:
            out["source"] = batch.column("source")
        return pa.Table.from_arrays(list(out.values()), names=list(out))

    def __call__(self, table: Any) -> Any:
        """The ``map_batches`` function: one output row per partition (``index``, ``shard`` and ``per_source``
        as JSON), built from buffers: the engine's row ``map`` builds its output with ``Table.from_pylist``,
        which imports pandas (~0.3 s in the driver, where the writer runs on up to 2 workers). Rows are packed
        ``threads`` at a time: reading spills, writing and hashing the shard release the GIL."""
        import pyarrow as pa

        rows = table.to_pylist()
        if self.threads > 1 and len(rows) > 1:
            from concurrent.futures import ThreadPoolExecutor

            with ThreadPoolExecutor(min(self.threads, len(rows)), thread_name_prefix="zephyr-pack") as pool:
                rows = list(pool.map(self.pack, rows))
        else:
            rows = [self.pack(row) for row in rows]
        return pa.Table.from_arrays(
            [
                numeric_array(np.array([r["index"] for r in rows], dtype=np.int64), pa.int64()),
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
            with shard_directory(self.output) as directory:
                info, per_source = write_shard(
                    directory,
                    row["name"],
                    self._batches(parquet, columns),
                    dtype=np.dtype(self.dtype),
                    num_tokens=total,
                    megatron=self.megatron,
                )
        return {
            "index": row["index"],
            "shard": json.dumps(info.to_json()),
            "per_source": json.dumps(per_source),
        }
