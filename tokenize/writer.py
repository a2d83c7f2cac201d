"""Corpus → globally shuffled token shards, through the zephyr engine.

Plan (each step is an engine stage, so it runs on any executor and resumes with ``work_dir``):

1. ``read_parquet``/``read_jsonl`` the inputs (only the text, id and source columns).
2. ``map_batches(tokenize)``: ``batch_rows`` documents at a time (this bounds peak memory), encode on the
   tokenizer's Rust threads, append EOS (prepend BOS under ``bos="always"``), and add the shuffle key: a
   seeded 128-bit xxh3 of the document (of its id when ``id_column`` is given, so duplicate texts do not land
   side by side; the text hash breaks ties). Output: ``key_hi``, ``key_lo``, ``tokens`` (the ids as
   little-endian bytes in the shard dtype), ``num_tokens`` and ``source``. Null texts are quarantined
   (``reject_reason = "null_text"``), never silently lost.
3. ``materialize``, then the total token count decides the number of shards:
   ``ceil(total_tokens * itemsize / shard_bytes)``.
4. ``sort(key_hi, key_lo, num_partitions=P)``: the global document shuffle. Output shard i is the sort's
   partition i, so shard contents depend only on the data, the seed and the shard size — never on the worker
   count or executor. Equal keys mean equal text (and id), hence equal tokens: ties cannot change bytes.
5. ``map(pack)`` over the partitions: stream each into ``shard-<i>.tokens.npy`` + ``.offsets.npy``
   (+ Megatron ``.bin``/``.idx``), hashing every file; the driver writes ``manifest.json`` last.
"""

from __future__ import annotations

import logging
import math
import os
import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
from zephyr.tokenize.format import token_dtype
from zephyr.tokenize.shards import write_manifest, write_shard
from zephyr.tokenize.tokenizer import BosPolicy, EngineChoice, TextTokenizer

from zephyr.errors import ConfigError, SchemaError
from zephyr.sizes import parse_bytes

if TYPE_CHECKING:
    import pyarrow as pa

    from zephyr.dataset import Dataset

__all__ = ["write_token_shards", "TokenizeResult", "TokenizeBatch"]

log = logging.getLogger(__name__)

_MIN_SHARD_BYTES = 1 << 10


@dataclass(frozen=True)
class TokenizeResult:
    """What ``write_token_shards`` wrote: the output directory, its manifest (as a dict) and engine stats."""

    output: str
    manifest: dict[str, Any]
    stats: dict[str, Any]

    @property
    def num_tokens(self) -> int:
        return int(self.manifest["num_tokens"])

    @property
    def num_documents(self) -> int:
        return int(self.manifest["num_documents"])


