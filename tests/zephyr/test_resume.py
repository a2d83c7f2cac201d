"""zephyr.resume: when a unit of work counts as finished, and what a rerun clears or keeps."""

from __future__ import annotations

import json

from zephyr import resume


def _finished_unit(folder, fingerprint, files=("part-00000.parquet",)):
    """A folder unit as a run leaves it: started, its files written, then done."""
    resume.begin(folder, fingerprint)
    paths = []
    for name in files:
        (folder / name).write_bytes(b"rows")
        paths.append(str(folder / name))
    resume.mark_done(folder, fingerprint)
    return paths


def test_complete_with_its_fingerprint_and_files(tmp_path):
    unit = tmp_path / "unit"
    files = _finished_unit(unit, "fp-a")
    assert resume.is_complete(unit, "fp-a", files)
    assert json.loads((unit / resume.SUCCESS).read_text())["fingerprint"] == "fp-a"
    assert json.loads((unit / resume.STARTED).read_text()) == {"fingerprint": "fp-a"}


def test_incomplete_without_done_marker_or_record(tmp_path):
    unit = tmp_path / "unit"
    resume.begin(unit, "fp-a")
    (unit / "part-00000.parquet").write_bytes(b"rows")
    assert not resume.is_complete(unit, "fp-a", [str(unit / "part-00000.parquet")])  # started, never done
    resume.mark_done(unit, "fp-a")
    assert not resume.is_complete(unit, "fp-a", None)  # no record of what it wrote
    assert not resume.is_complete(tmp_path / "never-ran", "fp-a", [])


def test_other_fingerprint_is_not_complete_and_is_cleared(tmp_path):
    unit = tmp_path / "unit"
    files = _finished_unit(unit, "fp-old")
    assert not resume.is_complete(unit, "fp-new", files)
    assert resume.begin(unit, "fp-new") is True
    assert sorted(p.name for p in unit.iterdir()) == [resume.STARTED]
    assert json.loads((unit / resume.STARTED).read_text()) == {"fingerprint": "fp-new"}


def test_missing_files_are_not_complete_and_the_unit_starts_over(tmp_path):
    unit = tmp_path / "unit"
    files = _finished_unit(unit, "fp-a", ("part-00000.parquet", "part-00001.parquet"))
    (unit / "part-00001.parquet").unlink()
    assert not resume.is_complete(unit, "fp-a", files)
    assert resume.begin(unit, "fp-a") is True  # a done marker whose files are gone: cleared, not trusted
    assert not (unit / "part-00000.parquet").exists() and not (unit / resume.SUCCESS).exists()


def test_unfinished_unit_of_the_same_fingerprint_keeps_its_work(tmp_path):
    unit = tmp_path / "unit"
    resume.begin(unit, "fp-a")
    (unit / "_work").mkdir()
    (unit / "_work" / "task-00000.json").write_text("{}")
    assert resume.begin(unit, "fp-a") is False
    assert (unit / "_work" / "task-00000.json").is_file()
    assert resume.begin(unit, "fp-a", fresh=True) is True  # a forced rerun starts over
    assert not (unit / "_work").exists()


def test_torn_or_foreign_markers_are_no_markers(tmp_path):
    marker = tmp_path / "m.json"
    marker.write_text('{"fingerprint": "fp-a", "rows')
    assert resume.read_marker(marker, "fp-a") is None
    marker.write_text("[1, 2]")
    assert resume.read_marker(marker, "fp-a") is None
    marker.write_text('{"fingerprint": "fp-b"}')
    assert resume.read_marker(marker, "fp-a") is None
    assert resume.read_marker(marker, "fp-b") == {"fingerprint": "fp-b"}


def test_task_markers_use_the_same_reader_and_keep_their_format(tmp_path):
    marker = tmp_path / "_done" / "task-00000.json"
    marker.parent.mkdir()
    marker.write_text(
        json.dumps({"fingerprint": "fp", "rows_quarantined": 2, "ops": [{"op": "m", "rows_quarantined": 2}]})
    )
    assert resume.read_marker(str(marker), "fp") == {
        "fingerprint": "fp",
        "ops": [{"op": "m", "rows_quarantined": 2}],
        "rows_quarantined": 2,
    }
    assert resume.read_marker(str(marker), "other") is None


