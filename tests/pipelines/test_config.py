"""Pipeline config validation: key paths and allowed values in errors, overrides, paths, built-in configs."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from zephyr.dedup.config import FuzzyDedupConfig
from zephyr.pipelines.config import (
    apply_overrides,
    builtin_config,
    check_inputs,
    load_config,
    parse_config,
)

from zephyr.cli import main
from zephyr.errors import ConfigError

REPO = Path(__file__).resolve().parents[2]


def _write(tmp_path: Path, raw: dict, name: str = "p.yaml") -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return path


def _base(tmp_path: Path) -> dict:
    data = tmp_path / "in.parquet"
    data.write_bytes(b"")
    (tmp_path / "tok.json").write_text("{}")
    return {
        "name": "t",
        "steps": [
            {"step": "read", "paths": ["in.parquet"]},
            {"step": "normalize"},
            {"step": "exact_dedup"},
            {"step": "fuzzy_dedup", "threshold": 0.8},
            {"step": "tokenize", "tokenizer": "tok.json"},
        ],
    }


def test_valid_config_resolves_paths_from_the_config_folder(tmp_path):
    cfg = load_config(_write(tmp_path, _base(tmp_path)))
    assert [s.name for s in cfg.steps] == ["read", "normalize", "exact_dedup", "fuzzy_dedup", "tokenize"]
    assert cfg.step("read").step.paths == [str(tmp_path / "in.parquet")]
    assert cfg.step("tokenize").step.tokenizer == str(tmp_path / "tok.json")
    assert cfg.step("fuzzy_dedup").step.dedup.threshold == 0.8


def test_errors_name_the_key_path_and_the_allowed_values(tmp_path):
    raw = _base(tmp_path)
    raw["steps"][3]["threshold"] = 1.5
    raw["steps"][1]["collapse_whitespce"] = True
    raw["steps"][2]["normalize"] = "lowercase"
    raw["steps"].insert(2, {"step": "dedupe"})
    raw["colour"] = "blue"
    with pytest.raises(ConfigError) as info:
        load_config(_write(tmp_path, raw))
    message = str(info.value)
    assert "invalid pipeline config (5 problems)" in message
    assert "steps[4].threshold: must be within (0, 1], got 1.5" in message
    assert "steps[1].collapse_whitespce is not a known key" in message and "collapse_whitespace" in message
    assert "steps[3].normalize: must be one of 'none', 'default', 'simplify', got 'lowercase'" in message
    assert "steps[2].step: must be one of read, normalize" in message
    assert (
        "colour is not a known key; allowed: description, id_column, lang_column, name, source_column, steps"
        in message
    )


@pytest.mark.parametrize(
    ("stage", "needle"),
    [
        ({"step": "langid", "min_score": -0.1}, "steps[1].min_score: must be within [0, 1]"),
        (
            {"step": "langid", "languages": "en", "max_chars": "many"},
            "steps[1].max_chars: must be an integer",
        ),
        (
            {"step": "heuristic_filter", "rules": ["gopher", "c5"]},
            "steps[1].rules: unknown rule family 'c5'; allowed: c4",
        ),
        (
            {"step": "quality", "min_score": 0.5},
            "steps[1].model: give exactly one of model, train or train_from",
        ),
        (
            {"step": "quality", "model": "m.bin", "epochs": 3},
            "steps[1].epochs is not a known key of a QualityStep; allowed:",
        ),
        ({"step": "fuzzy_dedup", "bands": 4}, "steps[1].bands: give both bands and rows"),
        (
            {"step": "fuzzy_dedup", "preset": "minhashlsh"},
            "steps[1].preset: must be one of 'datatrove', 'nemo'",
        ),
        ({"step": "normalize", "enabled": "yes"}, "steps[1].enabled: must be true or false"),
        ({"step": "map", "function": "no_such_module_xyz:f"}, "steps[1].function: cannot import"),
        ({"step": "tokenize", "shard_bytes": "lots"}, "steps[1].shard_bytes: not a byte size"),
        ({"step": "read", "paths": ["x"]}, "steps[1].step: only the first step may be 'read'"),
        ({"step": "fuzzy_dedup", "update_index": True}, "steps[1].update_index: needs index (--index DIR)"),
    ],
)
def test_stage_errors(tmp_path, stage, needle):
    raw = {"steps": [{"step": "read", "paths": ["/"]}, stage]}
    with pytest.raises(ConfigError) as info:
        parse_config(raw)
    assert needle in str(info.value)


def test_train_stage_checks_trainer_keys(tmp_path):
    raw = {
        "steps": [
            {"step": "read", "paths": ["/"]},
            {"step": "tokenize"},
            {"step": "train", "steps": 0, "presett": "tiny"},
        ]
    }
    with pytest.raises(ConfigError) as info:
        parse_config(raw)
    assert "steps[2].presett: " in str(info.value)  # every problem listed, led by the first one's key
    assert "presett is not a known key; allowed:" in str(info.value)
    raw["steps"][2] = {"step": "train", "steps": 0}
    with pytest.raises(ConfigError, match=r"steps\[2\]\.steps: steps must be >= 1"):
        parse_config(raw)
    raw["steps"][2] = {"step": "train", "preset": "huge"}
    with pytest.raises(ConfigError, match=r"steps\[2\]\.preset: unknown model preset 'huge'"):
        parse_config(raw)


def test_train_stage_takes_the_loader_keys(tmp_path):
    """zephyr run: best-fit packing and the instance filter go from the stage to the trainer's config."""
    raw = {
        "steps": [
            {"step": "read", "paths": ["/"]},
            {"step": "tokenize"},
            {
                "step": "train",
                "packing": "best-fit",
                "instance_filter": "repetition",
                "repetition_max_count": 16,
            },
        ]
    }
    stage = parse_config(raw).steps[2].step
    cfg = stage.build(data="shards/", log=None, checkpoint_dir=None)
    assert (cfg.packing, cfg.instance_filter, cfg.repetition_max_count) == ("best-fit", "repetition", 16)
    raw["steps"][2] = {"step": "train", "packing": "bestfit"}
    with pytest.raises(ConfigError, match=r"steps\[2\]\.packing: packing must be one of"):
        parse_config(raw)