class TokenizeBatch:
    """The ``map_batches`` function of step 2 (a callable object: the tokenizer loads once per task)."""

    def __init__(
        self,
        tokenizer: TextTokenizer,
        *,
        text_column: str,
        id_column: str | None,
        source_column: str | None,
        seed: int,
        verify_rows: int = 16,
    ):
        self.tokenizer = tokenizer
        self.text_column = text_column
        self.id_column = id_column
        self.source_column = source_column
        self.seed = seed
        self.verify_rows = verify_rows
        self._verified = False

    def _keys(self, texts: list[str], ids: list[Any] | None) -> tuple[np.ndarray, np.ndarray]:
        import xxhash

        # Per-document hashing is a C call per row; pyarrow/polars offer no version-stable vectorized hash.
        seed = self.seed & 0xFFFFFFFFFFFFFFFF
        text_hash = [xxhash.xxh3_128_intdigest(t.encode("utf-8"), seed) for t in texts]
        lo = np.fromiter((h & 0xFFFFFFFFFFFFFFFF for h in text_hash), dtype=np.uint64, count=len(texts))
        if ids is None:
            hi = np.fromiter((h >> 64 for h in text_hash), dtype=np.uint64, count=len(texts))
        else:
            hi = np.fromiter(
                (xxhash.xxh3_64_intdigest(str(i).encode("utf-8"), seed) for i in ids),
                dtype=np.uint64,
                count=len(texts),
            )
        return hi, lo

    def __call__(self, table: pa.Table) -> Any:
        import pyarrow as pa
        import pyarrow.compute as pc

        from zephyr import counters
        from zephyr.ops import BatchOutput

        if self.text_column not in table.schema.names:
            raise SchemaError(
                f"text column {self.text_column!r} not in the input (columns: {table.schema.names}); "
                "pass --text-column"
            )
        null = pc.is_null(table[self.text_column])
        rejected = None
        if table[self.text_column].null_count:
            rejected = table.filter(null).append_column(
                "reject_reason", pa.array(["null_text"] * int(pc.sum(null).as_py()), pa.string())
            )
            table = table.filter(pc.invert(null))
        texts = table[self.text_column].cast(pa.string()).to_pylist()
        if not self._verified and self.tokenizer.engine == "tiktoken":
            # the load-time probe proved the fast path; re-prove it on this task's own first documents
            sample = [t[:20000] for t in texts[: self.verify_rows]]
            bad = self.tokenizer.first_mismatch(sample)
            if bad is not None:
                raise ConfigError(
                    f"tiktoken fast path differs from HF on input text {bad[:200]!r}; use engine='hf'"
                )
            self._verified = True
        flat, offsets = self.tokenizer.encode_batch(texts)
        dtype = token_dtype(self.tokenizer.vocab_size)
        raw = flat.astype(dtype).tobytes()
        tokens = pa.LargeBinaryArray.from_buffers(
            pa.large_binary(), len(texts), [None, pa.py_buffer(offsets * dtype.itemsize), pa.py_buffer(raw)]
        )
        ids = table[self.id_column].to_pylist() if self.id_column else None
        hi, lo = self._keys(texts, ids)
        columns = {
            "key_hi": pa.array(hi, pa.uint64()),
            "key_lo": pa.array(lo, pa.uint64()),
            "tokens": tokens,
            "num_tokens": pa.array(np.diff(offsets), pa.int64()),
        }
        if self.source_column:
            columns["source"] = table[self.source_column].cast(pa.string())
        counters.increment("documents", len(texts))
        counters.increment("tokens", int(offsets[-1]))
        out = pa.table(columns)
        if rejected is not None:
            return BatchOutput(kept=out, rejected=rejected)
        return out


class _PackPartition:
    """The ``map`` function of step 5: one sorted partition file → one shard."""

    def __init__(self, output: str, dtype: str, megatron: bool):
        self.output, self.dtype, self.megatron = output, dtype, megatron

    def __call__(self, row: dict[str, Any]) -> dict[str, Any]:
        import json

        import pyarrow.parquet as pq

        parquet = pq.ParquetFile(row["path"])
        total = int(
            sum(b["num_tokens"].to_numpy().sum() for b in parquet.iter_batches(columns=["num_tokens"]))
        )
        columns = ["tokens", "source"] if "source" in parquet.schema_arrow.names else ["tokens"]
        info, per_source = write_shard(
            self.output,
            row["name"],
            parquet.iter_batches(batch_size=4096, columns=columns),
            dtype=np.dtype(self.dtype),
            num_tokens=total,
            megatron=self.megatron,
        )
        return {
            "index": row["index"],
            "shard": json.dumps(info.to_json()),
            "per_source": json.dumps(per_source),
        }


def _input_dataset(data: Any, columns: list[str]) -> Dataset:
    import zephyr

    paths = [data] if isinstance(data, str | os.PathLike) else list(data)
    paths = [os.fspath(p) for p in paths]
    if all(".json" in os.path.basename(p) for p in paths):
        return zephyr.read_jsonl(paths)
    return zephyr.read_parquet(paths, columns=columns)


