"""A --tokenizer file that is not a tokenizer.json: one line naming the file and what was expected."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from zephyr.tokenize.tokenizer import TextTokenizer

from zephyr.errors import ConfigError

from .conftest import FAST, GOOD, error_lines, zephyr_cli

NOT_TOKENIZERS = {
    "not-json": (b"version: 1\nmodel: bpe\n", "invalid JSON at line 1 column 1"),
    "truncated": (b'{"model": {"type": "BPE", "vocab": {"a": 0', "invalid JSON at line 1"),
    "binary": (b"\x80\x81\x82 not text", "not UTF-8 text"),
    "array": (b"[1, 2, 3]", "it holds [1, 2, 3] (list)"),
    "vocab-json": (b'{"hello": 0, "world": 1}', "an object without a 'model' object"),
}


@pytest.mark.parametrize("name", list(NOT_TOKENIZERS))
def test_cli_names_the_file_and_what_is_expected(tmp_path, name):
    content, detail = NOT_TOKENIZERS[name]
    bad = tmp_path / "bad.json"
    bad.write_bytes(content)
    data = tmp_path / "in.parquet"
    pq.write_table(pa.table({"text": [GOOD]}), data)
    run = zephyr_cli("tokenize", str(data), "--tokenizer", str(bad), "--output", str(tmp_path / "t"), *FAST)
    assert run.returncode == 1
    lines = error_lines(run)
    assert len(lines) == 1, run.stderr
    assert f"{bad} is not a tokenizer.json" in lines[0] and detail in lines[0]
    assert "expected a Hugging Face tokenizer.json" in lines[0]


def test_json_the_tokenizers_library_cannot_load(tmp_path):
    bad = tmp_path / "tokenizer.json"
    bad.write_text('{"model": {"type": "NoSuchModel"}, "added_tokens": [{"id": 0, "content": "</s>"}]}')
    tok = TextTokenizer(
        bad
    )  # the JSON itself is checked when the tokenizer is built; the model when first used
    with pytest.raises(
        ConfigError, match=r"tokenizer\.json is not a tokenizer\.json the Hugging Face tokenizers"
    ):
        _ = tok.vocab_size
