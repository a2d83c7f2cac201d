"""Stats format 2 of ``zephyr run`` (issue 14): step records name their step under ``step``, the job's
``stats.json`` lists them under ``steps``; format-1 files (``stage``/``stages``) are read as format 2, and the
Python API's records and the run's ``--json`` summary keep their old key for one release."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import yaml
from zephyr.pipelines.config import parse_config
from zephyr.pipelines.runner import run_pipeline
from zephyr.pipelines.stats_format import STATS_VERSION, StepRecord, upgrade_job_stats, upgrade_record

from zephyr.cli import main
from zephyr.config import ZephyrDeprecationWarning

from .conftest import as_format_1

SAMPLE = Path(__file__).resolve().parents[2] / "data" / "sample" / "sample.parquet"
RECORD = {
    "version": 2,
    "step": "dedup",
    "type": "exact_dedup",
    "config": {"stage": "exact_dedup", "mode": "remove"},  # as fingerprinted: the old key stays
    "jobs": [{"seconds": 0.1, "stages": ["read", "reduce"]}],  # engine stages: not renamed
    "rows_in": 3,
}


def test_a_format_1_record_reads_as_format_2_and_only_its_step_key_changes() -> None:
    old = as_format_1(RECORD)
    assert list(old)[:2] == ["version", "stage"] and old["version"] == 1
    upgraded = upgrade_record(old)
    assert upgraded == RECORD and list(upgraded) == list(RECORD)  # same keys, same order
    assert upgraded["config"]["stage"] == "exact_dedup" and upgraded["jobs"][0]["stages"] == [
        "read",
        "reduce",
    ]
    assert upgrade_record(RECORD) is RECORD  # format 2 is read as it is
    unversioned = upgrade_record({"stage": "read", "type": "read"})
    assert unversioned == {"step": "read", "type": "read", "version": STATS_VERSION}


def test_a_format_1_job_stats_reads_as_format_2() -> None:
    stats = {"version": 2, "pipeline": "p", "balanced": True, "steps": [RECORD, {**RECORD, "step": "again"}]}
    old = as_format_1(stats)
    assert "steps" not in old and [r["stage"] for r in old["stages"]] == ["dedup", "again"]
    assert upgrade_job_stats(old) == stats and list(upgrade_job_stats(old)) == list(stats)
    assert upgrade_job_stats(stats) is stats
    mixed = {**old, "stages": [as_format_1(RECORD), RECORD]}  # a hand-edited file: each record on its own
    assert upgrade_job_stats(mixed)["steps"] == [RECORD, RECORD]


def _two_steps(tmp_path: Path) -> Path:
    data = tmp_path / "in.parquet"
    pq.write_table(pq.read_table(SAMPLE).slice(0, 20), data)
    path = tmp_path / "two.yaml"
    path.write_text(
        yaml.safe_dump(
            {"name": "two", "steps": [{"step": "read", "paths": [str(data)]}, {"step": "normalize"}]}
        )
    )
    return path


def test_api_records_say_step_and_read_stage_with_a_warning(tmp_path) -> None:
    config = parse_config(yaml.safe_load(_two_steps(tmp_path).read_text()))
    seen: list[dict] = []
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the new key warns about nothing
        result = run_pipeline(
            config,
            tmp_path / "job",
            execution={"executor": "inprocess"},
            report=False,
            on_step_done=seen.append,
        )
        assert [r["step"] for r in result.steps] == [r["step"] for r in seen] == ["read", "normalize"]
        assert result.steps[0].get("stage") is None
    assert all(isinstance(r, StepRecord) for r in (*result.steps, *seen))
    with pytest.warns(ZephyrDeprecationWarning, match='a step record\'s key "stage" is renamed "step"'):
        assert result.steps[1]["stage"] == "normalize"
    with pytest.raises(KeyError):
        result.steps[0]["nope"]
    written = json.loads((tmp_path / "job" / "stats.json").read_text())
    assert written["steps"] == json.loads(
        json.dumps(result.steps, default=str)
    )  # StepRecord writes as a dict


def test_run_summary_lists_steps_and_keeps_stages_for_one_release(tmp_path, capsys) -> None:
    job = tmp_path / "job"
    argv = ["run", str(_two_steps(tmp_path)), "--job-dir", str(job), "--executor", "inprocess", "--no-report"]
    assert main([*argv, "--json"]) == 0
    details = json.loads(capsys.readouterr().out)["details"]
    assert details["steps"] == {"read": "ran", "normalize": "ran"}
    assert details["stages"] == details["steps"]
    assert list(details) == ["report", "html_report", "steps", "stages"]


def test_doctests() -> None:
    import doctest

    from zephyr.pipelines import stats_format

    result = doctest.testmod(stats_format)
    assert result.attempted > 0 and result.failed == 0
