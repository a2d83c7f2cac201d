"""Train a byte-level BPE ``tokenizer.json`` from a bounded, deterministic sample of a corpus.

``train_tokenizer(inputs, vocab_size=..., output=...)`` (CLI: ``zephyr tokenizer train``) reads any input the
engine reads (Parquet, JSONL[.gz|.zst], Vortex; local paths, globs, folders or fsspec URLs, resolved by
``zephyr.io.paths.input_files``), streams a sample of its text column into HF ``tokenizers``'
``BpeTrainer`` and writes the result atomically. The file loads with ``tokenizers.Tokenizer.from_file`` and
with ``zephyr.tokenize.TextTokenizer`` (so ``zephyr tokenize`` and the pipeline's tokenize stage use it), and
decodes back to the text it encoded: GPT-2's layout — ``ByteLevel`` pre-tokenizer (GPT-2 regex, no prefix
space) and decoder, all 256 bytes in the initial alphabet, no normalizer — so no input is out of vocabulary.
The first special token (default ``<|endoftext|>``) is the EOS the token shards append to every document.

The sample: the first bytes of every file. Files are taken in their sorted order (as every zephyr input is)
and each gets an equal share of what is left of the bound: file i of n gets ``(bound - taken) / (n - i)``
bytes of text, so a short file's unused share passes to the files after it. Inside a file, documents are
taken in order, whole, until the share is reached; the document that crosses it contributes its first bytes
up to the share (cut after a whitespace character), so the sample never exceeds the bound. Why this and not
a reservoir over all documents: it reads only what it keeps (a 256 MB sample of a 10 TB corpus reads about
256 MB, plus one batch per file), in one pass, with nothing held but the batch in hand, and it is a function
of the inputs and the bound alone, so the same inputs always give the same tokenizer bytes. Its bias: a file
sorted by topic contributes only its head, so give many files (the parts of an engine job are) or a shuffled
corpus. An input smaller than the bound is used whole.

Memory. The sample is streamed, never held: documents go to the trainer one at a time (pieces of at most
``_PIECE_BYTES``, cut after a newline). What grows is the trainer's own state (``tokenizers``' Rust
``BpeTrainer``): while feeding, a word → count map of every distinct pre-token (per rayon thread, merged at
the end); then, for training, one 32-byte symbol per character of every distinct word, a pair → count map,
a pair → set-of-words index over every adjacent pair of every distinct word, and the merge queue. So the
peak grows with the *distinct* words of the sample (Heaps' law: sublinearly in its bytes; much faster for
code and many languages than for English prose), plus up to ``_BUFFERED_ITEMS`` documents the binding
buffers. ``sample_bound`` turns a memory budget into the sample bound with a linear model, peak RSS ≤
``_BASE_RSS_BYTES`` + ``_RSS_PER_SAMPLE_BYTE`` × sample bytes, fitted with headroom to peaks measured on the
benchmark corpus (web pages, code, man pages in many languages: many distinct words per byte;
benchmarks/tokenizer_train.py, rows in benchmarks/RESULTS.md). The arithmetic is logged in one line. What the
model does not cover: Parquet row groups much larger than the benchmark's (their decode is part of the base),
and many cores (rayon's per-thread word maps; measured on 2 cores).
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from zephyr.tokenize.config import DEFAULT_SPECIAL_TOKENS, TokenizerTrain

from zephyr.config import format_bytes, parse_bytes
from zephyr.errors import ConfigError, InputError

log = logging.getLogger(__name__)

_PIECE_BYTES = 256 << 10
"""Longest piece of a document handed to the trainer at once (longer documents are cut after a newline)."""
_BUFFERED_ITEMS = 256
"""Items the ``tokenizers`` binding pulls from the iterator ahead of its threads (its ``PyBufferedIterator``)."""
_READ_BATCH_BYTES = 8 << 20
"""Bytes per record batch read from a file while sampling."""
_BASE_RSS_BYTES = 320 << 20
"""What the process holds besides the trainer's per-byte state: Python and its libraries (~80 MB), the decode
of one input row group (the benchmark corpus has 32 MiB of text per row group), the trainer's fixed costs."""
_RSS_PER_SAMPLE_BYTE = 6.0
"""Peak RSS per sample byte above ``_BASE_RSS_BYTES``. Measured on the benchmark corpus, vocab 32,768: peak
385 MB at a 16 MB sample, 436 at 34, 605 at 64, 939 at 123 (slopes 3-6 bytes per byte); the model gives 431,
558, 719 and 1,073 MB there: 12-28% headroom."""
_MIN_SAMPLE_BYTES = 1 << 20


