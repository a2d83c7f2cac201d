"""write_token_shards through the engine: round trip, manifest, determinism, Megatron layout, CLI."""

from __future__ import annotations

import hashlib
import json
import struct
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from zephyr.tokenize import TokenLoader, read_documents, write_token_shards
from zephyr.tokenize.format import read_manifest
from zephyr.tokenize.tokenizer import TextTokenizer

from .conftest import TRAIN_TEXT

WORDS = [
    "alpha",
    "beta",
    "gamma",
    "delta",
    "epsilon",
    "zeta",
    "eta",
    "theta",
    "iota",
    "kappa",
    "lambda",
    "mu",
    "42",
    "7",
    "ü",
    "東京",
    "🎉",
]


def _corpus(path: Path, n: int = 300, files: int = 2) -> list[str]:
    rng = np.random.default_rng(1)
    texts = [" ".join(rng.choice(WORDS, size=int(rng.integers(1, 80)))) for _ in range(n)]
    texts[3] = ""  # an empty document still gets its EOS
    texts[4] = texts[5]  # an exact duplicate text (different id)
    path.mkdir(parents=True, exist_ok=True)
    for f, part in enumerate(np.array_split(np.arange(n), files)):
        pq.write_table(
            pa.table(
                {
                    "id": [f"doc/{i}" for i in part],
                    "text": [texts[i] for i in part],
                    "source": ["even" if i % 2 == 0 else "odd" for i in part],
                }
            ),
            path / f"part-{f}.parquet",
        )
    return texts


def _sha(directory: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(directory.iterdir())}


def test_round_trip_matches_hf_encoding(tmp_path: Path, bpe_tokenizer: Path) -> None:
    texts = _corpus(tmp_path / "in")
    out = tmp_path / "out"
    result = write_token_shards(
        str(tmp_path / "in"),
        tokenizer=str(bpe_tokenizer),
        output=str(out),
        shard_size="4KB",
        seed=3,
        executor="inprocess",
        batch_rows=64,
    )
    tok = TextTokenizer(bpe_tokenizer)
    expected = sorted(tuple(tok.hf_ids(t) + [tok.eos_id]) for t in texts)
    docs = [tuple(d.tolist()) for d in read_documents(str(out))]
    assert sorted(docs) == expected
    assert docs != [tuple(tok.hf_ids(t) + [tok.eos_id]) for t in texts]  # shuffled
    manifest = read_manifest(str(out))
    assert manifest.num_documents == len(texts) == result.num_documents
    assert manifest.num_tokens == sum(len(d) for d in docs) == result.num_tokens
    assert len(manifest.shards) > 1 and manifest.dtype == np.dtype("uint16")
    raw = result.manifest
    assert raw["tokenizer"]["sha256"] == hashlib.sha256(bpe_tokenizer.read_bytes()).hexdigest()
    assert raw["seed"] == 3 and raw["sources"]["per_source"]["even"]["documents"] == 150
    assert sum(v["tokens"] for v in raw["sources"]["per_source"].values()) == manifest.num_tokens
    for shard in manifest.shards:
        for f in shard.files.values():
            assert hashlib.sha256((out / f.path).read_bytes()).hexdigest() == f.sha256
    assert not any(p.name.startswith("_work") for p in out.iterdir())
    # the loader reads it
    sample = next(iter(TokenLoader(str(out), seq_len=16)))
    assert sample["input_ids"].shape == (16,)


def test_shard_bytes_do_not_depend_on_workers(tmp_path: Path, bpe_tokenizer: Path) -> None:
    """One worker (in-process) vs two local worker processes: byte-identical shard sets."""
    _corpus(tmp_path / "in", n=200, files=3)
    common = dict(tokenizer=str(bpe_tokenizer), shard_size="3KB", seed=11, batch_rows=50)
    write_token_shards(
        str(tmp_path / "in"), output=str(tmp_path / "w2"), executor="local", workers=2, small_job_bytes=0, **common
    )
    write_token_shards(str(tmp_path / "in"), output=str(tmp_path / "ip"), executor="inprocess", **common)
    assert _sha(tmp_path / "w2") == _sha(tmp_path / "ip")
    write_token_shards(
        str(tmp_path / "in"), output=str(tmp_path / "s12"), executor="inprocess", **dict(common, seed=12)
    )
    assert _sha(tmp_path / "s12")["shard-00000.tokens.npy"] != _sha(tmp_path / "ip")["shard-00000.tokens.npy"]


@pytest.mark.slow
def test_shard_bytes_local_one_vs_two_workers(tmp_path: Path, bpe_tokenizer: Path) -> None:
    _corpus(tmp_path / "in", n=400, files=4)
    common = dict(tokenizer=str(bpe_tokenizer), shard_size="3KB", seed=2, batch_rows=40, executor="local")
    write_token_shards(str(tmp_path / "in"), output=str(tmp_path / "w1"), workers=1, **common)
    write_token_shards(str(tmp_path / "in"), output=str(tmp_path / "w2"), workers=2, **common)
    assert _sha(tmp_path / "w1") == _sha(tmp_path / "w2")


