"""Token spill files: content-derived names, atomic writes, and the pack step's gather."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

import numpy as np
import pytest
from zephyr.tokenize._pack import SpillFiles, gather, spill_name, write_spill

from zephyr.errors import InputError


def test_name_depends_on_content_only() -> None:
    keys = np.arange(5, dtype=np.uint64)
    assert spill_name(keys, keys) == spill_name(keys.copy(), keys.copy())
    assert spill_name(keys, keys) != spill_name(keys, keys[::-1].copy())
    assert spill_name(keys).endswith(".tokens") and len(spill_name(keys)) == 32 + len(".tokens")


def test_gather_reads_documents_in_reference_order(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    files, docs = [], []
    for f in range(3):
        lengths = rng.integers(0, 50, size=20)
        tokens = [rng.integers(0, 60000, size=n).astype("<u2") for n in lengths]
        name = spill_name(np.array([f], dtype=np.uint64))
        write_spill(str(tmp_path), name, np.concatenate(tokens))
        files.append(name)
        starts = np.concatenate([[0], np.cumsum(lengths)[:-1]]) * 2
        docs += [(f, int(s), t) for s, t in zip(starts, tokens)]
    assert not list(tmp_path.glob(".*.tmp")), "a finished spill leaves no temporary file"
    order = rng.permutation(len(docs))
    picked = [docs[i] for i in order]
    out = gather(
        str(tmp_path),
        np.array([d[0] for d in picked]),
        files,
        np.array([d[1] for d in picked], dtype=np.int64),
        np.array([d[2].nbytes for d in picked], dtype=np.int64),
    )
    assert out.tobytes() == b"".join(d[2].tobytes() for d in picked)
    # the pack step's way: one SpillFiles across batches, fewer descriptors than files unless one batch reads
    # more; same bytes
    with contextlib.closing(SpillFiles(str(tmp_path), limit=2)) as opened:
        for part in np.array_split(np.arange(len(picked)), 7):
            got = gather(
                str(tmp_path),
                np.array([picked[i][0] for i in part]),
                files,
                np.array([picked[i][1] for i in part], dtype=np.int64),
                np.array([picked[i][2].nbytes for i in part], dtype=np.int64),
                spill_files=opened,
            )
            assert got.tobytes() == b"".join(picked[i][2].tobytes() for i in part)
            assert len(opened._open) <= max(2, len({picked[i][0] for i in part}))
        held = list(opened._open.values())
    assert held and not opened._open
    for fd in held:  # closed at exit
        with pytest.raises(OSError):
            os.fstat(fd)


def test_missing_or_truncated_spill_names_the_file(tmp_path: Path) -> None:
    write_spill(str(tmp_path), "a.tokens", np.arange(4, dtype="<u2"))
    with pytest.raises(InputError, match="b.tokens"):
        gather(str(tmp_path), np.array([0]), ["b.tokens"], np.array([0]), np.array([2]))
    with pytest.raises(InputError, match="truncated"):
        gather(str(tmp_path), np.array([0]), ["a.tokens"], np.array([4]), np.array([8]))
    # in a batch read on several threads, the thread's error reaches the caller
    write_spill(str(tmp_path), "big.tokens", np.arange(4096, dtype="<u2"))
    starts = np.arange(0, 8192, 64, dtype=np.int64)
    sizes = np.full(len(starts), 64, dtype=np.int64)
    whole = gather(str(tmp_path), np.zeros(len(starts), dtype=np.int64), ["big.tokens"], starts, sizes)
    assert whole.tobytes() == np.arange(4096, dtype="<u2").tobytes()
    sizes[-1] = 128  # the last document runs past the end of the file
    with (
        contextlib.closing(SpillFiles(str(tmp_path), threads=4)) as opened,
        pytest.raises(InputError, match="big.tokens.*truncated"),
    ):
        gather(
            str(tmp_path),
            np.zeros(len(starts), dtype=np.int64),
            ["big.tokens"],
            starts,
            sizes,
            spill_files=opened,
        )


def test_gather_leaves_gaps_for_the_special_tokens(tmp_path: Path) -> None:
    """``before``/``after`` bytes frame every document (empty ones too); the documents' bytes land between."""
    docs = [np.array([5, 6, 7], dtype="<u2"), np.zeros(0, dtype="<u2"), np.array([9], dtype="<u2")]
    write_spill(str(tmp_path), "s.tokens", np.concatenate(docs))
    starts = np.array([0, 6, 6], dtype=np.int64)
    order = np.array([2, 1, 0])
    out = gather(
        str(tmp_path),
        np.zeros(3, dtype=np.int64),
        ["s.tokens"],
        starts[order],
        np.array([d.nbytes for d in docs], dtype=np.int64)[order],
        before=2,
        after=2,
    ).view("<u2")
    assert len(out) == sum(len(d) + 2 for d in docs)
    assert out[1:2].tolist() == [9] and out[6:9].tolist() == [5, 6, 7]
