"""Arrow arrays to and from numpy and Python values through their buffers, for the shard writer's steps.

pyarrow's convenient paths probe for pandas and import it on first use (``pa.array(ndarray)``,
``Array.to_numpy``, ``Table.from_pylist``): ~0.3-0.4 s in a process that has not imported it, which is the
driver when the writer runs there (``writer.DRIVER_MAX_WORKERS``). These build the same arrays from buffers.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["numeric_array", "numeric_values", "string_array"]


def numeric_array(values: np.ndarray, type_: pa.DataType) -> pa.Array:
    """A null-free ``type_`` Arrow array over ``values`` (cast to its numpy dtype), without a pandas probe."""
    import pyarrow as pa

    values = np.ascontiguousarray(values, dtype=type_.to_pandas_dtype())
    return pa.Array.from_buffers(type_, len(values), [None, pa.py_buffer(values)])


def numeric_values(array: pa.Array) -> np.ndarray:
    """The values of a null-free fixed-width Arrow array as a read-only numpy view, without a copy. pyarrow's
    ``Array.to_numpy`` imports pandas on first use (~0.3 s in a process that has not: the driver, where the
    writer runs on up to 2 workers)."""
    if array.null_count:
        raise ValueError(f"numeric_values: {array.null_count} nulls in a {array.type} array")
    dtype = np.dtype(array.type.to_pandas_dtype())
    return np.frombuffer(
        array.buffers()[1], dtype=dtype, count=len(array), offset=array.offset * dtype.itemsize
    )


def string_array(values: list[str]) -> pa.Array:
    """A ``large_string`` Arrow array from Python strings, built from buffers (no pandas probe)."""
    import pyarrow as pa

    raw = [v.encode("utf-8") for v in values]
    offsets = np.zeros(len(raw) + 1, dtype=np.int64)
    np.cumsum([len(r) for r in raw], out=offsets[1:])
    return pa.Array.from_buffers(
        pa.large_string(), len(raw), [None, pa.py_buffer(offsets), pa.py_buffer(b"".join(raw))]
    )
