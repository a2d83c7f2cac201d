"""Streaming paragraph dedup with a Bloom filter: one pass, memory fixed by (expected paragraphs, FP rate).

A paragraph (a piece of the text between separators, normalized and hashed as by the exact paragraph dedup:
``exact.split_paragraphs``) is removed when the filter says it was seen in an earlier document, in input
order. Blank paragraphs are never removed. Unlike the exact dedup, memory does not grow with the corpus: the
filter holds ``m = -n ln p / (ln 2)²`` bits and sets ``k = (m / n) ln 2`` of them per paragraph (Bloom 1970;
the sizing of Broder & Mitzenmacher 2004), from the paragraph's 128-bit xxh3 by double hashing
(``h1 + i·h2 mod m``, Kirsch & Mitzenmacher 2006). The filter only errs one way: a false positive removes a
paragraph that was new, with probability at most ``fp_rate`` while at most ``expected`` paragraphs were
inserted (``BloomFilter.false_positive_rate`` says how full it is).

Within one batch the check is exact: a paragraph is removed when the filter held it before the batch, or an
earlier paragraph of the batch had the same hash. With ``keep_first_in_doc`` a paragraph repeated inside the
document where it first appears keeps every copy there (only later documents lose it). Each paragraph is
inserted once, after the check: inserting it during the check as well (the double insert) would make every
paragraph look seen and remove nearly all text, a bug a peer shipped (90-98% of its data removed).

The filter can be saved and loaded (``BloomFilter.save``/``load``, format below) for incremental runs; a
filter made with another normalization or separator is refused.

File format (version 1): ``ZBLOOM1\\n``, one line of JSON (``num_bits``, ``num_hashes``, ``inserted``,
``expected``, ``fp_rate``, ``hash``, ``normalize``, ``separator``), then the ``ceil(num_bits / 8)`` bytes of
the bit array (bit ``i`` is bit ``i % 8`` of byte ``i // 8``).

>>> import pyarrow as pa
>>> f = BloomFilter.for_capacity(1000, 1e-4)
>>> t = pa.table({"text": ["a\\nb\\na", "b\\nc"]})
>>> bloom_paragraph_dedup(t, f).table["text"].to_pylist()
['a\\nb', 'c']
>>> bloom_paragraph_dedup(pa.table({"text": ["a\\nb\\na", "b\\nc"]}), BloomFilter.for_capacity(1000, 1e-4),
...                       keep_first_in_doc=True).table["text"].to_pylist()
['a\\nb\\na', 'c']
"""

from __future__ import annotations

import json
import logging
import math
import os
import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
from zephyr.dedup._hashing import hash_groups
from zephyr.dedup._rows import DedupResult, Jobs, has_column
from zephyr.dedup.config import ParagraphDedupConfig

from zephyr.errors import ConfigError, InputError

if TYPE_CHECKING:
    from zephyr.dataset import Dataset

MAGIC = b"ZBLOOM1\n"
_HASH = "xxh3_128 double hashing"
_HEADER = ("num_bits", "num_hashes", "expected", "fp_rate", "inserted", "normalize", "separator")


