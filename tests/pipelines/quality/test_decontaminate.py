import json

import numpy as np
import pyarrow as pa
import pytest
from zephyr.pipelines.quality.decontaminate import (
    Decontaminate,
    EvalNgramIndex,
    build_eval_index,
    contamination,
    read_eval_texts,
)

import zephyr
from zephyr.errors import ConfigError, SchemaError

QUESTION = "Which planet in the solar system has the largest number of known moons as of the year two thousand twenty three"


def test_shared_13gram_is_found_after_normalization():
    idx = build_eval_index([QUESTION, "too short to index"])
    assert idx.short_items == 1 and len(idx.hashes) == len(QUESTION.split()) - 12
    docs = pa.array(
        [
            "Quiz time! WHICH planet, in the solar system, has the largest number of known moons as of... next",
            "planet in the solar system has the largest number of known moons",  # only 12 words
            None,
            "",
        ]
    )
    assert contamination(docs, idx).tolist() == [3, 0, 0, 0]  # 15 matching words = 3 13-grams


def test_annotate_and_remove(tmp_path):
    build_eval_index([QUESTION]).save(tmp_path / "idx.npz")
    t = pa.table({"text": ["clean text", "prefix " + QUESTION + " suffix"], "id": [1, 2]})
    flagged = Decontaminate(str(tmp_path / "idx.npz"), mode="annotate")(t)
    assert flagged["contaminated"].to_pylist() == [False, True]
    assert flagged["contaminated_ngrams"].to_pylist() == [0, len(QUESTION.split()) - 12]
    remove = Decontaminate(str(tmp_path / "idx.npz"))
    out = remove(t)
    assert out.kept["id"].to_pylist() == [1] and out.dropped == {"decontam_shares_13gram": 1}
    assert remove.reasons(t).to_pylist() == [None, "decontam_shares_13gram"]


def test_an_unknown_mode_is_refused():
    with pytest.raises(ConfigError, match="mode: must be one of 'annotate', 'remove', got 'flag'"):
        Decontaminate("idx.npz", mode="flag")


def test_eval_files_index_roundtrip_and_engine_stage(tmp_path, executor):
    (tmp_path / "eval.jsonl").write_text(json.dumps({"question": QUESTION}) + "\n")
    texts = read_eval_texts([tmp_path / "eval.jsonl"], ["question"])
    idx = build_eval_index(texts)
    idx.save(tmp_path / "idx.npz")
    loaded = EvalNgramIndex.load(tmp_path / "idx.npz")
    np.testing.assert_array_equal(loaded.hashes, idx.hashes)
    with pytest.raises(SchemaError, match="answer"):
        read_eval_texts([tmp_path / "eval.jsonl"], ["answer"])
    ds = zephyr.from_items([{"text": QUESTION}, {"text": "fine"}, {"text": "also fine"}], num_shards=2)
    out = ds.map_batches(Decontaminate(str(tmp_path / "idx.npz")), name="decontam").to_arrow(
        executor=executor, workers=2
    )
    assert sorted(out["text"].to_pylist()) == ["also fine", "fine"]


def test_docstring_examples_run():
    import doctest

    import zephyr.pipelines.quality.decontaminate as module

    result = doctest.testmod(module)
    assert result.attempted >= 1 and result.failed == 0
