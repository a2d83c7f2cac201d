"""Fixtures shared by the pipeline tests."""

import pytest

from zephyr.errors import ConfigError


@pytest.fixture(scope="session")
def lid_model():
    """The LID model fetched by scripts/setup; skip (with the fetch command) where it is missing."""
    from zephyr.pipelines.quality.lid_model import ensure_lid_model

    try:
        return str(ensure_lid_model())
    except ConfigError as exc:
        pytest.skip(str(exc))


def lid_available() -> bool:
    """Whether the LID model is here (``lid_model`` skips without it; a whole-pipeline test turns langid off)."""
    from zephyr.pipelines.quality.lid_model import ensure_lid_model

    try:
        ensure_lid_model()
    except ConfigError:
        return False
    return True


def as_format_1(stats: dict) -> dict:
    """A job's ``stats.json`` or a step record (``_stats.json``) as the zephyr before stats format 2 wrote it:
    ``"version": 1``, the records under ``stages`` and each naming its step under ``stage``, in the same place
    among the keys (only those keys were renamed), ``config`` and the engine jobs' ``stages`` as they are."""

    def back(mapping: dict, new: str, old: str) -> dict:
        return {(old if key == new else key): value for key, value in mapping.items()}

    if "steps" in stats:
        return {
            **back(stats, "steps", "stages"),
            "version": 1,
            "stages": [as_format_1(r) for r in stats["steps"]],
        }
    assert "step" in stats, "neither a job's stats.json nor a step record"
    return {**back(stats, "step", "stage"), "version": 1}