def _detect_column(data: Any, wanted: str | None, default: str) -> str | None:
    """``"auto"`` → ``default`` when the first Parquet input has that column, else ``None``."""
    if wanted != "auto":
        return wanted
    if not isinstance(data, str | os.PathLike | list | tuple):
        return None
    import fsspec
    import pyarrow.parquet as pq

    paths = [data] if isinstance(data, str | os.PathLike) else list(data)
    try:
        fs, first = fsspec.core.url_to_fs(os.fspath(paths[0]))
        if fs.isdir(first):
            found = sorted(p for p in fs.find(first) if p.endswith(".parquet"))
            first = found[0]
        with fs.open(first, "rb") as handle:
            names = pq.read_schema(handle).names
    except (IndexError, OSError, ValueError):
        return None
    return default if default in names else None


def write_token_shards(
    data: Dataset | str | Sequence[str],
    *,
    tokenizer: str | TextTokenizer,
    output: str,
    text_column: str = "text",
    id_column: str | None = "auto",
    source_column: str | None = "auto",
    shard_size: int | str = "512MB",
    seed: int = 0,
    bos: BosPolicy = "never",
    engine: EngineChoice = "auto",
    eos_token: str | None = None,
    bos_token: str | None = None,
    batch_rows: int = 1024,
    megatron: bool = False,
    **execution: Any,
) -> TokenizeResult:
    """Tokenize ``data`` into a globally shuffled token-shard set at ``output`` (format: ``zephyr.tokenize.format``).

    Args:
        data: a ``zephyr.Dataset``, or Parquet/JSONL paths (files, directories, globs, fsspec URLs).
        tokenizer: path of a ``tokenizer.json`` (or a ``TextTokenizer``).
        output: local directory for the shards and ``manifest.json``.
        text_column: the column with the document text.
        id_column: a column of document ids for the shuffle key; ``"auto"`` uses ``id`` when the inputs have
            one, ``None`` keys on the text alone (then exact duplicate texts end up next to each other).
        source_column: a column whose per-value document/token counts go into the manifest's source mix;
            ``"auto"`` uses ``source`` when present.
        shard_size: target bytes of tokens per shard (e.g. ``"512MB"``); the shard count is
            ``ceil(total token bytes / shard_size)``.
        seed: shuffle seed; the same seed and inputs give byte-identical shards.
        bos: ``"never"`` or ``"always"``. EOS is always appended.
        engine: ``"auto"`` (tiktoken fast path when proven identical to HF), ``"hf"``, ``"tiktoken"``.
        eos_token / bos_token: the special tokens' text, when detection fails (e.g. ``"</s>"``).
        batch_rows: documents per tokenize batch; bounds each worker's peak memory.
        megatron: also write Megatron ``.bin``/``.idx`` per shard.
        execution: engine execution options (``executor``, ``workers``, ``memory_budget``, ``work_dir``...).
    """
    import pyarrow.compute as pc

    import zephyr

    shard_bytes = parse_bytes(shard_size)
    if shard_bytes < _MIN_SHARD_BYTES:
        raise ConfigError(f"shard_size must be at least {_MIN_SHARD_BYTES} bytes, got {shard_size!r}")
    if batch_rows < 1:
        raise ConfigError(f"batch_rows must be >= 1, got {batch_rows}")
    if "://" in output and not output.startswith("file://"):
        raise ConfigError(
            f"output must be a local directory for now, got {output!r}; copy the set afterwards"
        )
    output = output.removeprefix("file://")
    options = zephyr.ExecutionOptions.from_kwargs(**execution)
    workers = options.num_workers
    tok = (
        tokenizer
        if isinstance(tokenizer, TextTokenizer)
        else TextTokenizer(
            tokenizer,
            bos=bos,
            engine=engine,
            eos_token=eos_token,
            bos_token=bos_token,
            num_threads=max(1, (os.cpu_count() or 1) // workers),
        )
    )
    dtype = token_dtype(tok.vocab_size)
    id_column = _detect_column(data, id_column, "id")
    source_column = _detect_column(data, source_column, "source")
    columns = [c for c in (text_column, id_column, source_column) if c]
    dataset = data if isinstance(data, zephyr.Dataset) else _input_dataset(data, columns)

    if os.path.exists(os.path.join(output, "manifest.json")):
        os.remove(os.path.join(output, "manifest.json"))  # the old set is being replaced: invalidate it first
    os.makedirs(output, exist_ok=True)
    # A fixed name, so a rerun with the same ``work_dir`` finds its finished tasks (the engine fingerprints its
    # outputs by path); removed once the set is complete.
    scratch = os.path.join(output, "_work")
    from zephyr.executors import reuse_workers

    with reuse_workers(execution) as execution:  # one worker pool for the writer's four engine jobs
        try:
            batch_fn = TokenizeBatch(
                tok, text_column=text_column, id_column=id_column, source_column=source_column, seed=seed
            )
            tokenized = dataset.map_batches(batch_fn, batch_rows=batch_rows, name="tokenize").materialize(
                os.path.join(scratch, "tokenized"), **execution
            )
            counts = tokenized.select("num_tokens").to_arrow(**execution)["num_tokens"]
            total_tokens = int(pc.sum(counts).as_py() or 0)
            num_shards = max(1, math.ceil(total_tokens * dtype.itemsize / shard_bytes))
            log.info(
                "tokenize: %d documents, %d tokens x %d bytes / shard_size %d bytes -> %d shards",
                len(counts),
                total_tokens,
                dtype.itemsize,
                shard_bytes,
                num_shards,
            )
            written = tokenized.sort("key_hi", "key_lo", num_partitions=num_shards).write_parquet(
                os.path.join(scratch, "sorted"), **execution
            )
            parts = sorted(written.files)
            jobs = [{"index": i, "name": f"shard-{i:05d}", "path": p} for i, p in enumerate(parts)]
            packed = (
                zephyr.from_items(jobs, num_shards=max(1, len(jobs)))
                .map(_PackPartition(output, dtype.name, megatron))
                .to_arrow(**execution)
            )
            shards, per_source = _collect(packed.to_pylist())
            shards = [s for s in shards if s.num_documents > 0] or shards[:1]
            meta = {
                "dtype": dtype.name,
                "vocab_size": tok.vocab_size,
                "eos_id": tok.eos_id,
                "bos_id": tok.bos_id,
                "bos_policy": tok.bos_policy,
                "tokenizer": {"path": tok.path, "sha256": tok.sha256, "engine": tok.engine},
                "seed": seed,
                "shard_size_bytes": shard_bytes,
                "sources": {
                    "inputs": [os.fspath(p) for p in ([data] if isinstance(data, str | os.PathLike) else data)]
                    if not isinstance(data, zephyr.Dataset)
                    else [],
                    "text_column": text_column,
                    "id_column": id_column,
                    "source_column": source_column,
                    "per_source": per_source,
                },
            }
            manifest = write_manifest(output, shards, meta=meta)
            stats = getattr(written, "stats", {})
        except BaseException:
            if "work_dir" not in execution or execution.get("work_dir") is None:
                shutil.rmtree(scratch, ignore_errors=True)  # nothing could resume from it
            raise
        shutil.rmtree(scratch, ignore_errors=True)
        return TokenizeResult(output, manifest, stats)


def _collect(rows: list[dict[str, Any]]) -> tuple[list[Any], dict[str, dict[str, int]]]:
    import json

    from zephyr.tokenize.format import ShardInfo

    shards, per_source = [], {}
    for row in sorted(rows, key=lambda r: r["index"]):
        shards.append(ShardInfo.from_json(json.loads(row["shard"])))
        for src, counts in json.loads(row["per_source"]).items():
            entry = per_source.setdefault(src, {"documents": 0, "tokens": 0})
            entry["documents"] += counts["documents"]
            entry["tokens"] += counts["tokens"]
    return shards, dict(sorted(per_source.items()))
