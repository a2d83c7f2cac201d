"""zephyr.flags: a config dataclass declares a command's flags (type, default, help from the field's
docstring), and the flags given are laid over a config file into one checked config, every problem named by
its flag."""

from __future__ import annotations

import argparse
import dataclasses
import subprocess
import sys
from dataclasses import dataclass, field
from typing import Any, Literal

import pytest

from zephyr.config import ConfigProblems, check_field_values, check_fields, ranged_field
from zephyr.errors import ConfigError
from zephyr.flags import add_flags, config_from_flags, field_docs


def _epochs(values: list[str]) -> float | dict[str, float]:
    """``--epochs 4`` or ``--epochs a=1 --epochs b=2``."""
    if len(values) == 1 and "=" not in values[0]:
        return float(values[0])
    pairs = [v.rpartition("=") for v in values]
    return {path: float(number) for path, _, number in pairs}


@dataclass(frozen=True)
class Inner:
    top_k: int = ranged_field(1, default=2)
    """Experts per token."""
    dispatch: Literal["auto", "loop"] = "auto"
    """How tokens reach the experts."""

    def __post_init__(self) -> None:
        check_fields(self, "model.inner.", list)


@dataclass(frozen=True)
class Model:
    width: int = ranged_field(1, default=64)
    """Model width."""
    inner: Inner | None = field(default_factory=Inner)

    def __post_init__(self) -> None:
        check_fields(self, "model.", list)


@dataclass(frozen=True)
class Optim:
    lr: float = ranged_field(0, low_open=True, default=3e-4)
    """Peak learning rate (reached at 100% of the warmup)."""

    def __post_init__(self) -> None:
        check_fields(self, "optim.", list)


@dataclass(frozen=True)
class Run:
    steps: int = ranged_field(1, default=100)
    """Optimizer steps in total.

    A second paragraph, left out of the help."""
    optim: Optim = field(default_factory=Optim)
    schedule: Literal["cosine", "constant"] = "cosine"
    compile: bool = False
    """Compile each block."""
    log: str | None = None
    languages: list[str] = field(default_factory=list)
    weights: dict[str, float] | None = None
    """Weights by source."""
    model: dict[str, Any] = field(default_factory=dict, metadata={"overrides": Model})
    """Overrides of the model's fields."""
    hidden: int = field(default=0, metadata={"flag": False})
    verify: bool = field(default=True, metadata={"flag": "--check-it"})
    epochs: float | dict[str, float] | None = field(
        default=None, metadata={"parse": _epochs, "repeat": True, "metavar": "EPOCHS|DIR=EPOCHS"}
    )

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> Run:
        """Each section checked on its own, then every problem raised at once (as ``TrainConfig.from_dict``)."""
        problems: list[str] = []

        def build(make: type, values: dict[str, Any]) -> Any:
            try:
                return make(**values)
            except ConfigProblems as exc:
                problems.extend(exc.problems)

        values = dict(raw)
        model = dict(values.get("model", {}))
        if isinstance(model.get("inner"), dict):
            model["inner"] = build(Inner, model["inner"])
        build(Model, model)
        if "optim" in values:
            values["optim"] = build(Optim, values["optim"]) or Optim()
        run = build(cls, values)
        if problems:
            raise ConfigProblems(problems)
        return run

    def __post_init__(self) -> None:
        check_fields(self, "", list)


@dataclass(frozen=True)
class Flat:
    """Built by ``build_flat`` (no ``from_dict``); checks raise ``FieldError`` as the package configs do."""

    paths: list[str] = field(default_factory=list, metadata={"positional": True})
    """Input files."""
    threshold: float = ranged_field(0, 1, low_open=True, default=0.8)
    """Jaccard similarity above which two documents are duplicates."""
    seed: int = 0
    tokenizer: str = field(default="", metadata={"required": True})
    """Path of a tokenizer.json."""

    def __post_init__(self) -> None:
        check_field_values(self)


def _parser(cls: type, **kw: Any) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="zephyr demo", exit_on_error=False)
    add_flags(parser, cls, **kw)
    return parser


def _given(cls: type, argv: list[str], **kw: Any) -> dict[str, Any]:
    return vars(_parser(cls, **kw).parse_args(argv))


def test_help_comes_from_the_field_docstrings_with_types_and_defaults() -> None:
    text = " ".join(_parser(Run).format_help().split())
    assert "--steps STEPS Optimizer steps in total. (default: 100)" in text
    assert "second paragraph" not in text
    assert "--lr LR Peak learning rate (reached at 100% of the warmup). (default: 0.0003)" in text
    assert "--schedule {cosine,constant}" in text and "--compile, --no-compile Compile each block." in text
    assert "--width WIDTH Model width. --top-k TOP_K Experts per token. --dispatch {auto,loop}" in text
    assert "(default: 64)" not in text  # an override's default is the base's, not the class's
    assert "--hidden" not in text and "--check-it, --no-check-it" in text
    assert "--epochs EPOCHS|DIR=EPOCHS" in text and "--model" not in text and "--inner" not in text


