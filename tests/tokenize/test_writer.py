"""write_token_shards through the engine: round trip, manifest, determinism, Megatron layout, CLI."""

from __future__ import annotations

import hashlib
import json
import struct
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from zephyr.tokenize import TokenLoader, read_documents, write_token_shards
from zephyr.tokenize.shards import read_manifest
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


def _sha(directory: Path, pattern: str = "*") -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(directory.glob(pattern))}


def test_round_trip_matches_hf_encoding(tmp_path: Path, bpe_tokenizer: Path) -> None:
    texts = _corpus(tmp_path / "in")
    out = tmp_path / "out"
    result = write_token_shards(
        str(tmp_path / "in"),
        tokenizer=str(bpe_tokenizer),
        output=str(out),
        shard_bytes="4KB",
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
    assert not Path(f"{out}.zephyr/work").exists() and not Path(f"{out}.zephyr/staging").exists()
    assert all(p.name.startswith("shard-") or p.name == "manifest.json" for p in out.iterdir())
    # the loader reads it
    sample = next(iter(TokenLoader(str(out), seq_len=16)))
    assert sample["input_ids"].shape == (16,)


def _write_on_two_workers_and_in_process(tmp_path: Path, common: dict) -> None:
    """The shard set of ``tmp_path/in`` written by two local worker processes (``w2``) and in-process (``ip``)."""
    write_token_shards(
        str(tmp_path / "in"),
        output=str(tmp_path / "w2"),
        executor="local",
        workers=2,
        small_job_bytes=0,
        **common,
    )
    write_token_shards(str(tmp_path / "in"), output=str(tmp_path / "ip"), executor="inprocess", **common)


def test_shard_bytes_do_not_depend_on_workers(tmp_path: Path, bpe_tokenizer: Path) -> None:
    """One worker (in-process) vs two local worker processes: byte-identical shard sets."""
    _corpus(tmp_path / "in", n=200, files=3)
    common = dict(tokenizer=str(bpe_tokenizer), shard_bytes="3KB", seed=11, batch_rows=50)
    _write_on_two_workers_and_in_process(tmp_path, common)
    assert _sha(tmp_path / "w2") == _sha(tmp_path / "ip")
    write_token_shards(
        str(tmp_path / "in"), output=str(tmp_path / "s12"), executor="inprocess", **dict(common, seed=12)
    )
    assert _sha(tmp_path / "s12")["shard-00000.tokens.npy"] != _sha(tmp_path / "ip")["shard-00000.tokens.npy"]


def test_pack_adds_specials_identically_for_any_executor_and_batch_rows(
    tmp_path: Path, bpe_tokenizer: Path
) -> None:
    """Spills hold ids only; the pack step frames each document with BOS/EOS. Shards are byte-identical across
    executors and batch sizes (1 row: every document its own spill and pack batch), and every document is
    exactly [BOS, HF ids, EOS]."""
    texts = _corpus(tmp_path / "in", n=120, files=2)
    common = dict(tokenizer=str(bpe_tokenizer), shard_bytes="2KB", seed=4, bos="always")
    runs = {
        "ip64": dict(executor="inprocess", batch_rows=64),
        "ip1": dict(executor="inprocess", batch_rows=1),
        "local7": dict(executor="local", workers=2, small_job_bytes=0, batch_rows=7),
    }
    for name, options in runs.items():
        write_token_shards(str(tmp_path / "in"), output=str(tmp_path / name), **common, **options)
    assert _sha(tmp_path / "ip64") == _sha(tmp_path / "ip1") == _sha(tmp_path / "local7")
    tok = TextTokenizer(bpe_tokenizer, bos="always")
    expected = sorted(tuple([tok.bos_id, *tok.hf_ids(t), tok.eos_id]) for t in texts)
    assert sorted(tuple(d.tolist()) for d in read_documents(str(tmp_path / "ip1"))) == expected


@pytest.mark.slow
def test_shard_bytes_local_one_vs_two_workers(tmp_path: Path, bpe_tokenizer: Path) -> None:
    _corpus(tmp_path / "in", n=400, files=4)
    common = dict(tokenizer=str(bpe_tokenizer), shard_bytes="3KB", seed=2, batch_rows=40, executor="local")
    write_token_shards(str(tmp_path / "in"), output=str(tmp_path / "w1"), workers=1, **common)
    write_token_shards(str(tmp_path / "in"), output=str(tmp_path / "w2"), workers=2, **common)
    assert _sha(tmp_path / "w1") == _sha(tmp_path / "w2")


def test_interrupted_write_resumes_finished_tasks(tmp_path: Path, bpe_tokenizer: Path, monkeypatch) -> None:
    """With a work_dir, a rerun after a failure skips the tokenize and sort tasks that had finished."""
    import zephyr.tokenize._pack as pack_step

    _corpus(tmp_path / "in", n=120, files=3)
    common = dict(tokenizer=str(bpe_tokenizer), shard_bytes="3KB", seed=3, executor="inprocess")
    work = str(tmp_path / "work")
    original = pack_step.PackPartition.__call__

    def fail(self, row):
        raise RuntimeError("crash while packing")

    monkeypatch.setattr(pack_step.PackPartition, "__call__", fail)
    with pytest.raises(Exception, match="crash while packing"):
        write_token_shards(
            str(tmp_path / "in"), output=str(tmp_path / "out"), work_dir=work, max_retries=0, **common
        )
    scratch = list((tmp_path / "work").glob("tokenize-*"))
    assert len(scratch) == 1 and (scratch[0] / "spill").is_dir(), (
        "spills go to the work_dir and survive a failure"
    )
    assert not (tmp_path / "out.zephyr" / "work").exists()
    monkeypatch.setattr(pack_step.PackPartition, "__call__", original)
    result = write_token_shards(str(tmp_path / "in"), output=str(tmp_path / "out"), work_dir=work, **common)
    sorted_stages = result.stats["stages"]
    assert sorted_stages and all(s["tasks_resumed"] == s["tasks"] for s in sorted_stages)
    assert not scratch[0].exists()
    write_token_shards(str(tmp_path / "in"), output=str(tmp_path / "clean"), **common)
    assert _sha(tmp_path / "out") == _sha(tmp_path / "clean")


def test_a_staged_shard_packed_on_a_thread_and_changed_is_packed_again(
    tmp_path: Path, bpe_tokenizer: Path, monkeypatch, caplog
) -> None:
    """With pack threads (the driver's pack job: one task packs every shard, each on a thread), a rerun still
    sees a staged shard changed between the runs and packs again: each thread's side-file records reach the
    task's marker (tests/reliability/test_security.py covers one task a shard)."""
    import zephyr.tokenize.writer as writer

    monkeypatch.setattr(writer, "pack_threads", lambda placed, options: 2)

    _corpus(tmp_path / "in", n=120, files=3)
    common = dict(tokenizer=str(bpe_tokenizer), shard_bytes="3KB", seed=3, executor="inprocess")
    work = str(tmp_path / "work")
    original = writer.write_manifest

    def fail(*args, **kwargs):
        raise RuntimeError("crash before the manifest")

    monkeypatch.setattr(writer, "write_manifest", fail)
    with pytest.raises(RuntimeError, match="crash before the manifest"):
        write_token_shards(str(tmp_path / "in"), output=str(tmp_path / "out"), work_dir=work, **common)
    staged = sorted((tmp_path / "out.zephyr" / "staging" / "shards").glob("shard-*.tokens.npy"))
    assert len(staged) > 1
    staged[1].write_bytes(staged[1].read_bytes()[:-2] + b"\xff\xff")  # same size, other bytes
    monkeypatch.setattr(writer, "write_manifest", original)
    with caplog.at_level("WARNING", logger="zephyr.tasks"):
        result = write_token_shards(
            str(tmp_path / "in"), output=str(tmp_path / "out"), work_dir=work, **common
        )
    (rerun,) = [r.getMessage() for r in caplog.records if "the task reruns" in r.getMessage()]
    assert f"{staged[1].name} does not hold the bytes written" in rerun
    assert 0 < result.stats["tasks_resumed"] < result.stats["tasks"]
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


def test_batches_in_flight_keep_every_document_and_quarantine_every_null(
    tmp_path: Path, bpe_tokenizer: Path
) -> None:
    """fastokens keeps ``TokenizeBatch.IN_FLIGHT`` batches encoding; the task's last ones come out
    of ``finish`` together, their quarantined null texts too. Nulls in the first, a middle and each of the last
    batches: every other document is in the shards with HF's ids, every null is quarantined, in = kept +
    quarantined; and the shards are byte for byte those of HF's own encoder (in the call)."""
    from zephyr.tokenize._encode import TokenizeBatch

    pytest.importorskip("fastokens")
    engine = "fastokens"
    texts = [f"{TRAIN_TEXT[i % len(TRAIN_TEXT)]} number {i}" for i in range(40)]
    nulls = {1, 17, 29, 33, 37, 39}  # batches of 4: 0, 4, 7, 8, 9 (at least the last IN_FLIGHT + 1)
    column = [None if i in nulls else t for i, t in enumerate(texts)]
    (tmp_path / "in").mkdir()
    pq.write_table(pa.table({"text": column}), tmp_path / "in" / "a.parquet")
    common = dict(tokenizer=str(bpe_tokenizer), executor="inprocess", batch_rows=4, shard_bytes="2KB")
    result = write_token_shards(str(tmp_path / "in"), output=str(tmp_path / "o"), engine=engine, **common)
    assert TokenizeBatch.IN_FLIGHT > 1
    assert result.manifest["tokenizer"]["engine"] == engine
    assert result.stats["rows"] == {"in": 40, "kept": 34, "dropped": 0, "quarantined": 6}
    tok = TextTokenizer(bpe_tokenizer)
    expected = sorted(tuple([*tok.hf_ids(t), tok.eos_id]) for i, t in enumerate(texts) if i not in nulls)
    assert sorted(tuple(d.tolist()) for d in read_documents(str(tmp_path / "o"))) == expected
    write_token_shards(str(tmp_path / "in"), output=str(tmp_path / "hf"), engine="hf", **common)
    assert _sha(tmp_path / "o", "shard-*") == _sha(tmp_path / "hf", "shard-*")


def test_batches_in_flight_stay_within_the_byte_cap(tmp_path: Path, bpe_tokenizer: Path, monkeypatch) -> None:
    """``TokenizeBatch.IN_FLIGHT_BYTES``: with room for two batches' text, a third sends the oldest out, so the
    output lags two batches, not ``IN_FLIGHT``; ``finish`` returns the rest and no row is lost."""
    from zephyr.tokenize._encode import TokenizeBatch

    pytest.importorskip("fastokens")
    tok = TextTokenizer(bpe_tokenizer)
    assert tok.engine == "fastokens"
    monkeypatch.setattr(TokenizeBatch, "IN_FLIGHT", 3)  # the byte cap, not the count, holds the third back
    tables = [pa.table({"text": [f"{TRAIN_TEXT[0]} {i:02d} {j}" for j in range(4)]}) for i in range(6)]
    one = tables[0]["text"].cast(pa.large_string()).nbytes
    monkeypatch.setattr(TokenizeBatch, "IN_FLIGHT_BYTES", 2 * one + one // 2)
    step = TokenizeBatch(
        tok, text_column="text", id_column=None, source_column=None, seed=0, spill_dir=str(tmp_path)
    )
    outs = [step(t) for t in tables]
    assert [o is None for o in outs] == [True, True, False, False, False, False]
    assert [o.num_rows for o in outs[2:]] == [4, 4, 4, 4]
    assert step.finish().num_rows == 8


def test_batches_in_flight_encode_on_threads_kept_for_the_process(
    tmp_path: Path, bpe_tokenizer: Path, monkeypatch
) -> None:
    """fastokens keeps a pretokenization cache per calling thread: the batches in flight are encoded on at most
    ``IN_FLIGHT`` kept threads, the same ones for every batch and every task while batches keep coming, not a
    new thread per batch (a cold cache and ~10 MB of fresh tables each); every row comes out."""
    import threading

    from zephyr.tokenize import _encode as encode_step
    from zephyr.tokenize._encode import TokenizeBatch

    pytest.importorskip("fastokens")
    monkeypatch.setattr(encode_step, "_ENCODE_THREADS", None)  # not the threads other tests started
    tok = TextTokenizer(bpe_tokenizer)
    assert tok.engine == "fastokens"
    seen: list[threading.Thread] = []
    encode = tok.encode_bodies

    def recording(*args, **kwargs):
        seen.append(threading.current_thread())
        return encode(*args, **kwargs)

    monkeypatch.setattr(tok, "encode_bodies", recording)
    texts = [f"{TRAIN_TEXT[i % len(TRAIN_TEXT)]} {i}" for i in range(48)]
    outputs = []
    for _task in range(2):
        step = TokenizeBatch(
            tok, text_column="text", id_column=None, source_column=None, seed=0, spill_dir=str(tmp_path)
        )
        outputs += [step(pa.table({"text": texts[i : i + 4]})) for i in range(0, len(texts), 4)]
        outputs.append(step.finish())
    # 24 batches over two tasks on at most IN_FLIGHT threads, all of them still there for the next task
    assert len(seen) == 24 and threading.current_thread() not in seen
    assert len(set(seen)) <= TokenizeBatch.IN_FLIGHT
    assert all(t.name.startswith("zephyr-encode") and t.daemon and t.is_alive() for t in seen)
    assert sum(o.num_rows for o in outputs if o is not None) == 96


def _encode_in_forked_child() -> None:
    from zephyr.tokenize._encode import _in_flight

    assert _in_flight(sum, [1, 2, 3], background=True).result() == 6


def test_encode_threads_start_again_in_a_forked_child() -> None:
    """A child forked after the parent started its encode threads has none of them running: it starts its own
    (otherwise its first batch in flight would wait forever)."""
    import multiprocessing

    from zephyr.tokenize._encode import _in_flight

    assert _in_flight(sum, [1, 2], background=True).result() == 3  # the parent's threads run
    child = multiprocessing.get_context("fork").Process(target=_encode_in_forked_child)
    child.start()
    child.join(timeout=60)
    if child.is_alive():
        child.kill()
        child.join()
    assert child.exitcode == 0


def test_encode_threads_exit_when_idle_and_start_again(monkeypatch) -> None:
    """A kept encode thread exits after ``ENCODE_THREADS_IDLE_SECONDS`` without a batch (its fastokens cache
    goes with it); the next batch starts a thread again."""
    import threading

    from zephyr.tokenize import _encode as encode_step
    from zephyr.tokenize._encode import TokenizeBatch, _in_flight

    monkeypatch.setattr(encode_step, "_ENCODE_THREADS", None)  # this test's own threads
    monkeypatch.setattr(encode_step, "ENCODE_THREADS_IDLE_SECONDS", 0.05)
    jobs = [_in_flight(threading.current_thread) for _ in range(4)]
    first = {job.result() for job in jobs}
    pool = encode_step._encode_threads()
    assert 1 <= len(first) <= TokenizeBatch.IN_FLIGHT and threading.current_thread() not in first
    deadline = time.monotonic() + 10
    while pool.live and time.monotonic() < deadline:
        time.sleep(0.01)
    for thread in first:
        thread.join(timeout=10)
    assert pool.live == 0 and not any(t.is_alive() for t in first)
    again = _in_flight(threading.current_thread).result()
    assert again not in first and again.name.startswith("zephyr-encode") and pool.live == 1


def test_a_batch_queued_as_an_encode_thread_gives_up_is_still_encoded(monkeypatch) -> None:
    """The race of an idle exit: the one thread's wait for a batch times out, a batch is queued right then
    (the thread still counts as live, so no thread is started for it), and only then does the thread decide.
    It must see the batch and stay; leaving would strand it with no thread to run it."""
    import queue
    import threading

    from zephyr.tokenize import _encode as encode_step
    from zephyr.tokenize._encode import TokenizeBatch, _in_flight

    monkeypatch.setattr(encode_step, "_ENCODE_THREADS", None)
    monkeypatch.setattr(encode_step, "ENCODE_THREADS_IDLE_SECONDS", 0.01)
    monkeypatch.setattr(TokenizeBatch, "IN_FLIGHT", 1)
    late: list = []

    class QueuedOnTimeout(queue.SimpleQueue):
        def get(self, block=True, timeout=None):
            try:
                return super().get(block, timeout)
            except queue.Empty:
                if not late:  # the first timeout: another thread queues a batch before the Empty arrives
                    producer = threading.Thread(target=lambda: late.append(_in_flight(pow, 3, 2)))
                    producer.start()
                    producer.join()
                raise

    pool = encode_step._encode_threads()
    pool._jobs = QueuedOnTimeout()
    assert _in_flight(pow, 2, 2).result(timeout=10) == 4
    deadline = time.monotonic() + 10
    while not late and time.monotonic() < deadline:
        time.sleep(0.005)
    assert late and late[0].result(timeout=10) == 9


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
    argv = [
        "tokenize",
        str(tmp_path / "in"),
        "--tokenizer",
        str(bpe_tokenizer),
        "--output",
        str(tmp_path / "out"),
    ]
    argv += ["--shard-bytes", "2KB", "--seed", "5", "--executor", "inprocess", "--json"]
    code = main(argv)
    assert code == 0
    summary = json.loads(capsys.readouterr().out)["details"]
    assert summary["documents"] == 40 and summary["shards"] >= 2
    assert read_manifest(str(tmp_path / "out")).seed == 5


def _one_file_many_row_groups(path: Path, n: int = 240) -> None:
    rng = np.random.default_rng(4)
    texts = [" ".join(rng.choice(WORDS, size=int(rng.integers(1, 60)))) for _ in range(n)]
    path.mkdir(parents=True, exist_ok=True)
    table = pa.table({"id": [f"d{i}" for i in range(n)], "text": texts})
    pq.write_table(table, path / "one.parquet", row_group_size=20)


def test_few_files_are_split_into_tasks_for_the_workers(tmp_path: Path, monkeypatch) -> None:
    """One file of 12 row groups, 2 local workers: split by the engine (``zephyr.physical.plan_read``) into row-group
    runs, 2 tasks at a time (1 thread each); in-process: no split, one task with every core."""
    import zephyr.tokenize.writer as inputs

    from zephyr import ExecutionOptions, physical

    _one_file_many_row_groups(tmp_path / "in")
    monkeypatch.setattr(physical, "SPLIT_MIN_BYTES", 1)
    monkeypatch.setattr(physical, "TASK_MIN_BYTES", 1)
    split, concurrency = inputs.plan_tasks(
        str(tmp_path / "in"), ExecutionOptions(executor="local", workers=2)
    )
    assert split is not None and concurrency == 2
    assert inputs.plan_tasks(str(tmp_path / "in"), ExecutionOptions(executor="inprocess")) == (None, 1)
    monkeypatch.setattr(physical, "SPLIT_MIN_BYTES", 1 << 30)
    split, concurrency = inputs.plan_tasks(
        str(tmp_path / "in"), ExecutionOptions(executor="local", workers=2)
    )
    assert concurrency == 1, "one unsplittable task: one worker, every core for its encoder threads"


def test_split_input_gives_the_same_bytes_as_in_process(
    tmp_path: Path, bpe_tokenizer: Path, monkeypatch
) -> None:
    """Shard bytes depend on data, seed and shard size only: not on how the input was cut into tasks."""
    from zephyr import physical

    _one_file_many_row_groups(tmp_path / "in")
    common = dict(tokenizer=str(bpe_tokenizer), shard_bytes="2KB", seed=5, batch_rows=16)
    # decided in the driver: the workers need not see it
    monkeypatch.setattr(physical, "SPLIT_MIN_BYTES", 1)
    monkeypatch.setattr(physical, "TASK_MIN_BYTES", 1)
    _write_on_two_workers_and_in_process(tmp_path, common)
    assert len(list((tmp_path / "ip").glob("*.tokens.npy"))) > 1
    assert _sha(tmp_path / "w2") == _sha(tmp_path / "ip")


def test_pack_reads_batch_rows_documents_at_a_time(tmp_path: Path, bpe_tokenizer: Path, monkeypatch) -> None:
    """The pack step's memory is one batch of documents: it never gathers more than ``batch_rows`` at once."""
    import zephyr.tokenize._pack as pack_step

    _corpus(tmp_path / "in", n=150, files=1)
    seen: list[int] = []
    original = pack_step.gather

    def spy(directory, files, names, starts, nbytes, **gaps):
        seen.append(len(nbytes))
        return original(directory, files, names, starts, nbytes, **gaps)

    monkeypatch.setattr(pack_step, "gather", spy)
    result = write_token_shards(
        str(tmp_path / "in"),
        tokenizer=str(bpe_tokenizer),
        output=str(tmp_path / "o"),
        batch_rows=8,
        shard_bytes="1MB",
        executor="inprocess",
    )
    assert sum(seen) == result.num_documents == 150 and max(seen) <= 8 and len(seen) >= 150 // 8


@pytest.mark.slow
def test_peak_rss_does_not_grow_with_input(tmp_path: Path, bpe_tokenizer: Path) -> None:
    """RSS growth during a whole write (fresh process, warmed up, sampled every 5 ms) with a fixed batch_rows:
    8x the input adds far less than the extra input. The old writer's sort and pack held token bytes in
    proportion to the input (+0.3 GiB per +120 MB of text). The smaller input is 4 files, not 1: a one-file
    write allocates less than the steady state (10-21 MB of growth, against 18-34 MB for 4, 16 and 48 files).
    The writer runs as by default on 2 cores: in the driver (``writer_plan.driver_encodes``), two pack threads."""
    import subprocess
    import sys

    rng = np.random.default_rng(9)
    words = np.array(WORDS * 4)
    sizes = {}
    for copies in (4, 32):
        src = tmp_path / f"in{copies}"
        src.mkdir()
        for f in range(copies):
            texts = [" ".join(rng.choice(words, size=int(rng.integers(200, 2000)))) for _ in range(600)]
            pq.write_table(pa.table({"text": texts}), src / f"part-{f}.parquet", row_group_size=100)
            sizes[copies] = sizes.get(copies, 0) + sum(len(t) for t in texts)
    script = (
        "import sys, threading, time, psutil\n"
        "from zephyr.tokenize import write_token_shards\n"
        "def write(src, out):\n"
        "    write_token_shards(src, tokenizer=sys.argv[2], output=out, batch_rows=32, shard_bytes='4MB',\n"
        "                       executor='local', workers=2)\n"
        "write(sys.argv[4], sys.argv[3] + '-warm')  # imports, tokenizer proof, first-use allocations\n"
        "me = psutil.Process()\n"
        "base = peak = me.memory_info().rss\n"
        "done = threading.Event()\n"
        "def sample():\n"
        "    global peak\n"
        "    while not done.is_set():\n"
        "        peak = max(peak, me.memory_info().rss)\n"
        "        time.sleep(0.005)\n"
        "thread = threading.Thread(target=sample)\n"
        "thread.start()\n"
        "write(sys.argv[1], sys.argv[3])\n"
        "done.set()\n"
        "thread.join()\n"
        "print(peak - base)\n"
    )
    growth: dict[int, int] = {}
    # Each size is measured twice and the smaller growth kept: allocator retention varies by ~10 MB between
    # runs of the same input, which a leak of the input (its extra 85 MB of text) would exceed many times.
    for copies in (4, 4, 32, 32):
        out = subprocess.run(
            [
                sys.executable,
                "-c",
                script,
                str(tmp_path / f"in{copies}"),
                str(bpe_tokenizer),
                str(tmp_path / f"o{copies}"),
                str(tmp_path / "in4"),
            ],
            check=True,
            capture_output=True,
            text=True,
            cwd=tmp_path,
        )
        measured = int(out.stdout.strip().splitlines()[-1])
        growth[copies] = min(growth.get(copies, measured), measured)
    print("RSS growth during the write", growth, "text bytes", sizes)
    assert growth[32] - growth[4] < 0.4 * (sizes[32] - sizes[4]), (growth, sizes)


def test_up_to_two_local_workers_encode_in_the_driver(
    tmp_path: Path, bpe_tokenizer: Path, monkeypatch
) -> None:
    """``local`` with <= DRIVER_MAX_WORKERS workers runs the writer's jobs in the driver (one tokenizer load,
    the encoder on every core, the next batch decoded meanwhile, the shards packed two at a time on threads);
    more workers, or ``small_job_bytes=0``, keep worker processes. The shards are the same bytes either way."""
    import threading

    from zephyr.tokenize import _pack as pack_step
    from zephyr.tokenize import writer

    from zephyr import ExecutionOptions, physical

    _one_file_many_row_groups(tmp_path / "in")
    monkeypatch.setattr(physical, "SPLIT_MIN_BYTES", 1)
    monkeypatch.setattr(physical, "TASK_MIN_BYTES", 1)

    def pool(**kw):
        return writer.place_writer(str(tmp_path / "in"), ExecutionOptions(**kw), dict(kw)).pool

    assert pool(executor="local", workers=2, small_job_bytes=1)["executor"] == "inprocess"
    assert pool(executor="local", workers=3, small_job_bytes=1)["executor"] == "local"
    assert pool(executor="local", workers=2, small_job_bytes=0)["executor"] == "local"
    # under DRIVER_MIN_BUDGET_BYTES the driver's extra memory does not fit the budget: workers
    assert pool(executor="local", workers=2, small_job_bytes=1, memory_budget="64MiB")["executor"] == "local"
    assert pool(executor="local", workers=2, small_job_bytes=1, memory_budget="256MiB")["executor"] == "local"
    assert (
        pool(executor="local", workers=2, small_job_bytes=1, memory_budget="512MiB")["executor"]
        == "inprocess"
    )
    packed_on: list[str] = []
    pack = pack_step.PackPartition.pack

    def recorded(self, row):
        packed_on.append(threading.current_thread().name)
        return pack(self, row)

    monkeypatch.setattr(pack_step.PackPartition, "pack", recorded)
    common = dict(tokenizer=str(bpe_tokenizer), shard_bytes="2KB", seed=5, batch_rows=16)
    result = write_token_shards(
        str(tmp_path / "in"),
        output=str(tmp_path / "d"),
        executor="local",
        workers=2,
        small_job_bytes=1,
        **common,
    )
    assert result.stats["tokenize_plan"]["executor"] == "inprocess"
    assert len(result.manifest["shards"]) == len(packed_on) > 2
    assert result.stats["jobs"][-1]["tasks"] == 1  # the pack job: one task, its shards on two threads
    assert {name.rsplit("_", 1)[0] for name in packed_on} == {"zephyr-pack"}
    assert len(set(packed_on)) == 2
    write_token_shards(
        str(tmp_path / "in"),
        output=str(tmp_path / "w"),
        executor="local",
        workers=2,
        small_job_bytes=0,
        **common,
    )
    assert _sha(tmp_path / "d") == _sha(tmp_path / "w")


@pytest.mark.parametrize("executor", ["inprocess", "local"])
def test_a_forced_engine_that_cannot_be_proven_fails_naming_it(
    tmp_path: Path, executor: str, monkeypatch
) -> None:
    """In the driver the tokenizer proves itself on a thread (``warm_in_background``); a forced engine it cannot
    prove still fails the call with the reason, and leaves no scratch directory behind."""
    import sys

    import zephyr.tokenize.tokenizer as module

    from zephyr.errors import ConfigError

    from .conftest import train_bpe

    monkeypatch.setattr(module, "_FASTOKENS", {})
    monkeypatch.setattr(module, "_WARMING", {})
    monkeypatch.setitem(sys.modules, "fastokens", None)  # ``import fastokens`` raises ImportError
    _corpus(tmp_path / "in")
    path = train_bpe(tmp_path / "tok.json")
    with pytest.raises(ConfigError, match="fastokens engine cannot be used.*not installed"):
        write_token_shards(
            tmp_path / "in",
            tokenizer=path,
            output=str(tmp_path / "out"),
            engine="fastokens",
            executor=executor,
        )
    assert not (tmp_path / "out.zephyr" / "work").exists()


def test_shards_do_not_depend_on_how_the_input_is_split(tmp_path: Path, bpe_tokenizer: Path) -> None:
    """The same documents in one file (one task in the driver) or in three (tasks on two workers): the same
    shards, byte for byte. More documents than a task's key sample (4,096), so cuts taken from samples would
    differ with the layout; the writer cuts the hash-key space evenly instead (``shard_cuts``)."""
    n = 9000
    _corpus(tmp_path / "one", n=n, files=1)
    _corpus(tmp_path / "three", n=n, files=3)
    common = dict(tokenizer=str(bpe_tokenizer), shard_bytes="64KB", seed=5, batch_rows=1000)
    one = write_token_shards(
        str(tmp_path / "one"), output=str(tmp_path / "a"), executor="inprocess", **common
    )
    three = write_token_shards(
        str(tmp_path / "three"), output=str(tmp_path / "b"), workers=2, small_job_bytes=0, **common
    )
    assert three.stats["tokenize_plan"]["workers"] == 2 and len(one.manifest["shards"]) >= 4
    shards = {k: v for k, v in _sha(tmp_path / "a").items() if k.startswith("shard-")}
    assert shards == {k: v for k, v in _sha(tmp_path / "b").items() if k.startswith("shard-")}
    sizes = [s["num_documents"] for s in one.manifest["shards"]]
    assert sum(sizes) == n and max(sizes) < 1.2 * n / len(sizes)  # even in expectation: uniform hash keys


def test_fastokens_pool_threads_sets_the_first_encode_and_restores_the_environment(monkeypatch) -> None:
    """The setting is there for the block only, and the user's own value wins."""
    import os

    from zephyr.tokenize.tokenizer import FASTOKENS_THREADS_ENV, fastokens_pool_threads

    monkeypatch.delenv(FASTOKENS_THREADS_ENV, raising=False)
    with fastokens_pool_threads(3):
        assert os.environ[FASTOKENS_THREADS_ENV] == "3"
    assert FASTOKENS_THREADS_ENV not in os.environ
    monkeypatch.setenv(FASTOKENS_THREADS_ENV, "7")
    with fastokens_pool_threads(0):
        assert os.environ[FASTOKENS_THREADS_ENV] == "7"
    assert os.environ[FASTOKENS_THREADS_ENV] == "7"


@pytest.mark.parametrize("user_threads", [None, "2"])
def test_the_driver_leaves_a_core_to_python_unless_the_user_sized_fastokens(
    tmp_path: Path, bpe_tokenizer: Path, user_threads: str | None
) -> None:
    """In the driver fastokens encodes on all cores but one (here 2 - 1: no pool thread beside the caller's),
    unless the user set FASTOKENS_BPE_THREADS (2: one pool thread); the environment is left as it was. In a
    fresh process: fastokens sizes its pool once per process."""
    import os
    import subprocess
    import sys

    pytest.importorskip("fastokens")
    _corpus(tmp_path / "in", n=60, files=1)
    script = (
        "import os, sys\n"
        "os.cpu_count = lambda: 2\n"
        "from zephyr.tokenize import write_token_shards\n"
        "r = write_token_shards(sys.argv[1], tokenizer=sys.argv[2], output=sys.argv[3], shard_bytes='2KB',\n"
        "                       executor='local', workers=2)\n"
        "assert r.manifest['tokenizer']['engine'] == 'fastokens', r.manifest['tokenizer']\n"
        "names = {open(f'/proc/self/task/{t}/comm').read().strip() for t in os.listdir('/proc/self/task')}\n"
        "print(sorted(n for n in names if n.startswith('fastokens')), os.environ.get('FASTOKENS_BPE_THREADS'))\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "FASTOKENS_BPE_THREADS"}
    if user_threads is not None:
        env["FASTOKENS_BPE_THREADS"] = user_threads
    out = (
        subprocess.run(
            [sys.executable, "-c", script, str(tmp_path / "in"), str(bpe_tokenizer), str(tmp_path / "out")],
            check=True,
            capture_output=True,
            text=True,
            env=env,
        )
        .stdout.strip()
        .splitlines()[-1]
    )
    expected = "[] None" if user_threads is None else "['fastokens-0'] 2"
    assert out == expected


@pytest.mark.parametrize(
    "shard_bytes, batch_rows, message",
    [
        ("1KB", 16, r"shard_bytes: must be at least 1024 bytes, got '1KB' \(1000 bytes\); give a larger"),
        (100, 16, r"at least 1024 bytes, got 100 \(100 bytes\)"),
        ("4KB", 0, r"batch_rows: must be >= 1, got 0"),
    ],
)
def test_too_small_shards_and_batches_are_refused_before_any_work(
    tmp_path: Path, bpe_tokenizer: Path, shard_bytes, batch_rows, message
):
    """'1KB' is 1000 bytes (decimal, as everywhere in zephyr): the message says so, not just the limit."""
    from zephyr.errors import ConfigError

    pq.write_table(pa.table({"text": ["a b c"]}), tmp_path / "in.parquet")
    with pytest.raises(ConfigError, match=message):
        write_token_shards(
            str(tmp_path / "in.parquet"),
            tokenizer=str(bpe_tokenizer),
            output=str(tmp_path / "out"),
            shard_bytes=shard_bytes,
            batch_rows=batch_rows,
        )
    assert not (tmp_path / "out").exists()
