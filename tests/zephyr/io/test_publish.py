"""Publishing an output: the parts are moved in, a claim manifest is written last, a crash between the
moves and the manifest is recovered, and quarantine folders of other plans go."""

from __future__ import annotations

import json

import pytest

from zephyr.errors import ClaimError
from zephyr.io import claim, layout
from zephyr.io.claim import prune_quarantine, publish_folder


def _built(tmp_path, out, names):
    built = layout.side_path(str(out), "staging", "built")
    for name in names:
        path = tmp_path / built / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(name)
    return built


def test_publish_folder_replaces_the_content_whole_and_claims_it(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "old-part").write_text("old")
    publish_folder(_built(tmp_path, out, ["a", "b"]), str(out))
    assert sorted(p.name for p in out.iterdir()) == ["a", "b"]
    manifest = json.loads((tmp_path / "out.zephyr" / "manifest.json").read_text())
    assert [(name, f["bytes"]) for name, f in manifest["files"].items()] == [("a", 1), ("b", 1)]
    assert all(len(f["xxh3_128"]) == 32 for f in manifest["files"].values())
    assert not (tmp_path / "out.zephyr" / "staging").exists()  # the old content went with it
    assert claim.foreign_files(str(out)) == []


def test_a_crash_between_moves_and_manifest_leaves_files_the_next_claim_accepts(tmp_path, monkeypatch):
    out = tmp_path / "out"
    publish_folder(_built(tmp_path, out, ["a"]), str(out))

    def crash(*args, **kwargs):
        raise OSError("killed before the manifest")

    monkeypatch.setattr(claim, "write_manifest", crash)
    with pytest.raises(OSError, match="killed before the manifest"):
        publish_folder(_built(tmp_path, out, ["b", "c"]), str(out))
    monkeypatch.undo()
    assert sorted(p.name for p in out.iterdir()) == ["b", "c"]  # moved in, the old part deleted
    with claim.claimed(str(out)):  # not foreign: the pending manifest names them; the claim promotes it
        pass
    manifest = json.loads((tmp_path / "out.zephyr" / "manifest.json").read_text())
    assert sorted(manifest["files"]) == ["b", "c"]


def test_a_file_under_a_name_no_manifest_lists_is_foreign_a_changed_part_is_not(tmp_path):
    out = tmp_path / "out"
    publish_folder(_built(tmp_path, out, ["part-00000.parquet"]), str(out))
    (out / "part-00000.parquet").write_text(
        "edited by hand"
    )  # zephyr's part, damaged: a resume recomputes it
    assert claim.foreign_files(str(out)) == []
    (out / "part-00001.parquet").write_text("someone else's")
    refused = pytest.raises(ClaimError, match=r"holds files zephyr did not write \(part-00001.parquet\)")
    with refused, claim.claimed(str(out)):
        pass
    with claim.claimed(str(out), overwrite=True):
        pass


def test_prune_quarantine_removes_stage_folders_no_job_ran(tmp_path):
    for name in ("stage-aaaa", "stage-bbbb", "other"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "task-0.parquet").write_bytes(b"x")
    prune_quarantine(str(tmp_path), [{"stages": [{"fingerprint": "aaaa"}]}])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["other", "stage-aaaa"]
    prune_quarantine(str(tmp_path / "missing"), [])
