"""No silent column replacements: every quality command that adds columns refuses an input that already has one, before
any work, in one line naming the file, the column and both ways out; ``--replace-columns`` and ``--output-column``
each work."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from zephyr.cli import main
from zephyr.errors import ColumnExistsError
from zephyr.io.layout import dropped_dir, quarantine_dir, stats_path
from zephyr.removal import check_added_columns, check_input_columns

from .test_cli import GOOD, _parts, train_quality_model
from .test_langid import SAMPLES

EN, DE = SAMPLES["en"], SAMPLES["de"]


def _refused(capsys, argv: list[str], path, column: str) -> str:
    """Run a command that must refuse; return its one error line after checking what it names."""
    assert main(argv) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert str(path) in err and f"'{column}'" in err, err
    assert (
        "--replace-columns" in err and "--output-column NAME" in err and "replace_columns=True" not in err
    ), err
    assert "full traceback" not in err  # a configuration error: the line is the whole story
    return err


def _claimed(tmp_path, name: str = "claimed.parquet"):
    path = tmp_path / name
    pq.write_table(pa.table({"id": ["a", "b"], "text": [EN, DE], "lang": ["de", "de"]}), path)
    return path


def test_langid_refuses_an_existing_lang_column(tmp_path, capsys, lid_model):
    src = _claimed(tmp_path)
    out = tmp_path / "out"
    argv = ["langid", str(src), "--output", str(out), "--model", lid_model, "--executor", "inprocess"]
    _refused(capsys, argv, src, "lang")
    assert not list(out.glob("part-*.parquet")) and not Path(stats_path(out)).exists()  # no work started


def test_langid_refusal_names_the_file_that_has_the_column(tmp_path, capsys, lid_model):
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "b.jsonl").write_text(json.dumps({"text": EN, "lang_score": 0.5}) + "\n")
    jsonl = tmp_path / "in" / "b.jsonl"
    plain = tmp_path / "in" / "a.jsonl"
    plain.write_text(json.dumps({"text": EN}) + "\n")
    argv = ["langid", str(plain), str(jsonl), "--output", str(tmp_path / "o"), "--model", lid_model]
    _refused(capsys, [*argv, "--executor", "inprocess"], jsonl, "lang_score")


def test_langid_replace_columns_replaces_and_output_column_keeps_the_claim(tmp_path, lid_model):
    src = _claimed(tmp_path)
    common = ["--model", lid_model, "--executor", "inprocess"]
    assert main(["langid", str(src), "--output", str(tmp_path / "ow"), "--replace-columns", *common]) == 0
    replaced = _parts(tmp_path / "ow")
    assert replaced.column_names == ["id", "text", "lang", "lang_score"]
    assert replaced["lang"].to_pylist() == ["en", "de"]

    argv = ["langid", str(src), "--output", str(tmp_path / "oc"), "--output-column", "detected", *common]
    assert main([*argv, "--languages", "en"]) == 0
    kept = _parts(tmp_path / "oc")
    assert kept.select(["id", "lang", "detected"]).to_pylist() == [
        {"id": "a", "lang": "de", "detected": "en"}
    ]
    assert kept["detected_score"][0].as_py() > 0.5  # the filter read the new column, not the claim


def test_langid_without_a_clash_adds_the_columns(tmp_path, lid_model):
    src = tmp_path / "in.parquet"
    pq.write_table(pa.table({"text": [EN]}), src)
    assert (
        main(
            [
                "langid",
                str(src),
                "--output",
                str(tmp_path / "o"),
                "--model",
                lid_model,
                "--executor",
                "inprocess",
            ]
        )
        == 0
    )
    assert _parts(tmp_path / "o").column_names == ["text", "lang", "lang_score"]


@pytest.fixture(scope="module")
def quality_model(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("quality")
    train_quality_model(tmp)
    return tmp / "m.bin"


def test_quality_score_refuses_overwrites_and_renames(tmp_path, capsys, quality_model):
    src = tmp_path / "scored.parquet"
    pq.write_table(pa.table({"text": [GOOD, "buy pills"], "quality_bucket": [7, 7]}), src)
    argv = [
        "quality",
        "score",
        str(src),
        "--model",
        str(quality_model),
        "--buckets",
        "2",
        "--executor",
        "inprocess",
    ]
    _refused(capsys, [*argv, "--output", str(tmp_path / "r")], src, "quality_bucket")

    assert main([*argv, "--output", str(tmp_path / "ow"), "--replace-columns"]) == 0
    replaced = _parts(tmp_path / "ow")
    assert replaced.column_names == ["text", "quality_bucket", "quality_score"]
    assert sorted(replaced["quality_bucket"].to_pylist()) == [0, 1]

    assert main([*argv, "--output", str(tmp_path / "oc"), "--output-column", "q2"]) == 0
    renamed = _parts(tmp_path / "oc")
    assert renamed.column_names == ["text", "quality_bucket", "q2", "q2_bucket"]
    assert renamed["quality_bucket"].to_pylist() == [7, 7]


def test_pii_refuses_count_columns_but_not_without_them(tmp_path, capsys):
    src = tmp_path / "in.parquet"
    pq.write_table(pa.table({"text": ["mail a@b.com"], "pii_email": [9]}), src)
    argv = [str(src), "--executor", "inprocess"]
    _refused(capsys, ["pii", *argv, "--output", str(tmp_path / "r")], src, "pii_email")
    assert main(["pii", *argv, "--output", str(tmp_path / "n"), "--no-count-columns"]) == 0
    assert _parts(tmp_path / "n").to_pylist() == [{"text": "mail <EMAIL>", "pii_email": 9}]
    assert main(["pii", *argv, "--output", str(tmp_path / "oc"), "--output-column", "found"]) == 0
    renamed = _parts(tmp_path / "oc")
    assert renamed["pii_email"].to_pylist() == [9] and renamed["found_email"].to_pylist() == [1]
    assert main(["pii", *argv, "--output", str(tmp_path / "ow"), "--replace-columns"]) == 0
    assert _parts(tmp_path / "ow")["pii_email"].to_pylist() == [1]


def test_decontaminate_annotate_mode_refuses_and_remove_mode_adds_nothing(tmp_path, capsys):
    src = tmp_path / "in.parquet"
    pq.write_table(pa.table({"text": [GOOD, "other words"], "contaminated": [False, True]}), src)
    (tmp_path / "eval.jsonl").write_text(json.dumps({"text": GOOD[:200]}) + "\n")
    argv = ["decontaminate", str(src), "--eval", str(tmp_path / "eval.jsonl"), "--executor", "inprocess"]
    _refused(capsys, [*argv, "--mode", "annotate", "--output", str(tmp_path / "r")], src, "contaminated")
    assert not (tmp_path / "r" / "eval-ngrams.npz").exists()  # refused before the eval index was built
    assert (
        main([*argv, "--mode", "annotate", "--output", str(tmp_path / "oc"), "--output-column", "leak"]) == 0
    )
    flagged = _parts(tmp_path / "oc")
    assert flagged.select(["contaminated", "leak"]).to_pylist() == [
        {"contaminated": False, "leak": True},
        {"contaminated": True, "leak": False},
    ]
    assert main([*argv, "--mode", "annotate", "--output", str(tmp_path / "ow"), "--replace-columns"]) == 0
    assert _parts(tmp_path / "ow")["contaminated"].to_pylist() == [True, False]
    assert main([*argv, "--output", str(tmp_path / "rm")]) == 0  # remove mode: the input's column is data
    assert _parts(tmp_path / "rm").to_pylist() == [{"text": "other words", "contaminated": True}]


def test_filter_refuses_drop_reason_and_output_column_keeps_the_input_one(tmp_path, capsys):
    src = tmp_path / "in.parquet"
    rows = {"id": ["a", "b", "c"], "text": [GOOD, "short", None], "drop_reason": ["x", "y", "z"]}
    pq.write_table(pa.table(rows), src)
    argv = ["filter", str(src), "--executor", "inprocess", "--rules", "c4"]
    _refused(capsys, [*argv, "--output", str(tmp_path / "r")], src, "drop_reason")

    out = tmp_path / "oc"
    assert main([*argv, "--output", str(out), "--output-column", "why"]) == 0
    assert _parts(out).select(["id", "drop_reason"]).to_pylist() == [{"id": "a", "drop_reason": "x"}]
    dropped = _parts(Path(dropped_dir(out)))
    assert dropped.select(["id", "drop_reason"]).to_pylist() == [{"id": "b", "drop_reason": "y"}]
    assert dropped["why"].to_pylist()[0].startswith("c4_")
    quarantine = _parts(Path(quarantine_dir(out)))
    assert quarantine.select(["id", "drop_reason", "quarantine_reason"]).to_pylist() == [
        {"id": "c", "drop_reason": "z", "quarantine_reason": "null_text"}
    ]
    assert json.loads(Path(stats_path(out)).read_text())["filter"]["balanced"]

    out = tmp_path / "ow"
    assert main([*argv, "--output", str(out), "--replace-columns"]) == 0
    assert "drop_reason" not in _parts(out).column_names
    assert _parts(Path(dropped_dir(out)))["drop_reason"].to_pylist()[0].startswith("c4_")


def test_check_names_every_clash_and_passes_empty_and_replace_columns(tmp_path):
    with pytest.raises(
        ColumnExistsError, match=r"columns 'lang', 'lang_score'; pass replace_columns=True to replace them"
    ):
        check_added_columns(["text", "lang", "lang_score"], ["lang", "lang_score"], replace_columns=False)
    check_added_columns(["text", "lang"], ["lang"], replace_columns=True)
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    check_input_columns(
        [str(empty)], ["lang"], replace_columns=False
    )  # no rows, no columns: nothing to replace


def test_one_pass_filter_keeps_an_input_drop_reason():
    from zephyr.pipelines.quality.filters import HeuristicFilter

    t = pa.table({"text": [GOOD, "short", None], "drop_reason": ["x", "y", "z"]})
    out = HeuristicFilter("c4")(t)
    assert out.kept.to_pylist() == [{"text": GOOD, "drop_reason": "x"}]
    assert out.quarantined.select(["drop_reason", "quarantine_reason"]).to_pylist() == [
        {"drop_reason": "z", "quarantine_reason": "null_text"}
    ]
    assert sum(out.dropped.values()) == 1
