"""The budget holds: each op's peak RSS per worker process stays within baseline + 1.25 × ``--memory-budget``,
and the driver's within its baseline + the budget.

Slow (minutes each at 512 MiB): ``pytest -m slow tests/zephyr/test_budget_peaks.py``. The measurement is
benchmarks/budget_peaks.py's (one implementation): a generated corpus of 6× the budget in Arrow bytes, every op
on ``--executor local --workers 2``, every process sampled with psutil every 50 ms; the baseline is the largest
worker's peak when the same op runs on 2,000 rows with workers forced (``--small-job-bytes 0``). The figures of
a full run are in benchmarks/RESULTS.md.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import budget_peaks  # noqa: E402

pytestmark = pytest.mark.slow

BUDGETS = ("64MiB", "512MiB")


@pytest.fixture(scope="module")
def corpora(tmp_path_factory) -> dict:
    """Corpora generated on first use (one per budget), the tiny one and the tokenizer, shared by the module."""
    work = tmp_path_factory.mktemp("budget")
    made: dict = {"work": work, "tiny": budget_peaks.prepare_tiny(work)}

    def get(budget: str):
        if budget not in made:
            args = type("Args", (), {"data_ratio": 6.0, "row_group_bytes": "32MiB", "seed": 0})()
            made[budget] = budget_peaks.prepare(budget, work, args)
            if "tokenizer" not in made:
                made["tokenizer"] = budget_peaks.train_tokenizer(work / "tokenizer.json", made[budget])
        return made[budget]

    made["get"] = get
    return made


@pytest.mark.parametrize("budget", BUDGETS)
@pytest.mark.parametrize("op", budget_peaks.OPS)
def test_peak_per_worker_within_budget(corpora, op, budget):
    corpus = corpora["get"](budget)
    assert corpus.arrow_bytes >= 5 * budget_peaks.budget_mib(budget) * budget_peaks.MIB
    setup = budget_peaks.Setup("local", 2, corpora["tokenizer"])
    logs = corpora["work"] / "logs"
    logs.mkdir(exist_ok=True)
    row = budget_peaks.measure_op(
        op, budget, corpus, corpora["tiny"], setup, work=corpora["work"], logs=logs, timeout_s=1800
    )
    assert row["error"] is None, row["error"]
    assert row.get("driver_ok", True), (
        f"{op} at {budget}: driver peak {row['driver_peak_mib']:.0f} MiB = its baseline "
        f"{row['driver_baseline_mib']:.0f} + {row['driver_above_mib']:.0f} MiB, {row['driver_ratio']:.2f}× the "
        f"budget (goal ≤ {budget_peaks.DRIVER_GOAL}); RSS timeline and log in {logs}"
    )
    assert row["ok"], (
        f"{op} at {budget}: worker peak {row['peak_mib']:.0f} MiB = baseline {row['baseline_mib']:.0f} + "
        f"{row['above_mib']:.0f} MiB, {row['ratio']:.2f}× the budget (goal ≤ {budget_peaks.GOAL}); "
        f"RSS timeline and log in {logs}"
    )
