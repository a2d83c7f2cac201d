"""Write token shards (format version 1, see ``zephyr.tokenize.format``) and their Megatron export.

``write_shard`` streams one shard from record batches of tokenized documents (a ``tokens`` binary column
holding each document's little-endian ids, in the shard dtype): given the shard's token count it writes the
``.npy`` header, then appends the token bytes batch by batch with plain sequential writes, hashing (sha256)
as it goes, so memory stays at one record batch whatever the shard size (a writable memory map would keep the
whole shard's dirty pages in the writer's RSS) and no file is read back to be hashed. ``write_manifest`` writes ``manifest.json`` last,
through a temporary name and a rename: a set without a manifest is incomplete by definition.

Megatron export (``megatron=True``): ``<shard>.bin`` holds the same token bytes as the ``.npy`` body and
``<shard>.idx`` is Megatron-LM's ``MMapIndexedDataset`` index, laid out as its ``_IndexWriter`` writes it
(megatron/core/datasets/indexed_dataset.py), all little-endian:

    b"MMIDIDX\\x00\\x00"   9-byte magic
    uint64   version = 1
    uint8    dtype code (Megatron's DType enum: uint16 = 8, int32 = 4; uint32 has no code, so uint32 shards
             are exported as int32, which holds every id below 2**31)
    uint64   sequence count N (one sequence per document)
    uint64   document-index count N + 1
    int32[N] sequence lengths in tokens
    int64[N] sequence pointers: byte offset of each sequence in the .bin
    int64[N+1] document indices: 0, 1, ..., N (document i is sequence i)
"""

from __future__ import annotations

import json
import os
import struct
from collections.abc import Iterable
from typing import Any

import numpy as np
from zephyr.tokenize.format import (
    FORMAT_NAME,
    FORMAT_VERSION,
    MANIFEST_NAME,
    ShardFile,
    ShardInfo,
    sha256_file,
)

from zephyr.io.paths import atomic_output, atomic_write

__all__ = ["write_shard", "write_manifest", "write_megatron", "MEGATRON_MAGIC", "MEGATRON_DTYPE_CODES"]

MEGATRON_MAGIC = b"MMIDIDX\x00\x00"
MEGATRON_DTYPE_CODES = {
    "uint8": 1,
    "int8": 2,
    "int16": 3,
    "int32": 4,
    "int64": 5,
    "float64": 6,
    "float32": 7,
    "uint16": 8,
}


class _HashingWriter:
    """A binary file that sha256-hashes and counts what is written to it (for the manifest's file entries)."""

    def __init__(self, path: str):
        import hashlib

        self._handle = open(path, "wb")  # noqa: SIM115 - closed in close()
        self._hash = hashlib.sha256()
        self.size = 0

    def write(self, data: Any) -> int:
        view = memoryview(data).cast("B")
        self._hash.update(view)
        self.size += len(view)
        return self._handle.write(view)

    def close(self) -> str:
        self._handle.close()
        return self._hash.hexdigest()


def _file(directory: str, name: str) -> ShardFile:
    path = os.path.join(directory, name)
    return ShardFile(name, sha256_file(path), os.path.getsize(path))


def _binary_bytes(column: Any) -> tuple[np.ndarray, np.ndarray]:
    """(raw bytes, per-row byte lengths) of a binary/large_binary Arrow array, without per-row Python."""
    import pyarrow as pa

    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks()
    if pa.types.is_binary(column.type):
        column = column.cast(pa.large_binary())
    if column.null_count:
        raise ValueError("tokens column has nulls")
    offsets = np.frombuffer(column.buffers()[1], dtype=np.int64)[
        column.offset : column.offset + len(column) + 1
    ]
    data = column.buffers()[2]
    raw = np.frombuffer(data, dtype=np.uint8) if data is not None else np.zeros(0, np.uint8)
    return raw[offsets[0] : offsets[-1]], np.diff(offsets)


