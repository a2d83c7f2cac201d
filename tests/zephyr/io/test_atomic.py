"""zephyr.io.paths.atomic_write: a file appears whole under its name, or not at all."""

from __future__ import annotations

import fsspec
import pytest

from zephyr.errors import InputError
from zephyr.io.paths import atomic_write, expand_paths


@pytest.mark.parametrize("root", ["local", "memory"])
def test_written_file_appears_only_when_the_block_ends(tmp_path, root):
    base = str(tmp_path) if root == "local" else "memory://atomic-ok"
    target = f"{base}/sub/out.json"
    fs, path = fsspec.core.url_to_fs(target)
    with atomic_write(target, "w") as handle:
        handle.write('{"ok": true}\n')
        assert not fs.exists(path)  # nothing under the final name while writing
        beside = fs.ls(fs._strip_protocol(f"{base}/sub"), detail=False)
        assert len(beside) == 1 and ".tmp-" in beside[0]  # the temporary is beside it...
        with pytest.raises(InputError):  # ...and never listed as an input
            expand_paths(f"{base}/sub")
    assert fs.cat_file(path) == b'{"ok": true}\n'
    assert fs.ls(fs._strip_protocol(f"{base}/sub"), detail=False) == [path]


@pytest.mark.parametrize("root", ["local", "memory"])
def test_a_failed_write_leaves_neither_file_nor_temporary(tmp_path, root):
    base = str(tmp_path) if root == "local" else "memory://atomic-fail"
    target = f"{base}/out.bin"
    fs, path = fsspec.core.url_to_fs(target)
    with pytest.raises(RuntimeError, match="boom"), atomic_write(target) as handle:
        handle.write(b"partial")
        raise RuntimeError("boom")
    assert not fs.exists(path)
    assert fs.ls(fs._strip_protocol(base), detail=False) == []


def test_an_existing_file_is_replaced_whole(tmp_path):
    target = tmp_path / "manifest.json"
    target.write_text("old")
    with pytest.raises(ValueError), atomic_write(target, "w") as handle:
        handle.write("new, but the writer fails")
        raise ValueError
    assert target.read_text() == "old"  # a failed rewrite keeps the previous version
    with atomic_write(target, "w") as handle:
        handle.write("new")
    assert target.read_text() == "new"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["manifest.json"]
