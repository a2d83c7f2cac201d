"""Publishing an output: a local folder is swapped in whole (a crash mid-publish leaves the old content), a
claim manifest is written last, a crash between the swap and the manifest is recovered, and quarantine folders
of other plans go."""

from __future__ import annotations

import json
import os

import pytest

from zephyr.errors import ClaimError
from zephyr.io import claim, layout
from zephyr.io.claim import exchange, prune_quarantine, publish_folder


def _built(tmp_path, out, names, suffix=""):
    built = layout.side_path(str(out), "staging", "built")
    for name in names:
        path = tmp_path / built / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(name + suffix)
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


def test_exchange_swaps_two_folders_in_one_call(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    (tmp_path / "a" / "from-a").write_text("a")
    (tmp_path / "b" / "from-b").write_text("b")
    if not exchange(str(tmp_path / "a"), str(tmp_path / "b")):
        pytest.skip("no renameat2(RENAME_EXCHANGE) here: publish falls back to two renames")
    assert [p.name for p in (tmp_path / "a").iterdir()] == ["from-b"]
    assert [p.name for p in (tmp_path / "b").iterdir()] == ["from-a"]


class Killed(Exception):
    """The process dying in the middle of a publish."""


@pytest.mark.parametrize("crash_at", [1, 2, 3])
def test_a_crash_in_the_middle_of_a_local_publish_leaves_the_old_content_whole(
    tmp_path, monkeypatch, crash_at
):
    """Readers of a local output never see a mix of two runs' parts: the new content is built beside it and
    swapped in at once, so a publish that dies after any number of its moves leaves the old folder as it was."""
    out = tmp_path / "out"
    publish_folder(_built(tmp_path, out, ["a", "b", "c"]), str(out))
    moves = []

    def dying(real):
        def move(src, dst, *args, **kwargs):
            if "/staging/built/" in str(src):  # a part of the new run on its way
                moves.append(dst)
                if len(moves) == crash_at:
                    raise Killed  # not an OSError, which shutil.move would answer with a copy
            return real(src, dst, *args, **kwargs)

        return move

    monkeypatch.setattr(os, "replace", dying(os.replace))
    monkeypatch.setattr(os, "rename", dying(os.rename))
    with pytest.raises(Killed):
        publish_folder(_built(tmp_path, out, ["a", "b", "c"], suffix=" of the new run"), str(out))
    monkeypatch.undo()
    assert {p.name: p.read_text() for p in out.iterdir()} == {"a": "a", "b": "b", "c": "c"}
    with claim.claimed(str(out)):  # still the finished run's folder: nothing foreign
        pass


def test_a_crash_between_swap_and_manifest_leaves_files_the_next_claim_accepts(tmp_path, monkeypatch):
    out = tmp_path / "out"
    publish_folder(_built(tmp_path, out, ["a"]), str(out))

    def crash(*args, **kwargs):
        raise OSError("killed before the manifest")

    monkeypatch.setattr(claim, "write_manifest", crash)
    with pytest.raises(OSError, match="killed before the manifest"):
        publish_folder(_built(tmp_path, out, ["b", "c"]), str(out))
    monkeypatch.undo()
    assert sorted(p.name for p in out.iterdir()) == ["b", "c"]  # swapped in whole
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
