"""Fixtures for the bad-input tests: the CLI as a user runs it, a small tokenizer, a text that filters keep."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from ..bpe import train_tiny_bpe

FAST = ("--executor", "inprocess")
"""Global options for CLI runs here: one process, so a run costs its start-up and little more."""

GOOD = (
    "The history of the city is long and it is closely tied to the river that runs through it. "
    "Merchants came to trade with the people of the valley, and they brought new ideas with them. "
    "Over the centuries the town grew into a busy market, and many of the old buildings still stand today."
)


def zephyr_cli(*args: str) -> subprocess.CompletedProcess:
    """``zephyr ARGS...`` in a subprocess (text output captured)."""
    return subprocess.run([sys.executable, "-m", "zephyr.cli", *args], capture_output=True, text=True)


def error_lines(run: subprocess.CompletedProcess) -> list[str]:
    """stderr of a failed CLI run without its ``full traceback: PATH`` line (configuration errors, found
    before any work, have none): what should be the one error line."""
    lines = run.stderr.strip().splitlines()
    assert lines, run.stderr
    return lines[:-1] if lines[-1].startswith("full traceback: ") else lines


@pytest.fixture(scope="session")
def tokenizer_json(tmp_path_factory) -> Path:
    """A byte-level BPE tokenizer.json with an ``<|endoftext|>`` EOS, trained on a few sentences."""
    return train_tiny_bpe(tmp_path_factory.mktemp("tok") / "tokenizer.json", [GOOD] * 20, vocab_size=400)
