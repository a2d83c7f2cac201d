"""The decompressing readers detect cut and corrupt streams instead of returning a short read."""

from __future__ import annotations

import gzip
import io

import pytest
import zstandard

from zephyr.io.compression import CorruptStream, TruncatedStream, open_compressed_writer, open_decompressed

DATA = b"".join(b"line %d of some text\n" % i for i in range(50000))


def _read_all(reader) -> bytes:
    out = []
    while chunk := reader.read(10000):
        out.append(chunk)
    return b"".join(out)


@pytest.mark.parametrize("codec", ["gzip", "zstd"])
def test_writer_reader_round_trip(codec):
    raw = io.BytesIO()
    writer = open_compressed_writer(raw, codec)
    for i in range(0, len(DATA), 7777):
        writer.write(DATA[i : i + 7777])
    writer.close()
    assert not raw.closed
    assert _read_all(open_decompressed(io.BytesIO(raw.getvalue()), codec)) == DATA


@pytest.mark.parametrize("codec", ["gzip", "zstd"])
@pytest.mark.parametrize("keep", [0.1, 0.5, 0.99])
def test_cut_stream_raises(codec, keep):
    packed = gzip.compress(DATA) if codec == "gzip" else zstandard.ZstdCompressor().compress(DATA)
    reader = open_decompressed(io.BytesIO(packed[: int(len(packed) * keep)]), codec)
    with pytest.raises(TruncatedStream):
        _read_all(reader)


def test_corrupt_zstd_raises():
    packed = bytearray(zstandard.ZstdCompressor().compress(DATA))
    packed[20:40] = b"\xaa" * 20
    with pytest.raises((CorruptStream, TruncatedStream)):
        _read_all(open_decompressed(io.BytesIO(bytes(packed)), "zstd"))