def test_interrupted_write_resumes_finished_tasks(tmp_path: Path, bpe_tokenizer: Path, monkeypatch) -> None:
    """With a work_dir, a rerun after a failure skips the tokenize and sort tasks that had finished."""
    import zephyr.tokenize.writer as writer

    _corpus(tmp_path / "in", n=120, files=3)
    common = dict(tokenizer=str(bpe_tokenizer), shard_size="3KB", seed=3, executor="inprocess")
    work = str(tmp_path / "work")
    original = writer._PackPartition.__call__

    def fail(self, row):
        raise RuntimeError("crash while packing")

    monkeypatch.setattr(writer._PackPartition, "__call__", fail)
    with pytest.raises(Exception, match="crash while packing"):
        write_token_shards(str(tmp_path / "in"), output=str(tmp_path / "out"), work_dir=work, max_retries=0, **common)
    assert (tmp_path / "out" / "_work").is_dir(), "scratch must survive a failure when a work_dir is given"
    monkeypatch.setattr(writer._PackPartition, "__call__", original)
    result = write_token_shards(str(tmp_path / "in"), output=str(tmp_path / "out"), work_dir=work, **common)
    sorted_stages = result.stats["stages"]
    assert sorted_stages and all(s["tasks_resumed"] == s["tasks"] for s in sorted_stages)
    assert not (tmp_path / "out" / "_work").exists()
    write_token_shards(str(tmp_path / "in"), output=str(tmp_path / "clean"), **common)
    assert _sha(tmp_path / "out") == _sha(tmp_path / "clean")


def test_megatron_index_layout(tmp_path: Path, bpe_tokenizer: Path) -> None:
    _corpus(tmp_path / "in", n=60, files=1)
    out = tmp_path / "out"
    write_token_shards(
        str(tmp_path / "in"),
        tokenizer=str(bpe_tokenizer),
        output=str(out),
        megatron=True,
        executor="inprocess",
    )
    shard = read_manifest(str(out)).shards[0]
    tokens = np.load(out / shard.files["tokens"].path)
    offsets = np.load(out / shard.files["offsets"].path)
    idx = (out / shard.files["megatron_idx"].path).read_bytes()
    # Megatron-LM _IndexWriter: magic, <Q version, <B dtype code, <Q seq count, <Q doc-index count, arrays
    assert idx[:9] == b"MMIDIDX\x00\x00"
    version, code, n_seq, n_doc = struct.unpack_from("<QBQQ", idx, 9)
    assert (version, code, n_seq, n_doc) == (1, 8, shard.num_documents, shard.num_documents + 1)
    pos = 9 + 8 + 1 + 8 + 8
    sizes = np.frombuffer(idx, "<i4", n_seq, pos)
    pointers = np.frombuffer(idx, "<i8", n_seq, pos + 4 * n_seq)
    doc_idx = np.frombuffer(idx, "<i8", n_doc, pos + 12 * n_seq)
    assert len(idx) == pos + 12 * n_seq + 8 * n_doc
    assert sizes.tolist() == np.diff(offsets).tolist()
    assert pointers.tolist() == (offsets[:-1] * 2).tolist()
    assert doc_idx.tolist() == list(range(n_seq + 1))
    data = np.frombuffer((out / shard.files["megatron_bin"].path).read_bytes(), "<u2")
    assert np.array_equal(data, tokens)


def test_null_text_is_quarantined_not_lost(tmp_path: Path, bpe_tokenizer: Path) -> None:
    (tmp_path / "in").mkdir()
    pq.write_table(pa.table({"text": ["kept one", None, "kept two"]}), tmp_path / "in" / "a.parquet")
    result = write_token_shards(
        str(tmp_path / "in"), tokenizer=str(bpe_tokenizer), output=str(tmp_path / "o"), executor="inprocess"
    )
    assert result.num_documents == 2


def test_missing_text_column_names_it(tmp_path: Path, bpe_tokenizer: Path) -> None:
    from zephyr.errors import ZephyrError

    (tmp_path / "in").mkdir()
    pq.write_table(pa.table({"body": TRAIN_TEXT[:3]}), tmp_path / "in" / "a.parquet")
    with pytest.raises(ZephyrError, match="body|text"):
        write_token_shards(
            str(tmp_path / "in"),
            tokenizer=str(bpe_tokenizer),
            output=str(tmp_path / "o"),
            executor="inprocess",
        )


def test_cli(tmp_path: Path, bpe_tokenizer: Path, capsys) -> None:
    from zephyr.cli import main

    _corpus(tmp_path / "in", n=40, files=1)
    code = main(
        [
            "tokenize",
            str(tmp_path / "in"),
            "--tokenizer",
            str(bpe_tokenizer),
            "--output",
            str(tmp_path / "out"),
            "--shard-size",
            "2KB",
            "--seed",
            "5",
            "--executor",
            "inprocess",
        ]
    )
    assert code == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["documents"] == 40 and summary["shards"] >= 2
    assert read_manifest(str(tmp_path / "out")).seed == 5
