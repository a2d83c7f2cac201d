"""Batch text → token ids identical to HF ``tokenizers``, through the fastest engine proven identical.

``TextTokenizer`` is built from the bytes of a ``tokenizer.json`` (so it pickles to any worker without a
shared filesystem) and loads the Rust objects lazily on first use. ``encode_bodies(texts)`` returns one flat
token array plus each document's length; ``eos_id`` (appended to every document) and ``bos_id`` (prepended
under the ``"always"`` policy) are added where the shard is packed (``zephyr.tokenize._pack``). Ids are HF's
own ``encode(text, add_special_tokens=False).ids``: added tokens that appear literally in the text are
recognized, exactly as HF does.

Engines, tried in this order by ``engine="auto"``; each is used only after it reproduced HF's ids exactly on a
built-in probe sample (scripts, digits, whitespace runs, contractions, emoji, code, special tokens), in the
process that uses it, and any difference falls back to the next:

- ``fastokens`` (optional dependency, ``pip install zephyr[tokenize-fast]``): a Rust reimplementation of HF's
  pipeline that loads the same ``tokenizer.json`` (any model shape it supports: GPT-2, DeepSeek-V3...) and
  returns a batch as one flat ``uint32`` buffer + offsets, no Python object per token.
- ``hf``: HF ``tokenizers`` itself.

Before any library loads it, ``TextTokenizer`` reads from a ``tokenizer.json``: the parsed JSON (or an
error that names the file and says what it should be), the special-token names it looks for, and the probe
texts every engine must encode exactly as HF does.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, Literal

import numpy as np

from zephyr.config import describe_value
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
        found = "an object without a 'model' object" if isinstance(config, dict) else describe_value(config)
        raise ConfigError(f"{name} is not a tokenizer.json: it holds {found}; {expected}")
    return config


log = logging.getLogger(__name__)

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
EngineChoice = Literal["auto", "hf", "fastokens"]
ENGINES: tuple[str, ...] = ("auto", "hf", "fastokens")


class TextTokenizer:
    """A tokenizer.json with an EOS/BOS policy; encodes batches to flat arrays + lengths.

    Args:
        spec: path to a ``tokenizer.json``, or its content (``bytes``).
        bos: ``"never"`` (default) or ``"always"`` (prepend BOS to each document).
        eos_token / bos_token: override the detected special tokens (by their text).
        engine: ``"auto"`` (fastokens when it is proven identical, else HF), ``"hf"`` or ``"fastokens"``
            (fail when it cannot be proven).
    """

    def __init__(
        self,
        spec: str | os.PathLike[str] | bytes,
        *,
        bos: BosPolicy = "never",
        eos_token: str | None = None,
        bos_token: str | None = None,
        engine: EngineChoice = "auto",
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
        self._hf: Any = None
        self._engine: str | None = None
        self._ft: Any = None
        self._vocab_size: int | None = None

    # Pickling ships the JSON bytes; Rust objects are rebuilt lazily in the worker, and the engine is proven
    # again there against that process's own HF before first use.
    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state.update(_hf=None, _engine=None, _ft=None, _vocab_size=None)
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
        that encodes in this process (the tokenize writer in the driver). ``fastokens_threads``: the threads fastokens encodes on in
        this process, set around the proof, its first encode (``fastokens_pool_threads``).
        """
        if self._engine is not None or self._warm_key in _WARMING:
            return
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
        """``"fastokens"`` or ``"hf"``: the encoder ``encode_bodies`` uses (decided, and proven,
        on first use, or by ``warm_in_background``)."""
        if self._engine is None:
            self._await_warm()
        if self._engine is None:
            self._decide_engine()
        return self._engine  # type: ignore[return-value]

    def _decide_engine(self) -> None:
        """Set ``_engine``: fastokens when the choice allows it and it proves identical to HF, else HF."""
        if self._engine is not None:
            return
        reason = self._build_fastokens() if self.engine_choice != "hf" else "engine='hf'"
        if reason is None:
            self._engine = "fastokens"
        elif self.engine_choice == "fastokens":
            raise ConfigError(f"the fastokens engine cannot be used for this tokenizer: {reason}")
        else:
            self._engine = "hf"
            if self.engine_choice == "auto":
                log.info("tokenizer: HF encoder (fastokens: %s)", reason)

    # ---- fastokens -------------------------------------------------------------------------------------
    def _build_fastokens(self) -> str | None:
        """Load and prove ``fastokens`` once per process (see ``_FASTOKENS``); the reason when it fails."""
        if self.sha256 not in _FASTOKENS:
            _FASTOKENS[self.sha256] = self._prove_fastokens()
        cached = _FASTOKENS[self.sha256]
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

    # ---- encoding --------------------------------------------------------------------------------------
    def _encode_lists(self, texts: Sequence[str], *, engine: str) -> list[list[int]]:
        """HF ids of ``texts`` through ``engine`` (for proofs; ``encode_bodies`` is the fast way)."""
        if engine == "fastokens":
            return [e.ids for e in self._ft.encode_batch(list(texts), add_special_tokens=False)]
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

    def encode_bodies(self, texts: Sequence[str], dtype: Any = np.int64) -> tuple[np.ndarray, np.ndarray]:
        """Token ids of ``texts`` without EOS/BOS: (flat ids in ``dtype``, int64 lengths[len(texts)]).

        The shard writer's spill path: the encoder's flat buffer is cast once to the shard dtype (not at all
        when that is fastokens' ``uint32``), and EOS/BOS are added where the shard is packed, so no pass
        scatters the ids around the special tokens. ``dtype`` must hold every id (see ``zephyr.tokenize.shards.token_dtype``).
        """
        dtype = np.dtype(dtype)
        if self.engine == "fastokens":
            # one flat uint32 buffer + uint64 offsets: no Python object per token or per document
            raw, raw_offsets = self._ft.encode_batch_flat(list(texts), add_special_tokens=False)
            lengths = np.diff(np.frombuffer(raw_offsets, dtype="<u8").astype(np.int64))
            return np.frombuffer(raw, dtype="<u4").astype(dtype, copy=False), lengths
        # one C-level list→array conversion per document (a per-token generator is ~5x slower)
        parts = [np.array(ids, dtype=np.int64) for ids in self._encode_lists(texts, engine="hf")]
        lengths = np.fromiter((len(ids) for ids in parts), dtype=np.int64, count=len(parts))
        body = np.concatenate(parts) if parts else np.zeros(0, dtype=np.uint32)
        return body.astype(dtype, copy=False), lengths
