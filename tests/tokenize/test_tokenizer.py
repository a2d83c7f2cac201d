"""TextTokenizer: HF ids + EOS, BOS policy, the fastokens engine proven identical or refused."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from zephyr.tokenize.tokenizer import PROBE_TEXTS, TextTokenizer

from zephyr.errors import ConfigError

from .conftest import TRAIN_TEXT, documents, train_bpe

EDGE_TEXTS = ["", " ", "\n\n\n", "!!!???", "a" * 1000, "x <|endoftext|> y", "日本語 😀", "   \t  mixed\r\n"]


def test_normalizer_is_no_reason_to_fall_back(tmp_path: Path) -> None:
    path = train_bpe(tmp_path / "lower.json", lowercase=True)
    for engine in ("hf", "auto"):
        tok = TextTokenizer(path, engine=engine)
        assert documents(tok, ["Hello World"]) == [tok.hf_ids("Hello World") + [tok.eos_id]]
    assert TextTokenizer(path, engine="hf").engine == "hf"


def test_bos_policy(bpe_tokenizer: Path) -> None:
    tok = TextTokenizer(bpe_tokenizer, bos="always")
    texts = ["ab", "", "cd"]
    assert documents(tok, texts) == [[tok.bos_id, *tok.hf_ids(text), tok.eos_id] for text in texts]


@pytest.mark.parametrize("engine", ["auto", "hf"])
def test_encode_bodies_are_hf_ids_in_the_shard_dtype(bpe_tokenizer: Path, engine: str) -> None:
    """The spill path's ids (shard dtype, no EOS/BOS) are exactly HF's, one document after the other."""
    texts = ["ab", "", "cd ef", *TRAIN_TEXT[:5]]
    tok = TextTokenizer(bpe_tokenizer, bos="always", engine=engine)
    body, lengths = tok.encode_bodies(texts, np.dtype("<u2"))
    assert body.dtype == np.dtype("<u2") and lengths.tolist() == [len(tok.hf_ids(t)) for t in texts]
    bodies = np.split(body, np.cumsum(lengths)[:-1])
    assert [ids.tolist() for ids in bodies] == [tok.hf_ids(t) for t in texts]


def test_missing_eos_is_a_config_error(bpe_tokenizer: Path) -> None:
    with pytest.raises(ConfigError, match="cannot find the EOS token"):
        TextTokenizer(bpe_tokenizer, eos_token="<nope>")
    with pytest.raises(ConfigError, match="not found"):
        TextTokenizer(bpe_tokenizer.parent / "absent.json")


def test_pickles_without_rust_objects(bpe_tokenizer: Path) -> None:
    import pickle

    tok = TextTokenizer(bpe_tokenizer)
    before = tok.encode_bodies(["pickle me"])
    clone = pickle.loads(pickle.dumps(tok))
    assert clone._hf is None and np.array_equal(clone.encode_bodies(["pickle me"])[0], before[0])


def _fresh_caches(monkeypatch) -> None:
    """Forget what this process proved (the caches are per tokenizer sha256, and the test BPE is reused)."""
    import zephyr.tokenize.tokenizer as module

    monkeypatch.setattr(module, "_FASTOKENS", {})


def test_fastokens_engine_is_preferred_and_identical_to_hf(bpe_tokenizer: Path, tmp_path: Path) -> None:
    pytest.importorskip("fastokens")
    lower = train_bpe(tmp_path / "lower.json", lowercase=True)  # with a normalizer
    texts = list(PROBE_TEXTS) + EDGE_TEXTS + TRAIN_TEXT[:5]
    for path in (bpe_tokenizer, lower):
        tok = TextTokenizer(path, bos="always")
        assert tok.engine == "fastokens"
        assert documents(tok, texts) == [[tok.bos_id, *tok.hf_ids(text), tok.eos_id] for text in texts]


def test_auto_falls_back_when_fastokens_is_missing(bpe_tokenizer: Path, monkeypatch) -> None:
    import sys

    _fresh_caches(monkeypatch)
    monkeypatch.setitem(sys.modules, "fastokens", None)  # ``import fastokens`` raises ImportError
    assert TextTokenizer(bpe_tokenizer).engine == "hf"
    with pytest.raises(ConfigError, match="fastokens is not installed"):
        _ = TextTokenizer(bpe_tokenizer, engine="fastokens").engine


def test_an_engine_that_differs_from_hf_is_refused(bpe_tokenizer: Path, monkeypatch) -> None:
    """A fast engine whose ids differ from HF's on the probe is never used: auto falls back to the next."""
    pytest.importorskip("fastokens")
    _fresh_caches(monkeypatch)
    original = TextTokenizer._encode_lists

    def off_by_one(self, texts, *, engine):
        lists = original(self, texts, engine=engine)
        return [[i + 1 for i in ids] for ids in lists] if engine == "fastokens" else lists

    monkeypatch.setattr(TextTokenizer, "_encode_lists", off_by_one)
    assert TextTokenizer(bpe_tokenizer).engine == "hf"
    with pytest.raises(ConfigError, match="differ from HF"):
        _ = TextTokenizer(bpe_tokenizer, engine="fastokens").engine


