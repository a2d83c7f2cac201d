"""``--dropped-output DIR`` on langid, decontaminate and dedup exact|fuzzy|url --mode remove (``zephyr.removal``):
the kept rows are those the command keeps without the flag, and DIR holds exactly the removed ones, each with
its reason; the flag is refused where it could not mean that."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from zephyr.cli import main

EN = (
    "The history of the city is long and it is closely tied to the river that runs through it. "
    "Merchants came to trade with the people of the valley, and they brought new ideas with them."
)
EN2 = (
    "A quiet morning on the farm begins before sunrise, when the animals are fed and the fields are checked. "
    "The farmer walks the rows of wheat, looking for signs of disease, and plans the work of the day."
)
FR = "L'histoire de la ville est longue et elle est étroitement liée au fleuve qui la traverse depuis des siècles."
ROWS = [
    {"id": "a", "text": EN, "url": "http://example.com/a"},
    {"id": "b", "text": EN, "url": "http://example.com/b"},
    {"id": "c", "text": EN2, "url": "http://EXAMPLE.com/a"},
    {"id": "d", "text": EN2 + " It rained.", "url": "http://example.com/d"},
    {"id": "e", "text": FR, "url": "http://example.com/e"},
    {"id": "f", "text": None, "url": "http://example.com/f"},
]
FAST = ("--executor", "inprocess", "--on-error", "quarantine", "--json")


@pytest.fixture
def corpus(tmp_path) -> Path:
    path = tmp_path / "in.jsonl"
    lines = [json.dumps(r) for r in ROWS]
    path.write_text("\n".join([*lines[:2], '{"id": "broken", ', *lines[2:]]) + "\n")
    (tmp_path / "eval.jsonl").write_text(json.dumps({"text": EN2[:120]}) + "\n")
    return path


def _lid() -> None:
    from zephyr.pipelines.quality.langid import ensure_lid_model

    from zephyr.errors import ConfigError

    try:
        ensure_lid_model()
    except ConfigError as exc:
        pytest.skip(str(exc))


CASES = {
    "langid": (["langid", "--languages", "en"], {"lang_not_allowed", "lang_unknown"}),
    "decontaminate": (["decontaminate", "--eval", "EVAL"], {"decontam_shares_13gram"}),
    "dedup exact": (["dedup", "exact", "--mode", "remove"], {"duplicate"}),
    "dedup fuzzy": (["dedup", "fuzzy", "--mode", "remove", "--threshold", "0.7"], {"duplicate"}),
    "dedup url": (["dedup", "url", "--mode", "remove"], {"url_duplicate"}),
}


def _run(words: list[str], corpus: Path, *extra: str, capsys) -> dict:
    words = [str(corpus.parent / "eval.jsonl") if w == "EVAL" else w for w in words]
    n = 2 if words[0] == "dedup" else 1
    assert main([*words[:n], str(corpus), *words[n:], *extra, *FAST]) == 0
    return json.loads(capsys.readouterr().out)


def _sorted(table: pa.Table) -> pa.Table:
    return table.sort_by("id")


@pytest.mark.parametrize("case", list(CASES))
def test_dropped_rows_are_exactly_the_removed_ones(case, corpus, tmp_path, capsys):
    if case == "langid":
        _lid()
    words, reasons = CASES[case]
    plain, routed, dropped = tmp_path / "plain", tmp_path / "routed", tmp_path / "dropped"
    before = _run(words, corpus, "--output", str(plain), capsys=capsys)
    after = _run(words, corpus, "--output", str(routed), "--dropped-output", str(dropped), capsys=capsys)

    kept = _sorted(pq.read_table(plain))
    assert _sorted(pq.read_table(routed)).equals(kept)  # the flag changes nothing of the kept rows
    removed = pq.read_table(dropped)
    readable = {r["id"] for r in ROWS}
    assert set(removed["id"].to_pylist()) == readable - set(kept["id"].to_pylist())
    assert removed.num_rows >= 1 and set(removed["drop_reason"].to_pylist()) <= reasons
    assert removed.drop_columns(["drop_reason"]).column_names == kept.column_names
    assert not any(c.startswith("__zephyr") for c in removed.column_names + kept.column_names)
    for key in ("rows_in", "rows_kept", "rows_dropped", "rows_quarantined", "dropped_by_reason"):
        assert after[key] == before[key], key
    assert after["rows_in"] == len(ROWS) + 1 and after["rows_quarantined"] == 1 and after["balanced"]
    assert after["rows_dropped"] == removed.num_rows and after["dropped_output"] == str(dropped)
    assert not list(routed.glob(".routed-*"))  # the scratch folder is gone


@pytest.mark.parametrize("case", ["dedup exact", "decontaminate"])
def test_empty_input_writes_empty_outputs(case, tmp_path, capsys):
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    (tmp_path / "eval.jsonl").write_text(json.dumps({"text": EN}) + "\n")
    words, _ = CASES[case]
    record = _run(
        words, empty, "--output", str(tmp_path / "o"), "--dropped-output", str(tmp_path / "d"), capsys=capsys
    )
    assert (record["rows_in"], record["rows_dropped"]) == (0, 0)
    assert (tmp_path / "o").is_dir() and (tmp_path / "d").is_dir()


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["dedup", "exact", "IN", "--output", "OUT", "--mode", "remove", "--dropped-output", "OUT"],
            "--dropped-output 'OUT' is the output 'OUT'",
        ),
        (
            ["dedup", "url", "IN", "--output", "OUT", "--mode", "remove", "--dropped-output", "OUT/dropped"],
            "lies inside the output 'OUT': the set-aside rows would mix with the kept ones; pick a folder outside "
            "it (the default is OUT.zephyr/dropped)",
        ),
        (
            ["dedup", "fuzzy", "IN", "--output", "OUT", "--mode", "annotate", "--dropped-output", "D"],
            "needs --mode remove",
        ),
        (
            [
                "dedup",
                "paragraph",
                "IN",
                "--output",
                "OUT",
                "--mode",
                "remove",
                "--dropped-output",
                "D",
            ],
            "--dropped-output applies to dedup exact, fuzzy and url",
        ),
        (
            [
                "decontaminate",
                "IN",
                "--eval",
                "IN",
                "--mode",
                "annotate",
                "--output",
                "OUT",
                "--dropped-output",
                "D",
            ],
            "needs --mode remove",
        ),
    ],
)
def test_refused_where_it_cannot_hold_the_removed_rows(argv, message, corpus, tmp_path, capsys):
    out = str(tmp_path / "out")
    paths = {"IN": str(corpus), "OUT": out, "OUT/dropped": f"{out}/dropped", "D": str(tmp_path / "d")}
    argv = [paths.get(a, a) for a in argv]
    assert main([*argv, "--executor", "inprocess", "--on-error", "quarantine"]) == 1
    err = capsys.readouterr().err
    assert message.replace("OUT", out) in err and len(err.strip().splitlines()) <= 2, err


def test_an_input_drop_reason_column_is_refused_before_work(tmp_path, capsys):
    path = tmp_path / "in.parquet"
    pq.write_table(pa.table({"id": ["a", "b"], "text": [EN, EN], "drop_reason": ["x", None]}), path)
    argv = [
        "dedup",
        "exact",
        str(path),
        "--output",
        str(tmp_path / "o"),
        "--mode",
        "remove",
        "--dropped-output",
        str(tmp_path / "d"),
        "--executor",
        "inprocess",
    ]
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert (
        f"{path}: the input already has a column 'drop_reason'; pass --replace-columns to replace it" in err
    )
    assert not (tmp_path / "d").exists() or not list((tmp_path / "d").iterdir())
    assert main([*argv, "--replace-columns"]) == 0  # the one rule of added columns: replaced when told to
    assert pq.read_table(tmp_path / "d").column("drop_reason").to_pylist() == ["duplicate"]
    assert pq.read_table(tmp_path / "o").to_pydict() == {"id": ["a"], "text": [EN], "drop_reason": ["x"]}


@pytest.mark.parametrize("case", ["decontaminate", "dedup url"])
def test_routing_on_worker_processes(case, corpus, tmp_path, capsys):
    """The verdict and routes are pickled to local workers (one pool for the three jobs)."""
    words, reasons = CASES[case]
    words = [str(corpus.parent / "eval.jsonl") if w == "EVAL" else w for w in words]
    n = 2 if words[0] == "dedup" else 1
    argv = [
        *words[:n],
        str(corpus),
        *words[n:],
        "--output",
        str(tmp_path / "o"),
        "--dropped-output",
        str(tmp_path / "d"),
        "--executor",
        "local",
        "--workers",
        "2",
        "--small-job-bytes",
        "0",
        "--on-error",
        "quarantine",
        "--json",
    ]
    assert main(argv) == 0
    record = json.loads(capsys.readouterr().out)
    removed = pq.read_table(tmp_path / "d")
    assert record["balanced"] and record["rows_dropped"] == removed.num_rows >= 1
    assert set(removed["drop_reason"].to_pylist()) <= reasons