@dataclass(frozen=True)
class TokenizerTrainResult:
    """What ``train_tokenizer`` wrote and what it learned from."""

    output: str
    """The ``tokenizer.json`` written."""
    sha256: str
    """Of the file's bytes (the token-shard manifest records the same hash)."""
    vocab_size: int
    """Ids in the tokenizer, special tokens included (at most the ``vocab_size`` asked for: a small sample
    may not hold enough distinct pairs)."""
    files: int
    """Input files found."""
    files_sampled: int
    """Files that contributed text."""
    documents: int
    """Documents (or first pieces of documents) in the sample."""
    sample_bytes: int
    """UTF-8 bytes of text in the sample."""
    bound_bytes: int
    """The sample bound used (``sample_bound`` of the requested size and the memory budget)."""
    rows_quarantined: int = 0
    """Unreadable rows skipped under ``on_error="quarantine"`` (never silently: also logged)."""
    seconds: float = 0.0
    special_tokens: tuple[str, ...] = field(default=DEFAULT_SPECIAL_TOKENS)

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["special_tokens"] = list(self.special_tokens)
        return out


def sample_bound(sample_bytes: int | str, memory_budget: int | str | None) -> int:
    """The sample bound in bytes: ``sample_bytes``, lowered so the trainer's peak fits ``memory_budget``.

    ``memory_budget=None`` means no cap. A budget too small for even ``_MIN_SAMPLE_BYTES`` is a
    ``ConfigError`` naming the smallest budget that works.

    >>> sample_bound("256MB", None)
    256000000
    >>> sample_bound("256MB", "1GiB") < 256_000_000
    True
    """
    wanted = parse_bytes(sample_bytes)
    if wanted <= 0:
        raise ConfigError(f"the sample size must be > 0 bytes, got {sample_bytes!r}")
    if memory_budget is None:
        return wanted
    budget = parse_bytes(memory_budget)
    allowed = int((budget - _BASE_RSS_BYTES) / _RSS_PER_SAMPLE_BYTE)
    if allowed < _MIN_SAMPLE_BYTES:
        least = _BASE_RSS_BYTES + int(_MIN_SAMPLE_BYTES * _RSS_PER_SAMPLE_BYTE)
        raise ConfigError(
            f"memory budget {format_bytes(budget)} leaves no room to train a tokenizer (the process holds about "
            f"{format_bytes(_BASE_RSS_BYTES)} before training); give --memory-budget {format_bytes(least)} or more"
        )
    bound = min(wanted, allowed)
    log.info(
        "tokenizer sample bound %s = min(requested %s, (budget %s - base %s) / %.1f peak RSS bytes per sample byte)",
        format_bytes(bound),
        format_bytes(wanted),
        format_bytes(budget),
        format_bytes(_BASE_RSS_BYTES),
        _RSS_PER_SAMPLE_BYTE,
    )
    return bound


def _text_batches(shard: Any, text_column: str, on_error: str, counts: Counter[str]) -> Iterator[pa.Array]:
    """The file's text column, batch by batch, checked to be text (``zephyr.io.text_column``)."""
    from zephyr.io.quarantine import require_text_column
    from zephyr.io.sources import read_shard

    def quarantine(table: pa.Table) -> None:
        counts["rows_quarantined"] += table.num_rows
        for row in table.slice(0, 3).to_pylist():
            log.warning("tokenizer sample: skipped %s row %s: %s", row["source"], row["line"], row["reason"])

    batches = read_shard(
        shard,
        columns=[text_column],
        on_error=on_error,  # type: ignore[arg-type]
        quarantine=quarantine if on_error == "quarantine" else None,
        batch_bytes=_READ_BATCH_BYTES,
    )
    for batch in batches:
        require_text_column(batch.schema, text_column, where=shard.path)
        texts = batch.column(0)
        if pa.types.is_null(texts.type):  # no value at all: nothing to learn from
            continue
        yield texts.cast(pa.large_string()).drop_null()


