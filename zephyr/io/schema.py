"""Schema promotion and lossless casts, shared by the JSONL reader and the shard writers.

One table of what widens into what (``_merge_type``, also the rule of the input plan below), and the cast:

- ``promote_types(a, b)``: the narrowest type both fit in, or None for a real conflict. ``null`` widens to any
  type; integers widen to the wider integer, and integer + float to ``float64``; ``string``/``large_string``/
  ``string_view`` to ``large_string`` when either is large, else ``string`` (the same for binary); a
  dictionary-encoded type counts as its value type; lists widen their items; structs take the union of their
  fields (in first-seen order). Anything else (string vs number, struct vs list, two timestamp units) is a
  conflict (``SchemaConflict``, naming the innermost field: ``meta.score``).
- ``conform(batch, schema)``: reorder columns to ``schema``, add missing nullable columns as nulls, and cast
  columns whose type widens losslessly into the target (checked value by value: ``int64 → float64`` fails for
  integers above 2**53). Anything else raises ``SchemaError`` naming the column, both types and the fix.

One schema for a multi-file input, decided before any task runs.

Files of one input often disagree: ``id`` is ``string`` in one export and ``int64`` in another, a column exists
only in newer files, Parquet keeps ``int32`` where JSON infers ``int64``. Read file by file, they give output
parts with different schemas and shuffles that fail with Arrow's "Unable to merge", naming no file. So the
planner reads each file's *schema* (a Parquet footer, the first ``SCHEMA_PEEK_BYTES`` of a JSONL file, the
first batch of a Vortex file — never all the data) and fixes one input schema; every task casts its batches
to it, so every output part of a job has the same schema.

The rule (``zephyr.io.sources.plan_input_schema`` reads the files' schemas; ``merge_schemas`` here
decides), per column and recursively inside structs and lists:

- **Default — files must agree.** Allowed without asking, because no value changes: a column (or struct
  field) missing from some files is read as nulls there; ``null`` (a column with no value at all) takes the
  other file's type; ``string``/``large_string``/``string_view`` are one type (``large_string`` if any file
  has it), the same for binary and for ``list``/``large_list``; a dictionary-encoded column counts as its
  value type. Any other difference (``string`` vs ``int64``, ``int32`` vs ``int64``, ``int64`` vs
  ``double``) is a **type conflict**: ``SchemaError`` in one line naming both files, the column, both
  types and the two fixes below.
- **``unify_schemas=True`` (``--unify-schemas``)**: also promote by ``zephyr.io.schema.promote_types``:
  integers to the wider integer, integer + float to ``float64`` (each value is checked when cast: an integer
  above 2**53 fails naming file, row and column), struct fields united. Numbers never become strings here
  — that changes values, so it needs a schema.
- **``schema=`` (``--schema FILE``)**: the given schema, exactly. Each file is cast to it (Arrow's safe
  casts, so ``int64 → string`` works and ``"abc" → int64`` fails naming file, row and column); columns
  missing from a file are nulls, columns not in the schema are not read. ``load_schema_file`` reads it from
  a Parquet file (its schema) or a JSON/YAML mapping of column to type (see there). JSONL files are parsed
  with the schema's types: a line whose value does not fit is a bad line (``file:line``; quarantined with
  ``on_error="quarantine"``).

An input of a single shard needs no rule (one task writes one part) and is read exactly as before. JSONL types
come from the first ``SCHEMA_PEEK_BYTES`` of each file; a later line whose type does not fit the plan (a
column that was null so far and now holds text, int64 turning into double) fails naming the lines, the
column and both types — pass ``schema=`` then. Only the columns a job reads take part (``columns=``).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

import pyarrow as pa
import pyarrow.types as pat

from zephyr.errors import ConfigError, SchemaError


class SchemaConflict(Exception):
    """Two schemas disagree on a column; ``column`` is the innermost differing field's dotted path
    (``meta.score``, ``tags[]``). Callers turn it into a ``SchemaError`` with context."""

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


def _is_list_like(t: pa.DataType) -> bool:
    """``list`` or ``large_list``."""
    return pat.is_list(t) or pat.is_large_list(t)


def _is_number(t: pa.DataType) -> bool:
    return pat.is_integer(t) or pat.is_floating(t)


def _promote_int(a: pa.DataType, b: pa.DataType) -> pa.DataType:
    if pat.is_signed_integer(a) == pat.is_signed_integer(b):
        return a if a.bit_width >= b.bit_width else b
    signed, unsigned = (a, b) if pat.is_signed_integer(a) else (b, a)
    # a signed type wider than the unsigned one holds both; else int64 (values are checked when cast)
    return signed if signed.bit_width > unsigned.bit_width else pa.int64()


def _merge_type(a: pa.DataType, b: pa.DataType, *, unify: bool, path: str = "") -> pa.DataType:
    """The one type-merge rule: the type values of ``a`` and ``b`` are both read as at ``path``, or
    ``SchemaConflict`` naming the innermost differing field.

    Without ``unify``, only changes that keep every value (the module docstring's default rule); with it,
    numbers promote too (integers to the wider integer, integer + float to ``float64``)."""
    if a.equals(b):
        return a
    if pat.is_null(a):
        return b
    if pat.is_null(b):
        return a
    if pat.is_dictionary(a):
        return _merge_type(a.value_type, b, unify=unify, path=path)
    if pat.is_dictionary(b):
        return _merge_type(a, b.value_type, unify=unify, path=path)
    if is_string_like(a) and is_string_like(b):
        return pa.large_string() if pat.is_large_string(a) or pat.is_large_string(b) else pa.string()
    if is_binary_like(a) and is_binary_like(b):
        return pa.large_binary() if pat.is_large_binary(a) or pat.is_large_binary(b) else pa.binary()
    if _is_list_like(a) and _is_list_like(b):
        item = _merge_type(a.value_type, b.value_type, unify=unify, path=f"{path}[]")
        field = a.value_field.with_type(item).with_nullable(a.value_field.nullable or b.value_field.nullable)
        return pa.large_list(field) if pat.is_large_list(a) or pat.is_large_list(b) else pa.list_(field)
    if pat.is_struct(a) and pat.is_struct(b):
        return pa.struct(_merge_fields(list(a), list(b), unify=unify, prefix=f"{path}."))
    if unify and _is_number(a) and _is_number(b):
        if pat.is_integer(a) and pat.is_integer(b):
            return _promote_int(a, b)
        if pat.is_floating(a) and pat.is_floating(b):
            return a if a.bit_width >= b.bit_width else b
        return pa.float64()
    raise SchemaConflict(path, a, b)


def _merge_fields(
    left: list[pa.Field], right: list[pa.Field], *, unify: bool, prefix: str = ""
) -> list[pa.Field]:
    """Union by name, ``left``'s order first; a field missing on one side becomes nullable (read as nulls)."""
    others = {f.name: f for f in right}
    out: list[pa.Field] = []
    for f in left:
        other = others.pop(f.name, None)
        if other is None:
            out.append(f.with_nullable(True))
            continue
        t = _merge_type(f.type, other.type, unify=unify, path=prefix + f.name)
        nullable = f.nullable or other.nullable or pat.is_null(t)
        out.append(pa.field(f.name, t, nullable=nullable, metadata=f.metadata))
    out.extend(f.with_nullable(True) for f in right if f.name in others)
    return out


def promote_types(a: pa.DataType, b: pa.DataType) -> pa.DataType | None:
    """The narrowest type holding values of both ``a`` and ``b``, or None when they conflict."""
    try:
        return _merge_type(a, b, unify=True)
    except SchemaConflict:
        return None


def map_leaves(t: pa.DataType, leaf) -> pa.DataType:
    """``t`` with ``leaf`` applied to every type inside it that is not a struct or a list (struct fields and
    list items are walked)."""
    if _is_list_like(t):
        field = t.value_field.with_type(map_leaves(t.value_type, leaf))
        return pa.large_list(field) if pat.is_large_list(t) else pa.list_(field)
    if pat.is_struct(t):
        return pa.struct([f.with_type(map_leaves(f.type, leaf)) for f in t])
    return leaf(t)


def normalize_view_types(t: pa.DataType, *, large: bool = False) -> pa.DataType:
    """``string_view``/``binary_view`` (what Vortex hands back) as ``string``/``binary``, recursively;
    ``large``: as ``large_string``/``large_binary``."""
    string, binary = (pa.large_string(), pa.large_binary()) if large else (pa.string(), pa.binary())
    return map_leaves(
        t, lambda x: string if pat.is_string_view(x) else binary if pat.is_binary_view(x) else x
    )


def without_view_types(data: pa.Table) -> pa.Table:
    """``data`` with its ``string_view``/``binary_view`` columns (at any depth) cast to ``string``/``binary``,
    or to the large types when a chunk holds more than 2 GiB; ``data`` itself when it has none.

    Arrow has no take or filter kernel for view types (pyarrow 26: "Function 'array_take' has no kernel
    matching input types (string_view, ...)"), so every step that selects rows (a filter, a sort, a dedup's
    keep mask, setting quarantined rows aside) would fail on them far from where they came in. They come from
    ``from_arrow`` tables, Parquet files written with an Arrow schema that has them, and batch functions."""
    schema = data.schema
    if all(normalize_view_types(t).equals(t) for t in schema.types):  # the common case: no copy
        return data

    def plain(large: bool) -> pa.Schema:
        fields = [f.with_type(normalize_view_types(f.type, large=large)) for f in schema]
        return pa.schema(fields, schema.metadata)

    try:
        return data.cast(plain(large=False))
    except (pa.ArrowInvalid, pa.ArrowCapacityError):  # offsets overflow int32: more than 2 GiB in a chunk
        return data.cast(plain(large=True))


SCHEMA_FIX = "Pass schema= to the writer (or cast the column upstream) so every batch has one type."
"""The fix a ``SchemaError`` of a writer names."""


def promote_or_refuse(
    current: pa.Schema | None, new: pa.Schema, where: str, fix: str = SCHEMA_FIX
) -> pa.Schema:
    """The schema both ``current`` and ``new`` rows fit losslessly (the union, ``current``'s columns first), or
    a ``SchemaError`` naming the column."""
    if current is None:
        return new
    if current.equals(new):
        return current
    try:
        return pa.schema(_merge_fields(list(current), list(new), unify=True), metadata=current.metadata)
    except SchemaConflict as exc:
        raise SchemaError(
            f"{where}: column {exc.column!r} is {exc.left} in earlier rows but {exc.right} here; one column "
            f"needs one type. {fix}"
        ) from exc


def conform(
    data: pa.RecordBatch | pa.Table, schema: pa.Schema, *, where: str, fix: str = SCHEMA_FIX
) -> pa.RecordBatch | pa.Table:
    """Return ``data`` with exactly the columns and types of ``schema``, or raise ``SchemaError``: a column not
    in ``schema``, or one whose type does not widen into the target's by ``promote_types``, is refused.

    ``where`` names the data in messages (a file, a line range); ``fix`` says what the user can do.
    """
    if data.schema.equals(schema):
        return data
    extra = [n for n in data.schema.names if n not in schema.names]
    if extra:
        raise SchemaError(
            f"{where}: column(s) {extra} are not in the schema {schema.names}; they would be dropped. {fix}"
        )
    for field in schema:
        index = data.schema.get_field_index(field.name)
        src = data.schema.field(index).type if index >= 0 else field.type
        widened = promote_types(src, field.type)  # the cast keeps every value
        if widened is None or not widened.equals(field.type):
            raise SchemaError(
                f"{where}: column {field.name!r} has type {src} but the target type is {field.type}; "
                f"that cast could lose data. {fix}"
            )
    return cast_to_schema(data, schema, where=where, fix=fix)


SCHEMA_PEEK_BYTES = 1 << 20
"""JSONL bytes parsed per file to learn its column types (a longer first line is read whole)."""
_FIX = (
    "pass --unify-schemas to promote types by the documented rule (Python: unify_schemas=True), "
    "or --schema FILE to cast every file to one schema (Python: schema=)"
)
_FIX_SCHEMA = "pass --schema FILE (Python: schema=) giving the column the type you want"
PLANNED_FIX = (
    f"the input schema was decided from each file's first {SCHEMA_PEEK_BYTES >> 20} MiB; {_FIX_SCHEMA}"
)
"""The fix of a JSONL batch that does not fit the planned input schema (``conform`` to it)."""


def merge_schemas(peeks: Sequence[tuple[str, pa.Schema | None]], *, unify: bool = False) -> pa.Schema | None:
    """The one schema for files with these schemas (the module docstring's rule); None when none has one.

    A conflict raises ``SchemaError`` naming the earlier file that disagrees and the later one.
    """
    merged: list[pa.Field] | None = None
    seen: list[tuple[str, pa.Schema]] = []
    metadata: dict | None = None
    for path, schema in peeks:
        if schema is None:
            continue
        if merged is None:
            merged, metadata = list(schema), schema.metadata
        else:
            try:
                merged = _merge_fields(merged, list(schema), unify=unify)
            except SchemaConflict as exc:
                raise _conflict_error(exc, path, schema, seen, unify) from None
            if metadata != schema.metadata:
                metadata = None  # per-file metadata (pandas index info) would be wrong for the others
        seen.append((path, schema))
    if merged is None:
        return None
    return pa.schema([f.with_type(normalize_view_types(f.type)) for f in merged], metadata=metadata)


def _conflict_error(
    exc: SchemaConflict, path: str, schema: pa.Schema, seen: list, unify: bool
) -> SchemaError:
    top = exc.column.split(".", 1)[0].split("[", 1)[0]
    for earlier, earlier_schema in seen:  # the first earlier file that alone disagrees with this one
        if top not in earlier_schema.names:
            continue
        try:
            _merge_type(earlier_schema.field(top).type, schema.field(top).type, unify=unify, path=top)
        except SchemaConflict as pair:
            return _one_line(pair.column, earlier, pair.left, path, pair.right, unify)
    first = next((p for p, s in seen if top in s.names), "earlier files")
    return _one_line(exc.column, first, exc.left, path, exc.right, unify)


def _one_line(
    field: str, left_path: str, left: pa.DataType, right_path: str, right: pa.DataType, unify: bool
):
    how = "even with --unify-schemas" if unify else "and the default rule allows no type change"
    fix = _FIX_SCHEMA if unify else _FIX
    return SchemaError(
        f"input files disagree on column {field!r}: {left} in {left_path} but {right} in {right_path} "
        f"({how}); {fix}"
    )


# -- applying it --------------------------------------------------------------------------------------------
def cast_to_schema(
    data: pa.RecordBatch | pa.Table, target: pa.Schema, *, where: str, first_row: int = 0, fix: str = ""
) -> pa.RecordBatch | pa.Table:
    """``data`` with exactly ``target``'s columns: missing ones as nulls, others cast (values checked).

    A value that does not cast raises ``SchemaError`` naming ``where``, its row (``first_row`` + the row in
    the batch, found by bisection: O(log n) casts, only on failure) and the column; ``fix`` ends messages.
    """
    if data.schema.equals(target):
        return data
    tail = f". {fix}" if fix else ""
    arrays = []
    for field in target:
        index = data.schema.get_field_index(field.name)
        if index < 0:
            if not field.nullable:
                raise SchemaError(f"{where}: non-nullable column {field.name!r} is missing{tail}")
            arrays.append(pa.nulls(data.num_rows, field.type))
            continue
        column = data.column(index)
        if not column.type.equals(field.type):
            column = _cast(column, field, where=where, first_row=first_row, tail=tail)
        if not field.nullable and column.null_count:
            raise SchemaError(
                f"{where}: column {field.name!r} is non-nullable but holds {column.null_count} nulls{tail}"
            )
        arrays.append(column)
    return type(data).from_arrays(arrays, schema=target)


def _cast(column, field: pa.Field, *, where: str, first_row: int, tail: str):
    try:
        return column.cast(field.type, safe=True)
    except pa.ArrowNotImplementedError as exc:
        raise SchemaError(
            f"{where}: column {field.name!r} has type {column.type}, which has no cast to {field.type}: "
            f"{exc}{tail}"
        ) from exc
    except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:

        def error(lo: int, hi: int) -> str | None:
            try:
                column.slice(lo, hi - lo).cast(field.type, safe=True)
                return None
            except (pa.ArrowInvalid, pa.ArrowTypeError) as row_exc:
                return str(row_exc)  # Arrow's own message for the whole column may name another value

        row, reason = (failing_rows(len(column), error, first=True) or [(0, str(exc))])[0]
        raise SchemaError(
            f"{where}: row {first_row + row}: column {field.name!r} value {column[row].as_py()!r} does not fit "
            f"{field.type} (from {column.type}): {reason}{tail}"
        ) from exc


def failing_rows(
    n: int, error: Callable[[int, int], str | None], *, first: bool = False
) -> list[tuple[int, str]]:
    """(row, message) of each row of ``range(n)`` whose ``error(row, row + 1)`` is not None, in order, found
    by bisection (``error(lo, hi)``: whether rows ``[lo, hi)`` hold one): O(k log n) calls for k such rows,
    which is what makes naming bad rows cheap (the casts above, ``zephyr.io.quarantine.drop_bad_rows``).
    ``first``: stop at the first."""
    found: list[tuple[int, str]] = []
    stack = [(0, n)]
    while stack and not (first and found):
        lo, hi = stack.pop()
        message = error(lo, hi) if hi > lo else None
        if message is not None and hi - lo == 1:
            found.append((lo, message))
        elif message is not None:
            mid = (lo + hi) // 2
            stack += [(mid, hi), (lo, mid)]
    return found


# -- schema files -------------------------------------------------------------------------------------------
def load_schema_file(path: str) -> pa.Schema:
    """A schema from ``path``: a Parquet file (its schema; data is not read), or a JSON/YAML mapping of column
    name to type, in column order.

    A type is an Arrow type name (``string``, ``large_string``, ``int64``, ``double``, ``bool``,
    ``timestamp[ms]``, ``date32``...), a mapping (a struct of those fields) or a one-item list (a list of
    that type)::

        id: string
        score: double
        meta: {lang: string, year: int32}
        tags: [string]
    """
    from zephyr.io.paths import filesystem

    fs, stripped = filesystem(path)
    try:
        data = fs.cat_file(stripped)
    except (FileNotFoundError, IsADirectoryError) as exc:
        raise ConfigError(f"schema file {path!r} not found") from exc
    if data[:4] == b"PAR1":
        import io

        import pyarrow.parquet as pq

        return pq.read_schema(io.BytesIO(data))
    import yaml

    text = data.decode("utf-8", errors="replace")
    try:
        spec = json.loads(text) if path.endswith(".json") else yaml.safe_load(text)
    except (ValueError, yaml.YAMLError) as exc:
        raise ConfigError(f"schema file {path!r} is not valid JSON/YAML: {exc}") from exc
    if not isinstance(spec, dict) or not spec:
        raise ConfigError(
            f'schema file {path!r} must map column names to types, e.g. {{"id": "string", "score": "double"}}'
        )
    return pa.schema([pa.field(str(name), _type(value, f"{path}: {name}")) for name, value in spec.items()])


def _type(value: Any, where: str) -> pa.DataType:
    if isinstance(value, dict):
        return pa.struct([pa.field(str(k), _type(v, f"{where}.{k}")) for k, v in value.items()])
    if isinstance(value, list) and len(value) == 1:
        return pa.list_(_type(value[0], f"{where}[]"))
    if isinstance(value, str):
        name = value.strip()
        if name.startswith("timestamp[") and name.endswith("]"):
            unit, _, tz = name[len("timestamp[") : -1].partition(",")
            return pa.timestamp(unit.strip(), tz=tz.strip().removeprefix("tz=") or None)
        try:
            return pa.type_for_alias(name)
        except ValueError:
            pass
    raise ConfigError(
        f"{where}: {value!r} is not a type; use an Arrow type name (string, int64, double, bool, ...)"
    )