def write_shard(
    directory: str,
    name: str,
    batches: Iterable[Any],
    *,
    dtype: np.dtype,
    num_tokens: int,
    megatron: bool = False,
) -> tuple[ShardInfo, dict[str, dict[str, int]]]:
    """Write ``name.tokens.npy`` + ``name.offsets.npy`` (+ Megatron files) from batches of tokenized docs.

    ``batches`` yields Arrow record batches/tables with a ``tokens`` binary column (and optionally
    ``source``); ``num_tokens`` is their total token count (the ``.npy`` header is written first).
    Returns the shard's manifest entry and its per-source ``{"documents", "tokens"}`` counts.
    """
    dtype = np.dtype(dtype).newbyteorder("<")
    os.makedirs(directory, exist_ok=True)
    tokens_name, offsets_name = f"{name}.tokens.npy", f"{name}.offsets.npy"
    with atomic_output(os.path.join(directory, tokens_name)) as tmp_tokens:
        tokens = _HashingWriter(tmp_tokens)
        lengths: list[np.ndarray] = []
        per_source: dict[str, dict[str, int]] = {}
        position = 0
        try:
            header = {
                "descr": np.lib.format.dtype_to_descr(dtype),
                "fortran_order": False,
                "shape": (num_tokens,),
            }
            np.lib.format.write_array_header_1_0(tokens, header)
            for batch in batches:
                raw, nbytes = _binary_bytes(batch.column("tokens"))
                count = len(raw) // dtype.itemsize
                if position + count > num_tokens:
                    raise ValueError(f"shard {name}: more tokens than the announced {num_tokens}")
                tokens.write(raw)
                position += count
                doc_tokens = nbytes // dtype.itemsize
                lengths.append(doc_tokens)
                if "source" in batch.schema.names:
                    sources = np.asarray(batch.column("source").to_numpy(zero_copy_only=False), dtype=object)
                    names, inverse = np.unique(sources.astype(str), return_inverse=True)
                    docs = np.bincount(inverse, minlength=len(names))
                    toks = np.bincount(inverse, weights=doc_tokens, minlength=len(names))
                    for src, d, t in zip(names.tolist(), docs.tolist(), toks.tolist()):
                        entry = per_source.setdefault(src, {"documents": 0, "tokens": 0})
                        entry["documents"] += int(d)
                        entry["tokens"] += int(t)
        finally:
            tokens_sha = tokens.close()
        if position != num_tokens:  # raised inside the block: the temporary file is removed
            raise ValueError(f"shard {name}: wrote {position} tokens, announced {num_tokens}")
    doc_lengths = np.concatenate(lengths) if lengths else np.zeros(0, np.int64)
    offsets = np.zeros(len(doc_lengths) + 1, dtype=np.int64)
    np.cumsum(doc_lengths, out=offsets[1:])
    with atomic_output(os.path.join(directory, offsets_name)) as tmp_offsets:
        offsets_writer = _HashingWriter(tmp_offsets)
        try:
            np.lib.format.write_array(offsets_writer, offsets)
        finally:
            offsets_sha = offsets_writer.close()
    files = {
        "tokens": ShardFile(tokens_name, tokens_sha, tokens.size),
        "offsets": ShardFile(offsets_name, offsets_sha, offsets_writer.size),
    }
    if megatron:
        files.update(write_megatron(directory, name, os.path.join(directory, tokens_name), offsets, dtype))
    return ShardInfo(name, int(num_tokens), len(doc_lengths), files), per_source


def write_megatron(
    directory: str, name: str, tokens_npy: str, offsets: np.ndarray, dtype: np.dtype
) -> dict[str, ShardFile]:
    """Write ``name.bin``/``name.idx`` readable by Megatron-LM's ``IndexedDataset`` (layout in the module doc)."""
    tokens = np.load(tokens_npy, mmap_mode="r")
    out_dtype = np.dtype("<i4") if dtype.itemsize == 4 else dtype
    chunk = 1 << 24
    with open(os.path.join(directory, f"{name}.bin"), "wb") as handle:
        for start in range(0, len(tokens), chunk):
            handle.write(np.ascontiguousarray(tokens[start : start + chunk], dtype=out_dtype).tobytes())
    lengths = np.diff(offsets)
    if len(lengths) and lengths.max() > np.iinfo(np.int32).max:
        raise ValueError(
            f"shard {name}: a document longer than 2**31-1 tokens cannot be exported to Megatron"
        )
    with open(os.path.join(directory, f"{name}.idx"), "wb") as handle:
        handle.write(MEGATRON_MAGIC)
        handle.write(struct.pack("<Q", 1))
        handle.write(struct.pack("<B", MEGATRON_DTYPE_CODES[out_dtype.name]))
        handle.write(struct.pack("<Q", len(lengths)))
        handle.write(struct.pack("<Q", len(lengths) + 1))
        handle.write(lengths.astype("<i4").tobytes())
        handle.write((offsets[:-1] * out_dtype.itemsize).astype("<i8").tobytes())
        handle.write(np.arange(len(lengths) + 1, dtype="<i8").tobytes())
    return {"megatron_bin": _file(directory, f"{name}.bin"), "megatron_idx": _file(directory, f"{name}.idx")}


def write_manifest(directory: str, shards: list[ShardInfo], *, meta: dict[str, Any]) -> dict[str, Any]:
    """Write ``manifest.json`` (atomically, last) and return it as a dict.

    ``meta`` supplies dtype, vocab_size, eos_id, bos_id, bos_policy, tokenizer, seed and sources.
    """
    manifest = {
        "format": FORMAT_NAME,
        "version": FORMAT_VERSION,
        **meta,
        "num_tokens": sum(s.num_tokens for s in shards),
        "num_documents": sum(s.num_documents for s in shards),
        "shards": [s.to_json() for s in shards],
    }
    with atomic_write(os.path.join(directory, MANIFEST_NAME), "w") as handle:
        json.dump(manifest, handle, indent=1, sort_keys=False)
        handle.write("\n")
    return manifest