@dataclass
class BloomFilter:
    """A bit array of ``num_bits`` bits with ``num_hashes`` probes per item (module docstring)."""

    num_bits: int
    num_hashes: int
    bits: np.ndarray
    """uint8, ``ceil(num_bits / 8)`` bytes."""
    expected: int
    fp_rate: float
    inserted: int = 0
    normalize: str = "default"
    separator: str = "\n"

    @classmethod
    def for_capacity(cls, expected: int, fp_rate: float, *, normalize: str = "default"):
        """The smallest filter whose false-positive rate stays under ``fp_rate`` for ``expected`` items."""
        num_bits, num_hashes = cls.sizing(expected, fp_rate)
        bits = np.zeros((num_bits + 7) // 8, dtype=np.uint8)
        return cls(num_bits, num_hashes, bits, expected, fp_rate, 0, normalize)

    @classmethod
    def of(cls, config: ParagraphDedupConfig) -> BloomFilter:
        """The filter a run of ``config`` starts from: ``load_filter`` (refused when its paragraphs were cut
        or normalized otherwise), or a new one sized for ``expected`` at ``fp_rate``."""
        if config.load_filter is None and config.expected is None:
            raise ConfigError(
                "--method bloom needs --expected N (paragraphs the filter must hold) or --load-filter FILE"
            )
        if config.load_filter is None:
            return cls.for_capacity(config.expected, config.fp_rate, normalize=config.normalize)
        bloom = cls.load(config.load_filter)
        if (bloom.normalize, bloom.separator) != (config.normalize, "\n"):  # hashes would never match
            raise ConfigError(
                f"the Bloom filter {config.load_filter} was built with normalize={bloom.normalize!r}, separator="
                f"{bloom.separator!r}; this run uses normalize={config.normalize!r}, separator='\\n'"
            )
        return bloom

    @staticmethod
    def sizing(expected: int, fp_rate: float) -> tuple[int, int]:
        """(bits, probes per item) for ``expected`` items at ``fp_rate``: m = -n ln p / (ln 2)², k = (m/n) ln 2."""
        if expected < 1:
            raise ConfigError(f"expected must be >= 1 paragraph, got {expected}")
        if not 0 < fp_rate < 1:
            raise ConfigError(f"fp_rate must be within (0, 1), got {fp_rate}")
        num_bits = max(64, math.ceil(-expected * math.log(fp_rate) / math.log(2) ** 2))
        return num_bits, max(1, round(num_bits / expected * math.log(2)))

    def false_positive_rate(self) -> float:
        """The expected false-positive rate now: ``(1 - e^(-k·n/m))^k`` for n inserted items."""
        return (1 - math.exp(-self.num_hashes * self.inserted / self.num_bits)) ** self.num_hashes

    def _probes(self, hashes: np.ndarray) -> np.ndarray:
        """``(n, k)`` bit positions of ``(n, 2)`` uint64 hashes."""
        i = np.arange(self.num_hashes, dtype=np.uint64)
        with np.errstate(over="ignore"):
            return (hashes[:, :1] + i[None, :] * (hashes[:, 1:2] | np.uint64(1))) % np.uint64(self.num_bits)

    def contains(self, hashes: np.ndarray) -> np.ndarray:
        probes = self._probes(hashes)
        hit = (self.bits[probes >> np.uint64(3)] >> (probes & np.uint64(7)).astype(np.uint8)) & 1
        return hit.all(axis=1) if len(hashes) else np.zeros(0, dtype=bool)

    def add(self, hashes: np.ndarray) -> None:
        probes = self._probes(hashes).ravel()
        np.bitwise_or.at(
            self.bits, probes >> np.uint64(3), np.left_shift(1, probes & np.uint64(7)).astype(np.uint8)
        )
        self.inserted += len(hashes)

    def save(self, path: str) -> None:
        """Write the filter atomically (a temporary file renamed over ``path``)."""
        tmp = f"{path}.tmp-{uuid.uuid4().hex[:8]}"
        with open(tmp, "wb") as f:
            header = {"version": 1, "hash": _HASH, **{k: getattr(self, k) for k in _HEADER}}
            f.write(MAGIC + json.dumps(header, sort_keys=True).encode() + b"\n")
            f.write(self.bits.tobytes())
        os.replace(tmp, path)

    @classmethod
    def load(cls, path: str) -> BloomFilter:
        """Read a saved filter; a file that is not one, or is cut short, fails naming it."""
        try:
            with open(path, "rb") as f:
                magic = f.read(len(MAGIC))
                line = f.readline()
                data = f.read()
        except OSError as exc:
            raise InputError(f"cannot read the Bloom filter: {exc}", path=path) from exc
        if magic != MAGIC:
            raise InputError("not a zephyr Bloom filter file (no ZBLOOM1 header)", path=path)
        try:
            head = json.loads(line)
            num_bits = int(head["num_bits"])
        except (ValueError, KeyError) as exc:
            raise InputError(f"corrupt Bloom filter header: {exc}", path=path) from exc
        if head.get("hash") != _HASH or len(data) != (num_bits + 7) // 8:
            raise InputError(
                f"corrupt Bloom filter: {len(data)} bytes of bits for {num_bits} bits (or another hash scheme)",
                path=path,
            )
        return cls(bits=np.frombuffer(data, dtype=np.uint8).copy(), **{k: head[k] for k in _HEADER})


def bloom_paragraph_dedup(
    data: Any,
    bloom: BloomFilter,
    *,
    text_column: str = "text",
    mode: str = "remove",
    keep_first_in_doc: bool = False,
) -> DedupResult:
    """Remove the paragraphs ``bloom`` has seen, then insert this table's paragraphs (module docstring).

    ``remove`` rewrites the text; ``annotate`` adds ``dup_paragraphs`` / ``dup_paragraph_bytes`` instead."""
    from zephyr.dedup.exact import split_paragraphs, without_paragraphs

    table, paragraphs = split_paragraphs(data, text_column, bloom.normalize, mode)
    _, values, doc, _, _, blank, hashes = paragraphs
    live = np.flatnonzero(~blank)
    hashes, doc, seen = hashes[live], doc[live], bloom.contains(hashes[live])
    # removed: seen before the batch, or a repeat within it (not the first of its hash in input order; with
    # keep_first_in_doc, not in that first one's document); inserted: the first of each hash not seen
    order, group_first = hash_groups(hashes, np.arange(len(hashes)))
    first = np.empty(len(hashes), dtype=bool)
    first[order] = order == group_first
    repeat = ~first
    if keep_first_in_doc:
        repeat[order] = doc[order] != doc[group_first]
    removed, new = np.zeros(len(values), dtype=bool), first & ~seen
    removed[live] = seen | repeat
    bloom.add(hashes[new])  # once, after the check: see the module docstring on double inserts
    result, _, _ = without_paragraphs(table, text_column, paragraphs, removed, mode)
    result.stats.update(paragraphs=len(live), paragraphs_inserted=int(new.sum()))
    return result


def bloom_paragraph_dedup_dataset(
    ds: Dataset,
    config: ParagraphDedupConfig,
    *,
    text_column: str = "text",
    mode: str = "remove",
    save_path: str | None = None,
    jobs: Jobs | None = None,
) -> Dataset:
    """Bloom paragraph dedup on the engine: one task in input order (``reshard(1)``) holds the filter
    (``BloomFilter.of(config)``) for the whole stream; with ``save_path`` it writes the filter there after
    every batch (``finished_filter`` puts it in place after the run). Settings that can neither size nor
    load a filter are refused here, before any work; ``jobs``: as in ``exact.exact_dedup_dataset``."""
    if config.load_filter is None and config.expected is not None:  # sized, not made: no work yet
        bits, hashes = BloomFilter.sizing(config.expected, config.fp_rate)
        sized = f"sized for --expected {config.expected:,} at --fp-rate {config.fp_rate:g}"
    else:
        loaded = BloomFilter.of(config)
        bits, hashes, sized = loaded.num_bits, loaded.num_hashes, f"loaded from {config.load_filter}"
    jobs = jobs or Jobs()
    stage = BloomParagraphDedup(config, text_column, mode, save_path)
    out = jobs.output(
        "job 1: the output, one task in input order (reshard(1)), paragraphs the filter has seen removed",
        ds.reshard(1).map_batches(stage, name="dedup.paragraph.bloom"),
    )
    saved = f"; saved to {config.save_filter} after the run" if config.save_filter else ""
    jobs(
        f"the filter ({(bits + 7) // 8:,} bytes, {hashes} probes a paragraph, {sized}) is held by the one task, "
        f"outside the budget's shares{saved}"
    )
    return out


def finished_filter(config: ParagraphDedupConfig, partial: str | None, inserted: int) -> dict[str, Any]:
    """The filter after a run of ``bloom_paragraph_dedup_dataset(save_path=partial)``: as its task saved it,
    else (not saved, or no batch ran) the filter it started from with the ``inserted`` paragraphs the task
    counted; saved to ``config.save_filter`` when given. Returns its figures for the stats, with a warning
    (logged too) when more paragraphs went in than it was sized for."""
    if partial is not None and os.path.exists(partial):
        bloom = BloomFilter.load(partial)
    else:
        bloom = BloomFilter.of(config)
        bloom.inserted += inserted
    if config.save_filter is not None:
        bloom.save(config.save_filter)
        if partial is not None and os.path.exists(partial):
            os.remove(partial)
    rate = bloom.false_positive_rate()
    figures = {k: getattr(bloom, k) for k in ("fp_rate", "expected", "num_hashes", "inserted")}
    figures.update(filter_bytes=len(bloom.bits), false_positive_rate_now=rate)
    figures.update(keep_first_in_doc=config.keep_first_in_doc, filter_saved=config.save_filter)
    if bloom.inserted > bloom.expected:
        warning = (
            f"bloom dedup: {bloom.inserted:,} paragraphs inserted into a filter sized for {bloom.expected:,}: its "
            f"false-positive rate is now {rate:.2g} (asked {bloom.fp_rate:.2g}); rerun with a larger --expected"
        )
        logging.getLogger(__name__).warning(warning)
        figures["warnings"] = [warning]
    return figures


@dataclass
class BloomParagraphDedup:
    """``map_batches`` stage: one filter for the whole stream of its task (run it on one shard: the order
    is the input order). The filter is made (``BloomFilter.of``) on the first batch; with ``save_path`` it
    is written there after every batch (the caller renames it into place once the job succeeded, so a
    retried task starts again from ``config.load_filter``, never from its own inserts)."""

    config: ParagraphDedupConfig
    text_column: str = "text"
    mode: str = "remove"
    save_path: str | None = None
    _bloom: BloomFilter | None = field(default=None, repr=False, compare=False)

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_bloom": None}

    def __call__(self, table: pa.Table) -> pa.Table:
        from zephyr import counters

        if not has_column(table, self.text_column, "text"):
            return table
        if self._bloom is None:
            self._bloom = BloomFilter.of(self.config)
        result = bloom_paragraph_dedup(
            table,
            self._bloom,
            text_column=self.text_column,
            mode=self.mode,
            keep_first_in_doc=self.config.keep_first_in_doc,
        )
        for key in ("paragraphs", "paragraphs_inserted"):  # without_paragraphs counts what it removed
            counters.increment(f"dedup/{key}", result.stats[key])
        if self.save_path is not None:
            self._bloom.save(self.save_path)
        return result.table
