"""The ZSHX spill-run format (zephyr.shuffle.runs): what write_run and coalesce_runs leave on disk, read back
block by block and chunk by chunk, the requests that takes, and every damage a run can suffer (truncated index
or data, foreign magic, old version, a block of another run shape, a blob whose row count disagrees with its
entry, an input changed before it was coalesced) raising an ``InputError`` that names the file."""

from __future__ import annotations

import struct

import fsspec
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from fsspec.implementations.local import LocalFileSystem
from zephyr.shuffle.runs import (
    INDEX_VERSION,
    Run,
    RunPart,
    block_bytes,
    coalesce_runs,
    part_sources,
    read_index_block,
    write_run,
)

from zephyr.errors import InputError
from zephyr.io.checksum import checksum_record, file_checksum

FS = fsspec.filesystem("file")
PARTITIONS = 5


class CountingFS(LocalFileSystem):
    """A local filesystem that counts its ranged reads (``cat_file``), as an object store would bill them."""

    cachable = False

    def __init__(self):
        super().__init__()
        self.reads: list[tuple[str, int, int]] = []

    def cat_file(self, path, start=None, end=None, **kwargs):
        data = super().cat_file(path, start=start, end=end, **kwargs)
        self.reads.append((path, start or 0, (start or 0) + len(data)))
        return data


def _write_run(
    tmp_path, partitions: np.ndarray | None = None, rows: int = 1000, name: str = "run-00000", seed: int = 0
) -> tuple[str, pa.Table, np.ndarray]:
    """One run over ``rows`` rows; partitions 0, 2 and 4 hold rows, 1 and 3 are empty (by default)."""
    if partitions is None:
        partitions = np.sort(np.random.default_rng(seed).choice([0, 2, 4], size=rows))
    table = pa.table(
        {
            "k": np.arange(len(partitions)) + 10_000 * seed,
            "text": [f"row {i} of {seed} " * 3 for i in range(len(partitions))],
        }
    )
    prefix = str(tmp_path / name)
    write_run(FS, prefix, table, partitions, PARTITIONS, row_group_bytes=4096)
    return prefix + ".data", table, partitions


def _part(data: str, partition: int, slots: int = 1) -> RunPart:
    (part,) = read_index_block(FS, Run(data, slots), partition)
    return part


def _rows(parts: list[RunPart], fs=FS, chunk: int = 1 << 20) -> pa.Table | None:
    tables = [t for source in part_sources(fs, parts, chunk) for t in source]
    return pa.concat_tables(tables) if tables else None


def _blob_bytes(part: RunPart) -> bytes:
    with open(part.data_path, "rb") as f:
        f.seek(part.offset)
        return f.read(part.length)


def test_index_layout_is_one_block_per_partition(tmp_path):
    data, _, partitions = _write_run(tmp_path)
    raw = (tmp_path / "run-00000.index").read_bytes()
    assert len(raw) == PARTITIONS * block_bytes(1) == PARTITIONS * 48
    entries = []
    for p in range(PARTITIONS):
        block = raw[p * 48 : (p + 1) * 48]
        assert struct.unpack("<4sIIIQ", block[:24]) == (b"ZSHX", INDEX_VERSION, p, PARTITIONS, 1)
        entries.append(struct.unpack("<QQQ", block[24:]))
    entries = np.array(entries)
    assert entries[:, 2].tolist() == [int((partitions == p).sum()) for p in range(PARTITIONS)]
    assert entries[1].tolist() == [0, 0, 0] and entries[3].tolist() == [0, 0, 0]
    # blobs are back to back, in partition order, and fill the data file exactly
    full = entries[entries[:, 2] > 0]
    assert full[0, 0] == 0
    assert (full[1:, 0] == full[:-1, 0] + full[:-1, 1]).all()
    assert full[-1, 0] + full[-1, 1] == (tmp_path / "run-00000.data").stat().st_size


def test_each_partition_reads_back_its_own_rows_in_order_with_one_index_read(tmp_path):
    data, table, partitions = _write_run(tmp_path)
    fs = CountingFS()
    for p in range(PARTITIONS):
        fs.reads.clear()
        (part,) = read_index_block(fs, data, p)
        assert fs.reads == [(data[: -len(".data")] + ".index", 48 * p, 48 * (p + 1))]
        assert part.rows == int((partitions == p).sum())
        got = _rows([part], fs)
        if part.rows == 0:
            assert got is None and part.length == 0 and len(fs.reads) == 1
            continue
        assert fs.reads[1:] == [(data, part.offset, part.offset + part.length)]  # the blob: one read
        assert got.equals(table.filter(pa.array(partitions == p)))


