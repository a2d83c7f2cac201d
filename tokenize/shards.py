"""The token-shard format (version 1): what the writer produces and the loader reads.

A token-shard set is one directory (local path or fsspec URL)::

    DIR/manifest.json              written last; its presence means the set is complete
    DIR/shard-00000.tokens.npy     1-D array of token ids, all documents concatenated (uint16 or uint32)
    DIR/shard-00000.offsets.npy    1-D int64 array of num_documents + 1 token offsets into the tokens
                                   array: document i is tokens[offsets[i]:offsets[i + 1]]; offsets[0] == 0
    DIR/shard-00000.bin / .idx     optional Megatron MMapIndexedDataset export of the same tokens
    ...

Both ``.npy`` files are standard NumPy format 1.0 files (little-endian), so ``numpy.load(path, mmap_mode="r")``
reads them with no zephyr code. The token dtype is ``uint16`` when the tokenizer's vocabulary (added tokens
included) has fewer than 65,536 ids, else ``uint32``. Every document ends with the EOS id; with the BOS
policy ``"always"`` it also starts with the BOS id. Documents were globally shuffled (seeded) before being
packed, so shard order and document order within a shard are both already random; shards hold ~equal
token counts (the target shard size in bytes, give or take the shuffle's partition balance).

``manifest.json`` (UTF-8 JSON)::

    {
      "format": "zephyr-token-shards",
      "version": 1,
      "dtype": "uint16",
      "vocab_size": 50257, "eos_id": 50256, "bos_id": null, "bos_policy": "never",
      "tokenizer": {"path": "...", "sha256": "...", "engine": "fastokens" | "hf"},
      "seed": 0,
      "num_tokens": 123, "num_documents": 4,
      "sources": {"inputs": [...], "text_column": "text",
                  "per_source": {"<source>": {"documents": n, "tokens": n}, ...}},
      "shards": [
        {"name": "shard-00000", "num_tokens": 123, "num_documents": 4,
         "files": {"tokens": {"path": "shard-00000.tokens.npy", "sha256": "...", "bytes": 374},
                   "offsets": {...}, "megatron_bin": {...}, "megatron_idx": {...}}}
      ]
    }

Readers must refuse a ``version`` they do not know. Paths inside the manifest are relative to DIR.
``tokenizer.engine`` names the encoder the writer's tasks used (several joined by ``+`` when processes
differed); every engine is proven to give HF's ids, so it does not change the tokens.
Reading needs only numpy and fsspec (the loader side imports this on training nodes); writing imports
``zephyr.io`` where it writes.

Writing. ``write_shard`` streams one shard from record batches of tokenized documents (a ``tokens`` binary column
holding each document's little-endian ids, in the shard dtype): given the shard's token count it writes the
``.npy`` header, then appends the token bytes batch by batch with plain sequential writes, hashing (sha256)
as it goes, so memory stays at one record batch whatever the shard size (a writable memory map would keep the
whole shard's dirty pages in the writer's RSS) and no file is read back to be hashed. ``write_manifest`` writes ``manifest.json`` last,
through a temporary name and a rename: a set without a manifest is incomplete by definition.

Megatron export (``megatron=True``): ``<shard>.bin`` holds the same token bytes as the ``.npy`` body and
``<shard>.idx`` is Megatron-LM's ``MMapIndexedDataset`` index, laid out as its ``_IndexWriter`` writes it
(megatron/core/datasets/indexed_dataset.py), all little-endian:

    b"MMIDIDX\x00\x00"   9-byte magic
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

import contextlib
import dataclasses
import hashlib
import json
import os
import posixpath
import struct
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from zephyr.errors import InputError

FORMAT_NAME = "zephyr-token-shards"
FORMAT_VERSION = 1
MANIFEST_NAME = "manifest.json"


def token_dtype(vocab_size: int) -> np.dtype:
    """uint16 when every id fits (vocab < 65,536), else uint32: half the bytes for GPT-2-sized vocabularies."""
    return np.dtype("<u2") if vocab_size < 1 << 16 else np.dtype("<u4")


def join_path(root: str, name: str) -> str:
    """``root/name`` for local paths and URLs alike (fsspec URLs always use ``/``)."""
    return posixpath.join(root.rstrip("/"), name) if "://" in root else f"{root.rstrip('/')}/{name}"


def sha256_file(path: str) -> str:
    """Hex sha256 of a local file, read in chunks (bounded memory for GiB-sized shards)."""
    with open(path, "rb") as handle:
        return hashlib.file_digest(handle, "sha256").hexdigest()


@dataclass(frozen=True)
class ShardFile:
    """One file of a shard: its path relative to the set's directory, sha256 and size."""

    path: str
    sha256: str
    bytes: int


