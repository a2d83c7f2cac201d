"""The command registry (``zephyr.cli.Command``): a command declared once gets its flags from its option groups
and config, its ``explain`` twin from its ``plans``, and a removing command its column rules, dropped rows and
stats from ``zephyr.removal.Removal`` — with no ``argparse.Namespace`` below the CLI."""

from __future__ import annotations

import importlib
import json
import sys
import types
from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

import zephyr
from zephyr import cli
from zephyr.cli import COMMANDS, Command, Inputs, Output
from zephyr.flags import field_docs, flag_specs
from zephyr.physical import PlannedJob
from zephyr.removal import Removal


@dataclass(frozen=True)
class ShortRemoval(Removal):
    output_column: str = "short"
    """Name of the column annotate adds."""


@dataclass(frozen=True)
class ShortConfig:
    min_chars: int = field(default=3, metadata={"metavar": "N"})
    """Texts shorter than this are short."""


@dataclass(frozen=True)
class MarkShort:
    """The work: a ``short`` column, true for a text shorter than ``min_chars``."""

    min_chars: int

    def __call__(self, table: pa.Table) -> pa.Table:
        short = pc.less(pc.utf8_length(table.column("text")), self.min_chars)
        return table.append_column("short", short)


@dataclass(frozen=True)
class KeepLong:
    def __call__(self, table: pa.Table) -> pa.Table:
        return table.filter(pc.invert(table.column("short"))).drop_columns(["short"])


def _reasons(table: pa.Table) -> pa.Array:
    return pc.if_else(table.column("short"), pa.scalar("short"), pa.scalar(None, pa.string()))


def _marked(inputs: Inputs, removal: ShortRemoval, config: ShortConfig):
    marked = removal.aside(inputs.read(), ["short"]).map_batches(MarkShort(config.min_chars), name="mark")
    return marked if removal.internal_mode == "annotate" else marked.map_batches(KeepLong(), name="keep")


def drop_short(inputs: Inputs, output: Output, removal: ShortRemoval, config: ShortConfig, execution):
    """Remove or mark short texts."""
    from zephyr import job_stats
    from zephyr.summary import write_summary

    removal.check(inputs.inputs, output.output, ["short"])
    with job_stats.recording() as jobs:
        result, stages = removal.write(
            _marked(inputs, removal, config), output.output, execution.as_kwargs(), _reasons, ["short"]
        )
    extra = {"min_chars": config.min_chars}
    aside = removal.dropped_output
    return write_summary(
        result, output.output, "short", extra, jobs=jobs, stages=stages, dropped_output=aside
    )


def drop_short_plans(inputs: Inputs, removal: ShortRemoval, config: ShortConfig, execution):
    return [PlannedJob("job 1: mark", _marked(inputs, removal, config)), PlannedJob("a rule")]


@pytest.fixture
def short_command(monkeypatch):
    module = types.ModuleType("short_cli")
    module.GROUPS = {"text": "commands on texts"}
    module.COMMANDS = [
        Command(
            "text drop-short",
            drop_short,
            {"inputs": Inputs, "output": Output, "removal": ShortRemoval, "config": ShortConfig},
            plans=drop_short_plans,
        )
    ]
    monkeypatch.setitem(sys.modules, "short_cli", module)
    monkeypatch.setattr(cli, "COMMAND_MODULES", {**cli.COMMAND_MODULES, "short_cli": ("text",)})


def _input(tmp_path, texts, **columns):
    path = tmp_path / "in.parquet"
    pq.write_table(pa.table({"text": texts, **columns}), path)
    return str(path)


def _rows(folder):
    return pa.concat_tables(pq.read_table(p) for p in sorted(folder.glob("*.parquet"))).to_pylist()


def test_version(capsys):
    with pytest.raises(SystemExit) as exit:
        cli.main(["--version"])
    assert exit.value.code == 0 and capsys.readouterr().out.strip() == f"zephyr {zephyr.__version__}"


def test_every_flag_of_a_declared_command_has_help():
    """The help of a flag is its field's docstring: a field without one would be a flag without help."""
    for command in COMMANDS:
        assert command.texts()[0], command.words
        for cls in command.options.values():
            for spec in flag_specs(cls):
                assert field_docs(spec.owner).get(spec.field.name), f"{command.words}: {spec.flag}"


def test_a_declared_command_removes_routes_and_counts(short_command, tmp_path, capsys):
    source = _input(tmp_path, ["a", "long text", "bb", "another one"], id=[1, 2, 3, 4])
    out, dropped = tmp_path / "out", tmp_path / "dropped"
    argv = ["text", "drop-short", source, "--output", str(out), "--min-chars", "3"]
    code = cli.main([*argv, "--dropped-output", str(dropped), "--executor", "inprocess", "--json"])
    assert code == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["command"] == "zephyr text drop-short"
    assert (summary["rows_in"], summary["rows_kept"], summary["dropped_by_reason"]) == (4, 2, {"short": 2})
    assert [r["id"] for r in _rows(out)] == [2, 4] and "short" not in _rows(out)[0]
    assert [(r["id"], r["drop_reason"]) for r in _rows(dropped)] == [(1, "short"), (3, "short")]
    stats = json.loads((tmp_path / "out.zephyr" / "stats.json").read_text())
    rows = {"in": 4, "kept": 2, "dropped": 2, "quarantined": 0}
    assert stats["short"] == {"min_chars": 3, "dropped_output": str(dropped), "rows": rows}


