"""Dedup configurations: plain, serializable dataclasses, checked in ``__post_init__``.

``FuzzyDedupConfig.from_preset`` reproduces the shingling and banding of well-known pipelines:

========== ===================== ================= ============================================
preset     shingles              bands × rows/band notes
========== ===================== ================= ============================================
datatrove  word 5-grams          14 × 8 (112)      64-bit hashes; text simplified (punctuation)
nemo       character 24-grams    20 × 13 (260)     raw text (NeMo Curator's GPU MinHash)
redpajama  word 13-grams         128 permutations  0.7 → 14×9, 0.8 → 9×13, 0.9 → 5×25
========== ===================== ================= ============================================

>>> cfg = FuzzyDedupConfig.from_preset("datatrove")
>>> cfg.bands, cfg.rows_per_band, cfg.num_perm_resolved, round(cfg.lsh_threshold, 3)
(14, 8, 112, 0.719)
>>> FuzzyDedupConfig(threshold=0.8).bands_rows()
(14, 8)
"""

from __future__ import annotations

import functools
import typing
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from zephyr.config import FieldError, check_field_values, ranged_field

if TYPE_CHECKING:
    import numpy as np

# The dedup vocabulary, declared here once: the kernels (``normalize``, ``minhash``, ``signature_device``),
# the dedup CLI and the pipeline's dedup stages read it from this module, which imports only the standard
# library, so loading a pipeline config (``zephyr run --check``) loads neither numpy nor pyarrow.
Normalization = Literal["none", "default", "simplify"]
Scheme = Literal["affine64", "mersenne61"]
SignatureDevice = Literal["cpu", "cuda", "xpu", "torch-cpu"]
SIGNATURE_DEVICES: tuple[str, ...] = typing.get_args(SignatureDevice)
"""Where MinHash signatures are computed; every choice gives the same integers (tested)."""
Preset = Literal["datatrove", "nemo", "redpajama"]
PRESETS: tuple[str, ...] = typing.get_args(Preset)
ClusterRule = Literal["anchored", "components"]
DUP_COLUMNS = ("dup_cluster", "dup_cluster_size", "dup_keep")
"""The columns every document dedup adds in ``annotate`` mode (the CLI's and the pipeline steps')."""
DEDUP_APPROX_SHARD_BYTES = 32 << 20
"""The dedup commands read their inputs in shards of about this many uncompressed bytes (runs of Parquet row
groups / JSON-lines byte ranges): files of very different sizes would otherwise leave one worker hashing the
largest file alone. The output's part count follows it."""


def _column_or_none(value: str) -> str | None:
    """A column named on the command line: ``none`` (or nothing) means no column."""
    return None if value.lower() in ("", "none") else value


_PRESETS: dict[str, dict[str, Any]] = {
    "datatrove": dict(shingle="word", ngram=5, bands=14, rows_per_band=8, normalize="simplify"),
    "nemo": dict(shingle="char", ngram=24, bands=20, rows_per_band=13, normalize="none"),
    "redpajama": dict(shingle="word", ngram=13, num_perm=128, normalize="simplify"),  # bands by threshold
}
_DEFAULT_NUM_PERM = 112


def lsh_threshold(bands: int, rows: int) -> float:
    """Approximate Jaccard at which a pair becomes a candidate with probability ~1/2: ``(1/b)^(1/r)``."""
    return (1.0 / bands) ** (1.0 / rows)


def collision_probability(similarity: float | np.ndarray, bands: int, rows: int) -> float | np.ndarray:
    """Probability that a pair of Jaccard ``similarity`` shares a bucket in at least one band."""
    import numpy as np

    return 1.0 - (1.0 - np.asarray(similarity, dtype=np.float64) ** rows) ** bands