@dataclass(frozen=True)
class ShardInfo:
    """One shard's entry in the manifest."""

    name: str
    num_tokens: int
    num_documents: int
    files: dict[str, ShardFile]
    """Keys: ``tokens``, ``offsets`` and, with the Megatron export, ``megatron_bin`` and ``megatron_idx``."""

    def to_json(self) -> dict[str, Any]:
        """The manifest entry: ``name``, ``num_tokens``, ``num_documents``, ``files`` (path, sha256, bytes)."""
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ShardInfo:
        files = {k: ShardFile(v["path"], v["sha256"], int(v["bytes"])) for k, v in data["files"].items()}
        return cls(data["name"], int(data["num_tokens"]), int(data["num_documents"]), files)


@dataclass(frozen=True)
class Manifest:
    """A parsed ``manifest.json``; ``root`` is the directory it was read from."""

    root: str
    dtype: np.dtype
    vocab_size: int
    eos_id: int
    bos_id: int | None
    seed: int
    shards: list[ShardInfo]

    @property
    def num_tokens(self) -> int:
        return sum(s.num_tokens for s in self.shards)

    @property
    def num_documents(self) -> int:
        return sum(s.num_documents for s in self.shards)

    def fingerprint(self) -> str:
        """Identifies the token content: the ordered list of tokens-file checksums (16 hex digits)."""
        digest = hashlib.sha256()
        for shard in self.shards:
            digest.update(shard.files["tokens"].sha256.encode())
            digest.update(shard.files["offsets"].sha256.encode())
        return digest.hexdigest()[:16]


def read_manifest(root: str) -> Manifest:
    """Read and validate ``root/manifest.json``; ``InputError`` naming the file when it is missing or wrong."""
    import fsspec

    path = join_path(root, MANIFEST_NAME)
    try:
        with fsspec.open(path, "rb") as handle:
            data = json.loads(handle.read())
    except FileNotFoundError as exc:
        raise InputError(
            "no token-shard manifest here; write shards with `zephyr tokenize` (an interrupted write leaves "
            "no manifest)",
            path=path,
        ) from exc
    except json.JSONDecodeError as exc:
        raise InputError(f"manifest is not valid JSON: {exc}", path=path) from exc
    if not isinstance(data, dict) or data.get("format") != FORMAT_NAME:
        raise InputError(f"not a zephyr token-shard manifest (format={data.get('format')!r})", path=path)
    if data.get("version") != FORMAT_VERSION:
        raise InputError(
            f"token-shard format version {data.get('version')!r} is not supported by this zephyr "
            f"(reads version {FORMAT_VERSION}); upgrade zephyr or rewrite the shards",
            path=path,
        )
    shards = [ShardInfo.from_json(s) for s in data["shards"]]
    for shard in shards:  # a set's files are inside its folder: a manifest never sends a reader elsewhere
        for file in shard.files.values():
            steps = file.path.split("/")
            if (
                file.path.startswith(("/", "\\"))
                or "://" in file.path
                or any(x in ("", ".", "..") for x in steps)
            ):
                raise InputError(
                    f"shard {shard.name} names {file.path!r}, outside the set's folder; rewrite the shards",
                    path=path,
                )
    return Manifest(
        root=root,
        dtype=np.dtype(data["dtype"]).newbyteorder("<"),
        vocab_size=int(data["vocab_size"]),
        eos_id=int(data["eos_id"]),
        bos_id=None if data.get("bos_id") is None else int(data["bos_id"]),
        seed=int(data.get("seed", 0)),
        shards=shards,
    )


MEGATRON_MAGIC = b"MMIDIDX\x00\x00"
MEGATRON_DTYPE_CODES = {"uint16": 8, "int32": 4}
"""Megatron's ``DType`` codes of the two dtypes the export writes (the module docstring's layout)."""


@contextlib.contextmanager
def _shard_file(directory: str, name: str, files: dict[str, ShardFile], key: str) -> Iterator[Any]:
    """A shard file (``directory`` is a path or any fsspec URL) written under a temporary name and hashed as it
    is written (never read back): renamed to ``directory/name`` and recorded as ``files[key]`` when the block
    ends without an error, else removed (``zephyr.io.paths.atomic_write``)."""
    from zephyr.io.checksum import Checksummed
    from zephyr.io.paths import atomic_write

    with atomic_write(join_path(directory, name)) as handle:
        out = Checksummed(handle, "sha256")
        yield out
    files[key] = ShardFile(name, out.hexdigest(), out.size)


def value_bytes(array: Any) -> tuple[np.ndarray, np.ndarray]:
    """(the data buffer as ``uint8``, the ``int64`` offsets of the values in it) of one string or binary Arrow
    array, without copying the bytes (a 32-bit-offset array is cast to its large form first)."""
    import pyarrow as pa

    if pa.types.is_binary(array.type) or pa.types.is_string(array.type):
        array = array.cast(pa.large_binary() if pa.types.is_binary(array.type) else pa.large_string())
    offsets = np.frombuffer(array.buffers()[1], dtype=np.int64)[array.offset : array.offset + len(array) + 1]
    data = array.buffers()[2]
    return (np.frombuffer(data, dtype=np.uint8) if data is not None else np.zeros(0, np.uint8)), offsets