def test_large_blob_streams_in_row_groups_of_the_spill_size(tmp_path):
    data, table, _ = _write_run(tmp_path, rows=60_000)
    part = _part(data, 0)
    fs = CountingFS()
    (source,) = part_sources(fs, [part], 16 << 10)
    groups = list(source)
    assert len(groups) > 1  # 4 KiB row groups: a reducer holds one at a time, never the whole blob
    assert all(g.num_rows >= 256 for g in groups[:-1])
    # a part larger than the chunk is streamed a chunk at a time after its footer (benchmarks/shuffle_model.py
    # ``chunk_reads``), never fetched whole: the same rows
    assert len(fs.reads) == -(-part.length // (16 << 10)) + 1
    assert all(end - start < part.length for _, start, end in fs.reads)
    assert pa.concat_tables(groups).equals(_rows([part]))


def test_column_projection(tmp_path):
    data, table, partitions = _write_run(tmp_path)
    for chunk in (1 << 20, 1024):  # fetched whole, or streamed
        got = pa.concat_tables(part_sources(FS, [_part(data, 2)], chunk, columns=["k"])[0])
        assert got.column_names == ["k"]
        assert got.column("k").to_numpy().tolist() == np.flatnonzero(partitions == 2).tolist()


def test_empty_run_writes_an_index_of_empty_entries(tmp_path):
    prefix = str(tmp_path / "run-00000")
    written = write_run(
        FS, prefix, pa.table({"k": pa.array([], pa.int64())}), np.array([], np.int64), 3, 4096
    )
    assert (written.rows, written.bytes) == (0, 0)
    assert (tmp_path / "run-00000.data").stat().st_size == 0
    for p in range(3):
        (part,) = read_index_block(FS, prefix + ".data", p)
        assert (part.offset, part.length, part.rows) == (0, 0, 0)
        assert _rows([part]) is None


# -- coalescing ---------------------------------------------------------------------------------------------


def _records(data_paths) -> dict[str, dict]:
    """The checksum records the map tasks' markers hold for these runs' files (data and index)."""
    files = [p for d in data_paths for p in (d, d[: -len(".data")] + ".index")]
    return {p: checksum_record(*file_checksum(p)) for p in files}


def _three_runs(tmp_path) -> list[tuple[str, pa.Table, np.ndarray]]:
    rng = np.random.default_rng(5)
    return [
        _write_run(tmp_path, np.sort(rng.integers(0, PARTITIONS, 800 + 300 * i)), name=f"run-{i}", seed=i)
        for i in range(3)
    ]


@pytest.mark.parametrize("window", [1 << 30, 1], ids=["one-window", "window-per-partition-piecewise"])
def test_coalesced_run_holds_every_input_blob_in_order_unchanged(tmp_path, window):
    runs = _three_runs(tmp_path)
    fs = CountingFS()
    done = coalesce_runs(
        fs,
        [Run(d) for d, _, _ in runs],
        str(tmp_path / "all"),
        PARTITIONS,
        window_bytes=window,
        upload_bytes=1,
        expected=_records(d for d, _, _ in runs),
    )
    assert done.run == Run(str(tmp_path / "all.data"), 3)
    assert done.rows == sum(len(p) for _, _, p in runs)
    assert done.bytes == sum((tmp_path / f"run-{i}.data").stat().st_size for i in range(3))
    assert (tmp_path / "all.index").stat().st_size == PARTITIONS * block_bytes(3)
    if window > 1:  # each index read whole, then each input's data in one read
        assert len(fs.reads) == 6
    else:  # a window per partition: one read per input and partition that holds bytes (a byte per read: more)
        assert len(fs.reads) == 3 + sum((tmp_path / f"run-{i}.data").stat().st_size for i in range(3))
    for p in range(PARTITIONS):
        parts = read_index_block(FS, done.run, p)
        originals = [_part(d, p) for d, _, _ in runs]
        assert [(q.length, q.rows) for q in parts] == [(q.length, q.rows) for q in originals]
        assert [_blob_bytes(q) for q in parts] == [
            _blob_bytes(q) for q in originals
        ]  # copied, not re-encoded
        fs.reads.clear()
        got = _rows(parts, fs)
        assert len(fs.reads) == 1  # the partition's three blobs lie back to back: one read
        expected = pa.concat_tables([t.filter(pa.array(part == p)) for _, t, part in runs])
        assert got.equals(expected)
        assert _rows(parts, fs, chunk=max(q.length for q in parts)).equals(expected)


def test_coalesced_runs_coalesce_again(tmp_path):
    runs = _three_runs(tmp_path)
    first = coalesce_runs(
        FS,
        [Run(runs[0][0]), Run(runs[1][0])],
        str(tmp_path / "a"),
        PARTITIONS,
        window_bytes=64,
        upload_bytes=1,
        expected=_records([runs[0][0], runs[1][0]]),
    )
    both = coalesce_runs(
        FS,
        [first.run, Run(runs[2][0])],
        str(tmp_path / "b"),
        PARTITIONS,
        window_bytes=64,
        upload_bytes=1,
        expected={**first.checksums, **_records([runs[2][0]])},
    )
    flat = coalesce_runs(
        FS,
        [Run(d) for d, _, _ in runs],
        str(tmp_path / "c"),
        PARTITIONS,
        window_bytes=64,
        upload_bytes=1,
        expected=_records(d for d, _, _ in runs),
    )
    assert both.run.slots == 3
    assert (tmp_path / "b.data").read_bytes() == (tmp_path / "c.data").read_bytes()
    assert (tmp_path / "b.index").read_bytes() == (tmp_path / "c.index").read_bytes()
    assert both.checksums[both.run.path] == flat.checksums[flat.run.path]


def test_coalesce_checks_its_inputs_against_their_writers_checksums(tmp_path):
    runs = _three_runs(tmp_path)
    _, table, parts = runs[1]
    expected = write_run(
        FS, str(tmp_path / "run-1"), table, parts, PARTITIONS, 4096
    ).checksums  # the same bytes
    coalesce_runs(
        FS,
        [Run(runs[1][0])],
        str(tmp_path / "ok"),
        PARTITIONS,
        window_bytes=64,
        upload_bytes=1,
        expected=expected,
    )
    data = tmp_path / "run-1.data"
    raw = bytearray(data.read_bytes())
    raw[len(raw) // 2] ^= 0xFF
    data.write_bytes(bytes(raw))
    with pytest.raises(InputError, match="does not hold the bytes its map task wrote") as info:
        coalesce_runs(
            FS,
            [Run(runs[1][0])],
            str(tmp_path / "bad"),
            PARTITIONS,
            window_bytes=64,
            upload_bytes=1,
            expected=expected,
        )
    assert str(data) in str(info.value)


# -- fault injection: every damage names the file -----------------------------------------------------------


def _damage_index(tmp_path, transform) -> str:
    data, _, _ = _write_run(tmp_path)
    index = tmp_path / "run-00000.index"
    index.write_bytes(transform(index.read_bytes()))
    return data


@pytest.mark.parametrize(
    ("damage", "partition", "message"),
    [
        pytest.param(lambda b: b[:10], 0, "truncated", id="cut-in-first-block"),
        pytest.param(lambda b: b[:-5], 4, "truncated", id="cut-in-last-block"),
        pytest.param(lambda b: b"ZSHY" + b[4:], 0, "does not match: it says b'ZSHY'", id="bad-magic"),
        pytest.param(lambda b: b[:4] + struct.pack("<I", 99) + b[8:], 0, "version 99", id="bad-version"),
        pytest.param(lambda b: b[48:], 0, "does not match", id="block-of-another-partition"),
        pytest.param(
            lambda b: b[:8] + struct.pack("<I", 7) + b[12:], 0, "does not match", id="wrong-partition"
        ),
        pytest.param(lambda b: b[:16] + struct.pack("<Q", 2) + b[24:], 0, "does not match", id="wrong-slots"),
        pytest.param(lambda b: b"", 0, "truncated", id="empty"),
    ],
)
def test_damaged_index_block_names_the_file(tmp_path, damage, partition, message):
    data = _damage_index(tmp_path, damage)
    with pytest.raises(InputError, match=message) as info:
        read_index_block(FS, data, partition)
    assert str(tmp_path / "run-00000.index") in str(info.value)


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        pytest.param(lambda b: b + b"\0" * 48, "wrong length", id="padded"),
        pytest.param(lambda b: b[:-48], "wrong length", id="a-block-short"),
        pytest.param(
            lambda b: b[:24] + struct.pack("<Q", 1) + b[32:],
            "does not hold the bytes its map task wrote",
            id="blobs-not-back-to-back",
        ),
    ],
)
def test_damaged_index_read_whole_for_coalescing_names_the_file(tmp_path, damage, message):
    data, _, _ = _write_run(tmp_path)
    expected = _records([data])  # as the map task's marker recorded it, before the damage
    index = tmp_path / "run-00000.index"
    index.write_bytes(damage(index.read_bytes()))
    with pytest.raises(InputError, match=message) as info:
        coalesce_runs(
            FS,
            [Run(data)],
            str(tmp_path / "out"),
            PARTITIONS,
            window_bytes=64,
            upload_bytes=1,
            expected=expected,
        )
    assert str(tmp_path / "run-00000.index") in str(info.value)


