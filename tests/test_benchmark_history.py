"""Benchmark scripts write a run up in the month's notebook, benchmarks/history/<YYYY-MM>.md, not in RESULTS.md:
RESULTS.md is one page of current figures, each row updated in place by hand (benchmarks/README.md)."""

from __future__ import annotations

import datetime
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_benchmark_runs_append_to_the_months_notebook(tmp_path: Path) -> None:
    """A run's write-up goes to history/<YYYY-MM>.md (created with its heading), never to RESULTS.md."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import _measure
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    december = datetime.datetime(2026, 12, 1, tzinfo=datetime.UTC)
    first = _measure.append_history("### Run A\n\n| a |\n", now=december, folder=tmp_path)
    second = _measure.append_history("\n### Run B\n", now=december, folder=tmp_path)
    assert first == second == tmp_path / "2026-12.md"
    text = first.read_text(encoding="utf-8")
    assert text.startswith("# Benchmark runs, 2026-12\n")
    assert text.index("### Run A") < text.index("### Run B")
    assert "\n\n### Run A" in text
    assert [p.name for p in tmp_path.iterdir()] == ["2026-12.md"]
    this_month = datetime.datetime.now(datetime.UTC).strftime("%Y-%m.md")
    assert _measure.history_file(folder=tmp_path / "now").name == this_month


def test_no_benchmark_script_writes_results_md() -> None:
    """No script names RESULTS.md as a file to open: every appender goes through ``_measure.append_history``."""
    writers = [
        path.name
        for path in sorted((ROOT / "benchmarks").glob("*.py"))
        if re.search(r"""(["'])RESULTS\.md\1""", path.read_text(encoding="utf-8"))
    ]
    assert not writers, (
        f"open the month's notebook (_measure.append_history) instead of RESULTS.md in {writers}"
    )
