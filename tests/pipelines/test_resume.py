"""Resume after SIGKILL: finished stages are skipped, the interrupted stage skips its finished tasks, and the
outputs are byte-identical to an uninterrupted run."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import yaml

from zephyr.cli import main
from zephyr.io.layout import dropped_dir

REPO = Path(__file__).resolve().parents[2]
SAMPLE = REPO / "data" / "sample" / "sample.parquet"
SHARDS = 6

SLOW_MODULE = textwrap.dedent(
    '''
    """A deliberately slow batch function, so a test can kill a run in the middle of a stage."""
    import time

    import pyarrow.compute as pc
    from zephyr.ops import BatchOutput


    def slow_upper_source(table):
        time.sleep(0.4)
        short = pc.less(pc.utf8_length(table["text"]), 2000)
        kept = table.filter(pc.invert(short))
        return BatchOutput(kept=kept, dropped={"short": table.num_rows - kept.num_rows})
    '''
)


@pytest.fixture
def pipeline(tmp_path, monkeypatch):
    (tmp_path / "mods").mkdir()
    (tmp_path / "mods" / "slow_stage_mod.py").write_text(SLOW_MODULE)
    monkeypatch.syspath_prepend(str(tmp_path / "mods"))
    data = tmp_path / "in.parquet"
    pq.write_table(pq.read_table(SAMPLE).slice(0, 90), data)
    config = {
        "name": "resume",
        "steps": [
            {"step": "read", "paths": [str(data)], "num_shards": SHARDS},
            {"step": "normalize"},
            {"step": "map", "name": "slow", "function": "slow_stage_mod:slow_upper_source"},
            {"step": "exact_dedup"},
        ],
    }
    path = tmp_path / "resume.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def _outputs(job: Path) -> dict[str, bytes]:
    return {str(p.relative_to(job)): p.read_bytes() for p in sorted(job.glob("*/part-*.parquet"))}


def _markers(job: Path) -> list[Path]:
    return list(job.glob("02-slow.zephyr/work/main/stage-*/_done/task-*.json"))


def test_kill_between_and_within_stages_then_resume(pipeline, tmp_path):
    reference = tmp_path / "reference"
    assert (
        main(["run", str(pipeline), "--job-dir", str(reference), "--executor", "inprocess", "--no-report"])
        == 0
    )

    job = tmp_path / "job"
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(tmp_path / "mods"), os.environ.get("PYTHONPATH", "")]),
    }
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "zephyr.cli",
            "run",
            str(pipeline),
            "--job-dir",
            str(job),
            "--executor",
            "inprocess",
            "--no-report",
        ],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 120
        while len(_markers(job)) < 2:
            if proc.poll() is not None:
                pytest.fail(f"zephyr run ended before the kill: {proc.stderr.read().decode()[-2000:]}")
            if time.monotonic() > deadline:
                pytest.fail("no task of the slow stage finished within 120 s")
            time.sleep(0.02)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stderr.close()
    done_at_kill = len(_markers(job))
    assert 2 <= done_at_kill < SHARDS, "the kill must land inside the slow stage"
    assert (job / "01-normalize.zephyr" / "_SUCCESS.json").is_file() and not (
        job / "02-slow.zephyr" / "_SUCCESS.json"
    ).exists()
    assert (job / "lock.json").is_file()  # the killed run's lock, left behind: the rerun takes it over
    finished_parts = {p: p.stat().st_mtime_ns for p in job.glob("0[01]-*/part-*.parquet")}

    assert main(["run", str(pipeline), "--job-dir", str(job), "--executor", "inprocess", "--no-report"]) == 0
    assert not (job / "lock.json").exists()
    stats = {s["step"]: s for s in json.loads((job / "stats.json").read_text())["steps"]}
    assert stats["read"]["status"] == stats["normalize"]["status"] == "skipped"
    assert {p: p.stat().st_mtime_ns for p in finished_parts} == finished_parts  # not rewritten
    slow = stats["slow"]
    assert slow["status"] == "ran" and slow["tasks"] == SHARDS
    assert slow["tasks_resumed"] >= done_at_kill  # finished tasks were not run again
    assert slow["rows_in"] == slow["rows_kept"] + slow["dropped_by_reason"].get("short", 0)
    assert _outputs(job) == _outputs(reference)  # byte-identical to the uninterrupted run
    ref_stats = {s["step"]: s for s in json.loads((reference / "stats.json").read_text())["steps"]}
    for name in stats:
        for key in (
            "rows_in",
            "rows_kept",
            "rows_dropped",
            "rows_quarantined",
            "dropped_by_reason",
            "per_source",
        ):
            assert stats[name][key] == ref_stats[name][key], (name, key)


def test_from_reruns_and_until_stops(pipeline, tmp_path, capsys):
    job = tmp_path / "job"
    argv = ["run", str(pipeline), "--job-dir", str(job), "--executor", "inprocess", "--no-report"]
    assert main([*argv, "--until", "normalize"]) == 0
    folders = ["00-read", "00-read.zephyr", "01-normalize", "01-normalize.zephyr"]
    assert sorted(p.name for p in job.iterdir() if p.is_dir()) == folders
    capsys.readouterr()
    assert main([*argv, "--from", "normalize", "--until", "normalize"]) == 0
    err = capsys.readouterr().err
    assert "read (read): skipped, before --from" in err and "normalize (normalize): done" in err
    assert main([*argv, "--from", "exact_dedup"]) == 1
    assert "step 'slow' before it is not complete" in capsys.readouterr().err
    # a changed config reruns the changed stage and everything after it, not the stages before
    assert main(argv) == 0
    capsys.readouterr()
    assert main([*argv, "--set", "steps.normalize.collapse_whitespace=false"]) == 0
    err = capsys.readouterr().err
    assert "read (read): skipped" in err
    assert all(f"{name}): done" in err for name in ("normalize", "map", "exact_dedup"))


def _run_read_and_filter(tmp_path: Path) -> tuple[Path, Path, list[str]]:
    """(config file, job folder, argv) of a finished two-stage job (read 60 rows, heuristic filter), the
    starting point of the tests that rewrite its folder as an older zephyr left it."""
    data = tmp_path / "in.parquet"
    pq.write_table(pq.read_table(SAMPLE).slice(0, 60), data)
    config = {"name": "old", "steps": [{"step": "read", "paths": [str(data)]}, {"step": "heuristic_filter"}]}
    path, job = tmp_path / "old.yaml", tmp_path / "job"
    path.write_text(yaml.safe_dump(config))
    argv = ["run", str(path), "--job-dir", str(job), "--executor", "inprocess", "--no-report"]
    assert main(argv) == 0
    return path, job, argv


def test_job_folder_of_the_older_layout_reruns_into_the_sidecar_layout(tmp_path):
    """A job folder an older zephyr left, with each step's bookkeeping inside its folder under ``_`` names:
    its steps rerun (the folders are cleared first), and end in the sidecar layout, where every reader takes a
    step folder as its kept rows."""
    path, job, argv = _run_read_and_filter(tmp_path)
    steps = json.loads((job / "stats.json").read_text())["steps"]
    for step in steps:  # move each sidecar's bookkeeping into the step folder, as the older layout had it
        folder, side = Path(step["dir"]), Path(f"{step['dir']}.zephyr")
        for name in ("_SUCCESS.json", "_STARTED.json"):
            os.replace(side / name, folder / name)
        os.replace(side / "stats.json", folder / "_stats.json")
        if (side / "dropped").exists():
            os.replace(side / "dropped", folder / "_dropped")
    assert main(argv) == 0
    again = json.loads((job / "stats.json").read_text())["steps"]
    assert [s["status"] for s in again] == ["ran", "ran"]
    for old, new in zip(steps, again):
        folder = Path(new["dir"])
        assert all(p.name.startswith("part-") for p in folder.iterdir())
        assert pq.read_table(folder).num_rows == new["rows_kept"] == old["rows_kept"]
    filter_dir = Path(again[1]["dir"])
    assert pq.read_table(dropped_dir(filter_dir)).num_rows == again[1]["rows_dropped"]
    assert main(argv) == 0  # and the new layout resumes
    assert [s["status"] for s in json.loads((job / "stats.json").read_text())["steps"]] == [
        "skipped",
        "skipped",
    ]


def _old_fingerprints(config_path: Path) -> list[str]:
    """Stage fingerprints as zephyr computed them before ``zephyr.resume`` (a second sha256 recipe over JSON)."""
    import hashlib

    from zephyr.pipelines.config import CONFIG_VERSION, load_config

    from zephyr.io.paths import expand_paths, file_stat

    config = load_config(str(config_path))
    files = [[f, *file_stat(f)] for f in expand_paths(list(config.steps[0].step.paths))]
    upstream = hashlib.sha256(json.dumps(files).encode()).hexdigest()
    out = []
    for entry in config.steps:
        payload = json.dumps(
            {"step": entry.to_dict(), "upstream": upstream, "version": CONFIG_VERSION},
            sort_keys=True,
            default=str,
        )
        upstream = hashlib.sha256(payload.encode()).hexdigest()
        out.append(upstream)
    return out


def test_job_folder_with_old_fingerprints_reruns_cleanly(tmp_path):
    """A job folder whose markers hold the fingerprints of the zephyr before ``zephyr.resume``: every stage is
    cleared and reruns once (no crash, no stale file left), to the same outputs; the next run skips them all."""
    path, job, argv = _run_read_and_filter(tmp_path)
    reference = _outputs(job)
    dirs = [Path(s["dir"]) for s in json.loads((job / "stats.json").read_text())["steps"]]
    for stage_dir, old in zip(dirs, _old_fingerprints(path)):
        side = Path(f"{stage_dir}.zephyr")
        assert json.loads((side / "_SUCCESS.json").read_text())["fingerprint"] != old
        for name in ("_SUCCESS.json", "_STARTED.json", "stats.json"):
            marker = json.loads((side / name).read_text())
            (side / name).write_text(json.dumps({**marker, "fingerprint": old}))
        (side / "work" / "main" / "stage-0123456789abcdef").mkdir(parents=True)  # an old run's scratch
    assert main(argv) == 0
    steps = json.loads((job / "stats.json").read_text())["steps"]
    assert [s["status"] for s in steps] == ["ran", "ran"]
    assert _outputs(job) == reference
    assert not any(job.glob("*.zephyr/work/main/stage-0123456789abcdef"))
    for stage_dir, step in zip(dirs, steps):
        side = Path(f"{stage_dir}.zephyr")
        assert json.loads((side / "_SUCCESS.json").read_text())["fingerprint"] == step["fingerprint"]
    assert main(argv) == 0
    assert [s["status"] for s in json.loads((job / "stats.json").read_text())["steps"]] == [
        "skipped",
        "skipped",
    ]
