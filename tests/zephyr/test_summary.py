"""Every command ends with the one summary (``zephyr.summary``): ``--json`` gives one JSON object on stdout
with the same keys for every registered command, and its rows add up on an input with a bad line."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from zephyr.cli import build_parser, main
from zephyr.summary import KEYS, Summary, from_stages, human

GOOD = (
    "The history of the city is long and it is closely tied to the river that runs through it. "
    "Merchants came to trade with the people of the valley, and they brought new ideas with them. "
    "Over the centuries the town grew into a busy market, and many of the old buildings still stand today."
)
OTHER = (
    "A quiet morning on the farm begins before sunrise, when the animals are fed and the fields are checked. "
    "The farmer walks the rows of wheat, looking for signs of disease, and plans the work of the long day ahead."
)
ROWS = [  # six readable rows (two exact duplicates, a repeated URL, a null text) and one bad line
    {"id": "a", "text": GOOD, "url": "http://example.com/a"},
    {"id": "b", "text": GOOD, "url": "http://example.com/b"},
    {"id": "c", "text": OTHER, "url": "http://example.com/A"},
    {"id": "d", "text": OTHER + " Then it rains.", "url": "http://example.com/a"},
    {"id": "e", "text": "mail me at someone@example.com " + OTHER, "url": "http://example.com/e"},
    {"id": "f", "text": None, "url": "http://example.com/f"},
]
READ = len(ROWS) + 1  # the bad line is input too: quarantined, never lost


def _commands(parser: argparse.ArgumentParser, prefix: tuple[str, ...] = ()) -> list[str]:
    """The leaf commands of the registry (``dedup exact``, ``quality score``, ...)."""
    names = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                nested = _commands(sub, (*prefix, name))
                names += nested or [" ".join((*prefix, name))]
    return names


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("summary")
    jsonl = root / "in.jsonl"
    jsonl.write_text(
        "\n".join(
            [*(json.dumps(r) for r in ROWS[:3]), '{"id": "bad", "text": ', *(json.dumps(r) for r in ROWS[3:])]
        )
        + "\n"
    )
    labelled = root / "labelled.parquet"
    pq.write_table(
        pa.table(
            {
                "text": [t for i in range(20) for t in (f"{GOOD} {i}", f"buy cheap pills now {i}")],
                "label": ["hq", "lq"] * 20,
                "id": [f"l{i:02d}" for i in range(40)],
            }
        ),
        labelled,
    )
    (root / "eval.jsonl").write_text(json.dumps({"text": OTHER[:150]}) + "\n")
    (root / "pipe.yaml").write_text(
        f"version: 1\nname: tiny\nsteps:\n  - step: read\n    paths: [{root / 'labelled.parquet'}]\n"
        "  - step: normalize\n  - step: exact_dedup\n"
    )
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))  # warc_pages: test WARCs
    from warc_pages import BROKEN_KINDS, sample_pages, write_warc

    write_warc(str(root / "crawl.warc.gz"), sample_pages(3), broken=BROKEN_KINDS[:1])
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    trainer = trainers.BpeTrainer(
        vocab_size=300,
        special_tokens=["<|endoftext|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator([GOOD, OTHER] * 5, trainer=trainer)
    tok.save(str(root / "tokenizer.json"))
    return {"jsonl": jsonl, "labelled": labelled, "root": root}


def _argv(command: str, files: dict[str, Path], out: Path) -> list[str]:
    """A run of ``command`` on the small input (``READ`` rows, one unreadable); a new command must be added
    here, or ``test_every_command_ends_with_the_json_summary`` fails for it."""
    f, root, o = str(files["jsonl"]), files["root"], str(out)
    q = ("--on-error", "quarantine")
    table = {
        "convert": [f, "--output", o, *q],
        "sort": [f, "--by", "id", "--output", o, *q],
        "count": [f, *q],
        "dedup exact": [f, "--output", o, "--mode", "remove", *q],
        "dedup fuzzy": [f, "--output", o, "--mode", "remove", *q],
        "dedup url": [f, "--output", o, "--mode", "remove", *q],
        "dedup paragraph": [f, "--output", o, *q],
        "dedup substring": [f, "--output", o, "--min-bytes", "40", *q],
        "normalize": [f, "--output", o, *q],
        "langid": [f, "--output", o, "--languages", "en", *q],
        "filter": [f, "--output", o, *q],
        "pii": [f, "--output", o, *q],
        "decontaminate": [f, "--eval", str(root / "eval.jsonl"), "--output", o, *q],
        "quality train": [str(files["labelled"]), "--output", str(root / "model.bin"), "--epoch", "2"],
        "quality score": [f, "--model", str(root / "model.bin"), "--output", o, "--buckets", "2", *q],
        "extract": [str(root / "crawl.warc.gz"), "--output", o],
        "tokenize": [f, "--tokenizer", str(root / "tokenizer.json"), "--output", o, *q],
        "tokenizer train": [f, "--vocab-size", "300", "--output", f"{o}/tokenizer.json", *q],
        "train": [
            "--preset",
            "tiny",
            "--steps",
            "2",
            "--batch-size",
            "2",
            "--seq-len",
            "32",
            "--device",
            "cpu",
        ],
        "train check": [
            "--preset",
            "tiny",
            "--batch-size",
            "8",
            "--seq-len",
            "256",
            "--dispatch",
            "grouped_mm",
            "--no-measure-memory",
        ],
        "run": [str(root / "pipe.yaml"), "--job-dir", o],
        "explain convert": [f, *q],
        "explain sort": [f, "--by", "id", *q],
        "explain count": [f, *q],
        "explain dedup exact": [f, *q],
        "explain dedup fuzzy": [f, *q],
        "explain dedup url": [f, "--mode", "remove", *q],
        "explain dedup paragraph": [f, *q],
        "explain dedup substring": [f, "--min-bytes", "40", *q],
        "explain filter": [f, *q],
        "explain normalize": [f, *q],
        "explain langid": [f, "--languages", "en", *q],
        "explain pii": [f, *q],
        "explain decontaminate": [f, "--eval", str(root / "eval.jsonl"), *q],
        "explain quality score": [f, "--model", str(root / "model.bin"), *q],
        "explain extract": [str(root / "crawl.warc.gz")],
        "explain run": [str(root / "pipe.yaml"), "--job-dir", o],
        "explain tokenize": [f, "--tokenizer", str(root / "tokenizer.json"), *q],
    }
    return [*command.split(), *table[command], "--executor", "inprocess", "--json"]


# quality score needs the model quality train writes: the registry's order runs train first
COMMANDS = _commands(build_parser())


def test_the_registry_is_what_the_summary_test_covers():
    assert "dedup exact" in COMMANDS and "quality score" in COMMANDS
    assert COMMANDS.index("quality train") < COMMANDS.index("quality score")


# train check compiles the model (a minute); tests/trainer/test_check.py checks its summary in the default suite
@pytest.mark.parametrize(
    "command", [pytest.param(c, marks=pytest.mark.slow) if c == "train check" else c for c in COMMANDS]
)
def test_every_command_ends_with_the_json_summary(command, files, tmp_path, capsys):
    if command == "langid":
        from zephyr.pipelines.quality.langid import ensure_lid_model

        from zephyr.errors import ConfigError

        try:
            ensure_lid_model()
        except ConfigError as exc:
            pytest.skip(str(exc))
    if command == "quality score" and not (files["root"] / "model.bin").exists():
        assert main(_argv("quality train", files, tmp_path / "m")) == 0
        capsys.readouterr()
    if command == "extract":
        pytest.importorskip("warcio")
    assert main(_argv(command, files, tmp_path / "out")) == 0
    stdout = capsys.readouterr().out
    record = json.loads(stdout)  # one JSON object and nothing else on stdout
    assert list(record) == list(KEYS)
    assert record["command"] == f"zephyr {command}" and record["balanced"]
    assert record["rows_in"] == record["rows_kept"] + record["rows_dropped"] + record["rows_quarantined"]
    assert sum(record["dropped_by_reason"].values()) <= record["rows_dropped"]
    assert record["seconds"] >= 0 and isinstance(record["details"], dict)
    if command.startswith("explain "):  # runs nothing: the plan is the result
        assert record["rows_in"] == 0 and "ReadFiles" in record["details"]["plan"]
        return
    reads_the_jsonl = _argv(command, files, tmp_path)[len(command.split())] == str(files["jsonl"])
    if reads_the_jsonl and command != "tokenizer train":
        assert record["rows_in"] == READ and record["rows_quarantined"] >= 1, record
        assert record["bytes_in"] == files["jsonl"].stat().st_size
    if record["output"] and command not in ("train", "quality train", "tokenizer train", "run"):
        assert record["bytes_out"] > 0 or record["rows_kept"] == 0


def test_exact_dedup_counts_what_it_removed(files, tmp_path, capsys):
    assert main(_argv("dedup exact", files, tmp_path / "o")) == 0
    record = json.loads(capsys.readouterr().out)
    assert (record["rows_in"], record["rows_kept"], record["rows_dropped"], record["rows_quarantined"]) == (
        7,
        5,
        1,
        1,
    )
    assert record["dropped_by_reason"] == {"duplicate": 1}
    assert record["stats"] == str(tmp_path / "o.zephyr" / "stats.json")


def test_without_json_the_table_goes_to_stderr_and_stdout_keeps_only_data(files, tmp_path, capsys):
    out = tmp_path / "o"
    assert (
        main(
            [
                "dedup",
                "exact",
                str(files["jsonl"]),
                "--output",
                str(out),
                "--mode",
                "remove",
                "--on-error",
                "quarantine",
                "--executor",
                "inprocess",
            ]
        )
        == 0
    )
    captured = capsys.readouterr()
    assert captured.out == ""
    assert "zephyr dedup exact: done in" in captured.err
    assert "in 7 = kept 5 + dropped 1 + quarantined 1" in captured.err
    assert f"output      {out}" in captured.err and "next        zephyr tokenize" in captured.err
    assert main(["count", str(files["jsonl"]), "--on-error", "quarantine", "--executor", "inprocess"]) == 0
    captured = capsys.readouterr()
    assert captured.out == "6\n" and "quarantined 1" in captured.err  # the count stays scriptable


def test_from_stages_counts_every_stage_and_reason():
    stages = [
        {
            "rows_in": 10,
            "rows_out": 8,
            "rows_dropped": 1,
            "rows_quarantined": 1,
            "ops": [{"dropped_by_reason": {"short": 1}}],
        },
        {
            "rows_in": 8,
            "rows_out": 6,
            "rows_dropped": 2,
            "rows_quarantined": 0,
            "ops": [],
            "wide": {"dropped_by_reason": {"duplicate": 2}},
        },
    ]
    s = from_stages(stages, output="o")
    assert (s.rows_in, s.rows_kept, s.rows_dropped, s.rows_quarantined, s.balanced) == (10, 6, 3, 1, True)
    assert s.dropped_by_reason == {"short": 1, "duplicate": 2}
    assert from_stages([]).record("zephyr x", 0.0, None, None)["rows_in"] == 0


def test_an_unbalanced_summary_says_so():
    record = Summary(rows_in=5, rows_kept=3).record("zephyr x", 1.0, 10, 5)
    assert record["balanced"] is False and "DOES NOT BALANCE" in human(record)
