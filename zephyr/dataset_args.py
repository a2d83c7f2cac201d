"""Argument checks of the ``Dataset`` facade: each normalizes one kind of argument or refuses it with a
``ConfigError`` naming the value, so the facade's methods stay one check and one op each."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import pyarrow as pa

from zephyr.errors import ConfigError

__all__ = [
    "check_on_error",
    "column_names",
    "input_paths",
    "partitions_argument",
    "schema_argument",
    "shard_bytes_argument",
]


def input_paths(paths: str | Sequence[str]) -> tuple[str, ...]:
    """The input paths as a tuple; one path may be a plain string, and none at all is refused."""
    if isinstance(paths, str):
        return (paths,)
    result = tuple(str(p) for p in paths)
    if not result:
        raise ConfigError("no input paths given")
    return result


def check_on_error(on_error: str) -> None:
    """Refuse an ``on_error`` other than the two a reader knows, naming what it got."""
    if on_error not in ("raise", "quarantine"):
        raise ConfigError(f"on_error must be 'raise' or 'quarantine', got {on_error!r}")


def schema_argument(schema: pa.Schema | str | None, unify_schemas: bool) -> pa.Schema | None:
    """A schema object, or one loaded from a schema file (``zephyr.io.schema.load_schema_file``)."""
    if schema is not None and unify_schemas:
        raise ConfigError("give unify_schemas=True or schema=, not both: a schema already says every type")
    if schema is None or isinstance(schema, pa.Schema):
        return schema
    if isinstance(schema, str | os.PathLike):
        from zephyr.io.schema import load_schema_file

        return load_schema_file(os.fspath(schema))
    raise ConfigError(f"schema must be a pyarrow.Schema or a schema file path, got {type(schema).__name__}")


def shard_bytes_argument(value: int | str | None) -> int | None:
    """``approx_shard_bytes`` as an int: a number of bytes or a size string such as ``"256MB"``."""
    from zephyr.config import parse_bytes

    return None if value is None else parse_bytes(value)


def column_names(args: tuple, what: str) -> tuple[str, ...]:
    """Column names from ``*args`` (strings or sequences of them); at least one, else naming ``what``."""
    names: list[str] = []
    for arg in args:
        names.extend([arg] if isinstance(arg, str) else list(arg))
    if not names:
        raise ConfigError(f"{what} needs at least one column name")
    return tuple(names)


def partitions_argument(num_partitions: int | None) -> int | None:
    """``num_partitions`` when it is None or a positive int; anything else is refused with the value."""
    if num_partitions is not None and (not isinstance(num_partitions, int) or num_partitions < 1):
        raise ConfigError(f"num_partitions must be a positive integer, got {num_partitions!r}")
    return num_partitions


def sort_boundaries(
    boundaries: Sequence[Any] | None, *, descending: bool, num_partitions: int | None
) -> tuple[Any, ...] | None:
    """``Dataset.sort``'s split points as a tuple, after refusing ones out of sort order (strictly increasing,
    or decreasing for a descending sort), nulls, and a ``num_partitions`` that is not their count + 1."""
    if boundaries is None:
        return None
    cuts = tuple(boundaries)
    if any(c is None for c in cuts):
        raise ConfigError("sort boundaries cannot be null (nulls sort last, into the last partition)")
    pairs = list(zip(cuts, cuts[1:]))
    if not all((b < a) if descending else (a < b) for a, b in pairs):
        order = "decreasing" if descending else "increasing"
        raise ConfigError(f"sort boundaries must be strictly {order} (the sort order), got {list(cuts)[:8]}")
    if num_partitions is not None and num_partitions != len(cuts) + 1:
        raise ConfigError(
            f"sort: {len(cuts)} boundaries make {len(cuts) + 1} partitions, not num_partitions={num_partitions}"
        )
    return cuts