def write_shard(
    directory: str,
    name: str,
    batches: Iterable[Any],
    *,
    dtype: np.dtype,
    num_tokens: int,
    megatron: bool = False,
) -> tuple[ShardInfo, dict[str, dict[str, int]]]:
    """Write ``name.tokens.npy`` + ``name.offsets.npy`` (+ Megatron files) from batches of tokenized docs into
    ``directory`` (a path or any fsspec URL).

    ``batches`` yields Arrow record batches/tables with a ``tokens`` binary column (and optionally
    ``source``); ``num_tokens`` is their total token count (the ``.npy`` header is written first). The
    Megatron ``.bin`` is written in the same pass: its bytes are the tokens' (uint32 ids below 2**31 are the
    same bytes as int32). Returns the shard's manifest entry and its per-source ``{"documents", "tokens"}``
    counts.
    """
    from zephyr.job_stats import add_counts

    dtype = np.dtype(dtype).newbyteorder("<")
    files: dict[str, ShardFile] = {}
    lengths: list[np.ndarray] = []
    per_source: dict[str, dict[str, int]] = {}
    position = 0
    with contextlib.ExitStack() as stack:
        tokens = stack.enter_context(_shard_file(directory, f"{name}.tokens.npy", files, "tokens"))
        outs = [tokens]
        if megatron:
            outs.append(stack.enter_context(_shard_file(directory, f"{name}.bin", files, "megatron_bin")))
        header = {
            "descr": np.lib.format.dtype_to_descr(dtype),
            "fortran_order": False,
            "shape": (num_tokens,),
        }
        np.lib.format.write_array_header_1_0(tokens, header)
        for batch in batches:
            column = batch.column("tokens")
            if column.null_count:
                raise ValueError("tokens column has nulls")
            raw, offsets = value_bytes(column.combine_chunks() if hasattr(column, "chunks") else column)
            raw, nbytes = raw[offsets[0] : offsets[-1]], np.diff(offsets)
            count = len(raw) // dtype.itemsize
            if position + count > num_tokens:
                raise ValueError(f"shard {name}: more tokens than the announced {num_tokens}")
            for out in outs:
                out.write(raw)
            position += count
            doc_tokens = nbytes // dtype.itemsize
            lengths.append(doc_tokens)
            if "source" in batch.schema.names:
                sources = np.asarray(batch.column("source").to_numpy(zero_copy_only=False), dtype=object)
                names, inverse = np.unique(sources.astype(str), return_inverse=True)
                docs = np.bincount(inverse, minlength=len(names))
                toks = np.bincount(inverse, weights=doc_tokens, minlength=len(names))
                for src, d, t in zip(names.tolist(), docs.tolist(), toks.tolist()):
                    add_counts(per_source.setdefault(src, {}), {"documents": d, "tokens": t})
        if position != num_tokens:  # raised inside the block: the temporary files are removed
            raise ValueError(f"shard {name}: wrote {position} tokens, announced {num_tokens}")
        doc_lengths = np.concatenate(lengths) if lengths else np.zeros(0, np.int64)
        if megatron and len(doc_lengths) and doc_lengths.max() > np.iinfo(np.int32).max:
            raise ValueError(
                f"shard {name}: a document longer than 2**31-1 tokens cannot be exported to Megatron"
            )
    offsets = np.zeros(len(doc_lengths) + 1, dtype=np.int64)
    np.cumsum(doc_lengths, out=offsets[1:])
    with _shard_file(directory, f"{name}.offsets.npy", files, "offsets") as out:
        np.lib.format.write_array(out, offsets)
    if megatron:
        with _shard_file(directory, f"{name}.idx", files, "megatron_idx") as out:
            out.write(MEGATRON_MAGIC)
            code = MEGATRON_DTYPE_CODES["int32" if dtype.itemsize == 4 else dtype.name]
            out.write(struct.pack("<QBQQ", 1, code, len(doc_lengths), len(doc_lengths) + 1))
            out.write(doc_lengths.astype("<i4").tobytes())
            out.write((offsets[:-1] * dtype.itemsize).astype("<i8").tobytes())
            out.write(np.arange(len(doc_lengths) + 1, dtype="<i8").tobytes())
    order = ("tokens", "offsets", "megatron_bin", "megatron_idx")  # the manifest's order of a shard's files
    files = {key: files[key] for key in order if key in files}
    return ShardInfo(name, int(num_tokens), len(doc_lengths), files), per_source


def write_manifest(directory: str, shards: list[ShardInfo], *, meta: dict[str, Any]) -> dict[str, Any]:
    """Write ``manifest.json`` (atomically, last) and return it as a dict.

    ``meta`` supplies dtype, vocab_size, eos_id, bos_id, bos_policy, tokenizer, seed and sources.
    """
    from zephyr.io.paths import atomic_write

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