def test_coalesce_refuses_an_input_without_a_checksum_record(tmp_path):
    data, _, _ = _write_run(tmp_path)
    with pytest.raises(InputError, match="none recorded") as info:
        coalesce_runs(
            FS, [Run(data)], str(tmp_path / "out"), PARTITIONS, window_bytes=64, upload_bytes=1, expected={}
        )
    assert str(tmp_path / "run-00000.index") in str(info.value)


def test_missing_index_names_the_file(tmp_path):
    data, _, _ = _write_run(tmp_path)
    (tmp_path / "run-00000.index").unlink()
    with pytest.raises(InputError, match="missing") as info:
        read_index_block(FS, data, 0)
    assert "run-00000.index" in str(info.value)


def test_partition_out_of_range_and_foreign_partition_count(tmp_path):
    data, _, _ = _write_run(tmp_path)
    with pytest.raises(InputError, match="partition 5 out of range"):
        read_index_block(FS, data, PARTITIONS, num_partitions=PARTITIONS)
    with pytest.raises(InputError, match="truncated"):
        read_index_block(FS, data, PARTITIONS)  # past the last block
    with pytest.raises(InputError, match="partition 0 of 5 with 1 slots, the job reads .* partition 0 of 8"):
        read_index_block(FS, data, 0, num_partitions=8)
    assert read_index_block(FS, data, 0, num_partitions=PARTITIONS)[0].rows > 0


