"""Helpers for the tests of ``zephyr explain``: run it through the CLI, read the stages of each job it prints,
and compare them with the stages a real run of the command recorded (``zephyr.job_stats``), so a test shows
that the printed plan is the plan that runs."""

from __future__ import annotations

import os
import re
from pathlib import Path

from zephyr import job_stats
from zephyr.cli import main

_STAGE = re.compile(r"^  stage \d+ (map|reduce|sample): (.*)$")


def explain(argv: list[str], capsys) -> str:
    """What ``zephyr explain ARGV`` prints, after checking it ran no engine job."""
    with job_stats.recording() as jobs:
        assert main(["explain", *argv]) == 0
    assert jobs == []
    return capsys.readouterr().out


def planned_jobs(text: str) -> dict[str, list[str]]:
    """The stages of each job a multi-job plan prints, by the job's title up to its colon
    (``job 2a``)."""
    jobs: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in text.splitlines():
        if line.startswith("job "):
            current = jobs.setdefault(line.split(":", 1)[0], [])
            continue
        match = _STAGE.match(line)
        if match and current is not None:
            current.append(match.group(2))
    return jobs


def plan_stages(plan: str) -> list[str]:
    """The stages of one ``Dataset.explain`` text, as ``planned_jobs`` lists a job's."""
    return planned_jobs("job 0:\n" + "\n".join("  " + line for line in plan.splitlines()))["job 0"]


def ran_jobs(argv: list[str], capsys) -> list[list[str]]:
    """The stages of each engine job ``zephyr ARGV`` ran, in order."""
    with job_stats.recording() as jobs:
        assert main(argv) == 0
    capsys.readouterr()
    return [[stage["stage"] for stage in job["stages"]] for job in jobs]


def runs_in_order(planned: list[list[str]], ran: list[list[str]]) -> bool:
    """Whether every planned job ran, with the same stages, in this order (other jobs, such as the count
    of a materialized result, may run between them)."""
    it = iter(ran)
    return all(any(job == stages for stages in it) for job in planned)


def listing(root: Path) -> list[str]:
    return sorted(os.path.relpath(os.path.join(d, f), root) for d, _, fs in os.walk(root) for f in fs)
