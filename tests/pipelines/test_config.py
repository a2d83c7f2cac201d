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
        "stages": [
            {"stage": "read", "paths": ["in.parquet"]},
            {"stage": "normalize"},
            {"stage": "exact_dedup"},
            {"stage": "fuzzy_dedup", "threshold": 0.8},
            {"stage": "tokenize", "tokenizer": "tok.json"},
        ],
    }


def test_valid_config_resolves_paths_from_the_config_folder(tmp_path):
    cfg = load_config(_write(tmp_path, _base(tmp_path)))
    assert [s.name for s in cfg.stages] == ["read", "normalize", "exact_dedup", "fuzzy_dedup", "tokenize"]
    assert cfg.stage("read").config.paths == [str(tmp_path / "in.parquet")]
    assert cfg.stage("tokenize").config.tokenizer == str(tmp_path / "tok.json")
    assert cfg.stage("fuzzy_dedup").config.dedup.threshold == 0.8


def test_errors_name_the_key_path_and_the_allowed_values(tmp_path):
    raw = _base(tmp_path)
    raw["stages"][3]["threshold"] = 1.5
    raw["stages"][1]["collapse_whitespce"] = True
    raw["stages"][2]["normalize"] = "lowercase"
    raw["stages"].insert(2, {"stage": "dedupe"})
    raw["colour"] = "blue"
    with pytest.raises(ConfigError) as info:
        load_config(_write(tmp_path, raw))
    message = str(info.value)
    assert "invalid pipeline config (5 problems)" in message
    assert "stages[4].threshold: must be within (0, 1], got 1.5" in message
    assert "stages[1].collapse_whitespce: unknown key" in message and "collapse_whitespace" in message
    assert "stages[3].normalize: must be one of 'none', 'default', 'simplify', got 'lowercase'" in message
    assert "stages[2].stage: must be one of read, normalize" in message
    assert "colour: unknown key" in message


@pytest.mark.parametrize(
    ("stage", "needle"),
    [
        ({"stage": "langid", "min_score": -0.1}, "stages[1].min_score: must be within [0, 1]"),
        ({"stage": "langid", "languages": "en", "max_chars": "many"}, "stages[1].max_chars: must be an integer"),
        ({"stage": "heuristic_filter", "rules": ["gopher", "c5"]}, "stages[1].rules: unknown rule family 'c5'; allowed: c4"),
        ({"stage": "quality", "min_score": 0.5}, "stages[1].model: give exactly one of model, train or train_from"),
        ({"stage": "quality", "model": "m.bin", "classifier": {"epochs": 3}}, "stages[1].classifier: unknown key 'epochs'"),
        ({"stage": "fuzzy_dedup", "bands": 4}, "stages[1].bands: give both bands and rows"),
        ({"stage": "fuzzy_dedup", "preset": "minhashlsh"}, "stages[1].preset: must be one of 'datatrove', 'nemo'"),
        ({"stage": "normalize", "enabled": "yes"}, "stages[1].enabled: must be true or false"),
        ({"stage": "map", "function": "no_such_module_xyz:f"}, "stages[1].function: cannot import"),
        ({"stage": "tokenize", "shard_bytes": "lots"}, "stages[1].shard_bytes: not a byte size"),
        ({"stage": "read", "paths": ["x"]}, "stages[1].stage: only the first stage may be 'read'"),
    ],
)
def test_stage_errors(tmp_path, stage, needle):
    raw = {"stages": [{"stage": "read", "paths": ["/"]}, stage]}
    with pytest.raises(ConfigError) as info:
        parse_config(raw)
    assert needle in str(info.value)


def test_train_stage_checks_trainer_keys(tmp_path):
    raw = {"stages": [{"stage": "read", "paths": ["/"]}, {"stage": "tokenize"},
                      {"stage": "train", "steps": 0, "presett": "tiny"}]}
    with pytest.raises(ConfigError) as info:
        parse_config(raw)
    assert "stages[2].presett: unknown key; allowed:" in str(info.value)
    raw["stages"][2] = {"stage": "train", "steps": 0}
    with pytest.raises(ConfigError, match=r"stages\[2\]\.steps: steps must be >= 1"):
        parse_config(raw)
    raw["stages"][2] = {"stage": "train", "preset": "huge"}
    with pytest.raises(ConfigError, match=r"stages\[2\]\.preset: unknown model preset 'huge'"):
        parse_config(raw)


def test_train_stage_takes_the_loader_keys(tmp_path):
    """zephyr run: best-fit packing and the instance filter go from the stage to the trainer's config."""
    raw = {"stages": [{"stage": "read", "paths": ["/"]}, {"stage": "tokenize"},
                      {"stage": "train", "packing": "best-fit", "instance_filter": "repetition",
                       "repetition_max_count": 16}]}
    stage = parse_config(raw).stages[2].config
    cfg = stage.build(data="shards/", log=None, checkpoint_dir=None)
    assert (cfg.packing, cfg.instance_filter, cfg.repetition_max_count) == ("best-fit", "repetition", 16)
    raw["stages"][2] = {"stage": "train", "packing": "bestfit"}
    with pytest.raises(ConfigError, match=r"stages\[2\]\.packing: packing must be one of"):
        parse_config(raw)


