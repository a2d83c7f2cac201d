"""A ``zephyr run`` pipeline's entries are steps (issue 14): the old "stage" spellings still work for one release,
each with a ``ZephyrDeprecationWarning``, and a job begun under them resumes under the new ones redoing nothing."""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
import warnings
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import yaml
from zephyr.pipelines.config import apply_overrides, load_config, parse_config
from zephyr.pipelines.runner import run_pipeline

from zephyr.config import ZephyrDeprecationWarning
from zephyr.errors import ConfigError

SAMPLE = Path(__file__).resolve().parents[2] / "data" / "sample" / "sample.parquet"
NEW = {"name": "t", "steps": [{"step": "read", "paths": ["/"]}, {"step": "fuzzy_dedup", "threshold": 0.7}]}
OLD = {"name": "t", "stages": [{"stage": "read", "paths": ["/"]}, {"stage": "fuzzy_dedup", "threshold": 0.7}]}


def test_an_old_config_loads_as_the_new_one_with_one_warning_per_old_key() -> None:
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        old = parse_config(OLD)
    messages = [str(w.message) for w in seen if issubclass(w.category, ZephyrDeprecationWarning)]
    assert len(messages) == 2, messages  # one for stages:, one for stage: however many entries use it
    assert "stages: is renamed steps:" in messages[0] and "stage: key is renamed step:" in messages[1]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        new = parse_config(NEW)
    assert old == new
    assert old.to_dict()["steps"][1]["step"] == "fuzzy_dedup" and "stages" not in old.to_dict()


@pytest.mark.parametrize(
    ("raw", "needle"),
    [
        pytest.param({**NEW, "stages": OLD["stages"]}, "both stages: (the old name) and steps:", id="top"),
        pytest.param(
            {"name": "t", "steps": [{"step": "read", "stage": "read", "paths": ["/"]}]},
            "steps[0] has both stage: (the old name) and step:",
            id="entry",
        ),
    ],
)
def test_both_names_of_a_key_is_an_error_naming_both(raw: dict, needle: str) -> None:
    with pytest.raises(ConfigError) as info, warnings.catch_warnings():
        warnings.simplefilter("ignore", ZephyrDeprecationWarning)
        parse_config(raw)
    assert needle in str(info.value)


def test_an_old_set_override_still_works_with_a_warning() -> None:
    with pytest.warns(
        ZephyrDeprecationWarning,
        match=r"--set stages\.fuzzy_dedup\.threshold= is renamed "
        r"--set steps\.fuzzy_dedup\.threshold=",
    ):
        raw = apply_overrides(NEW, ["stages.fuzzy_dedup.threshold=0.9"])
    assert parse_config(raw).step("fuzzy_dedup").config.dedup.threshold == 0.9
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert apply_overrides(NEW, ["steps.fuzzy_dedup.threshold=0.9"]) == raw


def test_messages_say_step() -> None:
    with pytest.raises(ConfigError, match=r"no step named 'nope'; steps: read, fuzzy_dedup"):
        parse_config(NEW).step("nope")
    raw = {
        "name": "t",
        "steps": [{"step": "read", "paths": ["/"]}, {"step": "fuzzy_dedup", "threshold": 1.5}],
    }
    with pytest.raises(ConfigError, match=r"steps\[1\]\.threshold: must be within \(0, 1\], got 1\.5"):
        parse_config(raw)


def test_fingerprints_are_those_of_the_stage_vocabulary() -> None:
    """The hash of an entry did not change with the rename (pinned: the value zephyr computed before it)."""
    read = parse_config(
        {"name": "t", "steps": [{"step": "read", "paths": ["/"]}, {"step": "normalize"}]}
    ).steps[0]
    assert read.fingerprint("x") == "71eafebd3270a183fe4dd3a4b5eef9d047417893537682104742da9e834b5e71"
    assert read.record_dict()["stage"] == "read" and read.to_dict()["step"] == "read"


def test_old_python_names_still_import_with_a_warning() -> None:
    from zephyr.pipelines import config, runner
    from zephyr.pipelines.web import config as web_config

    for module, old, new in [
        (config, "StageEntry", "StepEntry"),
        (config, "LangIdStage", "LangIdStep"),
        (config, "STAGE_TYPES", "STEP_TYPES"),
        (web_config, "ExtractStage", "ExtractStep"),
        (runner, "stage_dir_name", "step_dir_name"),
    ]:
        with pytest.warns(ZephyrDeprecationWarning, match=f"{module.__name__}.{old} is renamed"):
            assert getattr(module, old) is getattr(module, new)
    with pytest.raises(AttributeError):
        config.NoSuchStage  # noqa: B018
    cfg = parse_config(NEW)
    with pytest.warns(
        ZephyrDeprecationWarning, match=r"PipelineConfig\.stages is renamed PipelineConfig\.steps"
    ):
        assert cfg.stages == cfg.steps
    with pytest.warns(ZephyrDeprecationWarning, match=r"PipelineConfig\.stage\(\) is renamed"):
        assert cfg.stage("read") is cfg.step("read")