@pytest.mark.corpus
@pytest.mark.parametrize("model", ["gpt2", "deepseek-v3"])
def test_fastokens_on_corpus(corpus_small: Path, model: str) -> None:
    pytest.importorskip("fastokens")
    import pyarrow.parquet as pq

    tok = TextTokenizer(corpus_small / "models" / model / "tokenizer.json")
    assert tok.engine == "fastokens"
    texts = pq.read_table(sorted((corpus_small / "docs").glob("*.parquet"))[0], columns=["text"]).column(
        "text"
    )
    texts = texts.to_pylist()[::25][:200]
    assert tok.first_mismatch(texts) is None
    assert documents(tok, texts[:20]) == [tok.hf_ids(text) + [tok.eos_id] for text in texts[:20]]


def _count_proofs(monkeypatch) -> dict[str, int]:
    """Forget what this process proved and count the proofs from here on (per engine)."""
    import zephyr.tokenize.tokenizer as module

    _fresh_caches(monkeypatch)
    monkeypatch.setattr(module, "_HF", {})
    monkeypatch.setattr(module, "_HF_LOADING", {})
    monkeypatch.setattr(module, "_WARMING", {})
    calls = {"fastokens": 0}
    original = TextTokenizer._prove_fastokens

    def counted(self):
        calls["fastokens"] += 1
        return original(self)

    monkeypatch.setattr(TextTokenizer, "_prove_fastokens", counted)
    return calls


def test_warm_in_background_proves_once_for_every_copy(bpe_tokenizer: Path, monkeypatch) -> None:
    """The writer in the driver warms its tokenizer on a thread; the engine's unpickled copy of it waits for that
    thread instead of proving again, and the pickle (the stage fingerprint) does not depend on the timing."""
    import pickle

    counted = _count_proofs(monkeypatch)
    reference = TextTokenizer(bpe_tokenizer).engine
    expected = dict(counted)  # the proofs one tokenizer runs without a thread
    calls = _count_proofs(monkeypatch)  # forgotten again, counted afresh

    tok = TextTokenizer(bpe_tokenizer)
    tok.warm_in_background()
    early = pickle.dumps(tok)  # most likely while the thread proves
    copy = pickle.loads(early)
    assert copy.engine == tok.engine == reference
    assert pickle.dumps(tok) == early
    assert calls == expected  # each engine proven at most once, by the thread
    texts = ["ab cd", "", *TRAIN_TEXT[:3]]
    assert [a.tolist() for a in copy.encode_bodies(texts)] == [a.tolist() for a in tok.encode_bodies(texts)]


def test_warm_in_background_loads_hf_beside_the_engine(bpe_tokenizer: Path, monkeypatch) -> None:
    """HF's tokenizer loads on a thread of its own while the engine loads (both parse without the GIL), once;
    the proof and ``hf`` wait for it."""
    import threading

    _count_proofs(monkeypatch)
    loads: list[str] = []
    original = TextTokenizer._load_hf

    def recorded(self):
        loads.append(threading.current_thread().name)
        return original(self)

    monkeypatch.setattr(TextTokenizer, "_load_hf", recorded)
    tok = TextTokenizer(bpe_tokenizer)
    tok.warm_in_background()
    assert tok.engine in ("fastokens", "hf")
    assert tok.hf_ids("ab cd") == tok.encode_bodies(["ab cd"])[0].tolist()
    assert loads == ["zephyr-tokenizer-hf"]


def test_an_hf_load_error_on_the_thread_is_raised_where_hf_is_used(tmp_path: Path, monkeypatch) -> None:
    """The HF thread swallows nothing for good: ``hf`` loads again where it is used and raises the error."""
    _count_proofs(monkeypatch)
    path = train_bpe(tmp_path / "tok.json")

    def broken(self):
        raise ConfigError(f"{self.path} is not a tokenizer.json the Hugging Face tokenizers library can load")

    monkeypatch.setattr(TextTokenizer, "_load_hf", broken)
    tok = TextTokenizer(path, engine="hf")
    tok.warm_in_background()
    with pytest.raises(ConfigError, match="Hugging Face tokenizers library can load"):
        _ = tok.hf


def test_warm_in_background_raises_where_the_engine_is_used(tmp_path: Path, monkeypatch) -> None:
    """A forced engine that cannot be proven fails at first use, in the tokenizer and in its copies."""
    import pickle
    import sys

    _count_proofs(monkeypatch)
    monkeypatch.setitem(sys.modules, "fastokens", None)  # ``import fastokens`` raises ImportError
    path = train_bpe(tmp_path / "tok.json")
    tok = TextTokenizer(path, engine="fastokens")
    tok.warm_in_background()
    copy = pickle.loads(pickle.dumps(tok))
    with pytest.raises(ConfigError, match="fastokens is not installed"):
        _ = copy.engine
    with pytest.raises(ConfigError, match="fastokens is not installed"):
        _ = tok.engine


def test_a_warm_up_error_belongs_to_its_engine_choice(tmp_path: Path, monkeypatch) -> None:
    """A forced engine's failed warm-up, never awaited, does not fail another tokenizer of the same file."""
    import sys

    _count_proofs(monkeypatch)
    monkeypatch.setitem(sys.modules, "fastokens", None)
    path = train_bpe(tmp_path / "tok.json")
    TextTokenizer(path, engine="fastokens").warm_in_background()  # fails on its thread; nobody asks
    auto = TextTokenizer(path)
    auto.warm_in_background()
    assert auto.engine in ("fastokens", "hf")