def test_order_rules():
    with pytest.raises(ConfigError, match=r"'train' needs an enabled tokenize step"):
        parse_config({"steps": [{"step": "read", "paths": ["/"]}, {"step": "train"}]})
    with pytest.raises(
        ConfigError, match=r"steps\[2\].step: 'normalize' cannot come after the tokenize step"
    ):
        parse_config(
            {"steps": [{"step": "read", "paths": ["/"]}, {"step": "tokenize"}, {"step": "normalize"}]}
        )
    with pytest.raises(ConfigError, match=r"steps\[2\].name: 'normalize' is already the name of steps\[1\]"):
        parse_config(
            {"steps": [{"step": "read", "paths": ["/"]}, {"step": "normalize"}, {"step": "normalize"}]}
        )
    with pytest.raises(
        ConfigError, match=r"train_from: must name an enabled heuristic_filter step before it"
    ):
        parse_config(
            {"steps": [{"step": "read", "paths": ["/"]}, {"step": "quality", "train_from": "filters"}]}
        )


def test_overrides_by_name_index_and_top_level(tmp_path):
    raw = _base(tmp_path)
    out = apply_overrides(
        raw,
        [
            "steps.fuzzy_dedup.threshold=0.7",
            "steps.1.enabled=false",
            "name=other",
            "steps.read.paths=[a.parquet, b.parquet]",
            "steps.fuzzy_dedup.ngram=3",
        ],
        base=tmp_path / "cwd",
    )
    cfg = parse_config(out)
    assert cfg.name == "other"
    assert (
        cfg.step("fuzzy_dedup").step.dedup.threshold == 0.7 and cfg.step("fuzzy_dedup").step.dedup.ngram == 3
    )
    assert cfg.step("normalize").enabled is False
    assert cfg.step("read").step.paths == [
        str(tmp_path / "cwd" / "a.parquet"),
        str(tmp_path / "cwd" / "b.parquet"),
    ]
    assert raw["steps"][3]["threshold"] == 0.8  # the input mapping is not mutated
    with pytest.raises(ConfigError, match="no step named 'fuzzy'; steps: read, normalize"):
        apply_overrides(raw, ["steps.fuzzy.threshold=0.7"])
    with pytest.raises(ConfigError, match="expected KEY=VALUE"):
        apply_overrides(raw, ["steps.fuzzy_dedup.threshold"])
    with pytest.raises(ConfigError, match=r"steps\[3\].threshold: must be a number, got 'high'"):
        parse_config(apply_overrides(raw, ["steps.fuzzy_dedup.threshold=high"]))


def test_environment_variables(tmp_path, monkeypatch):
    raw = _base(tmp_path)
    raw["steps"][0]["paths"] = ["${PIPE_TEST_DIR}/in.parquet"]
    raw["steps"][4]["tokenizer"] = "${PIPE_TEST_TOK:-tok2.json}"
    path = _write(tmp_path, raw)
    with pytest.raises(
        ConfigError, match=r"steps\[0\].paths\[0\]: environment variable PIPE_TEST_DIR is not set"
    ):
        load_config(path)
    monkeypatch.setenv("PIPE_TEST_DIR", str(tmp_path))
    cfg = load_config(path)
    assert cfg.step("read").step.paths == [str(tmp_path / "in.parquet")]
    assert cfg.step("tokenize").step.tokenizer == str(tmp_path / "tok2.json")