def _cut(text: str, limit: int) -> str:
    """The first ``limit`` UTF-8 bytes of ``text``, ending after its last whitespace character there (a word
    is not split; if there is none, the bytes as they are, without a torn character)."""
    head = text.encode("utf-8")[:limit].decode("utf-8", errors="ignore")
    for i in range(len(head) - 1, -1, -1):
        if head[i].isspace():
            return head[: i + 1]
    return head


def _pieces(text: str) -> Iterator[str]:
    """``text`` in pieces of at most ``_PIECE_BYTES`` UTF-8 bytes, cut after a newline where the window has
    one, else at a character boundary. The text is encoded once (linear in its length)."""
    if len(text) * 4 <= _PIECE_BYTES:  # at most 4 bytes a character: short enough without encoding
        yield text
        return
    data = text.encode("utf-8")
    start = 0
    while len(data) - start > _PIECE_BYTES:
        end = data.rfind(b"\n", start, start + _PIECE_BYTES) + 1  # a newline is never inside a character
        if end <= start:
            end = start + _PIECE_BYTES
            while data[end] & 0xC0 == 0x80:  # a continuation byte: step back to the character's start
                end -= 1
        yield data[start:end].decode("utf-8")
        start = end
    if start < len(data):
        yield data[start:].decode("utf-8")


def iter_sample(
    inputs: str | Sequence[str],
    bound_bytes: int,
    *,
    text_column: str = "text",
    format: Literal["auto", "parquet", "jsonl", "vortex"] = "auto",
    on_error: Literal["raise", "quarantine"] = "raise",
    counts: Counter[str] | None = None,
) -> Iterator[str]:
    """The sample's texts, in order (see the module docstring): each file's first share of ``bound_bytes``.

    Documents are yielded in pieces of at most ``_PIECE_BYTES``. ``counts`` (optional) counts as it goes:
    ``files``, ``files_sampled``, ``documents``, ``sample_bytes`` and ``rows_quarantined``.
    """
    from zephyr.io.paths import input_files
    from zephyr.io.sources import check_text_inputs, list_shards

    counts = counts if counts is not None else Counter()
    files, fmt = input_files(inputs, format)
    # a missing or non-text column: one line naming the file, before any reading
    check_text_inputs(files, text_column, format=fmt)
    shards = list_shards(files, fmt)  # one per file, in sorted order
    counts["files"] = len(shards)
    for i, shard in enumerate(shards):
        share = (bound_bytes - counts["sample_bytes"]) // (len(shards) - i)
        taken = 0
        for texts in _text_batches(shard, text_column, on_error, counts):
            if share - taken <= 0:
                break
            lengths = pc.binary_length(texts).to_numpy(zero_copy_only=False).astype(np.int64)
            whole = int(np.searchsorted(np.cumsum(lengths), share - taken, side="right"))
            chosen = texts.slice(0, whole).to_pylist()
            if whole < len(texts):  # the document crossing the share: its head, cut after a whitespace
                head = _cut(texts[whole].as_py(), share - taken - int(lengths[:whole].sum()))
                if head:
                    chosen.append(head)
            for text in chosen:
                if text:
                    counts["documents"] += 1
                    yield from _pieces(text)
            taken += sum(len(t.encode("utf-8")) for t in chosen[whole:]) + int(lengths[:whole].sum())
            if whole < len(texts):
                break
        counts["sample_bytes"] += taken
        counts["files_sampled"] += taken > 0


def _output_file(output: str) -> str:
    """``output``, or ``output/tokenizer.json`` for an existing folder; its folder is checked writable now, so
    a bad location fails before the training, not after it (``zephyr.io.paths.check_output_dir``)."""
    import posixpath

    from zephyr.io.paths import check_output_dir, filesystem

    fs, path = filesystem(output)
    if output.endswith("/") or fs.isdir(path):
        output = posixpath.join(output.rstrip("/"), "tokenizer.json")
    check_output_dir(posixpath.dirname(output) or ".")
    return output


