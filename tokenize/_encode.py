"""The tokenize job of ``write_token_shards``: a batch of documents → one token spill file + one reference row per
document.

``TokenizeBatch`` is the ``map_batches`` function. For each batch of ``batch_rows`` documents it

1. quarantines null texts (``quarantine_reason = "null_text"``), never dropping them silently;
2. encodes the texts in one call on the tokenizer's threads (``TextTokenizer.encode_bodies``; with fastokens
   while the task's thread finishes earlier batches, see ``TokenizeBatch``), ids only, in the
   shard dtype: fastokens' flat ``uint32`` buffer is cast once (not at all for ``uint32`` shards) and written
   as it is to the spill file (layout: ``zephyr.tokenize._pack``); EOS/BOS are added by the pack job;
3. emits one reference row per document::

       key_hi, key_lo  uint64  the shuffle key: a seeded xxh3-128 of the text, or (with an id column) the id's
                               xxh3-64 over the text hash's low half, so duplicate texts do not sit together
       num_tokens      int64   the document's tokens in the shard, EOS (and BOS) included
       spill_file      string  the batch's spill file name
       spill_offset    int64   byte offset of the document's ids (no specials) in that file
       source          string  (only with a source column) for the manifest's source mix

The job's ``documents``/``tokens`` counters give the totals the shard count is computed from.
"""

from __future__ import annotations

import os
import queue
import threading
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
from zephyr.tokenize._pack import SPILL_VERSION, spill_name, string_array, write_spill
from zephyr.tokenize.shards import token_dtype, value_bytes
from zephyr.tokenize.tokenizer import TextTokenizer

from zephyr.errors import ConfigError

if TYPE_CHECKING:
    import pyarrow as pa


_U64 = 0xFFFFFFFFFFFFFFFF
# tokenizer.json sha256s whose fast path this process has checked against HF on real input documents
_VERIFIED_ON_DATA: set[str] = set()


def _string_chunks(column: Any) -> list[tuple[memoryview, list[int]]]:
    """(UTF-8 data buffer, row offsets) of each chunk of a string Arrow array, zero-copy (for per-row
    hashing): a rebatched column has one chunk per input row group, and combining them would copy every text."""
    chunks = column.chunks if hasattr(column, "chunks") else [column]
    return [(memoryview(data), offsets.tolist()) for data, offsets in map(value_bytes, chunks)]


def _hash_strings(column: Any, seed: int, bits: int) -> np.ndarray:
    """Seeded xxh3 (64 or 128 bits) of every string of ``column``: ``(n,)`` or ``(n, 2)`` (hi, lo) uint64.

    One C call per row on a zero-copy slice of the Arrow buffer (no library offers a vectorized xxh3); the
    digests are joined and viewed as big-endian words, so no Python integer is built per row.
    """
    import xxhash

    digest = xxhash.xxh3_128_digest if bits == 128 else xxhash.xxh3_64_digest
    joined = b"".join(
        [
            digest(data[a:b], seed)
            for data, offsets in _string_chunks(column)
            for a, b in zip(offsets[:-1], offsets[1:])
        ]
    )
    words = np.frombuffer(joined, dtype=">u8").astype(np.uint64)
    return words.reshape(-1, 2) if bits == 128 else words


