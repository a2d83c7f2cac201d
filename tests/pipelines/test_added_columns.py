"""No silent column replacements in ``zephyr run``: a stage that would replace a column the data has refuses before any
work with key paths (``zephyr.pipelines.config.check_added_columns``); ``replace_columns:`` / ``output_column:`` work; dedup and
filter stages keep the data's own ``dup_*`` / ``drop_reason`` columns."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml
from zephyr.pipelines.config import load_config
from zephyr.pipelines.runner import run_pipeline

from zephyr.cli import main
from zephyr.errors import ColumnExistsError

from .quality.test_cli import GOOD
from .test_quickstart import SAMPLE

EN = "The committee will publish its final report on the new railway line next spring. " * 3
DE = "Der Ausschuss wird seinen Abschlussbericht über die neue Bahnstrecke im nächsten Frühjahr veröffentlichen."


def test_quickstart_refuses_the_sample_lang_column_without_replace_columns(tmp_path, capsys):
    argv = [
        "run",
        "quickstart",
        "--job-dir",
        str(tmp_path / "job"),
        "--set",
        "steps.langid.replace_columns=false",
    ]
    assert main(argv) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "full traceback" not in err, err
    assert "steps[2] (langid): the data already has 'lang', 'lang_score'" not in err  # only what it has
    assert "steps[2] (langid): the data already has 'lang'" in err and str(SAMPLE) in err
    assert "steps[2].replace_columns: true" in err and "steps[2].output_column: NAME" in err
    assert not (tmp_path / "job").exists()  # refused before any work
    assert main(["run", "quickstart", "--check", "--set", "steps.langid.replace_columns=false"]) == 1
    assert "steps[2].replace_columns: true" in capsys.readouterr().err
    assert main(["run", "quickstart", "--check"]) == 0  # the shipped config decides: replace_columns: true


def _write(tmp_path: Path, stages: list[dict]) -> Path:
    path = tmp_path / "p.yaml"
    path.write_text(
        yaml.safe_dump({"name": "t", "steps": [{"step": "read", "paths": ["in.parquet"]}, *stages]})
    )
    return path


def test_output_column_is_validated_with_key_paths(tmp_path, capsys):
    pq.write_table(pa.table({"id": ["a"], "text": [EN]}), tmp_path / "in.parquet")
    bad = [
        {"step": "langid", "output_column": "text"},
        {"step": "heuristic_filter", "output_column": " "},
        {"step": "quality", "model": "in.parquet", "replace_columns": "yes"},
    ]
    assert main(["run", str(_write(tmp_path, bad)), "--check"]) == 1
    err = capsys.readouterr().err
    assert "steps[1].output_column: 'text' is the pipeline's text_column; choose another name" in err
    assert "steps[2].output_column: must name a column" in err
    assert "steps[3].replace_columns: must be true or false, got 'yes'" in err


def test_a_column_added_by_an_earlier_stage_is_named_as_its_origin(tmp_path):
    pq.write_table(pa.table({"id": ["a"], "text": [EN]}), tmp_path / "in.parquet")
    stages = [
        {"step": "langid", "output_column": "quality_score"},
        {"step": "quality", "model": "in.parquet"},
    ]
    with pytest.raises(
        ColumnExistsError,
        match=r"steps\[2\] \(quality\): the data already has 'quality_score' "
        r"\(from step 'langid'\)",
    ):
        run_pipeline(
            load_config(_write(tmp_path, stages)), tmp_path / "job", execution={"executor": "inprocess"}
        )


def test_pipeline_keeps_the_data_columns_it_was_told_to(tmp_path, lid_model):
    rows = {
        "id": ["a", "b", "c", "d"],
        "text": [GOOD, DE + " " + DE, GOOD, "short"],
        "lang": ["de", "de", "de", "en"],
        "dup_keep": [False, False, False, False],
        "drop_reason": ["x", "y", "z", "w"],
    }
    pq.write_table(pa.table(rows), tmp_path / "in.parquet")
    stages = [
        {"step": "langid", "output_column": "detected", "model": lid_model},
        {"step": "heuristic_filter", "rules": ["c4"], "output_column": "why"},
        {"step": "exact_dedup"},
    ]
    result = run_pipeline(
        load_config(_write(tmp_path, stages)),
        tmp_path / "job",
        execution={"executor": "inprocess"},
        report=False,
    )
    by = {r["step"]: r for r in result.steps}
    kept = pa.concat_tables([pq.read_table(f) for f in by["exact_dedup"]["files"]])
    assert kept.select(["id", "lang", "detected", "dup_keep", "drop_reason"]).to_pylist() == [
        {"id": "a", "lang": "de", "detected": "en", "dup_keep": False, "drop_reason": "x"}
    ]
    dropped = pa.concat_tables([pq.read_table(f) for f in by["heuristic_filter"]["extra"]["dropped_files"]])
    dropped = dropped.sort_by("id")
    assert dropped.select(["id", "drop_reason"]).to_pylist() == [
        {"id": "b", "drop_reason": "y"},
        {"id": "d", "drop_reason": "w"},
    ]
    assert all(why.startswith("c4_") for why in dropped["why"].to_pylist())
    assert by["langid"]["rows_dropped"] == 0 and all(r["balanced"] for r in result.steps)