def train_tokenizer(
    inputs: str | Sequence[str],
    *,
    vocab_size: int,
    output: str,
    text_column: str = "text",
    sample_bytes: int | str = "256MB",
    memory_budget: int | str | None = "1GiB",
    min_frequency: int = 2,
    special_tokens: Sequence[str] = DEFAULT_SPECIAL_TOKENS,
    format: Literal["auto", "parquet", "jsonl", "vortex"] = "auto",
    on_error: Literal["raise", "quarantine"] = "raise",
) -> TokenizerTrainResult:
    """Train a byte-level BPE of ``vocab_size`` ids on a sample of ``inputs``; write it to ``output``.

    Args:
        inputs: files, folders, globs or fsspec URLs (any format the engine reads).
        vocab_size: ids in the result, the 256 bytes and the special tokens included; more than both.
        output: the ``tokenizer.json`` path or fsspec URL (in an existing folder: ``tokenizer.json`` there),
            written atomically (never a torn file).
        text_column: the column of document text (a string column).
        sample_bytes: the most text the trainer sees (see the module docstring for which text).
        memory_budget: lowers the sample bound so the trainer's peak RSS fits (``sample_bound``); None: no cap.
        min_frequency: a pair merges only if it occurs at least this many times in the sample.
        special_tokens: added tokens, never split; the first is the EOS of the token shards.
        format: the input format (``auto``: from the file names, or their first bytes).
        on_error: unreadable rows fail naming file and row (``raise``) or are skipped and counted.

    Raises ``InputError`` when the input holds no text to learn from (an empty input is a valid input, but it
    cannot train a tokenizer), ``SchemaError`` for a missing or non-string text column, ``ConfigError`` for
    bad settings (``zephyr.tokenize.config.TokenizerTrain`` checks them).
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    from zephyr.io.paths import write_bytes_atomic

    started = time.perf_counter()
    settings = [vocab_size, output, text_column, sample_bytes, min_frequency, list(special_tokens)]
    tokens = tuple(TokenizerTrain(*settings).special_tokens)
    if on_error not in ("raise", "quarantine"):
        raise ConfigError(f"on_error must be 'raise' or 'quarantine', got {on_error!r}")
    bound = sample_bound(sample_bytes, memory_budget)
    output = _output_file(output)
    counts: Counter[str] = Counter()
    sample = iter_sample(
        inputs, bound, text_column=text_column, format=format, on_error=on_error, counts=counts
    )

    # an untrained byte-level BPE and its trainer: the 256 byte ids first, then the special tokens
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=min_frequency,
        special_tokens=list(tokens),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(sample, trainer=trainer)
    if counts["sample_bytes"] == 0:  # an empty input is valid input, but it cannot train a tokenizer
        where = f"{counts['files']} file(s)" if counts["files"] else "the input"
        skipped = counts["rows_quarantined"]
        raise InputError(
            f"no text to train a tokenizer on: {where} hold no non-empty {text_column!r} values"
            + (f" ({skipped} unreadable row(s) skipped)" if skipped else "")
            + "; give inputs with text (an empty input cannot train a tokenizer)"
        )
    learned = tokenizer.get_vocab_size(with_added_tokens=True)
    if learned < vocab_size:
        log.warning(
            "tokenizer: %d ids, not the %d asked for: the %s sample holds too few pairs seen %d+ times to merge "
            "(give more text, or a lower --min-frequency)",
            learned,
            vocab_size,
            format_bytes(counts["sample_bytes"]),
            min_frequency,
        )
    data = tokenizer.to_str().encode("utf-8")
    write_bytes_atomic(output, data)
    result = TokenizerTrainResult(
        output=output,
        sha256=hashlib.sha256(data).hexdigest(),
        vocab_size=learned,
        bound_bytes=bound,
        seconds=round(time.perf_counter() - started, 3),
        special_tokens=tokens,
        **counts,  # files, files_sampled, documents, sample_bytes (each set, with text), rows_quarantined
    )
    log.info("tokenizer: %s", json.dumps(result.to_dict()))
    return result