class TokenizeBatch:
    """The ``map_batches`` function of the tokenize job (a callable object: the tokenizer loads once per process).

    With fastokens it keeps batches in flight (``IN_FLIGHT``; ``finish``, see ``Dataset.map_batches``): while
    the encoder's threads work on batches n - 1 and n, the task's thread builds batch n - 2's keys, spill file and
    references, and the engine writes them and decodes the next input batch (one batch in flight, with the
    tokenizer's warm-up thread, took 320 MB on 2 cores from 5.0-5.2 s to 4.0-4.6 s).

    Every task encodes on all of the machine's cores (HF's threads; fastokens sizes its own pool the same way),
    even when several tasks run at once: the encoders release the GIL, so the threads of concurrent
    tasks only share the cores, while a task left alone at the end of the job (the others finished: tasks
    differ in how fast their text encodes) still uses them all. With ``cores // tasks`` threads, that tail left
    cores idle: 10.1 s vs 7.1 s for 80 MB with tiktoken on 2 workers. One exception: in the driver, fastokens
    leaves one core to the Python thread that feeds it (``tokenizer.fastokens_pool_threads``, set by the
    writer); with ``IN_FLIGHT`` batches encoding it still uses every core while that thread waits.
    """

    def __init__(
        self,
        tokenizer: TextTokenizer,
        *,
        text_column: str,
        id_column: str | None,
        source_column: str | None,
        seed: int,
        spill_dir: str,
        verify_rows: int = 16,
    ):
        self.tokenizer = tokenizer
        self.text_column = text_column
        self.id_column = id_column
        self.source_column = source_column
        self.seed = seed
        self.spill_dir = spill_dir
        self.verify_rows = verify_rows
        # part of the stage fingerprint (the engine cloudpickles this object): a resumed job never reuses
        # references whose spill files were written in another layout
        self.spill_version = SPILL_VERSION

    @property
    def side_folder(self) -> str:
        """Where this function writes files of its own (its spills, ``zephyr.io.checksum.record_side_file``):
        a task's marker may name files there."""
        return self.spill_dir

    _held: list[_Held] | None = None
    """The batches in flight, oldest first, on the task's own copy (a class attribute: not in the fingerprint)."""

    IN_FLIGHT = 2
    """Batches encoding (with fastokens) while the task's thread builds an earlier batch's output, each
    on one of the process's kept encode threads (``_encode_threads``). With one (fastokens), the encoder ran
    dry whenever that thread stalled on the GIL or on the next decoded batch. Three were faster than one or two
    while every batch had a new thread (3.00 s against 3.25 s at 320 MB on 2 cores); on kept threads two and
    three time alike (3.38 against 3.43 s, median of 7 interleaved pairs), and each kept thread holds
    fastokens' per-thread cache (~95 MB of peak RSS each: 966 against 1,061 MB). Costs ``IN_FLIGHT - 1`` more
    batches of texts and ids in memory (~25 MB each at 1,024 documents), within ``IN_FLIGHT_BYTES``."""

    IN_FLIGHT_BYTES = 32 << 20
    """Most text the batches in flight hold, the newest included (at least that one): larger batches keep
    fewer in flight, so what ``batch_rows`` bounds stays about one batch's worth whatever its size (at
    ``batch_rows=4096``, three in flight had taken the benchmark's peak RSS from 1.21-1.26 GiB to 1.28-1.46)."""

    def _keys(self, table: pa.Table) -> tuple[np.ndarray, np.ndarray]:
        """(key_hi, key_lo): the text's 128-bit hash, or the id's 64-bit hash over the text hash's low half."""
        import pyarrow as pa
        import xxhash

        seed = self.seed & _U64
        text_hash = _hash_strings(table[self.text_column], seed, 128)
        if self.id_column is None:
            return text_hash[:, 0].copy(), text_hash[:, 1].copy()
        ids = table[self.id_column]
        if (pa.types.is_string(ids.type) or pa.types.is_large_string(ids.type)) and not ids.null_count:
            hi = _hash_strings(ids, seed, 64)
        else:  # other id types hash their Python ``str`` (nulls as "None"), as format version 1 always has
            hi = np.fromiter(
                (xxhash.xxh3_64_intdigest(str(i).encode("utf-8"), seed) for i in ids.to_pylist()),
                dtype=np.uint64,
                count=len(ids),
            )
        return hi, text_hash[:, 1].copy()

    def _verify(self, texts: list[str]) -> None:
        """Prove the fast engine on this process's first real documents (once per process: the load-time probe
        covers the tokenizer; this covers the data and this process's libraries)."""
        tok = self.tokenizer
        if tok.engine == "hf" or tok.sha256 in _VERIFIED_ON_DATA:
            return
        sample = [t[:4000] for t in texts[: self.verify_rows]]
        bad = tok.first_mismatch(sample)
        if bad is not None:
            raise ConfigError(
                f"the {tok.engine} engine differs from HF on input text {bad[:200]!r}; use engine='hf'"
            )
        _VERIFIED_ON_DATA.add(tok.sha256)

    def _split_nulls(self, table: pa.Table) -> tuple[pa.Table, pa.Table | None]:
        """(rows with a text, null-text rows to quarantine or None); the text column comes back ``large_string``."""
        import pyarrow as pa
        import pyarrow.compute as pc

        from zephyr.io.quarantine import require_text_column

        require_text_column(table.schema, self.text_column, where="tokenize input")
        quarantined = None
        if table[self.text_column].null_count:
            null = pc.is_null(table[self.text_column])
            quarantined = table.filter(null)
            table = table.filter(pc.invert(null))
        if not pa.types.is_large_string(table.schema.field(self.text_column).type):
            column = table[self.text_column].cast(pa.large_string())
            table = table.set_column(table.schema.get_field_index(self.text_column), self.text_column, column)
        return table, quarantined

    def __call__(self, table: pa.Table) -> Any:
        """This batch's output; with fastokens, the output of the batch ``IN_FLIGHT`` before it
        (None for the first ones) while this one starts encoding on a thread: keys, spill file and references
        are built as the encoder runs (``finish`` returns the rest)."""
        table, quarantined = self._split_nulls(table)
        texts = table[self.text_column].to_pylist()
        self._verify(texts)
        tok = self.tokenizer
        dtype = token_dtype(tok.vocab_size).newbyteorder("<")
        in_flight = tok.engine == "fastokens"  # HF's calls build Python lists per document: in the call
        encoding = _in_flight(tok.encode_bodies, texts, dtype, background=in_flight)
        del texts  # the encoder's thread holds them until it is done
        batch = _Held(table, quarantined, encoding, dtype, table[self.text_column].nbytes)
        if not in_flight:
            return self._output(batch)
        self._held = [*(self._held or ()), batch]
        ready = []
        while len(self._held) > 1 and (
            len(self._held) > self.IN_FLIGHT or sum(h.text_bytes for h in self._held) > self.IN_FLIGHT_BYTES
        ):
            ready.append(self._output(self._held.pop(0)))
        return _merged(ready) if ready else None

    def finish(self) -> Any:
        """The output of the batches still being encoded (``Dataset.map_batches``: called after a task's last)."""
        held, self._held = self._held or [], None
        return _merged([self._output(h) for h in held]) if held else None

    def _output(self, held: _Held) -> Any:
        """One batch's spill file and references (+ its quarantined null texts), once its encoding is done."""
        import pyarrow as pa
        from zephyr.shuffle.writer import numpy_to_arrow

        from zephyr import counters
        from zephyr.ops import BatchOutput

        tok, table, dtype = self.tokenizer, held.table, held.dtype
        hi, lo = self._keys(table)  # while the encoder may still run
        body, lengths = held.encoding.result()
        starts = np.zeros(len(lengths), dtype=np.int64)
        np.cumsum(lengths[:-1], out=starts[1:])
        num_tokens = lengths + (1 + (tok.bos_id is not None))  # EOS (and BOS): written by the pack step
        name = spill_name(hi, lo, num_tokens)
        write_spill(self.spill_dir, name, body)
        columns = {
            "key_hi": numpy_to_arrow(hi.astype(np.uint64, copy=False)),
            "key_lo": numpy_to_arrow(lo.astype(np.uint64, copy=False)),
            "num_tokens": numpy_to_arrow(num_tokens.astype(np.int64, copy=False)),
            "spill_file": string_array([name] * len(lengths)),
            "spill_offset": numpy_to_arrow(starts * dtype.itemsize),
        }
        if self.source_column:
            columns["source"] = table[self.source_column].cast(pa.string())
        counters.increment("documents", len(lengths))
        counters.increment("tokens", int(num_tokens.sum()))
        counters.increment(f"engine_{tok.engine}", len(lengths))  # for the manifest
        out = pa.Table.from_arrays(list(columns.values()), names=list(columns))
        if held.quarantined is not None:
            return BatchOutput(kept=out, quarantined=held.quarantined, quarantine_reason="null_text")
        return out


