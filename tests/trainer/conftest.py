"""Trainer test fixtures: single-threaded torch (2 shared cores: OpenMP threads thrash), tiny configs."""

from __future__ import annotations

import pytest
import torch


@pytest.fixture(autouse=True)
def _one_torch_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