def test_order_rules():
    with pytest.raises(ConfigError, match=r"'train' needs an enabled tokenize stage"):
        parse_config({"stages": [{"stage": "read", "paths": ["/"]}, {"stage": "train"}]})
    with pytest.raises(ConfigError, match=r"stages\[2\].stage: 'normalize' cannot come after the tokenize stage"):
        parse_config({"stages": [{"stage": "read", "paths": ["/"]}, {"stage": "tokenize"}, {"stage": "normalize"}]})
    with pytest.raises(ConfigError, match=r"stages\[2\].name: 'normalize' is already the name of stages\[1\]"):
        parse_config({"stages": [{"stage": "read", "paths": ["/"]}, {"stage": "normalize"}, {"stage": "normalize"}]})
    with pytest.raises(ConfigError, match=r"train_from: must name an enabled heuristic_filter stage before it"):
        parse_config({"stages": [{"stage": "read", "paths": ["/"]}, {"stage": "quality", "train_from": "filters"}]})


def test_overrides_by_name_index_and_top_level(tmp_path):
    raw = _base(tmp_path)
    out = apply_overrides(
        raw,
        ["stages.fuzzy_dedup.threshold=0.7", "stages.1.enabled=false", "name=other",
         "stages.read.paths=[a.parquet, b.parquet]", "stages.fuzzy_dedup.ngram=3"],
        base=tmp_path / "cwd",
    )
    cfg = parse_config(out)
    assert cfg.name == "other"
    assert cfg.stage("fuzzy_dedup").config.dedup.threshold == 0.7 and cfg.stage("fuzzy_dedup").config.dedup.ngram == 3
    assert cfg.stage("normalize").enabled is False
    assert cfg.stage("read").config.paths == [str(tmp_path / "cwd" / "a.parquet"), str(tmp_path / "cwd" / "b.parquet")]
    assert raw["stages"][3]["threshold"] == 0.8  # the input mapping is not mutated
    with pytest.raises(ConfigError, match="no stage named 'fuzzy'; stages: read, normalize"):
        apply_overrides(raw, ["stages.fuzzy.threshold=0.7"])
    with pytest.raises(ConfigError, match="expected KEY=VALUE"):
        apply_overrides(raw, ["stages.fuzzy_dedup.threshold"])
    with pytest.raises(ConfigError, match=r"stages\[3\].threshold: must be a number, got 'high'"):
        parse_config(apply_overrides(raw, ["stages.fuzzy_dedup.threshold=high"]))


def test_environment_variables(tmp_path, monkeypatch):
    raw = _base(tmp_path)
    raw["stages"][0]["paths"] = ["${PIPE_TEST_DIR}/in.parquet"]
    raw["stages"][4]["tokenizer"] = "${PIPE_TEST_TOK:-tok2.json}"
    path = _write(tmp_path, raw)
    with pytest.raises(ConfigError, match=r"stages\[0\].paths\[0\]: environment variable PIPE_TEST_DIR is not set"):
        load_config(path)
    monkeypatch.setenv("PIPE_TEST_DIR", str(tmp_path))
    cfg = load_config(path)
    assert cfg.stage("read").config.paths == [str(tmp_path / "in.parquet")]
    assert cfg.stage("tokenize").config.tokenizer == str(tmp_path / "tok2.json")


def test_missing_inputs_are_reported_before_work(tmp_path):
    raw = _base(tmp_path)
    raw["stages"][0]["paths"] = ["in.parquet", "nope/*.parquet", "missing.parquet"]
    raw["stages"][4]["tokenizer"] = "missing-tok.json"
    cfg = load_config(_write(tmp_path, raw))
    with pytest.raises(ConfigError) as info:
        check_inputs(cfg)
    message = str(info.value)
    assert "stages[0].paths[1]: the pattern" in message and "matches no file" in message
    assert "stages[0].paths[2]: no such file or directory" in message
    assert "stages[4].tokenizer: no such file or directory" in message


def test_fuzzy_preset_with_overrides():
    raw = {"stages": [{"stage": "read", "paths": ["/"]}, {"stage": "fuzzy_dedup", "preset": "datatrove", "threshold": 0.7}]}
    built = parse_config(raw).stage("fuzzy_dedup").config.dedup
    assert (built.shingle, built.ngram, built.bands, built.rows_per_band, built.threshold) == ("word", 5, 14, 8, 0.7)
    assert isinstance(built, FuzzyDedupConfig) and built.preset == "datatrove"


@pytest.mark.parametrize("name", ["quickstart", "web", "code"])
def test_builtin_configs_validate(name, monkeypatch):
    monkeypatch.setenv("ZEPHYR_INPUT", "/tmp/nothing-here")
    monkeypatch.setenv("ZEPHYR_WARC", "/tmp/nothing-here")
    cfg = load_config(builtin_config(name))
    assert cfg.stages[0].type == ("extract" if name == "web" else "read")
    assert load_config(name).to_dict() == cfg.to_dict()  # a bare name finds the built-in
    if name == "quickstart":
        check_inputs(cfg)  # the embedded sample is where the config says
        assert cfg.stage("read").config.paths == [str(REPO / "data" / "sample" / "sample.parquet")]


def test_cli_reports_config_errors_with_exit_code_1(tmp_path, capsys):
    raw = _base(tmp_path)
    raw["stages"][3]["threshold"] = 0
    assert main(["run", str(_write(tmp_path, raw)), "--job-dir", str(tmp_path / "job")]) == 1
    err = capsys.readouterr().err
    assert "zephyr run: error:" in err and "stages[3].threshold: must be within (0, 1], got 0.0" in err
    assert not (tmp_path / "job").exists()  # nothing started
    assert main(["run", str(_write(tmp_path, _base(tmp_path))), "--check"]) == 0
    assert "03-fuzzy_dedup: fuzzy_dedup" in capsys.readouterr().out