def test_a_relative_path_from_the_environment_resolves_from_the_current_directory(tmp_path, monkeypatch):
    """``ZEPHYR_WARC='crawl/*.warc.gz' zephyr run web``: the person typed the path where they stand, so it is
    read from there; a path the file writes (a ``${VAR:-default}`` default too) from the file's folder."""
    (tmp_path / "configs").mkdir()
    raw = _base(tmp_path)
    raw["steps"][0]["paths"] = ["${PIPE_TEST_IN}"]
    raw["steps"][4]["tokenizer"] = "${PIPE_TEST_TOK:-tok2.json}"
    path = tmp_path / "configs" / "p.yaml"
    path.write_text(yaml.safe_dump(raw))
    (tmp_path / "here").mkdir()
    monkeypatch.chdir(tmp_path / "here")
    monkeypatch.setenv("PIPE_TEST_IN", "crawl/*.parquet")
    cfg = load_config(path)
    assert cfg.step("read").step.paths == [str(tmp_path / "here" / "crawl" / "*.parquet")]
    assert cfg.step("tokenize").step.tokenizer == str(tmp_path / "configs" / "tok2.json")


def test_missing_inputs_are_reported_before_work(tmp_path):
    raw = _base(tmp_path)
    raw["steps"][0]["paths"] = ["in.parquet", "nope/*.parquet", "missing.parquet"]
    raw["steps"][4]["tokenizer"] = "missing-tok.json"
    cfg = load_config(_write(tmp_path, raw))
    with pytest.raises(ConfigError) as info:
        check_inputs(cfg)
    message = str(info.value)
    assert "steps[0].paths[1]: the pattern" in message and "matches no file" in message
    assert "steps[0].paths[2]: no such file or directory" in message
    assert "steps[4].tokenizer: no such file or directory" in message


def test_fuzzy_preset_with_overrides():
    raw = {
        "steps": [
            {"step": "read", "paths": ["/"]},
            {"step": "fuzzy_dedup", "preset": "datatrove", "threshold": 0.7},
        ]
    }
    built = parse_config(raw).step("fuzzy_dedup").step.dedup
    assert (built.shingle, built.ngram, built.bands, built.rows_per_band, built.threshold) == (
        "word",
        5,
        14,
        8,
        0.7,
    )
    assert isinstance(built, FuzzyDedupConfig) and built.preset == "datatrove"


@pytest.mark.parametrize("name", ["quickstart", "web", "code"])
def test_builtin_configs_validate(name, monkeypatch):
    monkeypatch.setenv("ZEPHYR_INPUT", "/tmp/nothing-here")
    monkeypatch.setenv("ZEPHYR_WARC", "/tmp/nothing-here")
    cfg = load_config(builtin_config(name))
    assert cfg.steps[0].type == ("extract" if name == "web" else "read")
    assert load_config(name).to_dict() == cfg.to_dict()  # a bare name finds the built-in
    if name == "quickstart":
        check_inputs(cfg)  # the embedded sample is where the config says
        assert cfg.step("read").step.paths == [str(REPO / "data" / "sample" / "sample.parquet")]


def test_cli_reports_config_errors_with_exit_code_1(tmp_path, capsys):
    raw = _base(tmp_path)
    raw["steps"][3]["threshold"] = 0
    assert main(["run", str(_write(tmp_path, raw)), "--job-dir", str(tmp_path / "job")]) == 1
    err = capsys.readouterr().err
    assert "zephyr run: error:" in err and "steps[3].threshold: must be within (0, 1], got 0.0" in err
    assert not (tmp_path / "job").exists()  # nothing started
    assert main(["run", str(_write(tmp_path, _base(tmp_path))), "--check"]) == 0
    assert "03-fuzzy_dedup: fuzzy_dedup" in capsys.readouterr().out


def test_a_step_built_in_python_checks_its_keys_as_a_config_file_does():
    """Every step type checks its keys' types and ranges (``Step.__post_init__``), not only those that declare
    rules of their own: a step object made in Python is refused as the same keys in a file are."""
    from zephyr.pipelines.steps import ExactDedupStep, NormalizeStep
    from zephyr.pipelines.web.steps import UrlDedupStep

    with pytest.raises(ConfigError, match="^priority_column: must be"):
        ExactDedupStep(priority_column=3)
    with pytest.raises(ConfigError, match="^url_column: must be"):
        UrlDedupStep(url_column=None)
    assert NormalizeStep().normalize.nfc
