"""benchmarks/revision_compare.py: its digest comparison names each differing file, files holding times are
compared by presence only, renamed flags resolve per revision, every registered command is run or excluded
with a reason, and (slow) the quick run of HEAD against itself finds every output identical."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "benchmarks"))
import revision_compare  # noqa: E402
from _compare_commands import (  # noqa: E402
    COMMANDS,
    EXCLUDED,
    Alt,
    Command,
    data_files,
    make_inputs,
    resolve,
)
from _compare_digest import STDOUT, differing, digest_tree  # noqa: E402
from _compare_report import table  # noqa: E402


def _tree(root: Path, files: dict[str, bytes]) -> Path:
    for name, data in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(data)
    return root


def test_one_differing_file_is_reported_by_name(tmp_path):
    same = {"out/part-00000.parquet": b"rows", "out/.huggingface.yaml": b"configs"}
    base = _tree(
        tmp_path / "base", {**same, "out/part-00001.parquet": b"old", "out/_stats.json": b'{"s": 1.2}'}
    )
    head = _tree(
        tmp_path / "head", {**same, "out/part-00001.parquet": b"new", "out/_stats.json": b'{"s": 3.4}'}
    )
    assert differing(digest_tree(base), digest_tree(head)) == ["out/part-00001.parquet"]


def test_an_ignored_file_still_has_to_exist_on_both_sides(tmp_path):
    base = _tree(tmp_path / "base", {"out/a.jsonl": b"x", "out/_stats.json": b"{}"})
    head = _tree(tmp_path / "head", {"out/a.jsonl": b"x", "extra.txt": b""})
    assert differing(digest_tree(base), digest_tree(head)) == [
        "extra.txt (only head)",
        "out.zephyr/stats.json (only base)",
    ]


def test_the_older_layout_compares_with_the_sidecar_layout(tmp_path):
    """A revision that kept its sidecars inside the output (``_`` names, an HF card) and one that keeps them in
    ``OUT.zephyr`` (with a claim manifest): the same data files in other folders are the same output."""
    base = _tree(
        tmp_path / "base",
        {
            "out/part-00000.parquet": b"rows",
            "out/.huggingface.yaml": b"configs",
            "out/_dedup_stats.json": b'{"s": 1}',
            "out/_quarantine/_unreadable/stage-1/task-00000.parquet": b"bad line",
            "job/01-f/_work/main/quarantine/stage-2/task-00000.parquet": b"null text",
            "job/01-f/_SUCCESS.json": b'{"fingerprint": "f", "finished": 1}',
        },
    )
    head = _tree(
        tmp_path / "head",
        {
            "out/part-00000.parquet": b"rows",
            "out.zephyr/manifest.json": b'{"finished": 2}',
            "out.zephyr/stats.json": b'{"s": 2}',
            "out.zephyr/unreadable/stage-1/task-00000.parquet": b"bad line",
            "job/01-f.zephyr/work/main/quarantine/stage-2/task-00000.parquet": b"null text",
            "job/01-f.zephyr/_SUCCESS.json": b'{"fingerprint": "f", "finished": 2}',
        },
    )
    assert differing(digest_tree(base), digest_tree(head)) == []
    (tmp_path / "head" / "out" / "part-00000.parquet").write_bytes(b"other rows")
    assert differing(digest_tree(base), digest_tree(head)) == ["out/part-00000.parquet"]


def test_the_report_row_says_no_and_names_the_files():
    def side(wall: float, digests: list[dict]) -> dict:
        return {"runs": [{"rc": 0, "wall_s": wall, "peak_mb": 100.0, "digests": d} for d in digests]}

    row = {
        "command": "sort --by url",
        "base": side(2.0, [{"out/a": "1", STDOUT: "e"}, {"out/a": "1", STDOUT: "e"}]),
        "head": side(3.0, [{"out/a": "2", STDOUT: "e"}, {"out/a": "3", STDOUT: "e"}]),
    }
    row = revision_compare._summarize(row, ["base", "head"])
    assert row["identical"] is False and row["differing"] == ["out/a"]
    assert row["head"]["nondeterministic"] == ["out/a"] and row["base"]["nondeterministic"] == []
    line = table([row]).splitlines()[-1]
    assert line.startswith(
        "| sort --by url | 2.00 | 3.00 | 1.50 | 100 | 100 | **no** | `out/a`; `head nondet"
    )


def test_a_failed_run_is_not_identical():
    runs = {"runs": [{"rc": 0, "wall_s": 1.0, "peak_mb": 1.0, "digests": {STDOUT: "e"}}]}
    failed = {"runs": [{"rc": 2, "wall_s": 1.0, "peak_mb": 1.0, "digests": {STDOUT: "e"}}]}
    row = revision_compare._summarize({"command": "x", "base": runs, "head": failed}, ["base", "head"])
    assert row["identical"] is False and row["differing"] == ["head exit 2"]


def test_a_command_new_at_head_is_not_a_difference_but_one_gone_from_head_is():
    ran = {"runs": [{"rc": 0, "wall_s": 1.0, "peak_mb": 1.0, "digests": {STDOUT: "e"}}]}
    new = revision_compare._summarize(
        {"command": "x", "base": {"absent": True}, "head": ran}, ["base", "head"]
    )
    assert new["identical"] is None and new["differing"] == ["(command absent at base)"]
    assert "| x | absent | 1.00 |  | absent | 1 | n/a |" in table([new])
    ran = {"runs": [{"rc": 0, "wall_s": 1.0, "peak_mb": 1.0, "digests": {STDOUT: "e"}}]}
    gone = revision_compare._summarize(
        {"command": "x", "base": ran, "head": {"absent": True}}, ["base", "head"]
    )
    assert gone["identical"] is False


def test_a_renamed_flag_resolves_to_the_name_each_revision_accepts():
    command = Command(
        "tokenize", "tokenize", ("{in}", Alt((("--shard-bytes", "2MB"), ("--shard-size", "2MB"))))
    )
    values = {"in": ["a.parquet", "b.parquet"]}
    assert resolve(command, {"--shard-bytes": None, "--shard-size": None}, values)[2] == "--shard-bytes"
    assert resolve(command, {"--shard-size": None}, values) == [
        "a.parquet",
        "b.parquet",
        "--shard-size",
        "2MB",
    ]
    mode = Command("d", "decontaminate", (Alt((("--mode", "remove"), ("--mode", "drop"))),))
    assert resolve(mode, {"--mode": ["drop", "flag"]}, {}) == ["--mode", "drop"]
    with pytest.raises(ValueError, match="accepts none"):
        resolve(mode, {"--mode": ["flag"]}, {})


def test_every_registered_command_is_run_or_excluded_with_a_reason():
    from zephyr.cli import build_parser

    def leaves(parser: argparse.ArgumentParser, prefix: tuple[str, ...] = ()) -> set[str]:
        found: set[str] = set()
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, sub in action.choices.items():
                    found |= leaves(sub, (*prefix, name)) or {" ".join((*prefix, name))}
        return found

    run = {c.words for c in COMMANDS}
    assert leaves(build_parser()) <= run | set(EXCLUDED)
    assert not run & set(EXCLUDED) and all(reason for reason in EXCLUDED.values())


@pytest.mark.slow
def test_quick_run_of_head_against_itself_is_identical(tmp_path):
    out = tmp_path / "compare"
    argv = [
        sys.executable,
        str(REPO / "benchmarks" / "revision_compare.py"),
        "--base",
        "HEAD",
        "--head",
        "HEAD",
    ]
    run = subprocess.run(
        [*argv, "--quick", "--repeat", "1", "--out", str(out)], capture_output=True, text=True, timeout=900
    )
    assert run.returncode == 0, run.stdout + run.stderr[-3000:]
    result = json.loads((out / "compare.json").read_text())
    assert [r["command"] for r in result["rows"]] == [c.name for c in COMMANDS if c.quick]
    assert all(r["identical"] for r in result["rows"]), [r["differing"] for r in result["rows"]]
    assert all(len(r["head"]["digests"]) > 1 or r["command"] == "count" for r in result["rows"])
    assert (out / "compare.md").read_text().count("| yes |") == len(result["rows"])
    worktrees = subprocess.run(["git", "worktree", "list"], cwd=REPO, capture_output=True, text=True).stdout
    assert str(out) not in worktrees  # the throwaway worktrees are removed


def test_tables_without_a_text_column_beside_the_documents_are_not_input(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"id": ["a"], "text": ["doc"]}), tmp_path / "part-00000.parquet")
    pq.write_table(pa.table({"id_a": ["a"], "id_b": ["b"]}), tmp_path / "pairs.parquet")
    (tmp_path / "more.jsonl").write_text('{"text": "x"}\n')
    (tmp_path / "README.md").write_text("not data")
    assert [p.name for p in data_files(tmp_path)] == ["more.jsonl", "part-00000.parquet"]


def test_the_derived_inputs_come_from_the_listed_files_only(tmp_path):
    """``--out`` inside ``--input``: the derived inputs (here the JSONL copy of the corpus) hold the listed
    corpus only, not the Parquet/JSONL files the run has written beside it since."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    docs = [f"document {i} " + "word " * 50 for i in range(3)]
    pq.write_table(pa.table({"id": ["a", "b", "c"], "text": docs}), tmp_path / "part-00000.parquet")
    files = data_files(tmp_path)
    (tmp_path / "out").mkdir()
    pq.write_table(pa.table({"text": ["not the corpus"]}), tmp_path / "out" / "written.parquet")
    made = make_inputs(files, tmp_path / "out" / "inputs")
    lines = Path(made["jsonl"]).read_text().splitlines()
    assert [json.loads(line)["text"] for line in lines] == docs
