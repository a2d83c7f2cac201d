"""Batch text → token ids identical to HF ``tokenizers``, through the fastest engine proven identical.

``TextTokenizer`` is built from the bytes of a ``tokenizer.json`` (so it pickles to any worker without a
shared filesystem) and loads the Rust objects lazily on first use. ``encode_batch(texts)`` returns one flat
token array plus document offsets (the shard layout), with EOS appended to every document and BOS prepended
under the ``"always"`` policy. Ids are HF's own ``encode(text, add_special_tokens=False).ids``: added tokens
that appear literally in the text are recognized, exactly as HF does.

Engines, tried in this order by ``engine="auto"``; each is used only after it reproduced HF's ids exactly on a
built-in probe sample (scripts, digits, whitespace runs, contractions, emoji, code, special tokens), in the
process that uses it, and any difference falls back to the next:

- ``fastokens`` (optional dependency, ``pip install zephyr[tokenize-fast]``): a Rust reimplementation of HF's
  pipeline that loads the same ``tokenizer.json`` (any model shape it supports: GPT-2, DeepSeek-V3...) and
  returns a batch as one flat ``uint32`` buffer + offsets, no Python object per token. Measured 10-15x
  tiktoken here (benchmarks/RESULTS.md).
- ``tiktoken``: a GPT-2-style byte-level BPE (no normalizer, one ``ByteLevel`` pre-tokenizer with its regex,
  BPE without dropout/suffixes/byte fallback) rebuilt as a ``tiktoken.Encoding``: vocabulary strings are
  mapped back from GPT-2's byte-to-unicode alphabet to raw bytes, merge order becomes tiktoken rank order,
  and a lookup array maps tiktoken ranks back to HF ids. About 3-5x HF's ``encode_batch`` here. A tokenizer of
  another shape (DeepSeek-V3's chained regex splits) is refused.
- ``hf``: HF ``tokenizers`` itself.

Before any library loads it, ``TextTokenizer`` reads from a ``tokenizer.json``: the parsed JSON (or an
error that names the file and says what it should be), the special-token names it looks for, GPT-2's byte
alphabet and pre-tokenizer regex (the tiktoken engine's rebuild), and the probe texts every engine must encode
exactly as HF does.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import logging
import os
import threading
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from functools import cached_property
from pathlib import Path
from typing import Any, Literal

import numpy as np

from zephyr.errors import ConfigError

EOS_CANDIDATES = (
    "<|endoftext|>",
    "<｜end▁of▁sentence｜>",
    "<|end_of_text|>",
    "</s>",
    "<eos>",
    "<|eos|>",
    "<|im_end|>",
)
BOS_CANDIDATES = ("<｜begin▁of▁sentence｜>", "<|begin_of_text|>", "<s>", "<bos>", "<|startoftext|>")

# GPT-2's pre-tokenizer regex, as HF's ByteLevel(use_regex=True) applies it.
GPT2_PATTERN = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""

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


def bytes_to_unicode() -> dict[int, str]:
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


EXPECTED_TOKENIZER = (
    "expected a Hugging Face tokenizer.json (a JSON object with a 'model', as written by tokenizers' "
    "Tokenizer.save or transformers' save_pretrained); a vocab.json, merges.txt or .model file is not one"
)


def parse_tokenizer_json(data: bytes, path: str | None) -> dict[str, Any]:
    """The parsed tokenizer.json, or a ``ConfigError`` that names the file and says what it should be."""
    name = path or "the tokenizer bytes"
    expected = EXPECTED_TOKENIZER
    try:
        config = json.loads(data)
    except UnicodeDecodeError as exc:
        raise ConfigError(
            f"{name} is not a tokenizer.json: not UTF-8 text ({exc.reason}); {expected}"
        ) from exc
    except json.JSONDecodeError as exc:
        raise ConfigError(
            f"{name} is not a tokenizer.json: invalid JSON at line {exc.lineno} column {exc.colno} ({exc.msg}); "
            f"{expected}"
        ) from exc
    if not isinstance(config, dict) or not isinstance(config.get("model"), dict):
        kinds = {
            list: "a JSON array",
            str: "a JSON string",
            int: "a number",
            float: "a number",
            bool: "a boolean",
        }
        found = (
            "an object without a 'model' object"
            if isinstance(config, dict)
            else kinds.get(type(config), "null")
        )
        raise ConfigError(f"{name} is not a tokenizer.json: it holds {found}; {expected}")
    return config


log = logging.getLogger(__name__)

# Per process: tokenizer.json sha256 -> the fast path proven in this process ((tiktoken.Encoding, rank_to_id)),
# or the reason it cannot be used. Building the rank table and proving it costs ~0.5 s; engine tasks in a
# reused worker process (and the in-process executor's copy of the driver's tokenizer) skip it.
_FAST_PATHS: dict[str, tuple[Any, np.ndarray] | str] = {}
# Per process: tokenizer.json sha256 -> the proven ``fastokens.Tokenizer``, or why it cannot be used.
_FASTOKENS: dict[str, Any] = {}
# Per process: tokenizer.json sha256 -> its HF ``Tokenizer`` (parsing GPT-2's JSON takes ~0.15 s).
_HF: dict[str, Any] = {}
# Per process: (tokenizer.json sha256, engine choice) -> the thread of ``warm_in_background`` filling the three
# caches above, and where it leaves its error. Every copy of the tokenizer in the process (the engine unpickles
# a task's stage) waits for it instead of proving the engine a second time.
_WARMING: dict[tuple[str, str], tuple[threading.Thread, dict[str, BaseException]]] = {}
# Per process: tokenizer.json sha256 -> the thread of ``warm_in_background`` loading HF's tokenizer into ``_HF``
# beside the engine's own load (both parse the JSON without the GIL: 0.37 s together against 0.62 s in turn).
_HF_LOADING: dict[str, threading.Thread] = {}

FASTOKENS_THREADS_ENV = "FASTOKENS_BPE_THREADS"
"""fastokens' encoder threads, read from the environment once per process: at its first encode."""


