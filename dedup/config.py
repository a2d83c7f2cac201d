"""Dedup configurations: plain, serializable dataclasses, checked in ``__post_init__``.

``FuzzyDedupConfig.from_preset`` reproduces the shingling and banding of well-known pipelines:

========== ===================== ================= ============================================
preset     shingles              bands × rows      notes
========== ===================== ================= ============================================
datatrove  word 5-grams          14 × 8 (112)      64-bit hashes; text simplified (punctuation)
nemo       character 24-grams    20 × 13 (260)     raw text (NeMo Curator's GPU MinHash)
redpajama  word 13-grams         128 permutations  0.7 → 14×9, 0.8 → 9×13, 0.9 → 5×25
========== ===================== ================= ============================================

>>> cfg = FuzzyDedupConfig.from_preset("datatrove")
>>> cfg.bands, cfg.rows, cfg.num_perm_resolved, round(cfg.lsh_threshold, 3)
(14, 8, 112, 0.719)
>>> FuzzyDedupConfig(threshold=0.8).bands_rows()
(14, 8)
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass, field
from typing import Any

from zephyr.dedup.lsh import lsh_threshold, optimal_bands
from zephyr.dedup.minhash import SCHEMES
from zephyr.dedup.normalize import NORMALIZATIONS
from zephyr.dedup.signature_device import SIGNATURE_DEVICES

from zephyr.errors import ConfigError

__all__ = ["ExactDedupConfig", "FuzzyDedupConfig", "PRESETS", "MODES", "CLUSTER_RULES", "check_mode"]

MODES = ("annotate", "remove")
PRESETS = ("datatrove", "nemo", "redpajama")
CLUSTER_RULES = ("anchored", "components")


def check_mode(mode: str) -> None:
    """``annotate`` keeps every row and adds the dedup columns; ``remove`` drops the duplicates."""
    if mode not in MODES:
        raise ConfigError(f"mode must be 'annotate' or 'remove', got {mode!r}")
_REDPAJAMA_BANDS = {0.7: (14, 9), 0.8: (9, 13), 0.9: (5, 25)}
_DEFAULT_NUM_PERM = 112


@dataclass(frozen=True)
class ExactDedupConfig:
    """Exact (hash-equality) dedup of documents or paragraphs."""

    level: str = "document"
    """``document`` (whole texts) or ``paragraph`` (lines seen earlier in id order are removed)."""
    normalize: str = "default"
    """``default`` (NFC + lower case + whitespace collapse), ``none`` (byte-exact), or ``simplify``."""
    paragraph_separator: str = "\n"
    """What splits a document into paragraphs (``level="paragraph"``)."""

    def __post_init__(self) -> None:
        if self.level not in ("document", "paragraph"):
            raise ConfigError(f"level must be 'document' or 'paragraph', got {self.level!r}")
        if self.normalize not in NORMALIZATIONS:
            raise ConfigError(f"normalize must be one of {', '.join(NORMALIZATIONS)}, got {self.normalize!r}")
        if not self.paragraph_separator:
            raise ConfigError("paragraph_separator must not be empty")


@dataclass(frozen=True)
class FuzzyDedupConfig:
    """MinHash-LSH near-duplicate detection with verified clusters."""

    threshold: float = 0.8
    """Jaccard similarity (of shingle sets) at or above which two documents are duplicates."""
    shingle: str = "word"
    """``word`` n-grams of the normalized text, or ``char`` (Unicode code point) n-grams."""
    ngram: int = 5
    """Shingle length in words or characters."""
    normalize: str = "default"
    """Text normalization before shingling (see ``zephyr.dedup.normalize``)."""
    bands: int | None = None
    """LSH bands; ``None`` (with ``rows``) picks them from ``threshold`` and ``num_perm``."""
    rows: int | None = None
    """Signature values per band."""
    num_perm: int | None = None
    """Permutations; ``None`` means ``bands * rows`` when those are given, else 112."""
    seed: int = 1
    """Seed of the permutations; an index and the corpus deduped against it must share it."""
    scheme: str = "affine64"
    """``affine64`` (datasketch 2.x ``affine64``) or ``mersenne61`` (datatrove's ``(a·h+b) mod 2^61−1``)."""
    verify: bool = True
    """Keep a candidate pair only if the true Jaccard of its shingle sets reaches ``threshold``."""
    clusters: str = "anchored"
    """``anchored``: a row is removed only if its verified Jaccard to its cluster's kept row reaches
    ``threshold`` (see ``zephyr.dedup.anchored``); ``components``: connected components of the verified
    pairs (transitive: a chain of near-duplicates becomes one cluster, however far its ends are apart)."""
    signature_device: str = "auto"
    """Where signatures are computed: ``auto`` (CUDA or XPU when torch sees one, else the numba kernels),
    ``cpu``, ``cuda``, ``xpu``, or ``torch-cpu`` (the accelerator code on CPU). Same integers on every
    device, so it is not part of ``signature_fingerprint``."""
    bucket_links: int = 8
    """Each LSH bucket member is paired with at most this many earlier members of its bucket, so a bucket
    of m rows costs at most m·bucket_links candidate pairs (see ``zephyr.dedup.lsh.candidate_edges``)."""
    preset: str | None = field(default=None, compare=False)
    """Name of the preset this config came from (informational)."""

    def __post_init__(self) -> None:
        if not 0.0 < self.threshold <= 1.0:
            raise ConfigError(f"threshold must be in (0, 1], got {self.threshold}")
        if self.shingle not in ("word", "char"):
            raise ConfigError(f"shingle must be 'word' or 'char', got {self.shingle!r}")
        if self.ngram < 1:
            raise ConfigError(f"ngram must be >= 1, got {self.ngram}")
        if self.normalize not in NORMALIZATIONS:
            raise ConfigError(f"normalize must be one of {', '.join(NORMALIZATIONS)}, got {self.normalize!r}")
        if self.clusters not in CLUSTER_RULES:
            raise ConfigError(f"clusters must be one of {', '.join(CLUSTER_RULES)}, got {self.clusters!r}")
        if self.signature_device not in SIGNATURE_DEVICES:
            raise ConfigError(
                f"signature_device must be one of {', '.join(SIGNATURE_DEVICES)}, got {self.signature_device!r}"
            )
        if self.bucket_links < 1:
            raise ConfigError(f"bucket_links must be >= 1, got {self.bucket_links}")
        if self.scheme not in SCHEMES:
            raise ConfigError(f"scheme must be one of {', '.join(SCHEMES)}, got {self.scheme!r}")
        if (self.bands is None) != (self.rows is None):
            raise ConfigError(f"give both bands and rows or neither (bands={self.bands}, rows={self.rows})")
        if self.bands is not None and (self.bands < 1 or self.rows < 1):
            raise ConfigError(f"bands and rows must be >= 1, got {self.bands} × {self.rows}")
        if self.bands is not None and self.num_perm is not None and self.bands * self.rows > self.num_perm:
            raise ConfigError(
                f"bands × rows = {self.bands * self.rows} exceeds num_perm = {self.num_perm}; "
                "raise num_perm or lower bands/rows"
            )

    @classmethod
    def from_preset(cls, name: str, **overrides: Any) -> FuzzyDedupConfig:
        """A config reproducing a known pipeline's shingling and banding; ``overrides`` replace fields."""
        threshold = float(overrides.get("threshold", 0.8))
        if name == "datatrove":
            base: dict[str, Any] = dict(shingle="word", ngram=5, bands=14, rows=8, normalize="simplify")
        elif name == "nemo":
            base = dict(shingle="char", ngram=24, bands=20, rows=13, normalize="none")
        elif name == "redpajama":
            if threshold not in _REDPAJAMA_BANDS:
                bands, rows = optimal_bands(threshold, 128)
            else:
                bands, rows = _REDPAJAMA_BANDS[threshold]
            base = dict(shingle="word", ngram=13, bands=bands, rows=rows, num_perm=128, normalize="simplify")
        else:
            raise ConfigError(f"unknown preset {name!r}; choose one of {', '.join(PRESETS)}")
        base.update(overrides)
        return cls(preset=name, **base)

    def bands_rows(self) -> tuple[int, int]:
        """The (bands, rows) in force: explicit, or optimized for ``threshold`` (verification on: recall first)."""
        if self.bands is not None and self.rows is not None:
            return self.bands, self.rows
        if self.threshold >= 1.0:
            return optimal_bands(0.99, self.num_perm or _DEFAULT_NUM_PERM)
        weights = (0.05, 0.95) if self.verify else (0.5, 0.5)
        return optimal_bands(
            self.threshold,
            self.num_perm or _DEFAULT_NUM_PERM,
            false_positive_weight=weights[0],
            false_negative_weight=weights[1],
        )

    @property
    def bands_resolved(self) -> int:
        return self.bands_rows()[0]

    @property
    def num_perm_resolved(self) -> int:
        bands, rows = self.bands_rows()
        return self.num_perm or bands * rows

    @property
    def lsh_threshold(self) -> float:
        """Approximate LSH S-curve midpoint ``(1/b)^(1/r)``; see ``zephyr.dedup.lsh``."""
        return lsh_threshold(*self.bands_rows())

    def signature_fingerprint(self) -> str:
        """Hash of everything that determines signatures; an index built with another one is refused."""
        fields = dict(
            shingle=self.shingle,
            ngram=self.ngram,
            normalize=self.normalize,
            num_perm=self.num_perm_resolved,
            seed=self.seed,
            scheme=self.scheme,
        )
        return hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()[:16]

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)
