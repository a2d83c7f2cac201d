"""Schema promotion and lossless casts."""

from __future__ import annotations

import pyarrow as pa
import pytest

from zephyr.errors import SchemaError
from zephyr.io.schema import conform, promote_or_refuse, promote_types


@pytest.mark.parametrize(
    ("a", "b", "expected"),
    [
        (pa.null(), pa.string(), pa.string()),
        (pa.int32(), pa.int64(), pa.int64()),
        (pa.int64(), pa.float64(), pa.float64()),
        (pa.uint8(), pa.int16(), pa.int16()),
        (pa.string(), pa.large_string(), pa.large_string()),
        (pa.list_(pa.null()), pa.list_(pa.int64()), pa.list_(pa.int64())),
        (
            pa.struct([("a", pa.int64())]),
            pa.struct([("b", pa.string())]),
            pa.struct([("a", pa.int64()), ("b", pa.string())]),
        ),
        (pa.string(), pa.int64(), None),
        (pa.struct([("a", pa.int64())]), pa.list_(pa.int64()), None),
        (pa.timestamp("s"), pa.timestamp("ms"), None),
    ],
)
def test_promote_types(a, b, expected):
    got = promote_types(a, b)
    assert (got is None) if expected is None else got.equals(expected)


def test_promote_or_refuse_names_the_column():
    with pytest.raises(SchemaError, match="column 'bad' is string in earlier rows but int64 here"):
        promote_or_refuse(
            pa.schema([("ok", pa.int64()), ("bad", pa.string())]), pa.schema([("bad", pa.int64())]), "t"
        )


def test_conform_reorders_fills_and_widens():
    schema = pa.schema([("b", pa.float64()), ("a", pa.string()), ("c", pa.int64())])
    out = conform(pa.table({"a": pa.nulls(2), "b": [1, 2]}), schema, where="t", fix="fix it")
    assert out.schema == schema
    assert out.column("b").to_pylist() == [1.0, 2.0]


def test_conform_refuses_narrowing_with_a_message():
    with pytest.raises(
        SchemaError, match=r"t: column 'a' has type double but the target type is int64.*fix it"
    ):
        conform(pa.table({"a": [1.5]}), pa.schema([("a", pa.int64())]), where="t", fix="fix it")
