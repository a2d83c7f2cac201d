"""Clean-ups after a run publishes its output: stale part files and quarantine folders of other plans go."""

from __future__ import annotations

from zephyr.io.publish import prune_quarantine, remove_stale_parts


def test_remove_stale_parts_keeps_this_runs_parts_and_other_files(tmp_path):
    for name in ("part-00000.parquet", "part-00001.parquet", "part-00002.parquet", "notes.txt"):
        (tmp_path / name).write_bytes(b"x")
    remove_stale_parts(str(tmp_path), [str(tmp_path / "part-00000.parquet")])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt", "part-00000.parquet"]
    remove_stale_parts(str(tmp_path / "missing"), [])  # no folder: nothing to do, no error


def test_prune_quarantine_removes_stage_folders_no_job_ran(tmp_path):
    for name in ("stage-aaaa", "stage-bbbb", "other"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "task-0.parquet").write_bytes(b"x")
    prune_quarantine(str(tmp_path), [{"stages": [{"fingerprint": "aaaa"}]}])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["other", "stage-aaaa"]
    prune_quarantine(str(tmp_path / "missing"), [])
