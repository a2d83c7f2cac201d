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
