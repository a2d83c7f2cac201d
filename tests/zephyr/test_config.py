"""The config base (zephyr.config): one --set value reader for `zephyr run` and `zephyr train`, checks with key
paths, and embedded package configs."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass

import pytest
from zephyr.dedup.config import FuzzyDedupConfig
from zephyr.pipelines.config import apply_overrides, parse_config
from zephyr.pipelines.quality.config import NormalizeConfig
from zephyr.trainer.cli import train_config

from zephyr.config import (
    build_flat,
    coerce,
    embedded_field,
    flat_dict,
    parse_value,
)
from zephyr.errors import ConfigError

VALUES = ["0.7", "4", "true", "null", "flex", "1e-3", '{"a": 1}', "[1, 2]", "", "yes", "[en, de]", "a: b: c"]


def _read_step(**step) -> dict:
    return {"steps": [{"step": "read", "paths": ["/"]}, step]}


@pytest.mark.parametrize("text", VALUES)
def test_set_values_read_the_same_in_run_and_train(text: str) -> None:
    """`zephyr run --set` and `zephyr train --set` give one value for one text (JSON first, then YAML)."""
    run = apply_overrides(_read_step(step="normalize"), [f"steps.normalize.nfc={text}"])["steps"][1]["nfc"]
    try:
        train = train_config({"overrides": [f"n_layers={text}"]}).model["n_layers"]
    except ConfigError as exc:  # a value TrainConfig refuses names the value it was given
        train = exc
    assert run == parse_value(text)
    if isinstance(train, ConfigError):
        assert f"n_layers must be an integer, got {run!r} ({type(run).__name__})" in str(train)
    else:
        assert train == run


def test_set_value_json_before_yaml() -> None:
    # PyYAML (YAML 1.1) reads 1e-3 as text; JSON and YAML 1.2 read a number: both commands now read 0.001
    assert parse_value("1e-3") == 0.001
    assert parse_value("[en, de]") == ["en", "de"] and parse_value("yes") is True
    assert parse_value("") == "" and parse_value("a: b: c") == "a: b: c"


def test_set_value_without_pyyaml() -> None:
    """On a training node without PyYAML, JSON values read the same and YAML-only forms stay text."""
    code = (
        "import sys\n"
        "class Block:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] == 'yaml':\n"
        "            raise ImportError('blocked ' + name)\n"
        "sys.meta_path.insert(0, Block())\n"
        "from zephyr.config import parse_value\n"
        "print(repr([parse_value(t) for t in ['0.7', 'true', '1e-3', 'flex', '[en, de]']]))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd="/", capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[0.7, True, 0.001, 'flex', '[en, de]']"


def test_coerce_names_the_key_and_type() -> None:
    assert coerce(3, float, "x") == 3.0 and coerce("en", list[str], "x") == ["en"]
    with pytest.raises(ConfigError, match=r"steps\[1\]\.min_score: must be a number, got 'high'"):
        coerce("high", float, "steps[1].min_score")
    with pytest.raises(ConfigError, match="must be true or false, got 1"):
        coerce(1, bool, "k")


@dataclass(frozen=True)
class _Owner:
    normalize: NormalizeConfig = embedded_field(NormalizeConfig, keys=("nfc", "fix_mojibake"))
    label: str = "x"


def test_embedded_keys_are_flat_and_checked_by_the_package_dataclass() -> None:
    errors: list[str] = []
    built = build_flat(_Owner, {"nfc": False, "label": "y"}, "s", errors)
    assert errors == [] and built.normalize == NormalizeConfig(nfc=False) and built.label == "y"
    assert flat_dict(built) == {"nfc": False, "fix_mojibake": False, "label": "y"}
    assert build_flat(_Owner, {"strip_control": False, "nfc": "no"}, "s", errors) is None
    assert errors[0].startswith(
        "s.strip_control is not a known key of a _Owner; allowed: fix_mojibake, label, nfc"
    )
    assert errors[1] == "s.nfc: must be true or false, got 'no'"


def test_pipeline_steps_embed_the_package_configs() -> None:
    cfg = parse_config(_read_step(step="fuzzy_dedup", preset="nemo", threshold=0.9, bucket_links=4))
    dedup = cfg.step("fuzzy_dedup").step.dedup
    assert dedup == FuzzyDedupConfig.from_preset("nemo", threshold=0.9, bucket_links=4)
    assert cfg.step("fuzzy_dedup").to_dict()["rows_per_band"] == 13
    errors = parse_config_errors(_read_step(step="fuzzy_dedup", rows_per_band=8))
    assert "steps[1].bands: give both bands and rows_per_band or neither" in errors


def parse_config_errors(raw: dict) -> str:
    with pytest.raises(ConfigError) as info:
        parse_config(raw)
    return str(info.value)
