"""The format of a ``zephyr run`` job's stats files, and how files an older zephyr wrote are read.

Why a module: the runner writes these files and three readers use them (resume, the report and its plots);
each reader goes through ``upgrade_record`` / ``upgrade_job_stats`` here, so a job folder of either format
resumes and renders the same way, and the next format change has one place to go.

Format 2 (``"version": 2``, this release) says *step* for a pipeline step:

- a step record (``NN-NAME.zephyr/stats.json``) names its step under ``step``;
- the job's ``stats.json`` lists the step records under ``steps``.

Format 1 (``"version": 1``, written before it) said ``stage`` and ``stages`` there, from when pipeline steps
were called stages. Two things keep their name in both formats, because they are not pipeline steps:

- ``config`` in a step record still holds the step's type under ``stage``: it is the dict the step's
  fingerprint hashes (``StepEntry.record_dict``, see ``pipelines/step_renames.py``), and renaming it would make
  every resumed run redo every step;
- each engine job under ``jobs`` keeps its ``stages``: those are engine stages.

>>> upgrade_record({"version": 1, "stage": "read", "type": "read", "config": {"stage": "read"}})
{'version': 2, 'step': 'read', 'type': 'read', 'config': {'stage': 'read'}}
>>> upgrade_job_stats({"version": 1, "pipeline": "p", "stages": [{"stage": "read"}]})
{'version': 2, 'pipeline': 'p', 'steps': [{'step': 'read', 'version': 2}]}
"""

from __future__ import annotations

from typing import Any

from zephyr.pipelines.step_renames import deprecated_name

__all__ = ["STATS_VERSION", "STEP", "STEPS", "StepRecord", "upgrade_job_stats", "upgrade_record"]

STATS_VERSION = 2
"""The format version of the step records and of the job's ``stats.json`` (both carry it as ``version``)."""
STEP = "step"
"""The key of a step record that names its step."""
STEPS = "steps"
"""The key of the job's ``stats.json`` that lists the step records."""
_OLD_STEP = "stage"
_OLD_STEPS = "stages"


def _renamed(mapping: dict[str, Any], old: str, new: str) -> dict[str, Any]:
    """``mapping`` with key ``old`` called ``new``, in the same place among its keys."""
    return {(new if key == old else key): value for key, value in mapping.items()}


def upgrade_record(record: dict[str, Any]) -> dict[str, Any]:
    """A step record in format 2: ``record`` itself when it already is, else a copy with the old key renamed
    and ``version`` set (added after the keys when a record had none)."""
    if STEP in record or _OLD_STEP not in record:
        return record
    return {**_renamed(record, _OLD_STEP, STEP), "version": STATS_VERSION}


def upgrade_job_stats(stats: dict[str, Any]) -> dict[str, Any]:
    """A job's ``stats.json`` in format 2, every step record in it too (copies where anything changes)."""
    if STEPS not in stats and _OLD_STEPS in stats:
        stats = {**_renamed(stats, _OLD_STEPS, STEPS), "version": STATS_VERSION}
    steps = stats.get(STEPS)
    if not isinstance(steps, list):
        return stats
    upgraded = [upgrade_record(r) if isinstance(r, dict) else r for r in steps]
    return stats if all(a is b for a, b in zip(upgraded, steps)) else {**stats, STEPS: upgraded}


class StepRecord(dict):
    """A step record as the Python API hands it out (``PipelineResult.steps``, ``on_step_done``): a plain dict
    whose old key ``record["stage"]`` still reads the step's name, with a ``ZephyrDeprecationWarning``, until
    the next release (``.get("stage")`` does not: it says None, as for any absent key)."""

    def __missing__(self, key: str) -> Any:
        if key == _OLD_STEP and STEP in self:
            deprecated_name('a step record\'s key "stage"', '"step"')
            return self[STEP]
        raise KeyError(key)