def test_annotate_names_its_column_and_keeps_the_inputs_own(short_command, tmp_path, capsys):
    source = _input(tmp_path, ["a", "long text"], short=["mine", "mine too"])
    out = tmp_path / "out"
    argv = [
        "text",
        "drop-short",
        source,
        "--output",
        str(out),
        "--mode",
        "annotate",
        "--executor",
        "inprocess",
    ]
    assert cli.main(argv) == 1
    assert "--replace-columns" in capsys.readouterr().err  # the library's hint, spelled as a flag
    assert cli.main([*argv, "--output-column", "is_short"]) == 0
    rows = _rows(out)
    assert [(r["short"], r["is_short"]) for r in rows] == [("mine", True), ("mine too", False)]


def test_dropped_output_needs_remove_mode(short_command, tmp_path, capsys):
    source = _input(tmp_path, ["a"])
    argv = ["text", "drop-short", source, "--output", str(tmp_path / "out"), "--mode", "annotate"]
    assert cli.main([*argv, "--dropped-output", str(tmp_path / "d"), "--executor", "inprocess"]) == 1
    assert "--dropped-output needs --mode remove" in capsys.readouterr().err


def test_the_explain_twin_prints_the_plans_and_runs_nothing(short_command, tmp_path, capsys):
    source = _input(tmp_path, ["a", "long text"])
    assert cli.main(["explain", "text", "drop-short", source, "--min-chars", "2"]) == 0
    plan = capsys.readouterr().out
    assert plan.startswith("zephyr text drop-short: nothing ran.")
    assert "job 1: mark" in plan and "then: a rule" in plan and "budget shares" in plan
    assert not list(tmp_path.glob("out*"))


def test_a_bad_value_is_named_by_its_flag(short_command, tmp_path, capsys):
    source = _input(tmp_path, ["a"])
    argv = ["text", "drop-short", source, "--output", str(tmp_path / "out"), "--executor", "inprocess"]
    assert cli.main([*argv, "--unify-schemas", "--schema", str(tmp_path / "s.json")]) == 1
    assert "give --unify-schemas or --schema FILE, not both" in capsys.readouterr().err


def _registry() -> list[Command]:
    """Every command of every package's ``COMMANDS`` (``zephyr.cli.COMMAND_MODULES``)."""
    modules = [cli, *(importlib.import_module(name) for name in cli.COMMAND_MODULES)]
    return [command for module in modules for command in module.COMMANDS]


def _required(command: Command) -> list[str]:
    """A value for each required flag of ``command`` outside its ``Output`` group (its choices' first)."""
    argv = []
    for cls in command.options.values():
        for spec in flag_specs(cls):
            meta = spec.field.metadata
            if meta.get("required") and not meta.get("positional") and not issubclass(cls, Output):
                argv += [spec.flag, str(meta.get("choices", ["x"])[0])]
    return argv


WRITING_TWINS = [
    c for c in _registry() if c.plans is not None and any(issubclass(k, Output) for k in c.options.values())
]


@pytest.mark.parametrize("command", WRITING_TWINS, ids=lambda c: c.words)
def test_explain_takes_the_command_line_with_its_output(command):
    """The command's own line works with ``explain`` in front: its output flags are accepted and ignored, and
    no other flag takes the folder (argparse once read ``--output DIR`` as ``--output-column DIR``)."""
    argv = ["explain", *command.words.split(), "in.parquet", *_required(command), "--output", "out/"]
    args = cli.build_parser(argv).parse_args([*argv, "--overwrite"])
    assert args.output == "out/" and args.overwrite is True
    assert [dest for dest, value in vars(args).items() if value == "out/"] == ["output"]


def test_explain_of_substring_dedup_with_its_output(tmp_path, capsys):
    source = _input(tmp_path, ["the same words again and again"] * 4)
    out = tmp_path / "out"
    assert cli.main(["explain", "dedup", "substring", source, "--output", str(out)]) == 0
    assert "nothing ran" in capsys.readouterr().out and not out.exists()


def test_a_flag_is_never_taken_by_a_prefix_of_its_name(tmp_path, capsys):
    with pytest.raises(SystemExit):
        cli.build_parser(["count"]).parse_args(["count", "in.parquet", "--work-d", str(tmp_path)])
    assert "unrecognized arguments: --work-d" in capsys.readouterr().err
    args = cli.build_parser(["count"]).parse_args(["count", "in.parquet", "-vv"])
    assert args.verbose == 2


def test_library_keywords_are_spelled_as_the_commands_flags(capsys):
    """A failure names the fix in the library's keywords; the command line prints them as its own flags,
    derived from the command's fields: every keyword of the command, none that is not one of its flags."""
    from zephyr.errors import ConfigError

    argv = ["dedup", "exact", "in.parquet", "--output", "out"]
    message = (
        "in.parquet has no column 'text_column': pass text_column='body' or schema=, replace_columns=True; "
        "see /data/text_column/ and tokenizer=gpt2"
    )
    assert cli.report_failure(ConfigError(message), cli.build_parser(argv).parse_args(argv)) == 1
    assert capsys.readouterr().err.strip() == (
        "zephyr dedup exact: error: in.parquet has no column 'text_column': pass --text-column body or --schema "
        "FILE, --replace-columns; see /data/text_column/ and tokenizer=gpt2"
    )