def _merged(outputs: list[Any]) -> Any:
    """Batch outputs (tables, or ``BatchOutput`` with quarantined rows) as one, in order."""
    import pyarrow as pa

    from zephyr.ops import BatchOutput

    kept = [o.kept if isinstance(o, BatchOutput) else o for o in outputs]
    quarantined = [o.quarantined for o in outputs if isinstance(o, BatchOutput) and o.quarantined is not None]
    table = pa.concat_tables(kept)
    if not quarantined:
        return table
    return BatchOutput(kept=table, quarantined=pa.concat_tables(quarantined), quarantine_reason="null_text")


def _in_flight(fn: Callable[..., Any], *args: Any, background: bool = True) -> Future:
    """``fn(*args)`` running on the process's encode threads (``background``, see ``_encode_threads``), or
    already run in this one; the future's ``result()`` waits for it and raises what it raised."""
    future: Future = Future()
    if background:
        _encode_threads().submit((future, fn, args))
    else:
        _run(future, fn, args)
    return future


def _run(future: Future, fn: Callable[..., Any], args: tuple[Any, ...]) -> None:
    try:
        future.set_result(fn(*args))
    except BaseException as exc:  # raised by result(), in the task's thread
        future.set_exception(exc)


ENCODE_THREADS_IDLE_SECONDS = 30.0
"""How long a kept encode thread waits for another batch before it exits. Its fastokens cache goes with it
(about 95 MB per thread, freed when the thread exits). A writer's batches come milliseconds apart, so the
threads stay for a whole run and for runs in close succession. A long-lived process that has stopped
tokenizing gets that memory back."""


