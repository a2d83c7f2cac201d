"""Batch text → token ids with HF ``tokenizers``, and a tiktoken fast path proven identical at load time.

``TextTokenizer`` is built from the bytes of a ``tokenizer.json`` (so it pickles to any worker without a
shared filesystem) and loads the Rust objects lazily on first use. ``encode_batch(texts)`` returns one flat
token array plus document offsets (the shard layout), with EOS appended to every document and BOS prepended
under the ``"always"`` policy. Ids are HF's own ``encode(text, add_special_tokens=False).ids``: added tokens
that appear literally in the text are recognized, exactly as HF does.

Fast path: a GPT-2-style byte-level BPE (no normalizer, one ``ByteLevel`` pre-tokenizer with its regex, BPE
without dropout/suffixes/byte fallback) is rebuilt as a ``tiktoken.Encoding``: vocabulary strings are mapped
back from GPT-2's byte-to-unicode alphabet to raw bytes, merge order becomes tiktoken rank order, and a lookup
array maps tiktoken ranks back to HF ids. tiktoken encodes about 3-5x faster than HF's ``encode_batch``
here (see benchmarks/RESULTS.md). The fast path is only used after it reproduces HF's ids exactly on a
built-in probe sample (scripts, digits, whitespace runs, contractions, emoji, code, special tokens); any
difference, or a tokenizer of another shape (DeepSeek-V3's chained regex splits), falls back to HF.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from collections.abc import Sequence
from functools import cached_property
from pathlib import Path
from typing import Any, Literal

import numpy as np

from zephyr.errors import ConfigError

__all__ = ["TextTokenizer", "BosPolicy", "EngineChoice", "PROBE_TEXTS"]

log = logging.getLogger(__name__)

BosPolicy = Literal["never", "always"]
EngineChoice = Literal["auto", "hf", "tiktoken"]

_EOS_CANDIDATES = (
    "<|endoftext|>",
    "<｜end▁of▁sentence｜>",
    "<|end_of_text|>",
    "</s>",
    "<eos>",
    "<|eos|>",
    "<|im_end|>",
)
_BOS_CANDIDATES = ("<｜begin▁of▁sentence｜>", "<|begin_of_text|>", "<s>", "<bos>", "<|startoftext|>")

# GPT-2's pre-tokenizer regex, as HF's ByteLevel(use_regex=True) applies it.
_GPT2_PATTERN = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""

PROBE_TEXTS: tuple[str, ...] = (
    "Hello, world! It's a test: we'll see what they've done, I'd say, you're right, I'm sure.",
    "  leading spaces,\ttabs,\n\nnewlines   and   runs of    spaces   \n",
    "Numbers 1234567890 3.14159 1e-10 0x1F 2024-11-22 ½ ² ٣",
    "Ünïcödé façade naïve coöperate Straße İstanbul ΑΒΓ αβγ Привет мир",
    "中文字符测试，日本語のテキスト、한국어 텍스트 ไทย العربية עברית हिन्दी",
    "emoji 😀🎉👍🏽 👨‍👩‍👧 flags 🇺🇸 ZWJ a\u200db soft\u00adhyphen",
    "def f(x):\n    return {'a': [1, 2, 3]} if x else None  # comment\n\tindent\r\nCRLF",
    "special <|endoftext|> inside text, and </s> <s> [CLS] too",
    "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
    "",
    " ",
    "''''''\"\"\"\"``` --- *** ### @@@ !!! ??? ... ,,, ;;; ::: ~~~",
    "\u0000\u0001\u007f control \ufeff bom \U0001f600 \ud7ff \ue000",
)


def _bytes_to_unicode() -> dict[int, str]:
    """GPT-2's reversible byte → printable-character alphabet (printable Latin-1 bytes map to themselves)."""
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1))
    keep += list(range(ord("®"), ord("ÿ") + 1))
    mapping = {b: chr(b) for b in keep}
    extra = 0
    for b in range(256):
        if b not in mapping:
            mapping[b] = chr(256 + extra)
            extra += 1
    return mapping


