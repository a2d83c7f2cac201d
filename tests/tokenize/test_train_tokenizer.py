"""``zephyr tokenizer train``: a byte-level BPE from a bounded, deterministic sample of a corpus."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from zephyr.tokenize.tokenizer import PROBE_TEXTS, TextTokenizer
from zephyr.tokenize.train_tokenizer import iter_sample, sample_bound, train_tokenizer

from zephyr.cli import main
from zephyr.errors import ConfigError, InputError, OutputError, SchemaError

from .conftest import documents

REPO = Path(__file__).resolve().parents[2]
SAMPLE = REPO / "data" / "sample" / "sample.parquet"


def _jsonl(path: Path, texts: list) -> Path:
    path.write_text("".join(json.dumps({"text": t}) + "\n" for t in texts))
    return path


@pytest.fixture(scope="module")
def sample_tokenizer(tmp_path_factory) -> tuple[Path, object]:
    out = tmp_path_factory.mktemp("trained") / "tokenizer.json"
    return out, train_tokenizer(str(SAMPLE), vocab_size=1000, output=str(out), sample_bytes="2MB")


def test_trains_on_the_sample_and_round_trips(sample_tokenizer):
    from tokenizers import Tokenizer

    path, result = sample_tokenizer
    assert (
        result.output == str(path) and result.vocab_size == 1000 and result.files == result.files_sampled == 1
    )
    assert 1_990_000 < result.sample_bytes <= result.bound_bytes == 2_000_000 and result.documents > 300
    hf = Tokenizer.from_file(str(path))
    assert hf.token_to_id("<|endoftext|>") == 0 and hf.get_vocab_size() == 1000
    texts = pq.read_table(SAMPLE, columns=["text"])["text"].to_pylist()[::100] + list(PROBE_TEXTS)
    for text in texts:  # byte-level: every text, in any script, decodes back to itself
        assert hf.decode(hf.encode(text).ids, skip_special_tokens=False) == text
    ours = TextTokenizer(path)  # what `zephyr tokenize` loads; it finds the EOS and proves fastokens
    fast = importlib.util.find_spec("fastokens") is not None
    assert ours.eos_id == 0 and ours.engine == ("fastokens" if fast else "hf")
    encoded = documents(ours, texts[:5])
    assert [ids[-1] for ids in encoded] == [0] * 5
    assert encoded[0][:-1] == hf.encode(texts[0]).ids
    assert len(hf.encode(texts[0]).ids) < len(texts[0].encode()) / 2.5  # it learned English merges


def test_same_inputs_give_the_same_bytes_in_another_process(sample_tokenizer, tmp_path):
    path, result = sample_tokenizer
    again = tmp_path / "again.json"
    code = (
        "from zephyr.tokenize.train_tokenizer import train_tokenizer; "
        f"train_tokenizer({str(SAMPLE)!r}, vocab_size=1000, output={str(again)!r}, sample_bytes='2MB')"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=tmp_path)
    assert again.read_bytes() == path.read_bytes()
    import hashlib

    assert hashlib.sha256(again.read_bytes()).hexdigest() == result.sha256


def test_the_sample_is_an_equal_share_of_every_file(tmp_path):
    folder = tmp_path / "in"
    folder.mkdir()
    _jsonl(folder / "a.jsonl", ["aaaa " * 10, "bbbb " * 10])  # 50 + 50 bytes
    _jsonl(folder / "b.jsonl", ["short"])  # 5 bytes: its unused share passes to c
    _jsonl(folder / "c.jsonl", ["c1 " * 30, "c2 " * 30, None, "c3 " * 30])  # 90 bytes each, a null skipped
    pieces = list(iter_sample(str(folder), 150))
    # a: share 50 -> its first document; b: share 50 -> "short"; c: share 95 -> c1 whole, c2 cut after a space
    assert pieces == ["aaaa " * 10, "short", "c1 " * 30, "c2 "]
    assert sum(len(p.encode()) for p in pieces) <= 150
    assert list(iter_sample(str(folder), 10_000)) == [
        "aaaa " * 10,
        "bbbb " * 10,
        "short",
        "c1 " * 30,
        "c2 " * 30,
        "c3 " * 30,
    ]


def test_long_documents_go_to_the_trainer_in_pieces(tmp_path, monkeypatch):
    import zephyr.tokenize.train_tokenizer as module

    monkeypatch.setattr(module, "_PIECE_BYTES", 64)
    text = "".join(f"line {i:02d} of a long document\n" for i in range(10))  # 28 bytes a line
    pieces = list(iter_sample(str(_jsonl(tmp_path / "a.jsonl", [text])), 10_000))
    assert "".join(pieces) == text and all(len(p.encode()) <= 64 and p.endswith("\n") for p in pieces)
    no_newline = "é" * 100  # 200 bytes, 2 a character: cut at character boundaries
    pieces = list(module._pieces(no_newline))
    assert "".join(pieces) == no_newline and [len(p.encode()) for p in pieces] == [64, 64, 64, 8]


def test_memory_budget_lowers_the_sample_bound():
    assert sample_bound("256MB", None) == 256_000_000
    small = sample_bound("256MB", "512MiB")
    assert 1 << 20 < small < 256_000_000 and sample_bound("1MB", "512MiB") == 1_000_000
    with pytest.raises(ConfigError, match="give --memory-budget .* or more"):
        sample_bound("256MB", "200MiB")
    with pytest.raises(ConfigError, match="must be > 0"):
        sample_bound(0, None)


@pytest.mark.parametrize(
    "texts",
    [
        pytest.param([], id="empty-file"),
        pytest.param([None, None], id="null-texts"),
        pytest.param(["", ""], id="empty"),
    ],
)
def test_no_text_is_one_line_saying_so(tmp_path, texts):
    src = _jsonl(tmp_path / "in.jsonl", texts) if texts else tmp_path / "in.jsonl"
    src.touch()
    out = tmp_path / "tok.json"
    with pytest.raises(
        InputError, match=r"no text to train a tokenizer on: 1 file\(s\) .*\(an empty input cannot"
    ):
        train_tokenizer(str(src), vocab_size=600, output=str(out))
    assert not out.exists() and not list(tmp_path.glob("*.tmp-*"))


def test_empty_parquet_file(tmp_path):
    src = tmp_path / "in.parquet"
    pq.write_table(pa.table({"text": pa.array([], pa.string())}), src)
    with pytest.raises(InputError, match="no text to train a tokenizer on"):
        train_tokenizer(str(src), vocab_size=600, output=str(tmp_path / "tok.json"))


def test_bad_text_column_names_the_file(tmp_path):
    src = tmp_path / "in.parquet"
    pq.write_table(pa.table({"body": ["some text"], "n": [1]}), src)
    with pytest.raises(SchemaError, match=r"in.parquet: text column 'text' not found.*--text-column"):
        train_tokenizer(str(src), vocab_size=600, output=str(tmp_path / "tok.json"))
    with pytest.raises(SchemaError, match=r"in.parquet: text column 'n' has type int64, not a string type"):
        train_tokenizer(str(src), vocab_size=600, output=str(tmp_path / "tok.json"), text_column="n")


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"vocab_size": 257}, "vocab_size: must be above 257"),
        ({"vocab_size": 600, "special_tokens": []}, "give at least one special token"),
        ({"vocab_size": 600, "special_tokens": ["<a>", "<a>"]}, "special_tokens: must not repeat"),
        ({"vocab_size": 600, "min_frequency": 0}, "min_frequency: must be >= 1"),
        ({"vocab_size": 600, "sample_bytes": "lots"}, "not a byte size"),
    ],
)
def test_bad_settings(tmp_path, kwargs, message):
    src = _jsonl(tmp_path / "in.jsonl", ["text"])
    with pytest.raises(ConfigError, match=message):
        train_tokenizer(str(src), output=str(tmp_path / "tok.json"), **kwargs)


def test_unreadable_rows_fail_or_are_counted(tmp_path):
    src = tmp_path / "in.jsonl"
    src.write_text('{"text": "a few words of text here"}\n{broken\n')
    with pytest.raises(InputError, match=r"in.jsonl:2: invalid JSON"):
        train_tokenizer(str(src), vocab_size=600, output=str(tmp_path / "tok.json"))
    result = train_tokenizer(
        str(src), vocab_size=600, output=str(tmp_path / "tok.json"), on_error="quarantine"
    )
    assert result.rows_quarantined == 1 and result.documents == 1


def test_fsspec_urls_and_folder_output(tmp_path):
    import fsspec

    fs = fsspec.filesystem("memory")
    fs.pipe(
        "/train-tok/in.jsonl",
        b"".join(json.dumps({"text": f"document {i} about tokens"}).encode() + b"\n" for i in range(50)),
    )
    result = train_tokenizer("memory://train-tok", vocab_size=300, output="memory://train-tok-out/")
    assert result.output == "memory://train-tok-out/tokenizer.json"
    assert TextTokenizer(fs.cat_file("/train-tok-out/tokenizer.json")).eos_id == 0
    folder = tmp_path / "model"
    folder.mkdir()
    assert train_tokenizer("memory://train-tok", vocab_size=300, output=str(folder)).output == str(
        folder / "tokenizer.json"
    )
    assert TextTokenizer(folder).eos_id == 0  # a model folder is accepted where a tokenizer.json is


def test_an_unwritable_output_fails_before_training(tmp_path, monkeypatch):
    import zephyr.tokenize.train_tokenizer as module

    def never(*args, **kwargs):
        raise AssertionError("the input was read before the output was checked")

    monkeypatch.setattr(module, "iter_sample", never)
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(OutputError, match="cannot write the output directory"):
        train_tokenizer(str(SAMPLE), vocab_size=4000, output=str(blocker / "tok.json"))


def test_cli(tmp_path, capsys):
    out = tmp_path / "tok.json"
    argv = [
        "tokenizer",
        "train",
        str(SAMPLE),
        "--vocab-size",
        "500",
        "--output",
        str(out),
        "--sample-bytes",
        "1MB",
        "--special-tokens",
        "<|endoftext|>,<|pad|>",
        "--memory-budget",
        "512MiB",
        "--json",
    ]
    assert main(argv) == 0
    record = json.loads(capsys.readouterr().out)
    summary = record["details"]
    assert (
        record["output"] == str(out) and summary["vocab_size"] == 500 and summary["bound_bytes"] == 1_000_000
    )
    assert record["balanced"] and record["rows_kept"] == summary["documents"] > 0
    assert summary["special_tokens"] == ["<|endoftext|>", "<|pad|>"] and TextTokenizer(out).eos_id == 0
    empty = tmp_path / "empty.jsonl"
    empty.touch()
    assert main(["tokenizer", "train", str(empty), "--vocab-size", "500", "--output", str(out)]) == 1
    err = capsys.readouterr().err.splitlines()
    assert err[0].startswith("zephyr tokenizer train: error: InputError: no text to train a tokenizer on")
    with pytest.raises(SystemExit) as exited:  # the group alone: its usage, exit status 2
        main(["tokenizer"])
    assert exited.value.code == 2 and "usage: zephyr tokenizer" in capsys.readouterr().err


@pytest.mark.slow
def test_peak_rss_of_training_on_the_sample_stays_in_the_budget(tmp_path):
    """The CLI on the whole sample, its RSS sampled every 10 ms from outside (psutil): the peak stays under
    --memory-budget and under the model ``sample_bound`` divides the budget by (base + k x sample bytes)."""
    import psutil
    from zephyr.tokenize.train_tokenizer import _BASE_RSS_BYTES, _RSS_PER_SAMPLE_BYTE

    budget = 512 << 20
    out = tmp_path / "tok.json"
    argv = ["tokenizer", "train", str(SAMPLE), "--vocab-size", "8192", "--output", str(out), "--json"]
    code = f"import sys; from zephyr.cli import main; sys.exit(main({argv + ['--memory-budget', str(budget)]!r}))"
    proc = psutil.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, env={**os.environ})
    peak = 0
    while proc.poll() is None:
        try:
            peak = max(peak, proc.memory_info().rss)
        except psutil.NoSuchProcess:
            break
        time.sleep(0.01)
    stdout = proc.stdout.read()
    assert proc.returncode == 0
    summary = json.loads(stdout)["details"]
    assert summary["sample_bytes"] > 9_000_000 and summary["vocab_size"] == 8192  # the whole sample
    assert peak < budget, f"peak RSS {peak >> 20} MiB over the {budget >> 20} MiB budget"
    model = _BASE_RSS_BYTES + _RSS_PER_SAMPLE_BYTE * summary["sample_bytes"]
    assert peak < model, f"peak RSS {peak >> 20} MiB over the model's {int(model) >> 20} MiB"
