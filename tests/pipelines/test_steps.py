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
