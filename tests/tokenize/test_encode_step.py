"""The tokenize step's batch function: encoder threads, references, quarantined null texts."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from zephyr.tokenize.encode_step import TokenizeBatch
from zephyr.tokenize.tokenizer import TextTokenizer

from zephyr.ops import BatchOutput


@pytest.mark.parametrize("engine", ["tiktoken", "hf"])
def test_every_task_encodes_on_every_core(bpe_tokenizer: Path, tmp_path: Path, monkeypatch, engine: str) -> None:
    """A task uses all cores even when others run beside it: the last task of a step is not left on one."""
    monkeypatch.setattr("os.cpu_count", lambda: 6)
    tok = TextTokenizer(bpe_tokenizer, num_threads=1, engine=engine)
    step = TokenizeBatch(tok, text_column="text", id_column=None, source_column=None, seed=0, spill_dir=str(tmp_path))
    out = step(pa.table({"text": ["the first document", "and a second one", None]}))
    assert tok.num_threads == 6
    assert isinstance(out, BatchOutput) and out.rejected.num_rows == 1  # the null text, quarantined
    refs = out.kept
    assert refs.num_rows == 2 and refs.column_names[:3] == ["key_hi", "key_lo", "num_tokens"]
    ids = [tok.hf_ids(t) for t in ("the first document", "and a second one")]
    assert refs["num_tokens"].to_pylist() == [len(i) + 1 for i in ids]  # EOS is added by the pack step
    spilled = np.fromfile(next(tmp_path.glob("*.tokens")), dtype="<u2" if tok.vocab_size <= 65536 else "<u4")
    assert spilled.tolist() == ids[0] + ids[1]