class TextTokenizer:
    """A tokenizer.json with an EOS/BOS policy; encodes batches to flat arrays + offsets.

    Args:
        spec: path to a ``tokenizer.json``, or its content (``bytes``).
        bos: ``"never"`` (default) or ``"always"`` (prepend BOS to each document).
        eos_token / bos_token: override the detected special tokens (by their text).
        engine: ``"auto"`` (tiktoken when it is proven identical, else HF), ``"hf"`` or ``"tiktoken"``
            (fail when the fast path cannot be proven).
        num_threads: encoder threads; ``None`` means all cores.
    """

    def __init__(
        self,
        spec: str | os.PathLike[str] | bytes,
        *,
        bos: BosPolicy = "never",
        eos_token: str | None = None,
        bos_token: str | None = None,
        engine: EngineChoice = "auto",
        num_threads: int | None = None,
    ):
        if isinstance(spec, bytes):
            self.json_bytes, self.path = spec, None
        else:
            path = Path(spec)
            if path.is_dir():
                path = path / "tokenizer.json"
            if not path.exists():
                raise ConfigError(f"tokenizer file not found: {path} (give the path of a tokenizer.json)")
            self.json_bytes, self.path = path.read_bytes(), str(path)
        if bos not in ("never", "always"):
            raise ConfigError(f"bos must be 'never' or 'always', got {bos!r}")
        if engine not in ("auto", "hf", "tiktoken"):
            raise ConfigError(f"engine must be 'auto', 'hf' or 'tiktoken', got {engine!r}")
        self.bos_policy: BosPolicy = bos
        self.engine_choice: EngineChoice = engine
        self.num_threads = num_threads
        self.sha256 = hashlib.sha256(self.json_bytes).hexdigest()
        config = json.loads(self.json_bytes)
        self._added = {t["content"]: int(t["id"]) for t in config.get("added_tokens", [])}
        self.eos_id = self._special_id(config, eos_token, _EOS_CANDIDATES, "eos")
        self.bos_id: int | None = None
        if bos == "always":
            try:
                self.bos_id = self._special_id(config, bos_token, _BOS_CANDIDATES, "bos")
            except ConfigError:
                # GPT-2 has one special token and uses it as both document separator and BOS.
                log.info(
                    "no BOS token in %s; using the EOS id %d as BOS", self.path or "tokenizer", self.eos_id
                )
                self.bos_id = self.eos_id
        self._config = config
        self._hf: Any = None
        self._fast: Any = None
        self._rank_to_id: np.ndarray | None = None
        self._engine: str | None = None

    # pickling ships the JSON bytes only; Rust objects are rebuilt lazily in the worker
    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state.update(_hf=None, _fast=None, _rank_to_id=None, _engine=None)
        state.pop("vocab_size", None)
        return state

    def _special_id(self, config: dict, given: str | None, candidates: Sequence[str], kind: str) -> int:
        vocab = config.get("model", {}).get("vocab", {})
        names = [given] if given is not None else list(candidates)
        for name in names:
            if name in self._added:
                return self._added[name]
            if isinstance(vocab, dict) and name in vocab:
                return int(vocab[name])
        hint = f"--{kind}-token" if given is None else f"a token that exists (not {given!r})"
        raise ConfigError(
            f"cannot find the {kind.upper()} token in {self.path or 'the tokenizer'} "
            f"(tried {names}); pass {hint}"
        )

    @cached_property
    def vocab_size(self) -> int:
        """Number of ids, added tokens included (decides the shard dtype)."""
        return int(self.hf.get_vocab_size(with_added_tokens=True))

    @property
    def hf(self) -> Any:
        if self._hf is None:
            from tokenizers import Tokenizer

            self._hf = Tokenizer.from_str(self.json_bytes.decode("utf-8"))
        return self._hf

    @property
    def engine(self) -> str:
        """``"tiktoken"`` or ``"hf"``: which encoder ``encode_batch`` uses (decided, and proven, on first use)."""
        if self._engine is None:
            self._engine = "hf"
            if self.engine_choice != "hf":
                reason = self._build_fast_path()
                if reason is None:
                    self._engine = "tiktoken"
                elif self.engine_choice == "tiktoken":
                    raise ConfigError(f"the tiktoken fast path cannot be used for this tokenizer: {reason}")
                else:
                    log.info("tokenizer: HF encoder (fast path not used: %s)", reason)
        return self._engine

    # ---- fast path -------------------------------------------------------------------------------------
    def _fast_path_shape(self) -> str | None:
        """Why this tokenizer is not a GPT-2-style byte-level BPE (``None`` when it is)."""
        cfg = self._config
        normalizer = cfg.get("normalizer")
        if normalizer and not (normalizer.get("type") == "Sequence" and not normalizer.get("normalizers")):
            return f"has a normalizer ({normalizer.get('type')})"
        pre = cfg.get("pre_tokenizer") or {}
        if pre.get("type") == "Sequence" and len(pre.get("pretokenizers", [])) == 1:
            pre = pre["pretokenizers"][0]
        if pre.get("type") != "ByteLevel" or not pre.get("use_regex", True) or pre.get("add_prefix_space"):
            return f"pre-tokenizer is not a plain ByteLevel with the GPT-2 regex ({pre.get('type')})"
        model = cfg.get("model", {})
        if model.get("type") != "BPE":
            return f"model is {model.get('type')}, not BPE"
        for key in ("dropout", "continuing_subword_prefix", "end_of_word_suffix"):
            if model.get(key):
                return f"BPE has {key}={model.get(key)!r}"
        if model.get("byte_fallback"):
            return "BPE uses byte_fallback"
        return None

    def _build_fast_path(self) -> str | None:
        reason = self._fast_path_shape()
        if reason is not None:
            return reason
        try:
            import tiktoken
        except ImportError:
            return "tiktoken is not installed"
        model = self._config["model"]
        vocab: dict[str, int] = model["vocab"]
        decode = {ch: b for b, ch in _bytes_to_unicode().items()}
        try:
            token_bytes = {tok: bytes(decode[ch] for ch in tok) for tok in vocab}
        except KeyError:
            return "vocabulary has characters outside the byte-level alphabet"
        # tiktoken merges the adjacent pair whose concatenation has the lowest rank; HF merges by merge order.
        ranks: dict[bytes, int] = {bytes([b]): b for b in range(256)}
        for merge in model.get("merges", []):
            left, right = merge.split(" ", 1) if isinstance(merge, str) else merge
            merged = token_bytes.get(left + right)
            if merged is not None and merged not in ranks:
                ranks[merged] = len(ranks)
        for raw in token_bytes.values():  # tokens no merge produces: reachable only as whole pieces
            ranks.setdefault(raw, len(ranks))
        if len(ranks) != len(vocab) or any(bytes([b]) not in token_bytes.values() for b in range(256)):
            return "vocabulary is not a byte-level BPE over all 256 bytes"
        id_of_bytes = {raw: vocab[tok] for tok, raw in token_bytes.items()}
        special = {name: len(ranks) + i for i, name in enumerate(sorted(self._added, key=self._added.get))}
        rank_to_id = np.zeros(len(ranks) + len(special), dtype=np.int64)
        for raw, rank in ranks.items():
            rank_to_id[rank] = id_of_bytes[raw]
        for name, rank in special.items():
            rank_to_id[rank] = self._added[name]
        try:
            fast = tiktoken.Encoding(
                name=f"zephyr-{self.sha256[:12]}",
                pat_str=_GPT2_PATTERN,
                mergeable_ranks=ranks,
                special_tokens=special,
            )
        except Exception as exc:  # tiktoken rejects odd vocabularies with assorted errors; fall back to HF
            return f"tiktoken refused the vocabulary ({exc})"
        self._fast, self._rank_to_id = fast, rank_to_id
        mismatch = self.first_mismatch(PROBE_TEXTS, use_fast=True)
        if mismatch is not None:
            self._fast, self._rank_to_id = None, None
            return f"tiktoken ids differ from HF on probe text {mismatch!r}"
        return None

    def _fast_encoding(self) -> Any:
        """The proven ``tiktoken.Encoding`` (ids are ranks; see ``rank_to_id``), for benchmarks; None if unproven."""
        return self._fast if self.engine == "tiktoken" else None

    # ---- encoding --------------------------------------------------------------------------------------
    def _encode_lists(self, texts: Sequence[str], *, use_fast: bool) -> list[list[int]]:
        threads = self.num_threads or os.cpu_count() or 1
        if use_fast:
            assert self._fast is not None and self._rank_to_id is not None  # built by _build_fast_path
            return self._fast.encode_batch(list(texts), num_threads=threads, allowed_special="all")
        hf = self.hf
        encode = getattr(hf, "encode_batch_fast", hf.encode_batch)
        return [e.ids for e in encode(list(texts), add_special_tokens=False)]

    def hf_ids(self, text: str) -> list[int]:
        """HF's own ids for one text (the reference the fast path must equal)."""
        return self.hf.encode(text, add_special_tokens=False).ids

    def first_mismatch(self, texts: Sequence[str], *, use_fast: bool | None = None) -> str | None:
        """The first text whose ids differ between the active encoder and HF's ``encode`` (``None``: all equal)."""
        fast = self._fast is not None if use_fast is None else use_fast
        got = self._encode_lists(texts, use_fast=fast)
        for text, ids in zip(texts, got):
            if fast:
                ids = self._rank_to_id[np.asarray(ids, dtype=np.int64)].tolist()  # type: ignore[index]
            if list(ids) != self.hf_ids(text):
                return text
        return None

    def encode_batch(self, texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """Token ids of ``texts`` as (flat int64 tokens, int64 offsets[len(texts) + 1]), EOS (and BOS) added."""
        engine = self.engine
        lists = self._encode_lists(texts, use_fast=engine == "tiktoken")
        extra = 1 + (self.bos_id is not None)
        lengths = np.fromiter((len(ids) for ids in lists), dtype=np.int64, count=len(lists)) + extra
        offsets = np.zeros(len(lists) + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        # one C-level list→array conversion per document (a per-token generator is ~5x slower)
        parts = [np.array(ids, dtype=np.int64) for ids in lists]
        body = np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)
        if engine == "tiktoken":
            body = self._rank_to_id[body]  # type: ignore[index]
        tokens = np.empty(int(offsets[-1]), dtype=np.int64)
        # scatter the bodies: every position except each document's EOS (and BOS) slot
        is_body = np.ones(len(tokens), dtype=bool)
        is_body[offsets[1:] - 1] = False
        tokens[offsets[1:] - 1] = self.eos_id
        if self.bos_id is not None:
            is_body[offsets[:-1]] = False
            tokens[offsets[:-1]] = self.bos_id
        tokens[is_body] = body
        return tokens, offsets