def test_only_the_flags_given_come_back() -> None:
    assert _given(Run, []) == {}
    given = _given(Run, ["--lr", "0.01", "--no-compile", "--languages", "en", "--languages", "de"])
    assert given == {"optim.lr": 0.01, "compile": False, "languages": ["en", "de"]}


def test_flags_lay_over_the_file_and_the_defaults() -> None:
    base = {"steps": 5, "optim": {"lr": 0.1}, "model": {"width": 8}, "log": "a.jsonl"}
    argv = ["--lr", "0.2", "--top-k", "3", "--weights", '{"web": 1, "code": 0.5}', "--compile"]
    argv += ["--epochs", "web=2", "--epochs", "code=1", "--check-it"]
    run = config_from_flags(Run, _given(Run, argv), base=base)
    assert run == Run(
        steps=5,
        optim=Optim(lr=0.2),
        compile=True,
        log="a.jsonl",
        weights={"web": 1, "code": 0.5},
        model={"width": 8, "inner": {"top_k": 3}},
        epochs={"web": 2.0, "code": 1.0},
    )
    assert base == {"steps": 5, "optim": {"lr": 0.1}, "model": {"width": 8}, "log": "a.jsonl"}  # not mutated
    assert (
        config_from_flags(Run, {"schedule": "constant", "json": True, "func": print}).schedule == "constant"
    )


def test_every_problem_at_once_each_named_by_its_flag_or_its_key() -> None:
    given = _given(Run, ["--lr", "-1", "--top-k", "0", "--steps", "0"])
    with pytest.raises(ConfigProblems) as info:
        config_from_flags(Run, given, base={"log": 3, "model": {"width": 0}}, what="run config")
    assert str(info.value).splitlines() == [
        "invalid run config (5 problems):",
        "  --top-k must be >= 1, got 0",
        "  model.width must be >= 1, got 0",
        "  --lr must be > 0, got -1.0",
        "  --steps must be >= 1, got 0",
        "  log must be a string or null, got 3 (int)",
    ]


def test_a_parse_failure_and_a_null_section_name_the_flag() -> None:
    given = _given(Run, ["--epochs", "x", "--dispatch", "loop"])
    with pytest.raises(ConfigProblems) as info:
        config_from_flags(Run, given, base={"model": {"inner": None}})
    assert info.value.problems == [
        "--dispatch: model.inner is None in the config, not a mapping to set it in",
        "--epochs: could not convert string to float: 'x'",
    ]


def test_a_flat_config_built_by_build_flat(capsys: pytest.CaptureFixture[str]) -> None:
    given = _given(Flat, ["a.parquet", "b.parquet", "--threshold", "0.5", "--tokenizer", "t.json"])
    assert config_from_flags(Flat, given) == Flat(["a.parquet", "b.parquet"], 0.5, 0, "t.json")
    with pytest.raises(ConfigProblems, match=r"^--threshold: must be within \(0, 1\], got 1.5$"):
        config_from_flags(Flat, _given(Flat, ["x", "--threshold", "1.5", "--tokenizer", "t"]))
    with pytest.raises(ConfigProblems, match="^seed: must be an integer, got 'x'$"):
        config_from_flags(Flat, {"tokenizer": "t"}, base={"seed": "x"})
    with pytest.raises(SystemExit):
        _given(Flat, ["x"])  # required on the command line too
    assert "the following arguments are required: --tokenizer" in capsys.readouterr().err


def test_skip_and_group() -> None:
    parser = argparse.ArgumentParser()
    add_flags(parser, Run, skip=("dispatch", "optim.lr"), group="training")
    text = " ".join(parser.format_help().split())
    assert "training: --steps STEPS" in text and "--check-it" in text
    assert "dispatch" not in text and "--lr" not in text
    assert vars(parser.parse_args(["--top-k", "1"])) == {"model.inner.top_k": 1}


def test_field_docs() -> None:
    assert field_docs(Inner) == {"top_k": "Experts per token.", "dispatch": "How tokens reach the experts."}
    made = dataclasses.make_dataclass("Made", [("x", int, 1)])  # no source: no docs, no failure
    assert field_docs(made) == {}
    assert "--x X" in " ".join(_parser(made).format_help().split())


def test_imports_the_standard_library_only() -> None:
    code = (
        "import sys, zephyr.flags\n"
        "heavy = {'numpy', 'pyarrow', 'polars', 'torch', 'yaml', 'fsspec'} & {m.split('.')[0] for m in sys.modules}\n"
        "assert not heavy, heavy\n"
    )
    result = subprocess.run([sys.executable, "-c", code], cwd="/", capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


def test_a_config_error_from_the_builder_is_one_problem_led_by_the_flag() -> None:
    @dataclass(frozen=True)
    class Picky:
        name: str = "a"

        @classmethod
        def from_dict(cls, raw: dict[str, Any]) -> Picky:
            raise ConfigError(f"name {raw.get('name')!r} is taken")

    with pytest.raises(ConfigProblems, match="^--name 'b' is taken$"):
        config_from_flags(Picky, {"name": "b"})
