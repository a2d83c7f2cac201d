"""The step registry: one ``Step`` class per step type, iterated everywhere; no type switch in pipelines/."""

from __future__ import annotations

import re
from pathlib import Path

from zephyr.pipelines.config import STEPS, parse_config
from zephyr.pipelines.step import Step

PIPELINES = Path(__file__).resolve().parents[2] / "pipelines"


def test_no_type_switch_in_pipelines() -> None:
    """A step type is declared once, in its class: no module compares a step's type to a name, and the old
    tables (STEP_TYPES, DATA_STEPS, SOURCE_STEPS, RUNNERS) are gone."""
    switch = re.compile(r"""(\.type|\[["']type["']\])\s*(==|!=|\bin\b|\bnot in\b)""")
    tables = re.compile(r"\b(STEP_TYPES|DATA_STEPS|SOURCE_STEPS|RUNNERS)\b")
    offenders = [
        f"{path.relative_to(PIPELINES)}:{number}: {line.strip()}"
        for path in sorted(PIPELINES.rglob("*.py"))
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if switch.search(line) or tables.search(line)
    ]
    assert not offenders, "\n".join(offenders)


def test_every_step_type_is_a_documented_step_class() -> None:
    assert {"read", "extract", "fuzzy_dedup", "tokenize", "train", "substring_dedup"} <= set(STEPS)
    for name, cls in STEPS.items():
        assert issubclass(cls, Step) and cls.type == name and cls.__doc__, name
    assert [t for t, cls in STEPS.items() if cls.starts] == ["read", "extract"]


def test_order_rules_come_from_the_classes() -> None:
    raw = {
        "name": "t",
        "steps": [
            {"step": "read", "paths": ["/"]},
            {"step": "train", "name": "early"},
            {"step": "tokenize", "tokenizer": "/t.json"},
            {"step": "normalize"},
            {"step": "tokenize", "name": "again", "tokenizer": "/t.json"},
            {"step": "read", "name": "late", "paths": ["/"]},
        ],
    }
    try:
        parse_config(raw)
    except Exception as exc:  # noqa: BLE001 - the message is what is checked
        text = str(exc)
    assert "steps[1].step: 'train' needs an enabled tokenize step before it" in text
    assert "steps[3].step: 'normalize' cannot come after the tokenize step" in text
    assert "steps[4].step: only one tokenize step is allowed" in text
    assert "steps[5].step: only the first step may be 'read'" in text


def test_explain_prints_every_steps_jobs_and_runs_nothing(tmp_path, capsys):
    import pyarrow as pa
    import pyarrow.parquet as pq
    import yaml

    from zephyr.cli import main

    texts = [f"document number {i} has a few words in it. " * 20 for i in range(30)]
    pq.write_table(pa.table({"id": [str(i) for i in range(30)], "text": texts}), tmp_path / "in.parquet")
    steps = [{"step": "read", "paths": [str(tmp_path / "in.parquet")]}, {"step": "normalize"}]
    steps += [{"step": "heuristic_filter"}, {"step": "exact_dedup"}, {"step": "tokenize", "enabled": False}]
    (tmp_path / "p.yaml").write_text(yaml.safe_dump({"name": "p", "steps": steps}))
    job = tmp_path / "job"
    assert (
        main(["run", str(tmp_path / "p.yaml"), "--explain", "--job-dir", str(job), "--executor", "inprocess"])
        == 0
    )
    out = capsys.readouterr().out
    assert out.startswith("zephyr run p: nothing ran.")
    for line in (
        "[1/4] read (read): the output, written to the step folder",
        "[2/4] normalize (normalize): the output",
        "[3/4] heuristic_filter (heuristic_filter): job 1: every row annotated",
        "[4/4] exact_dedup (exact_dedup): job 2b: the output by the shuffle path",
    ):
        assert line in out, line
    # the plans are the ones the run executes: the step's own ops, by the names its accounting reads
    for op in (
        "pipeline.normalize.normalize",
        "route_kept",
        "pipeline.exact_dedup.remove",
    ):
        assert f"map_batches({op})" in out, op
    assert "tokenize" not in out and not job.exists()


def test_a_quality_step_trains_on_the_first_rows_of_each_label_of_labelled_parquet(tmp_path, monkeypatch):
    """``train: [labelled.parquet]``: the classifier learns from the first ``train_max_rows`` rows of each of
    the two labels (other labels left out), in file order, and the step scores every row with it."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    import pytest
    from zephyr.pipelines.quality import classifier

    from zephyr.cli import main

    pytest.importorskip("fasttext")
    good, bad = "the committee approved the annual budget after a long debate", "buy cheap pills now click"
    rows = [(f"{good} {i}", "hq") for i in range(12)] + [(f"{bad} {i}", "lq") for i in range(12)]
    rows += [("unlabelled text", "other")] * 3
    pq.write_table(
        pa.table({"id": list(range(len(rows))), "text": [t for t, _ in rows], "label": [k for _, k in rows]}),
        tmp_path / "lab.parquet",
    )
    (tmp_path / "p.yaml").write_text(
        f"version: 1\nname: q\nsteps:\n  - step: read\n    paths: [{tmp_path / 'lab.parquet'}]\n"
        f"  - step: quality\n    train: [{tmp_path / 'lab.parquet'}]\n    train_max_rows: 5\n    min_score: 0\n"
    )
    seen = []
    real = classifier.train_classifier

    def recording(table, *args, **kwargs):
        seen.append(table.select(["text", "label"]).to_pylist())
        return real(table, *args, **kwargs)

    monkeypatch.setattr(classifier, "train_classifier", recording)
    job = tmp_path / "job"
    assert (
        main(
            ["run", str(tmp_path / "p.yaml"), "--job-dir", str(job), "--executor", "inprocess", "--no-report"]
        )
        == 0
    )
    expected = [{"text": t, "label": k} for t, k in rows[:5] + rows[12:17]]
    assert seen == [expected]
    scored = pq.read_table(sorted(job.glob("01-quality/*.parquet")))
    assert scored.num_rows == len(rows) and "quality_score" in scored.column_names
