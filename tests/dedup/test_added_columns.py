"""``zephyr dedup``: no silent overwrites of an input's ``dup_*`` columns (``zephyr.removal``)."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from zephyr.cli import main

TEXT = "the same words in the same order for the two copies of this document"


def _input(tmp_path, **extra) -> str:
    rows = {"id": ["a", "b", "c"], "text": [TEXT, TEXT, "another document entirely"], **extra}
    path = tmp_path / "in.parquet"
    pq.write_table(pa.table(rows), path)
    return str(path)


@pytest.mark.parametrize("kind", ["exact", "fuzzy"])
def test_annotate_refuses_existing_dup_columns(tmp_path, capsys, kind):
    src = _input(tmp_path, dup_keep=[True, True, True])
    out = tmp_path / "out"
    assert (
        main(["dedup", kind, src, "--output", str(out), "--mode", "annotate", "--executor", "inprocess"]) == 1
    )
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "full traceback" not in err, err
    assert f"{src}: the input already has a column 'dup_keep'; pass --replace-columns to replace it" in err
    assert "--output-column NAME" in err
    assert not out.exists() or not list(out.glob("*.parquet"))


def test_replace_columns_output_column_and_remove_mode(tmp_path):
    src = _input(tmp_path, dup_keep=[False, False, False])
    run = ["dedup", "exact", src, "--mode", "annotate", "--executor", "inprocess"]

    assert main([*run, "--output", str(tmp_path / "ow"), "--replace-columns"]) == 0
    replaced = pq.read_table(tmp_path / "ow").sort_by("id")
    assert replaced["dup_keep"].to_pylist() == [True, False, True]

    assert main([*run, "--output", str(tmp_path / "oc"), "--output-column", "exact"]) == 0
    renamed = pq.read_table(tmp_path / "oc").sort_by("id")
    assert renamed.column_names == [
        "id",
        "text",
        "dup_keep",
        "exact_cluster",
        "exact_cluster_size",
        "exact_keep",
    ]
    assert renamed["dup_keep"].to_pylist() == [False] * 3 and renamed["exact_keep"].to_pylist() == [
        True,
        False,
        True,
    ]

    assert (
        main([*run, "--output", str(tmp_path / "rm"), "--mode", "remove"]) == 0
    )  # nothing added: no refusal
    kept = pq.read_table(tmp_path / "rm").sort_by("id")
    assert kept.to_pydict() == {
        "id": ["a", "c"],
        "text": [TEXT, "another document entirely"],
        "dup_keep": [False, False],
    }  # the input's column passes unchanged


def test_paragraph_annotate_checks_its_own_columns(tmp_path, capsys):
    src = _input(tmp_path, dup_paragraphs=[7, 7, 7])
    run = ["dedup", "paragraph", src, "--mode", "annotate", "--executor", "inprocess"]
    assert main([*run, "--output", str(tmp_path / "r")]) == 1
    assert "a column 'dup_paragraphs'" in capsys.readouterr().err
    assert main([*run, "--output", str(tmp_path / "oc"), "--output-column", "para"]) == 0
    out = pq.read_table(tmp_path / "oc").sort_by("id")
    assert out["dup_paragraphs"].to_pylist() == [7, 7, 7] and out["para_paragraphs"].to_pylist() == [0, 1, 0]


def test_paragraph_bloom_and_url_commands_check_their_columns(tmp_path, capsys):
    src = _input(
        tmp_path,
        dup_paragraphs=[7, 7, 7],
        dup_keep=[True, True, True],
        url=["https://example.org/a", "https://EXAMPLE.org/a", "https://example.org/b"],
    )
    bloom = [
        "dedup",
        "paragraph",
        src,
        "--method",
        "bloom",
        "--expected",
        "100",
        "--mode",
        "annotate",
        "--executor",
        "inprocess",
    ]
    assert main([*bloom, "--output", str(tmp_path / "r")]) == 1
    assert "a column 'dup_paragraphs'" in capsys.readouterr().err
    assert main([*bloom, "--output", str(tmp_path / "oc"), "--output-column", "para"]) == 0
    out = pq.read_table(tmp_path / "oc")
    assert out["dup_paragraphs"].to_pylist() == [7, 7, 7] and "para_paragraph_bytes" in out.column_names

    url = ["dedup", "url", src, "--mode", "annotate", "--executor", "inprocess"]
    assert main([*url, "--output", str(tmp_path / "u")]) == 1
    assert "a column 'dup_keep'" in capsys.readouterr().err
    assert main([*url, "--output", str(tmp_path / "urm"), "--mode", "remove"]) == 0
    kept = pq.read_table(tmp_path / "urm").sort_by("id")
    assert kept["id"].to_pylist() == ["a", "c"] and kept["dup_keep"].to_pylist() == [True, True]
