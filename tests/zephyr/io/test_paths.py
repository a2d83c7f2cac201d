"""expand_paths: globs, directories, fsspec URLs; sorted, deterministic, errors naming the pattern."""

from __future__ import annotations

import os

import fsspec
import pytest

from zephyr.errors import ConfigError, InputError
from zephyr.io.paths import expand_paths, infer_compression, infer_format


@pytest.fixture
def tree(tmp_path):
    for name in (
        "b.parquet",
        "a.jsonl",
        "sub/c.jsonl.zst",
        "sub/deep/d.vortex",
        "_SUCCESS",
        ".hidden.jsonl",
        "notes.txt",
        "x.parquet.tmp-123",
    ):
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"")
    return tmp_path


def test_directory_is_recursive_sorted_and_filtered(tree):
    got = expand_paths(str(tree))
    assert got == sorted(
        str(tree / n) for n in ("a.jsonl", "b.parquet", "sub/c.jsonl.zst", "sub/deep/d.vortex")
    )
    assert expand_paths(str(tree), formats=["jsonl"]) == [
        str(tree / "a.jsonl"),
        str(tree / "sub/c.jsonl.zst"),
    ]


def test_globs_and_lists(tree):
    assert expand_paths(str(tree / "*.parquet")) == [str(tree / "b.parquet")]
    assert expand_paths(str(tree / "**" / "*.jsonl*")) == [
        str(tree / "a.jsonl"),
        str(tree / "sub/c.jsonl.zst"),
    ]
    both = expand_paths([str(tree / "b.parquet"), str(tree / "a.jsonl"), str(tree / "a.jsonl")])
    assert both == [str(tree / "a.jsonl"), str(tree / "b.parquet")]
    assert expand_paths(f"file://{tree}/notes.txt") == [str(tree / "notes.txt")]  # explicit files are kept


def test_memory_urls():
    fs = fsspec.filesystem("memory")
    fs.pipe("/paths-test/x/1.jsonl", b"")
    fs.pipe("/paths-test/x/2.jsonl", b"")
    try:
        assert expand_paths("memory://paths-test/x") == [
            "memory:///paths-test/x/1.jsonl",
            "memory:///paths-test/x/2.jsonl",
        ]
        assert expand_paths("memory://paths-test/x/2*") == ["memory:///paths-test/x/2.jsonl"]
    finally:
        fs.rm("/paths-test", recursive=True)


def test_nothing_matches_names_the_pattern(tmp_path):
    with pytest.raises(InputError, match=r"no files match the pattern .*\*\.parquet"):
        expand_paths(str(tmp_path / "*.parquet"))
    with pytest.raises(InputError, match="no such file or directory"):
        expand_paths(str(tmp_path / "missing.jsonl"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(InputError, match="no files with a known extension"):
        expand_paths(str(tmp_path / "empty"))
    with pytest.raises(ConfigError):
        expand_paths([])


@pytest.mark.parametrize(
    ("name", "fmt", "codec"),
    [
        ("a.parquet", "parquet", None),
        ("a.jsonl", "jsonl", None),
        ("a.json", "jsonl", None),
        ("a.ndjson", "jsonl", None),
        ("a.jsonl.gz", "jsonl", "gzip"),
        ("a.JSONL.ZST", "jsonl", "zstd"),
        ("a.vortex", "vortex", None),
        ("a.parquet.gz", None, "gzip"),
        ("a.csv", None, None),
    ],
)
def test_inference(name, fmt, codec):
    assert infer_format(name) == fmt
    assert infer_compression(name) == codec


def test_file_stat_changes_with_a_same_size_rewrite_and_names_a_missing_file(tmp_path):
    from zephyr.io.paths import file_stat

    path = tmp_path / "a.jsonl"
    path.write_bytes(b"{}\n")
    first = file_stat(str(path))
    assert first == file_stat(str(path))  # stable while the file is untouched
    os.utime(path, ns=(0, path.stat().st_mtime_ns + 1_000_000_000))  # same bytes, rewritten later
    assert file_stat(str(path)).size_bytes == first.size_bytes and file_stat(str(path)) != first
    memory = fsspec.filesystem("memory")
    memory.pipe("/stat-test/a.jsonl", b"{}\n")
    before = file_stat("memory:///stat-test/a.jsonl")
    memory.pipe("/stat-test/a.jsonl", b"[]\n")
    assert file_stat("memory:///stat-test/a.jsonl") != before
    memory.rm("/stat-test", recursive=True)
    with pytest.raises(InputError, match="missing.jsonl"):
        file_stat(str(tmp_path / "missing.jsonl"))


def test_open_input_reads_bytes_and_names_a_file_gone_since_listing(tmp_path):
    from zephyr.io.paths import open_input

    (tmp_path / "a.jsonl").write_bytes(b'{"a": 1}\n')
    with open_input(str(tmp_path / "a.jsonl")) as handle:
        assert handle.read() == b'{"a": 1}\n'
    with pytest.raises(InputError, match="deleted after listing") as err:
        open_input(str(tmp_path / "gone.jsonl"))
    assert "gone.jsonl" in str(err.value)