class _EncodeThreads:
    """This process's threads for batches in flight: at most ``TokenizeBatch.IN_FLIGHT``, started as batches
    come and kept while they keep coming. A thread exits after ``ENCODE_THREADS_IDLE_SECONDS`` without a batch.

    Kept because fastokens keeps a pretokenization cache per calling thread, in tables the kernel zeroes as huge
    pages on first touch. A new thread per batch (as before) paid that and a cold cache on every batch: 130
    tables at 320 MB. With the threads kept (three then), the kernel's page zeroing went from 15.8% to 9.1% of
    perf's samples, and 320 MB on 2 cores went from 4.01 to 3.70 s (median of 5 interleaved pairs, all 5
    faster; 0.5 CPU-s less). Daemon threads, unlike a ``ThreadPoolExecutor``'s, so a process that fails
    meanwhile leaves nothing to join.

    A batch is queued and a thread decides to exit under the same lock, and a thread leaves only if the queue
    is empty then. So a batch queued as a thread gives up still finds a thread: one that saw it, or one
    started for it."""

    def __init__(self) -> None:
        self.pid = os.getpid()
        self.live = 0
        self._jobs: queue.SimpleQueue = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._started = 0

    def submit(self, job: tuple[Future, Callable[..., Any], tuple[Any, ...]]) -> None:
        with self._lock:
            self._jobs.put(job)
            if self.live < TokenizeBatch.IN_FLIGHT:
                self.live += 1
                self._started += 1
                name = f"zephyr-encode-{self._started - 1}"
                threading.Thread(target=self._serve, name=name, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                job = self._jobs.get(timeout=ENCODE_THREADS_IDLE_SECONDS)
            except queue.Empty:
                with self._lock:
                    if self._jobs.empty():  # nothing queued since the wait ended: leave
                        self.live -= 1
                        return
                continue
            _run(*job)


_ENCODE_THREADS: _EncodeThreads | None = None
_ENCODE_THREADS_LOCK = threading.Lock()


def _encode_threads() -> _EncodeThreads:
    """This process's encode threads (``_EncodeThreads``). Keyed by pid: a forked child starts its own."""
    global _ENCODE_THREADS
    with _ENCODE_THREADS_LOCK:
        if _ENCODE_THREADS is None or _ENCODE_THREADS.pid != os.getpid():
            _ENCODE_THREADS = _EncodeThreads()
        return _ENCODE_THREADS


@dataclass(frozen=True)
class _Held:
    """A batch whose encoding is in flight: what its output is built from once the ids are there."""

    table: pa.Table
    quarantined: pa.Table | None
    encoding: Future
    dtype: np.dtype
    text_bytes: int
