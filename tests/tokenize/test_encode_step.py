"""The tokenize step's batch function: encoder threads, references, quarantined null texts."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from zephyr.tokenize._encode import TokenizeBatch
from zephyr.tokenize.tokenizer import TextTokenizer

from zephyr.ops import BatchOutput


@pytest.mark.parametrize("engine", ["fastokens", "hf"])
def test_fastokens_batches_encode_in_flight_hf_in_the_call(
    bpe_tokenizer: Path, tmp_path: Path, monkeypatch, engine: str
) -> None:
    """fastokens keeps the batch in flight on a kept encode thread until the next call or ``finish``; HF
    encodes in the call and returns it at once."""
    import threading

    if engine == "fastokens":
        pytest.importorskip("fastokens")
    tok = TextTokenizer(bpe_tokenizer, engine=engine)
    calls = []
    encode = tok.encode_bodies

    def recording(texts, dtype):
        calls.append(threading.current_thread())
        return encode(texts, dtype)

    monkeypatch.setattr(tok, "encode_bodies", recording)
    step = TokenizeBatch(
        tok, text_column="text", id_column=None, source_column=None, seed=0, spill_dir=str(tmp_path)
    )
    out = step(pa.table({"text": ["the first document", "and a second one", None]}))
    in_flight = engine != "hf"
    if in_flight:
        out, rest = step.finish(), out  # in flight until now
    else:
        rest = step.finish()
    [thread] = calls
    assert (thread is threading.current_thread()) is not in_flight
    assert rest is None
    assert isinstance(out, BatchOutput) and out.quarantined.num_rows == 1  # the null text, quarantined
    refs = out.kept
    assert refs.num_rows == 2 and refs.column_names[:3] == ["key_hi", "key_lo", "num_tokens"]
    ids = [tok.hf_ids(t) for t in ("the first document", "and a second one")]
    assert refs["num_tokens"].to_pylist() == [len(i) + 1 for i in ids]  # EOS is added by the pack step
    spilled = np.fromfile(next(tmp_path.glob("*.tokens")), dtype="<u2" if tok.vocab_size <= 65536 else "<u4")
    assert spilled.tolist() == ids[0] + ids[1]


def test_numeric_values_are_a_view_of_the_buffer_without_pandas() -> None:
    from zephyr.tokenize._pack import numeric_values, string_array

    column = pa.array(np.arange(10, dtype=np.int64)).slice(3, 4)  # an offset into the buffer
    assert numeric_values(column).tolist() == [3, 4, 5, 6]
    assert numeric_values(pa.array([1, 2], pa.int32())).dtype == np.int32
    with pytest.raises(ValueError, match="1 nulls"):
        numeric_values(pa.array([1, None]))
    assert string_array(["a", "ünï", ""]).to_pylist() == ["a", "ünï", ""]
    assert string_array([]).to_pylist() == []


def test_the_writer_in_the_driver_never_imports_pandas(bpe_tokenizer: Path, tmp_path: Path) -> None:
    """pyarrow imports pandas on a first ``Array.to_numpy`` or ``Table.from_pylist`` (~0.3 s); the writer's
    steps avoid both, so a write in the driver process does not pay for it."""
    import subprocess
    import sys

    import pyarrow.parquet as pq

    pq.write_table(
        pa.table({"text": [f"document number {i} " * 20 for i in range(300)]}), tmp_path / "in.parquet"
    )
    code = (
        "import sys\n"
        "from zephyr.tokenize import write_token_shards\n"
        f"write_token_shards({str(tmp_path / 'in.parquet')!r}, tokenizer={str(bpe_tokenizer)!r}, "
        f"output={str(tmp_path / 'out')!r}, shard_bytes='4KB', executor='inprocess')\n"
        "print('pandas' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True)
    assert out.stdout.strip().splitlines()[-1] == "False"


def test_an_encoder_error_in_flight_is_raised_by_the_task(
    bpe_tokenizer: Path, tmp_path: Path, monkeypatch
) -> None:
    """The batch encodes on a thread while the previous one is written: its error comes back in the task."""
    pytest.importorskip("fastokens")
    tok = TextTokenizer(bpe_tokenizer, engine="fastokens")
    step = TokenizeBatch(
        tok, text_column="text", id_column=None, source_column=None, seed=0, spill_dir=str(tmp_path)
    )

    def broken(texts, dtype):
        raise RuntimeError("encoder crashed")

    monkeypatch.setattr(tok, "encode_bodies", broken)
    assert step(pa.table({"text": ["a document"]})) is None
    with pytest.raises(RuntimeError, match="encoder crashed"):
        step.finish()
    assert not list(tmp_path.glob("*.tokens"))


def test_a_one_shard_write_in_the_driver_imports_no_pandas(bpe_tokenizer: Path, tmp_path: Path) -> None:
    """One shard: the reference sort gets no boundaries (``pa.array([])`` would import pandas)."""
    import subprocess
    import sys

    pq.write_table(pa.table({"text": ["a b c", "d e"] * 50}), tmp_path / "in.parquet")
    code = (
        "import sys\n"
        "from zephyr.tokenize import write_token_shards\n"
        f"r = write_token_shards({str(tmp_path / 'in.parquet')!r}, tokenizer={str(bpe_tokenizer)!r},"
        f" output={str(tmp_path / 'out')!r}, shard_bytes='1MB', executor='local', workers=2)\n"
        "print(len(r.manifest['shards']), 'pandas' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["1", "False"]