@pytest.mark.parametrize(
    ("old", "new", "names"),
    [
        ("zephyr.pipelines.stage_ops", "zephyr.pipelines.step_ops", {"StageContext": "StepContext"}),
        ("zephyr.pipelines.stage_configs", "zephyr.pipelines.step_configs", {"TrainStage": "TrainStep"}),
    ],
)
def test_an_old_module_serves_the_old_names(old: str, new: str, names: dict[str, str], monkeypatch) -> None:
    monkeypatch.delitem(sys.modules, old, raising=False)
    with pytest.warns(ZephyrDeprecationWarning, match=f"{old} is renamed {new}"):
        legacy = importlib.import_module(old)
    for old_name, new_name in names.items():
        with pytest.warns(ZephyrDeprecationWarning, match=f"{old}.{old_name} is renamed {new}.{new_name}"):
            assert getattr(legacy, old_name) is getattr(importlib.import_module(new), new_name)


def _write(path: Path, config: dict) -> Path:
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def test_a_job_begun_with_stages_resumes_with_steps_redoing_nothing(tmp_path) -> None:
    """The resume guarantee across the rename: same fingerprints, every step skipped, no file rewritten; only
    ``pipeline.yaml`` (the config as run) now says ``steps:``."""
    data = tmp_path / "in.parquet"
    pq.write_table(pq.read_table(SAMPLE).slice(0, 60), data)
    entries = [
        ("read", {"paths": [str(data)], "num_shards": 2}),
        ("heuristic_filter", {}),
        ("exact_dedup", {}),
    ]
    old = _write(
        tmp_path / "old.yaml", {"name": "rename", "stages": [{"stage": t, **kw} for t, kw in entries]}
    )
    new = _write(tmp_path / "new.yaml", {"name": "rename", "steps": [{"step": t, **kw} for t, kw in entries]})
    job = tmp_path / "job"
    with pytest.warns(ZephyrDeprecationWarning):
        old_config = load_config(old)
    first = run_pipeline(old_config, job, execution={"executor": "inprocess"}, report=False)
    assert [r["status"] for r in first.steps] == ["ran"] * 3
    files = sorted(p for p in job.rglob("*") if p.is_file() and p.name != "pipeline.yaml")
    before = {p: (p.stat().st_mtime_ns, p.read_bytes()) for p in files if p.name != "stats.json"}

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the new spellings warn about nothing
        again = run_pipeline(load_config(new), job, execution={"executor": "inprocess"}, report=False)
    assert [r["status"] for r in again.steps] == ["skipped"] * 3
    assert [r["fingerprint"] for r in again.steps] == [r["fingerprint"] for r in first.steps]
    assert {p: (p.stat().st_mtime_ns, p.read_bytes()) for p in before} == before
    assert yaml.safe_load((job / "pipeline.yaml").read_text())["steps"][0]["step"] == "read"
    record = json.loads((job / "01-heuristic_filter.zephyr" / "stats.json").read_text())
    assert (
        record["step"] == "heuristic_filter" and record["config"]["stage"] == "heuristic_filter"
    )  # hashed: kept


def test_run_pipeline_reads_its_old_keywords_with_a_warning(tmp_path) -> None:
    data = tmp_path / "in.parquet"
    pq.write_table(pq.read_table(SAMPLE).slice(0, 20), data)
    config = parse_config(
        {"name": "kw", "steps": [{"step": "read", "paths": [str(data)]}, {"step": "normalize"}]}
    )
    with pytest.warns(ZephyrDeprecationWarning, match=r"run_pipeline\(until_stage=\) is renamed"):
        result = run_pipeline(
            config, tmp_path / "job", execution={"executor": "inprocess"}, report=False, until_stage="read"
        )
    assert [r["step"] for r in result.steps] == ["read"]
    with pytest.warns(ZephyrDeprecationWarning, match=r"PipelineResult\.stages is renamed"):
        assert result.stages == result.steps


def test_the_executable_runs_an_old_config_with_one_deprecation_line_per_key(tmp_path) -> None:
    config = tmp_path / "p.yaml"
    config.write_text("stages:\n  - stage: read\n    paths: [/]\n  - stage: normalize\n")
    cmd = [sys.executable, "-m", "zephyr.cli", "run", str(config), "--check"]
    out = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    deprecated = [line for line in out.stderr.splitlines() if line.startswith("zephyr: deprecated:")]
    assert deprecated == [
        "zephyr: deprecated: the config key stages: is renamed steps:; write steps: (the old name is read until "
        "the next release)",
        "zephyr: deprecated: an entry's stage: key is renamed step:; write step: (the old name is read until the "
        "next release)",
    ]
    assert "2 steps, job dir" in out.stdout


@pytest.mark.parametrize("name", ["zephyr.pipelines.config", "zephyr.pipelines.step_renames"])
def test_doctests(name: str) -> None:
    import doctest

    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0 and result.failed == 0