@functools.lru_cache(maxsize=64)  # ~36 ms of numpy a call, and every batch's signatures ask for it
def optimal_bands(
    threshold: float, num_perm: int, weights: tuple[float, float] = (0.5, 0.5)
) -> tuple[int, int]:
    """``(bands, rows)`` with ``bands * rows <= num_perm`` minimizing the FP and FN areas, ``weights``
    (false positives, false negatives) given."""
    import numpy as np

    if not 0.0 < threshold < 1.0:
        raise FieldError("threshold", f"must be in (0, 1), got {threshold}")
    lo = np.linspace(0.0, threshold, 201)
    hi = np.linspace(threshold, 1.0, 201)
    best: tuple[float, int, int] | None = None
    for b in range(1, num_perm + 1):
        for r in range(1, num_perm // b + 1):
            fp = np.trapezoid(collision_probability(lo, b, r), lo)
            fn = np.trapezoid(1.0 - collision_probability(hi, b, r), hi)
            err = weights[0] * fp + weights[1] * fn
            if best is None or err < best[0] - 1e-15:
                best = (err, b, r)
    assert best is not None
    return best[1], best[2]


@dataclass(frozen=True)
class ExactDedupConfig:
    """Exact (hash-equality) dedup of documents (paragraphs: ``ParagraphDedupConfig``)."""

    normalize: Normalization = "default"
    """``default``: NFC + lower case + collapsed whitespace; ``none``: byte-exact; ``simplify``: also
    punctuation → space and digits → 0."""

    def __post_init__(self) -> None:
        check_field_values(self)


@dataclass(frozen=True)
class FuzzyDedupConfig:
    """MinHash-LSH near-duplicate detection with verified clusters."""

    threshold: float = ranged_field(0, 1, low_open=True, default=0.8)
    """Jaccard similarity (of shingle sets) at or above which two documents are duplicates, in (0, 1]."""
    shingle: Literal["word", "char"] = "word"
    """``word`` n-grams of the normalized text, or ``char`` (Unicode code point) n-grams."""
    ngram: int = ranged_field(1, default=5)
    """Shingle length in words or characters."""
    normalize: Normalization = "default"
    """Text normalization before shingling: ``default`` (NFC + lower case + collapsed whitespace), ``none``
    (byte-exact) or ``simplify`` (also punctuation → space and digits → 0)."""
    bands: int | None = ranged_field(1, default=None)
    """LSH bands (give with ``rows_per_band``); left out, they are picked from ``threshold`` and
    ``num_perm``."""
    rows_per_band: int | None = ranged_field(1, default=None)
    """Signature values per LSH band (give with ``bands``)."""
    num_perm: int | None = ranged_field(1, default=None)
    """Permutations; left out: ``bands * rows_per_band`` when those are given, else 112."""
    seed: int = 1
    """Seed of the permutations; an index and the corpus deduped against it must share it."""
    scheme: Scheme = "affine64"
    """``affine64`` (datasketch 2.x ``affine64``) or ``mersenne61`` (datatrove's ``(a·h+b) mod 2^61−1``)."""
    verify: bool = True
    """Keep a candidate pair only if the true Jaccard of its shingle sets reaches ``threshold`` (off: every
    pair LSH proposes is a duplicate)."""
    clusters: ClusterRule = "anchored"
    """``anchored``: a row is removed only if its verified Jaccard to its cluster's kept row reaches
    ``threshold`` (see ``zephyr.dedup._graph``); ``components``: connected components of the verified
    pairs (transitive: a chain of near-duplicates becomes one cluster, however far its ends are apart)."""
    signature_device: SignatureDevice = "cpu"
    """Where signatures are computed: ``cpu`` (the numba kernels), or torch on ``cuda``, ``xpu`` or
    ``torch-cpu`` (the accelerator code on CPU); only an explicit torch device imports torch. Same integers on
    every device, so an index built on one serves every other."""
    bucket_links: int = ranged_field(1, default=8)
    """Each LSH bucket member is paired with at most this many earlier members of its bucket, so a bucket
    of m rows costs at most m·bucket_links candidate pairs (see ``zephyr.dedup._minhash.candidate_pairs``)."""
    preset: Preset | None = field(default=None, compare=False)
    """A known pipeline whose shingling and banding to reproduce (``from_preset``); the other settings given
    override it."""

    def __post_init__(self) -> None:
        check_field_values(self)
        bands, rows = self.bands, self.rows_per_band
        if (bands is None) != (rows is None):
            raise FieldError(
                "bands", f"give both bands and rows_per_band or neither (bands={bands}, rows_per_band={rows})"
            )
        if bands is not None and self.num_perm is not None and bands * rows > self.num_perm:
            raise FieldError(
                "bands",
                f"bands × rows_per_band = {bands * rows} exceeds num_perm = {self.num_perm}; "
                "raise num_perm or lower bands/rows_per_band",
            )

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> FuzzyDedupConfig:
        """From a config file's keys: ``preset`` (if given) first, the other keys over it."""
        values = dict(raw)
        return cls.from_preset(values.pop("preset", None), **values)

    @classmethod
    def from_preset(cls, name: str | None, **overrides: Any) -> FuzzyDedupConfig:
        """A config reproducing a known pipeline's shingling and banding (None: none); ``overrides`` replace
        fields."""
        if name is None:
            return cls(**overrides)
        if name not in _PRESETS:
            raise FieldError("preset", f"unknown preset {name!r}; choose one of {', '.join(PRESETS)}")
        base = dict(_PRESETS[name])
        if name == "redpajama":
            threshold = float(overrides.get("threshold", 0.8))
            # RedPajama's published bands (0.7 → 14×9, 0.8 → 9×13, 0.9 → 5×25) are these optima
            base["bands"], base["rows_per_band"] = optimal_bands(threshold, 128)
        return cls(preset=name, **{**base, **overrides})

    def bands_rows(self) -> tuple[int, int]:
        """The (bands, rows) in force: explicit, or optimized for ``threshold`` (verification on: recall first)."""
        if self.bands is not None and self.rows_per_band is not None:
            return self.bands, self.rows_per_band
        if self.threshold >= 1.0:
            return optimal_bands(0.99, self.num_perm or _DEFAULT_NUM_PERM)
        weights = (0.05, 0.95) if self.verify else (0.5, 0.5)  # verification on: recall first
        return optimal_bands(self.threshold, self.num_perm or _DEFAULT_NUM_PERM, weights)

    @property
    def num_perm_resolved(self) -> int:
        bands, rows = self.bands_rows()
        return self.num_perm or bands * rows

    @property
    def lsh_threshold(self) -> float:
        """Approximate LSH S-curve midpoint ``(1/b)^(1/r)``; see ``zephyr.dedup._minhash``."""
        return lsh_threshold(*self.bands_rows())


@dataclass(frozen=True)
class SubstringConfig:
    """Settings of one substring dedup run (``zephyr.dedup.substring``; the web pipeline's ``substring_dedup``
    stage embeds ``min_bytes``, ``anchor_bytes`` and ``min_doc_bytes``)."""

    min_bytes: int = ranged_field(2, default=100)
    """Shortest repeated span removed (bytes)."""
    anchor_bytes: int | None = None
    """Length of the winnowing anchors; None: ``min(32, min_bytes // 2)``. Shorter anchors repeat more by
    chance (more candidates), longer ones leave fewer windows per anchor (fewer anchors to count)."""
    min_doc_bytes: int = ranged_field(0, default=0)
    """Documents that lost bytes and have fewer left are dropped (``substring_short_doc``); 0 keeps them."""
    text_column: str = "text"
    """The text column."""
    source_column: str | None = field(default="source", metadata={"parse": _column_or_none})
    """Report removed bytes per value of this column, when present ('none' or '': no column)."""
    top_spans: int = 20
    """The most repeated spans listed in the stats."""
    unit: Literal["bytes", "tokens"] = "bytes"
    """What removed spans snap to: UTF-8 characters (bytes) or the token starts of ``tokenizer`` (tokens)."""
    tokenizer: str | None = field(default=None, metadata={"metavar": "FILE", "reads": True})
    """A ``tokenizer.json`` (HF tokenizers) for ``unit`` tokens: removed runs snap to its token starts, so no
    token is cut in half."""

    def __post_init__(self) -> None:
        check_field_values(self)
        if self.unit == "tokens" and not self.tokenizer:
            raise FieldError("unit", "tokens needs a tokenizer (a tokenizer.json)")
        if self.tokenizer and self.unit != "tokens":
            raise FieldError("tokenizer", "is for unit tokens")
        if self.anchor_bytes is not None and not 1 <= self.anchor_bytes <= self.min_bytes:
            raise FieldError(
                "anchor_bytes", f"must be within [1, min_bytes={self.min_bytes}], got {self.anchor_bytes}"
            )

    @property
    def anchor(self) -> int:
        return self.anchor_bytes if self.anchor_bytes is not None else max(1, min(32, self.min_bytes // 2))


@dataclass(frozen=True)
class DedupColumns:
    """The columns a dedup reads: the text, the ids that order rows, the priority that picks the kept row."""

    text_column: str = "text"
    """The text column."""
    id_column: str | None = field(default="id", metadata={"parse": _column_or_none})
    """Ids order rows: the smallest id of a cluster is kept (rows that share an id, or have none, are still
    separate rows); 'none': no id column, input order decides."""
    priority_column: str | None = None
    """Keep the row with the largest value of this column instead (ties: the smallest id)."""


COLUMNS = DedupColumns()
"""The columns a dedup function reads unless told otherwise: ``text``, ordered by ``id``, no priority."""


@dataclass(frozen=True)
class ParagraphDedupConfig:
    """Paragraph dedup (``zephyr dedup paragraph``): exact, or one pass of a Bloom filter (``zephyr.dedup.bloom``)."""

    method: Literal["exact", "bloom"] = "exact"
    """exact: every paragraph hash in memory, id order; bloom: fixed memory from expected and fp_rate, one pass
    in input order, false positives at most fp_rate."""
    normalize: Normalization = "default"
    """``default``: NFC + lower case + collapsed whitespace; ``none``: byte-exact; ``simplify``: also
    punctuation → space and digits → 0."""
    expected: int | None = None
    """Bloom: paragraphs the filter is sized for."""
    fp_rate: float = 1e-4
    """Bloom: false-positive rate at ``expected`` paragraphs."""
    keep_first_in_doc: bool = False
    """Bloom: a paragraph repeated inside the document where it first appears keeps every copy there."""
    save_filter: str | None = field(default=None, metadata={"metavar": "FILE"})
    """Bloom: write the filter here after the run."""
    load_filter: str | None = field(default=None, metadata={"metavar": "FILE", "reads": True})
    """Bloom: start from a saved filter."""

    def __post_init__(self) -> None:
        check_field_values(self)


@dataclass(frozen=True)
class UrlDedupConfig:
    """URL dedup (``zephyr dedup url``): one row per normalized URL."""

    url_column: str = "url"
    """The URL column."""


@dataclass(frozen=True)
class IndexConfig:
    """The signature index of a fuzzy dedup (``zephyr.dedup.index``)."""

    index: str | None = field(default=None, metadata={"metavar": "DIR"})
    """Signature index of earlier runs' kept rows: rows near an indexed document are duplicates too."""
    update_index: bool = False
    """With ``index``: append this run's kept rows to the index (after the output is written)."""
    write_index: str | None = field(default=None, metadata={"metavar": "DIR"})
    """Start a new signature index at DIR holding this run's kept rows."""

    def __post_init__(self) -> None:
        if self.update_index and self.index is None:
            raise FieldError("update_index", "needs index (--index DIR): the index to add to")
        if self.index is not None and self.write_index is not None:
            raise FieldError("write_index", "starts a new index; to add to --index DIR, pass --update-index")

    @property
    def writes(self) -> str | None:
        """The index this run adds a generation to, if any."""
        return self.write_index or (self.index if self.update_index else None)
