"""What ``zephyr train`` shows: a line every ``--log-every`` steps with its fields, a bar only on a terminal
(or with ``--progress``), none with ``--no-progress``, and no extra host read of the metrics for any of it."""

from __future__ import annotations

import importlib
import json
import os
import re

import pytest
from zephyr.trainer.config import TrainConfig
from zephyr.trainer.metrics import TrainLog
from zephyr.trainer.train import train

from zephyr import progress
from zephyr.cli import main

from ..terminal import cli_under_pty

train_module = importlib.import_module("zephyr.trainer.train")  # the package's ``train`` is the function

TINY = ["--preset", "tiny", "--batch-size", "2", "--seq-len", "32", "--device", "cpu"]
LINE = re.compile(
    r"^zephyr train: step (\d+)/(\d+) \| loss ([\d.]+) \| ([\d.]+k?) tok/s \| MFU ([\d.]+)% \| lr ([\d.e+-]+)"
    r"( \| ETA \d+(m\d\ds|s|h\d\dm))?$"
)


def test_a_line_every_n_steps_and_after_the_last(tmp_path, capsys):
    """5 steps, --log-every 2: lines after steps 2, 4 and 5, each with the loss and lr the JSONL log holds for
    that step, tokens/s, MFU (a peak is given, so it is known on the CPU) and an ETA on all but the last."""
    log = tmp_path / "train.jsonl"
    argv = ["train", *TINY, "--steps", "5", "--log-every", "2", "--peak-tflops", "1", "--log", str(log)]
    assert main(argv) == 0
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.startswith("zephyr train: step")]
    matches = [LINE.match(line) for line in lines]
    assert all(matches), lines
    records = [json.loads(line) for line in log.read_text().splitlines()]
    assert [int(m[1]) for m in matches] == [2, 4, 5] and {m[2] for m in matches} == {"5"}
    for m in matches:
        record = records[int(m[1]) - 1]
        assert float(m[3]) == pytest.approx(record["loss"], abs=1e-4)
        assert float(m[6]) == pytest.approx(record["lr"], rel=1e-2)
        assert float(m[5]) > 0
    assert [m[7] is not None for m in matches] == [True, True, False]  # no ETA once done
    assert "step/s" not in err and "%|" not in err  # stderr is not a terminal: no bar


def test_log_every_0_prints_no_line_and_mfu_is_left_out_where_unknown(capsys):
    assert main(["train", *TINY, "--steps", "2", "--log-every", "0"]) == 0
    assert "step " not in capsys.readouterr().err
    assert main(["train", *TINY, "--steps", "2", "--log-every", "1"]) == 0
    lines = [line for line in capsys.readouterr().err.splitlines() if "step " in line]
    assert len(lines) == 2 and all("MFU" not in line for line in lines)  # CPU: no peak to divide by


def test_the_bar_counts_steps_from_a_resumed_checkpoint(tmp_path, capsys):
    """The bar (forced on) counts steps from the checkpoint's step, and reads each step's metrics once: the
    trainer's one-step-late read, no other."""
    base = dict(preset="tiny", batch_size=2, seq_len=32, device="cpu", checkpoint_dir=str(tmp_path / "ckpt"))
    train(TrainConfig(steps=3, log_every=0, **base))
    capsys.readouterr()
    reads = []
    original = train_module._StepMetrics.flush

    def counted(self: train_module._StepMetrics) -> None:
        if self.pending is not None:  # a step's metrics are read
            reads.append(self.pending[0])
        original(self)

    with pytest.MonkeyPatch.context() as mp, progress.command("zephyr train", True) as display:
        mp.setattr(train_module._StepMetrics, "flush", counted)
        train(TrainConfig(steps=6, log_every=1, **base))
        assert display._bar.initial == 3 and display._bar.n == 6 and display._bar.total == 6
    assert reads == [3, 4, 5]
    err = capsys.readouterr().err
    # the bar starts at the checkpoint's step; its label is "zephyr train" alone, which says what it counts
    assert "3/6" in err and "6/6" in err and "step/s" in err and "[train]" not in err
    assert re.findall(r"zephyr train: step (\d)/6 \|", err) == ["4", "5", "6"]  # lines above the bar


def test_tokens_per_s_averages_the_window_and_eta_counts_steps_left():
    shown = TrainLog(TrainConfig(steps=10, log_every=2), 0)
    base = {"loss": 2.0, "lr": 1e-3, "mfu": None}
    assert shown.write({**base, "step": 1, "tokens": 100, "tokens_per_s": 100.0, "step_time_s": 1.0}) is None
    line = shown.write({**base, "step": 2, "tokens": 100, "tokens_per_s": 50.0, "step_time_s": 2.0})
    assert line.startswith("train: step 2/10 | loss 2.0000 | 67 tok/s | lr 1.00e-03 | ETA ")
    last = TrainLog(TrainConfig(steps=10, log_every=5), 9)
    record = {"step": 10, "loss": 1.5, "lr": 3e-4, "mfu": 0.214, "tokens": 2_500_000, "tokens_per_s": 2.5e6}
    line = last.write({**record, "step_time_s": 1.0})
    assert (
        line == "train: step 10/10 | loss 1.5000 | 2.5M tok/s | MFU 21.4% | lr 3.00e-04"
    )  # no ETA when done
    long = TrainLog(TrainConfig(steps=3726, log_every=1), 0)
    assert long.write({**base, "step": 1, "tokens": 1, "tokens_per_s": 1.0, "step_time_s": 1.0}).endswith(
        "ETA 1h02m"
    )
    quiet = TrainLog(TrainConfig(steps=2, log_every=1), 0, enabled=False)  # ranks other than 0
    assert quiet.write({**base, "step": 1, "tokens": 1, "tokens_per_s": 1.0, "step_time_s": 1.0}) is None


def _under_pty(argv: list[str]) -> str:
    """Run ``python -m zephyr.cli ARGV`` with stderr on a pseudo-terminal; return what it showed there."""
    env = {**os.environ, "COLUMNS": "160", "OMP_NUM_THREADS": "1"}
    returncode, out, text = cli_under_pty(argv, env=env, timeout_s=300)
    # the result line is part of the command's summary on stderr; stdout stays empty without --json
    assert returncode == 0 and out == b"" and "trained steps 1..4" in text, text
    return text


@pytest.mark.parametrize(
    "flag", [pytest.param([], id="terminal"), pytest.param(["--no-progress"], id="no-progress")]
)
def test_the_bar_shows_on_a_terminal_unless_no_progress(flag):
    text = _under_pty(["train", *TINY, "--steps", "4", "--log-every", "2", *flag])
    lines = [line for line in text.replace("\r", "\n").splitlines() if line.startswith("zephyr train: step")]
    assert [line.split(" |")[0] for line in lines] == ["zephyr train: step 2/4", "zephyr train: step 4/4"]
    if flag:
        assert "step/s" not in text and "%|" not in text
    else:
        assert "step/s" in text and "100%|" in text and "4/4 [" in text and "loss " in text