@contextlib.contextmanager
def fastokens_pool_threads(threads: int | None) -> Iterator[None]:
    """For the block, fastokens' first encode in this process (which sizes its thread pool for the process)
    sees ``FASTOKENS_BPE_THREADS=threads``; the user's own setting wins, and the environment is as it was after
    the block (worker processes started later do not inherit it). No effect once fastokens has encoded in this
    process; none with ``threads=None``. ``TextTokenizer.warm_in_background`` takes it around its proof, the
    first encode.

    For a process whose one Python thread feeds the encoder: the tokenize writer in the driver decodes,
    converts texts to ``str``, hashes, spills and writes references under the GIL while batches encode. With
    the encoder on every core its threads take the core of the thread that holds the GIL, and all wait: 320 MB
    on 2 cores took 3.72 s (6.12 CPU-s) with fastokens on 2 threads and 3.31 s (5.36 CPU-s) on 1, the median of
    6 interleaved runs. Several batches encode at once (``TokenizeBatch.IN_FLIGHT``), so the encoder still uses
    every core while Python waits."""
    if threads is None or FASTOKENS_THREADS_ENV in os.environ:
        yield
        return
    os.environ[FASTOKENS_THREADS_ENV] = str(max(1, int(threads)))
    try:
        yield
    finally:
        os.environ.pop(FASTOKENS_THREADS_ENV, None)