def test_fingerprints_follow_config_upstream_and_files(tmp_path):
    assert resume.unit_fingerprint({"a": 1, "b": [1, 2]}, "up") == resume.unit_fingerprint(
        {"b": [1, 2], "a": 1}, "up"
    )
    assert resume.unit_fingerprint({"a": 1}, "up") != resume.unit_fingerprint({"a": 2}, "up")
    assert resume.unit_fingerprint({"a": 1}, "up") != resume.unit_fingerprint({"a": 1}, "up2")
    data = tmp_path / "in.jsonl"
    data.write_text('{"text": "a"}\n')
    before = resume.files_fingerprint([str(data)])
    assert resume.files_fingerprint([str(data)]) == before
    data.write_text('{"text": "a"}\n{"text": "b"}\n')
    assert resume.files_fingerprint([str(data)]) != before


def test_drop_scratch_keeps_quarantined_rows(tmp_path):
    work = tmp_path / "_work"
    for step in ("main", "hash"):
        (work / step / "stage-0123" / "_done").mkdir(parents=True)
        (work / step / "quarantine").mkdir()
        (work / step / "stats.json").write_text("{}")
    (work / "note.txt").write_text("not a job folder")
    resume.drop_scratch(work)
    assert sorted(str(p.relative_to(work)) for p in work.rglob("*")) == [
        "hash",
        "hash/quarantine",
        "main",
        "main/quarantine",
        "note.txt",
    ]
    resume.drop_scratch(tmp_path / "none")  # no work folder: nothing to do


# -- what a marker may name, and whether its files still hold their bytes ------------------------------------
def _sink_task(tmp_path, index: int = 3):
    from zephyr.tasks import SinkOutput, StageSpec, TaskSpec

    staging = str(tmp_path / "out.zephyr" / "staging")
    output = StageSpec("fp", "write", (), SinkOutput(str(tmp_path / "out"), "parquet", staging=staging))
    task = TaskSpec(
        fingerprint="fp",
        index=index,
        marker_path=str(tmp_path / "work" / "_done" / f"task-{index:05d}.json"),
        quarantine_path=str(tmp_path / "q" / f"task-{index:05d}.parquet"),
        budget_bytes=1 << 20,
    )
    return output, task


def test_a_marker_names_only_its_own_files_in_the_stages_folders(tmp_path):
    from zephyr.tasks import owned_folders

    output, task = _sink_task(tmp_path)
    rules = owned_folders(output, task)
    out, staging = tmp_path / "out", tmp_path / "out.zephyr" / "staging"
    assert resume.inside(f"{staging}/part-00003.parquet", rules["files"])  # its own staged part
    assert resume.inside(f"{out}/part-00001.parquet", rules["files"])  # published under a dense name
    assert not resume.inside(f"{staging}/part-00004.parquet", rules["files"])  # another task's part
    assert not resume.inside(f"{out}/part-00001.jsonl", rules["files"])  # another format
    assert not resume.inside(f"{out}/sub/part-00001.parquet", rules["files"])
    assert not resume.inside(f"{staging}/../../home/part-00003.parquet", rules["files"])
    assert resume.inside(task.quarantine_path, rules["quarantine"])
    assert not resume.inside(str(tmp_path / "q" / "task-00004.parquet"), rules["quarantine"])


def test_a_link_planted_in_an_owned_folder_does_not_lead_out(tmp_path):
    victim = tmp_path / "home" / "private.parquet"
    victim.parent.mkdir()
    victim.write_bytes(b"mine")
    staging = tmp_path / "out.zephyr" / "staging"
    staging.mkdir(parents=True)
    (staging / "part-00003.parquet").symlink_to(victim)
    assert not resume.inside(str(staging / "part-00003.parquet"), [(str(staging), None)])


def test_check_files_compares_sizes_then_checksums(tmp_path):
    from zephyr.io.checksum import checksum_record, file_checksum

    path = tmp_path / "part-00000.parquet"
    path.write_bytes(b"0123456789")
    records = {str(path): checksum_record(*file_checksum(str(path)))}
    assert resume.check_files(records) is None
    path.write_bytes(b"0123456788")  # same size, other bytes
    assert "does not hold the bytes written" in resume.check_files(records)
    path.write_bytes(b"garbage\n")
    assert "has 8 bytes, 10 were written" in resume.check_files(records)
    path.unlink()
    assert "is missing" in resume.check_files(records)
    assert "no checksum recorded" in resume.check_files({str(path): None})