def test_truncated_data_file_names_the_file(tmp_path):
    data, _, _ = _write_run(tmp_path)
    last = _part(data, 4)
    with open(data, "r+b") as f:
        f.truncate(last.offset + last.length // 2)
    for read in (lambda: _rows([last]), lambda: _rows([last], chunk=1024)):
        with pytest.raises(InputError, match="past the end of the data file") as info:
            read()
        assert data in str(info.value)
    # partitions before the cut still read whole
    assert _rows([_part(data, 0)]).num_rows == _part(data, 0).rows


def test_corrupt_blob_names_the_file_and_range(tmp_path):
    data, _, _ = _write_run(tmp_path)
    part = _part(data, 2)
    with open(data, "r+b") as f:  # overwrite the blob's footer magic
        f.seek(part.offset + part.length - 4)
        f.write(b"XXXX")
    with pytest.raises(InputError, match=f"corrupt shuffle blob at bytes {part.offset}-") as info:
        _rows([part])
    assert data in str(info.value)


def test_entry_row_count_disagreeing_with_blob_is_caught(tmp_path):
    data, _, _ = _write_run(tmp_path)
    part = _part(data, 0)
    with pytest.raises(InputError, match=f"holds {part.rows} rows, its index entry says {part.rows + 1}"):
        _rows([RunPart(data, part.offset, part.length, part.rows + 1)])


def test_blob_is_a_standalone_parquet_file(tmp_path):
    """Documented in the module: each blob can be cut out and read by any Parquet reader."""
    data, table, partitions = _write_run(tmp_path)
    part = _part(data, 4)
    with open(data, "rb") as f:
        f.seek(part.offset)
        blob = f.read(part.length)
    assert pq.read_table(pa.BufferReader(blob)).equals(table.filter(pa.array(partitions == 4)))
