"""Schema promotion and lossless casts, shared by the JSONL reader and the shard writers.

Two rules, one table of what widens into what:

- ``promote_types(a, b)``: the narrowest type both fit in, or None for a real conflict. ``null`` widens to any
  type; integers widen to the wider integer, and integer + float to ``float64``; ``string``/``large_string``/
  ``string_view`` to ``large_string`` when either is large, else ``string`` (the same for binary); lists widen
  their items; structs take the union of their fields (in first-seen order). Anything else (string vs number,
  struct vs list, two timestamp units) is a conflict.
- ``conform(batch, schema)``: reorder columns to ``schema``, add missing nullable columns as nulls, and cast
  columns whose type widens losslessly into the target (checked value by value: ``int64 → float64`` fails for
  integers above 2**53). Anything else raises ``SchemaError`` naming the column, both types and the fix.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.types as pat

from zephyr.errors import SchemaError

__all__ = [
    "promote_types",
    "promote_schemas",
    "conform",
    "SchemaConflict",
    "normalize_view_types",
    "without_view_types",
    "is_string_like",
    "is_binary_like",
    "is_list_like",
]


class SchemaConflict(Exception):
    """Internal: two schemas disagree on a column; callers turn it into a SchemaError with context."""

    def __init__(self, column: str, left: pa.DataType, right: pa.DataType):
        super().__init__(f"column {column!r}: {left} vs {right}")
        self.column = column
        self.left = left
        self.right = right


def is_string_like(t: pa.DataType) -> bool:
    """``string``, ``large_string`` or ``string_view``: the types that widen into each other."""
    return pat.is_string(t) or pat.is_large_string(t) or pat.is_string_view(t)


def is_binary_like(t: pa.DataType) -> bool:
    """``binary``, ``large_binary`` or ``binary_view``."""
    return pat.is_binary(t) or pat.is_large_binary(t) or pat.is_binary_view(t)


def is_list_like(t: pa.DataType) -> bool:
    """``list`` or ``large_list``."""
    return pat.is_list(t) or pat.is_large_list(t)


def _promote_int(a: pa.DataType, b: pa.DataType) -> pa.DataType:
    if pat.is_signed_integer(a) == pat.is_signed_integer(b):
        return a if a.bit_width >= b.bit_width else b
    signed, unsigned = (a, b) if pat.is_signed_integer(a) else (b, a)
    # a signed type wider than the unsigned one holds both; else int64 (values are checked when cast)
    return signed if signed.bit_width > unsigned.bit_width else pa.int64()


def promote_types(a: pa.DataType, b: pa.DataType) -> pa.DataType | None:
    """The narrowest type holding values of both ``a`` and ``b``, or None when they conflict."""
    if a.equals(b):
        return a
    if pat.is_null(a):
        return b
    if pat.is_null(b):
        return a
    if pat.is_integer(a) and pat.is_integer(b):
        return _promote_int(a, b)
    if (pat.is_integer(a) or pat.is_floating(a)) and (pat.is_integer(b) or pat.is_floating(b)):
        if pat.is_floating(a) and pat.is_floating(b):
            return a if a.bit_width >= b.bit_width else b
        return pa.float64()
    if is_string_like(a) and is_string_like(b):
        return pa.large_string() if pat.is_large_string(a) or pat.is_large_string(b) else pa.string()
    if is_binary_like(a) and is_binary_like(b):
        return pa.large_binary() if pat.is_large_binary(a) or pat.is_large_binary(b) else pa.binary()
    if pat.is_dictionary(a) and not pat.is_dictionary(b):
        return promote_types(a.value_type, b)
    if pat.is_dictionary(b) and not pat.is_dictionary(a):
        return promote_types(a, b.value_type)
    if is_list_like(a) and is_list_like(b):
        item = promote_types(a.value_type, b.value_type)
        if item is None:
            return None
        field = a.value_field.with_type(item)
        return pa.large_list(field) if pat.is_large_list(a) or pat.is_large_list(b) else pa.list_(field)
    if pat.is_struct(a) and pat.is_struct(b):
        try:
            merged = _merge_fields(list(a), list(b))
        except SchemaConflict:
            return None
        return pa.struct(merged)
    return None


def _merge_fields(left: list[pa.Field], right: list[pa.Field]) -> list[pa.Field]:
    by_name = {f.name: f for f in right}
    out: list[pa.Field] = []
    for f in left:
        other = by_name.pop(f.name, None)
        if other is None:
            out.append(f.with_nullable(True))
            continue
        t = promote_types(f.type, other.type)
        if t is None:
            raise SchemaConflict(f.name, f.type, other.type)
        out.append(pa.field(f.name, t, nullable=f.nullable or other.nullable or pat.is_null(t)))
    out.extend(f.with_nullable(True) for f in right if f.name in by_name)
    return out


def promote_schemas(a: pa.Schema, b: pa.Schema) -> pa.Schema:
    """Union of two schemas, columns of ``a`` first; raises ``SchemaConflict`` naming the first bad column."""
    if a.equals(b):
        return a
    return pa.schema(_merge_fields(list(a), list(b)), metadata=a.metadata)


def normalize_view_types(t: pa.DataType, *, large: bool = False) -> pa.DataType:
    """``string_view``/``binary_view`` (what Vortex hands back) as ``string``/``binary``, recursively;
    ``large``: as ``large_string``/``large_binary``."""
    if pat.is_string_view(t):
        return pa.large_string() if large else pa.string()
    if pat.is_binary_view(t):
        return pa.large_binary() if large else pa.binary()
    if is_list_like(t):
        field = t.value_field.with_type(normalize_view_types(t.value_type, large=large))
        return pa.large_list(field) if pat.is_large_list(t) else pa.list_(field)
    if pat.is_struct(t):
        return pa.struct([f.with_type(normalize_view_types(f.type, large=large)) for f in t])
    return t


def _has_view(t: pa.DataType) -> bool:
    if pat.is_string_view(t) or pat.is_binary_view(t):
        return True
    if is_list_like(t):
        return _has_view(t.value_type)
    return pat.is_struct(t) and any(_has_view(f.type) for f in t)


def without_view_types(data: pa.Table) -> pa.Table:
    """``data`` with its ``string_view``/``binary_view`` columns (at any depth) cast to ``string``/``binary``,
    or to the large types when a chunk holds more than 2 GiB; ``data`` itself when it has none.

    Arrow has no take or filter kernel for view types (pyarrow 26: "Function 'array_take' has no kernel
    matching input types (string_view, ...)"), so every step that selects rows (a filter, a sort, a dedup's
    keep mask, setting quarantined rows aside) would fail on them far from where they came in. They come from
    ``from_arrow`` tables, Parquet files written with an Arrow schema that has them, and batch functions."""
    schema = data.schema
    if not any(map(_has_view, schema.types)):  # the common case: a type check per column, no copy
        return data

    def plain(large: bool) -> pa.Schema:
        fields = [f.with_type(normalize_view_types(f.type, large=large)) for f in schema]
        return pa.schema(fields, schema.metadata)

    try:
        return data.cast(plain(large=False))
    except (pa.ArrowInvalid, pa.ArrowCapacityError):  # offsets overflow int32: more than 2 GiB in a chunk
        return data.cast(plain(large=True))


def conform(
    data: pa.RecordBatch | pa.Table, schema: pa.Schema, *, where: str, fix: str
) -> pa.RecordBatch | pa.Table:
    """Return ``data`` with exactly the columns and types of ``schema``, or raise ``SchemaError``.

    ``where`` names the data in messages (a file, a line range); ``fix`` says what the user can do.
    """
    if data.schema.equals(schema):
        return data
    names = set(data.schema.names)
    extra = [n for n in data.schema.names if n not in schema.names]
    if extra:
        raise SchemaError(
            f"{where}: column(s) {extra} are not in the schema {schema.names}; writing them would drop data. {fix}"
        )
    arrays = []
    for field in schema:
        if field.name not in names:
            if not field.nullable:
                raise SchemaError(f"{where}: non-nullable column {field.name!r} is missing. {fix}")
            arrays.append(pa.nulls(data.num_rows, field.type))
            continue
        column = data.column(field.name)
        arrays.append(_cast_column(column, field, where=where, fix=fix))
    if isinstance(data, pa.Table):
        return pa.Table.from_arrays(arrays, schema=schema)
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


def _cast_column(column, field: pa.Field, *, where: str, fix: str):
    src = column.type
    if src.equals(field.type):
        out = column
    else:
        widened = promote_types(src, field.type)
        if widened is None or not widened.equals(field.type):
            raise SchemaError(
                f"{where}: column {field.name!r} has type {src} but the target type is {field.type}; "
                f"that cast could lose data. {fix}"
            )
        try:
            out = column.cast(field.type, safe=True)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
            raise SchemaError(
                f"{where}: column {field.name!r} ({src}) does not fit {field.type} without loss: {exc}. {fix}"
            ) from exc
    if not field.nullable and out.null_count:
        raise SchemaError(
            f"{where}: column {field.name!r} is non-nullable but holds {out.null_count} nulls. {fix}"
        )
    return out