BosPolicy = Literal["never", "always"]
EngineChoice = Literal["auto", "hf", "tiktoken", "fastokens"]
ENGINES: tuple[str, ...] = ("auto", "hf", "tiktoken", "fastokens")


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
        if engine not in ENGINES:
            raise ConfigError(f"engine must be one of {', '.join(ENGINES)}; got {engine!r}")
        self.bos_policy: BosPolicy = bos
        self.engine_choice: EngineChoice = engine
        self.num_threads = num_threads
        self.sha256 = hashlib.sha256(self.json_bytes).hexdigest()
        config = parse_tokenizer_json(self.json_bytes, self.path)
        self._added = {t["content"]: int(t["id"]) for t in config.get("added_tokens", [])}
        self.eos_id = self._special_id(config, eos_token, EOS_CANDIDATES, "eos")
        self.bos_id: int | None = None
        if bos == "always":
            try:
                self.bos_id = self._special_id(config, bos_token, BOS_CANDIDATES, "bos")
            except ConfigError:
                # GPT-2 has one special token and uses it as both document separator and BOS.
                log.info(
                    "no BOS token in %s; using the EOS id %d as BOS", self.path or "tokenizer", self.eos_id
                )
                self.bos_id = self.eos_id
        self.__dict__["_config"] = config
        self._hf: Any = None
        self._fast: Any = None
        self._rank_to_id: np.ndarray | None = None
        self._engine: str | None = None
        self._ft: Any = None
        self._tables: tuple[bytes, np.ndarray, dict[str, int], np.ndarray] | None = None
        self._vocab_size: int | None = None
        self._ship_tables = True

    # Pickling ships the JSON bytes, plus the fast path's rank tables once proven (building them from the
    # vocabulary is most of the fast path's setup). Rust objects are rebuilt lazily in the worker, and the
    # shipped tables are proven again there against that process's own HF before first use.
    # A tokenizer warmed in the background (``warm_in_background``) stays in its process and ships no tables:
    # whether its thread has finished when the engine fingerprints the stage (a pickle) must not matter.
    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        tables = None
        if self._fast is not None and self._ship_tables:
            # ranks 0..n-1 in order as one blob + lengths: two objects to pickle, not 50,000 dict entries
            tokens = sorted(self._fast._mergeable_ranks, key=self._fast._mergeable_ranks.get)
            lengths = np.fromiter(map(len, tokens), dtype=np.int32, count=len(tokens))
            tables = (b"".join(tokens), lengths, self._fast._special_tokens, self._rank_to_id)
        state.update(_hf=None, _fast=None, _rank_to_id=None, _engine=None, _tables=tables, _ft=None)
        state.update(_vocab_size=None)
        state.pop("_config", None)  # re-parsed from the JSON bytes on use: cheaper than pickling the dict
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
    def _config(self) -> dict[str, Any]:
        """The parsed tokenizer.json (not pickled: re-parsed on first use in a worker)."""
        return json.loads(self.json_bytes)

    @property
    def vocab_size(self) -> int:
        """Number of ids, added tokens included (decides the shard dtype)."""
        if self._vocab_size is None:
            self._vocab_size = int(self.hf.get_vocab_size(with_added_tokens=True))
        return self._vocab_size

    def warm_in_background(self, fastokens_threads: int | None = None) -> None:
        """Decide and prove the engine and load HF's tokenizer on a thread, starting now.

        fastokens and HF parse the tokenizer.json with the GIL released (~0.5 s for GPT-2 here), so the caller
        plans its job and decodes its first input batch meanwhile. ``engine`` and ``hf`` (of this object and of
        its copies in this process) wait for the thread on first use and raise what it raised. For a tokenizer
        that encodes in this process (the tokenize writer in the driver): it no longer ships its fast path's
        tables when pickled (see ``__getstate__``). ``fastokens_threads``: the threads fastokens encodes on in
        this process, set around the proof, its first encode (``fastokens_pool_threads``).
        """
        self._ship_tables = False
        if self._engine is not None or self._warm_key in _WARMING:
            return
        _ = self._config  # parsed here, so the thread takes no cached_property lock
        errors: dict[str, BaseException] = {}

        def warm() -> None:
            try:
                with fastokens_pool_threads(fastokens_threads):
                    self._decide_engine()
                _ = self.hf
            except BaseException as exc:  # raised where the engine is first used
                errors["error"] = exc

        def load_hf() -> None:
            with contextlib.suppress(Exception):  # a tokenizer HF cannot load fails where ``hf`` is used
                _HF[self.sha256] = self._load_hf()

        if self.sha256 not in _HF and self.sha256 not in _HF_LOADING:
            _HF_LOADING[self.sha256] = threading.Thread(
                target=load_hf, name="zephyr-tokenizer-hf", daemon=True
            )
            _HF_LOADING[self.sha256].start()
        thread = threading.Thread(target=warm, name="zephyr-tokenizer-warm", daemon=True)
        _WARMING[self._warm_key] = (thread, errors)
        thread.start()

    @property
    def _warm_key(self) -> tuple[str, str]:
        """What a warm-up thread proved: its error (a forced engine it could not prove) is this choice's only."""
        return self.sha256, self.engine_choice

    def _await_warm(self) -> None:
        """Wait for ``warm_in_background``'s thread (not from that thread itself); raise what it raised."""
        warming = _WARMING.get(self._warm_key)
        if warming is None or warming[0] is threading.current_thread():
            return
        thread, errors = warming
        thread.join()
        _WARMING.pop(self._warm_key, None)
        if "error" in errors:
            raise errors["error"]

    @property
    def hf(self) -> Any:
        if self._hf is None:
            self._await_warm()
        if self._hf is None:
            loading = _HF_LOADING.get(self.sha256)
            if loading is not None:
                loading.join()
                _HF_LOADING.pop(self.sha256, None)
            self._hf = _HF.get(self.sha256)
        if self._hf is None:
            self._hf = _HF[self.sha256] = self._load_hf()
        return self._hf

    def _load_hf(self) -> Any:
        """HF's ``Tokenizer`` for these bytes; a JSON it cannot load names the file and what is expected."""
        from tokenizers import Tokenizer

        try:
            return Tokenizer.from_str(self.json_bytes.decode("utf-8"))
        except Exception as exc:  # tokenizers raises a bare Exception for a JSON it cannot load
            raise ConfigError(
                f"{self.path or 'the tokenizer bytes'} is not a tokenizer.json the Hugging Face tokenizers "
                f"library can load: {exc}; {EXPECTED_TOKENIZER}"
            ) from exc

    @property
    def engine(self) -> str:
        """``"fastokens"``, ``"tiktoken"`` or ``"hf"``: the encoder ``encode_batch`` uses (decided, and proven,
        on first use, or by ``warm_in_background``)."""
        if self._engine is None:
            self._await_warm()
        if self._engine is None:
            self._decide_engine()
        return self._engine  # type: ignore[return-value]

    def _decide_engine(self) -> None:
        """Set ``_engine``: the first engine of the choice that proves identical to HF (see the module doc)."""
        if self._engine is None:
            choice = self.engine_choice
            skipped = []
            for name, build in (("fastokens", self._build_fastokens), ("tiktoken", self._build_fast_path)):
                if choice not in ("auto", name):
                    continue
                reason = build()
                if reason is None:
                    self._engine = name
                    break
                if choice == name:
                    raise ConfigError(f"the {name} engine cannot be used for this tokenizer: {reason}")
                skipped.append(f"{name}: {reason}")
            if self._engine is None:
                self._engine = "hf"
                if skipped:
                    log.info("tokenizer: HF encoder (%s)", "; ".join(skipped))

    # ---- fastokens -------------------------------------------------------------------------------------
    def _build_fastokens(self) -> str | None:
        """Load and prove ``fastokens`` once per process (see ``_FASTOKENS``); the reason when it fails."""
        cached = _FASTOKENS.get(self.sha256)
        if cached is None:
            cached = self._prove_fastokens()
            _FASTOKENS[self.sha256] = cached
        if isinstance(cached, str):
            return cached
        self._ft = cached
        return None

    def _prove_fastokens(self) -> Any:
        try:
            import fastokens
        except ImportError:
            return "fastokens is not installed"
        try:
            self._ft = fastokens.Tokenizer.from_json_str(self.json_bytes.decode("utf-8"))
        except Exception as exc:  # a model or component it does not implement: fall back
            return f"fastokens refused the tokenizer ({exc})"
        mismatch = self.first_mismatch(PROBE_TEXTS, engine="fastokens")
        tokenizer, self._ft = self._ft, None
        if mismatch is not None:
            return f"fastokens ids differ from HF on probe text {mismatch!r}"
        return tokenizer

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
        """Set up and prove the fast path once per process (see ``_FAST_PATHS``); the reason when it fails."""
        cached = _FAST_PATHS.get(self.sha256)
        if cached is None:
            reason = self._prove_fast_path()
            cached = reason if reason is not None else (self._fast, self._rank_to_id)
            _FAST_PATHS[self.sha256] = cached
        self._tables = None  # shipped tables are not needed once this process has its proven copy
        if isinstance(cached, str):
            return cached
        self._fast, self._rank_to_id = cached
        return None

    def _prove_fast_path(self) -> str | None:
        try:
            import tiktoken
        except ImportError:
            return "tiktoken is not installed"
        if self._tables is not None:  # built and proven by the process that pickled us: prove it here too
            blob, lengths, special, rank_to_id = self._tables
            ends = np.cumsum(lengths).tolist()
            starts = [0, *ends[:-1]]
            ranks = {blob[a:b]: rank for rank, (a, b) in enumerate(zip(starts, ends))}
            if len(ranks) == len(lengths):
                return self._adopt(tiktoken, ranks, special, rank_to_id)
        reason = self._fast_path_shape()
        if reason is not None:
            return reason
        model = self._config["model"]
        vocab: dict[str, int] = model["vocab"]
        decode = {ch: b for b, ch in bytes_to_unicode().items()}
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
        return self._adopt(tiktoken, ranks, special, rank_to_id)

    def _adopt(
        self, tiktoken: Any, ranks: dict[bytes, int], special: dict[str, int], rank_to_id: np.ndarray
    ) -> str | None:
        """Build the ``tiktoken.Encoding`` from rank tables and keep it only if it equals HF on the probe."""
        try:
            fast = tiktoken.Encoding(
                name=f"zephyr-{self.sha256[:12]}",
                pat_str=GPT2_PATTERN,
                mergeable_ranks=ranks,
                special_tokens=special,
            )
        except Exception as exc:  # tiktoken rejects odd vocabularies with assorted errors; fall back to HF
            return f"tiktoken refused the vocabulary ({exc})"
        self._fast, self._rank_to_id = fast, rank_to_id
        mismatch = self.first_mismatch(PROBE_TEXTS, engine="tiktoken")
        if mismatch is not None:
            self._fast, self._rank_to_id = None, None
            return f"tiktoken ids differ from HF on probe text {mismatch!r}"
        return None

    def _fast_encoding(self) -> Any:
        """The proven ``tiktoken.Encoding`` (ids are ranks; see ``rank_to_id``), for benchmarks; None if unproven."""
        return self._fast if self.engine == "tiktoken" else None

    # ---- encoding --------------------------------------------------------------------------------------
    def _encode_lists(self, texts: Sequence[str], *, engine: str) -> list[list[int]]:
        """HF ids of ``texts`` through ``engine`` (for proofs; ``encode_batch`` is the fast way)."""
        if engine == "fastokens":
            return [e.ids for e in self._ft.encode_batch(list(texts), add_special_tokens=False)]
        if engine == "tiktoken":
            assert self._fast is not None and self._rank_to_id is not None  # built by _build_fast_path
            threads = self.num_threads or os.cpu_count() or 1
            ranks = self._fast.encode_batch(list(texts), num_threads=threads, allowed_special="all")
            return [self._rank_to_id[np.asarray(r, dtype=np.int64)].tolist() for r in ranks]
        hf = self.hf
        encode = getattr(hf, "encode_batch_fast", hf.encode_batch)
        return [e.ids for e in encode(list(texts), add_special_tokens=False)]

    def hf_ids(self, text: str) -> list[int]:
        """HF's own ids for one text (the reference every other engine must equal)."""
        return self.hf.encode(text, add_special_tokens=False).ids

    def first_mismatch(self, texts: Sequence[str], *, engine: str | None = None) -> str | None:
        """The first text whose ids differ between ``engine`` (default: the active one) and HF's ``encode``."""
        got = self._encode_lists(texts, engine=engine or self.engine)
        for text, ids in zip(texts, got):
            if list(ids) != self.hf_ids(text):
                return text
        return None

    def _fast_arrays(self, texts: Sequence[str], threads: int | None = None) -> list[np.ndarray]:
        """tiktoken ranks of every text as ``uint32`` arrays, encoded on ``threads`` threads (``None``:
        ``num_threads``, else every core).

        tiktoken releases the GIL while it encodes; ``encode_to_numpy`` hands back its Rust buffer, so no Python
        int is built per token (``encode_batch``'s lists, then list → array, cost ~15% on top of encoding).
        The threads live for one call (a batch): starting two threads costs microseconds, and none outlive it.
        """
        assert self._fast is not None  # built by _build_fast_path
        if not hasattr(self._fast, "encode_to_numpy"):  # tiktoken < 0.8
            ranks = self._fast.encode_batch(list(texts), num_threads=1, allowed_special="all")
            return [np.array(r, dtype=np.uint32) for r in ranks]
        encode = functools.partial(self._fast.encode_to_numpy, allowed_special="all")
        threads = threads or self.num_threads or os.cpu_count() or 1
        if threads == 1 or len(texts) < 2:
            return [encode(t) for t in texts]
        with ThreadPoolExecutor(threads, thread_name_prefix="zephyr-tokenize") as pool:
            return list(pool.map(encode, texts))

    def encode_bodies(
        self, texts: Sequence[str], dtype: Any = np.int64, threads: int | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """Token ids of ``texts`` without EOS/BOS: (flat ids in ``dtype``, int64 lengths[len(texts)]).

        The shard writer's spill path: the encoder's flat buffer is cast once to the shard dtype (not at all
        when that is fastokens' ``uint32``), and EOS/BOS are added where the shard is packed, so no pass
        scatters the ids around the special tokens. ``dtype`` must hold every id (see ``zephyr.tokenize.shards.token_dtype``).
        ``threads``: tiktoken's threads for this call (``None``: ``num_threads``, else every core).
        """
        dtype = np.dtype(dtype)
        engine = self.engine
        if engine == "fastokens":
            # one flat uint32 buffer + uint64 offsets: no Python object per token or per document
            raw, raw_offsets = self._ft.encode_batch_flat(list(texts), add_special_tokens=False)
            lengths = np.diff(np.frombuffer(raw_offsets, dtype="<u8").astype(np.int64))
            return np.frombuffer(raw, dtype="<u4").astype(dtype, copy=False), lengths
        if engine == "tiktoken":
            parts: list[Any] = self._fast_arrays(texts, threads)
        else:
            # one C-level list→array conversion per document (a per-token generator is ~5x slower)
            parts = [np.array(ids, dtype=np.int64) for ids in self._encode_lists(texts, engine="hf")]
        lengths = np.fromiter((len(ids) for ids in parts), dtype=np.int64, count=len(parts))
        body = np.concatenate(parts) if parts else np.zeros(0, dtype=np.uint32)
        if engine == "tiktoken":  # ranks → HF ids, landing in ``dtype`` in the same pass
            return self._rank_to_id.astype(dtype)[body], lengths  # type: ignore[union-attr]
        return body.astype(dtype, copy=False), lengths

    def encode_batch(self, texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """Token ids of ``texts`` as (flat int64 tokens, int64 offsets[len(texts) + 1]), EOS (and BOS) added."""
        body, lengths = self.encode_bodies(texts, np.int64)
        extra = 1 + (self.bos_id is not None)
        offsets = np.zeros(len(lengths) + 1, dtype=np.int64)
        np.cumsum(lengths + extra, out=offsets[1:])
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
