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
      "tokenizer": {"path": "...", "sha256": "...", "engine": "fastokens" | "tiktoken" | "hf"},
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
This module needs only numpy and fsspec: the loader side imports it on training nodes.
"""

from __future__ import annotations

import hashlib
import json
import posixpath
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from zephyr.errors import InputError

__all__ = [
    "FORMAT_NAME",
    "FORMAT_VERSION",
    "MANIFEST_NAME",
    "ShardFile",
    "ShardInfo",
    "Manifest",
    "token_dtype",
    "sha256_file",
    "read_manifest",
    "join_path",
]

FORMAT_NAME = "zephyr-token-shards"
FORMAT_VERSION = 1
MANIFEST_NAME = "manifest.json"
_HASH_CHUNK_BYTES = 8 << 20


def token_dtype(vocab_size: int) -> np.dtype:
    """uint16 when every id fits (vocab < 65,536), else uint32: half the bytes for GPT-2-sized vocabularies."""
    return np.dtype("<u2") if vocab_size < 1 << 16 else np.dtype("<u4")


def join_path(root: str, name: str) -> str:
    """``root/name`` for local paths and URLs alike (fsspec URLs always use ``/``)."""
    return posixpath.join(root.rstrip("/"), name) if "://" in root else f"{root.rstrip('/')}/{name}"


def sha256_file(path: str, fs: Any = None) -> str:
    """Hex sha256 of a file, read in 8 MiB chunks (bounded memory for GiB-sized shards)."""
    digest = hashlib.sha256()
    if fs is None:
        handle = open(path, "rb")  # noqa: SIM115 - closed by the with below
    else:
        handle = fs.open(path, "rb")
    with handle:
        while chunk := handle.read(_HASH_CHUNK_BYTES):
            digest.update(chunk)
    return digest.hexdigest()


@dataclass(frozen=True)
class ShardFile:
    """One file of a shard: its path relative to the set's directory, sha256 and size."""

    path: str
    sha256: str
    bytes: int

    def to_json(self) -> dict[str, Any]:
        return {"path": self.path, "sha256": self.sha256, "bytes": self.bytes}


@dataclass(frozen=True)
class ShardInfo:
    """One shard's entry in the manifest."""

    name: str
    num_tokens: int
    num_documents: int
    files: dict[str, ShardFile]
    """Keys: ``tokens``, ``offsets`` and, with the Megatron export, ``megatron_bin`` and ``megatron_idx``."""

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "num_tokens": self.num_tokens,
            "num_documents": self.num_documents,
            "files": {k: v.to_json() for k, v in self.files.items()},
        }

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
    raw: dict[str, Any] = field(repr=False)

    @property
    def num_tokens(self) -> int:
        return sum(s.num_tokens for s in self.shards)

    @property
    def num_documents(self) -> int:
        return sum(s.num_documents for s in self.shards)

    def checksum_records(self) -> dict[str, dict[str, Any]]:
        """Every file of the set (``root/path``) with its size and sha256 as this manifest records them, in the
        form ``zephyr.resume.check_files`` checks (``zephyr run`` records them for its tokenize step)."""
        return {
            join_path(self.root, f.path): {"bytes": f.bytes, "sha256": f.sha256}
            for shard in self.shards
            for f in shard.files.values()
        }

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
        raw=data,
    )
