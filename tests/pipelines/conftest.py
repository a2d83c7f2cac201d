"""Fixtures shared by the pipeline tests."""

import pytest

from zephyr.errors import ConfigError


@pytest.fixture(scope="session")
def lid_model():
    """The LID model fetched by scripts/setup; skip (with the fetch command) where it is missing."""
    from zephyr.pipelines.quality.langid import ensure_lid_model

    try:
        return str(ensure_lid_model())
    except ConfigError as exc:
        pytest.skip(str(exc))


def lid_available() -> bool:
    """Whether the LID model is here (``lid_model`` skips without it; a whole-pipeline test turns langid off)."""
    from zephyr.pipelines.quality.langid import ensure_lid_model

    try:
        ensure_lid_model()
    except ConfigError:
        return False
    return True
