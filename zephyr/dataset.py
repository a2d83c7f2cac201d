"""The lazy ``Dataset`` API: each method appends one logical op; actions run the plan.

>>> import zephyr
>>> ds = zephyr.from_items([{"word": w, "n": i} for i, w in enumerate("the cat saw the dog".split())])
>>> ds.filter(lambda r: r["word"] != "dog").group_by("word").count().sort("word").to_arrow(
...     executor="inprocess").to_pylist()
[{'word': 'cat', 'count': 1}, {'word': 'saw', 'count': 1}, {'word': 'the', 'count': 2}]

Narrow ops (``map``, ``filter``, ``flat_map``, ``map_batches``, ``select``) fuse into one stage; wide ops
(``group_by``, ``deduplicate``, ``sort``, ``join``, ``reshard``) cut the plan with a Parquet shuffle.
Actions (``to_arrow``, ``count``, ``write_*``, ``materialize``) take the execution keywords of
``ExecutionOptions``: ``executor``, ``workers``, ``memory_budget``, ``work_dir``, ``cluster``, ``max_retries``,
``progress``.

The facade's argument checks (``input_paths``, ``_schema_argument``...): each normalizes one kind of argument or refuses it with a
``ConfigError`` naming the value, so the facade's methods stay one check and one op each.
"""

from __future__ import annotations

import operator
import os
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import pyarrow as pa

from zephyr.config import parse_bytes
from zephyr.errors import ConfigError, require
from zephyr.io.schema import without_view_types
from zephyr.job_stats import WriteResult
from zephyr.ops import (
    Deduplicate,
    FromTable,
    GroupAggregate,
    GroupApply,
    Join,
    MapBatches,
    OnError,
    Op,
    ReadFiles,
    Reshard,
    RowOp,
    Select,
    Sort,
    WithRowIndex,
)
from zephyr.shuffle.reduce import Agg


def read(
    paths: str | Sequence[str],
    *,
    format: Literal["auto", "parquet", "jsonl", "vortex", "warc"] = "auto",
    columns: Sequence[str] | None = None,
    approx_shard_bytes: int | str | None = None,
    on_error: OnError = "raise",
    unify_schemas: bool = False,
    schema: pa.Schema | str | None = None,
) -> Dataset:
    """Files of one format, told by their extensions (``zephyr.io.paths.input_files``: a folder of
    ``.jsonl.zst`` files is JSON lines; two formats at once are refused), or by ``format``. ``columns``
    projects Parquet files only (JSON lines and Vortex are read whole); the rest as in ``read_parquet``.
    Vortex files (``vortex-data``) are read with this: ``read(paths, format="vortex")``.

    WARC/ARC files (``.warc[.gz]``, ``.arc[.gz]``) give their HTML response records, one row each, with the
    decoded ``html`` (schema and rules: ``zephyr.io.warc``). A bad record (a truncated gzip member, a wrong
    Content-Length, a non-HTML payload, an undecodable charset) fails the read naming its byte offset, or
    goes to the quarantine output with ``on_error="quarantine"``, as crawls always hold some.
    ``zephyr.read_warc`` adds text extraction."""
    from zephyr.io.paths import input_files

    files, fmt = input_files(list(input_paths(paths)), format)
    if fmt == "warc":
        _check_on_error(on_error)
        return Dataset((ReadFiles(tuple(files), "warc", on_error=on_error),))
    projected = columns if fmt == "parquet" else None
    shard_bytes = None if fmt == "vortex" else approx_shard_bytes  # Vortex files are read whole
    return _read_files(fmt, files, projected, schema, unify_schemas, shard_bytes, on_error)


def _read_files(
    fmt: Literal["parquet", "jsonl", "vortex"],
    paths: str | Sequence[str],
    columns: Sequence[str] | None,
    schema: pa.Schema | str | None,
    unify_schemas: bool,
    approx_shard_bytes: int | str | None,
    on_error: OnError,
) -> Dataset:
    """The ``ReadFiles`` op of the columnar and JSON-lines readers, their arguments checked one way."""
    _check_on_error(on_error)
    shard_bytes = None if approx_shard_bytes is None else parse_bytes(approx_shard_bytes)
    columns, schema = tuple(columns) if columns else None, _schema_argument(schema, unify_schemas)
    op = ReadFiles(input_paths(paths), fmt, columns, schema, shard_bytes, on_error, unify_schemas)
    return Dataset((op,))


def read_parquet(
    paths: str | Sequence[str],
    *,
    columns: Sequence[str] | None = None,
    approx_shard_bytes: int | str | None = None,
    unify_schemas: bool = False,
    schema: pa.Schema | str | None = None,
    on_error: OnError = "raise",
) -> Dataset:
    """Parquet files (globs, directories, fsspec URLs). One shard per file, or row-group runs of about
    ``approx_shard_bytes`` uncompressed bytes each. Rows that cannot be read (invalid UTF-8 in a string
    column) raise naming file, row group and row, or go to the quarantine output with ``on_error="quarantine"``.

    Files whose schemas differ follow one rule, checked from their footers before any task runs
    (``zephyr.io.schema``): missing columns are nulls, other type differences fail naming both files,
    unless ``unify_schemas=True`` (promote int → wider int → double) or ``schema=`` (a ``pa.Schema`` or a
    schema file: cast every file to it)."""
    return _read_files("parquet", paths, columns, schema, unify_schemas, approx_shard_bytes, on_error)


def read_jsonl(
    paths: str | Sequence[str],
    *,
    schema: pa.Schema | str | None = None,
    approx_shard_bytes: int | str | None = None,
    on_error: OnError = "raise",
    unify_schemas: bool = False,
) -> Dataset:
    """JSON-lines files, plain or ``.gz``/``.zst``. Bad lines raise naming file and line, or go to the
    quarantine output with ``on_error="quarantine"``.

    ``schema`` (a ``pa.Schema`` or a schema file) parses every file with those types; without it, files whose
    inferred types differ follow the rule of ``read_parquet`` (``unify_schemas``)."""
    return _read_files("jsonl", paths, None, schema, unify_schemas, approx_shard_bytes, on_error)


def from_arrow(data: pa.Table | pa.RecordBatch | Iterable[pa.RecordBatch], *, num_shards: int = 1) -> Dataset:
    """An in-memory Arrow table split into ``num_shards`` shards (staged as Parquet before tasks run); view-typed
    columns become plain ones (``zephyr.io.schema.without_view_types``: Arrow can neither slice nested views
    for Parquet nor select rows of any view)."""
    batches = [data] if isinstance(data, pa.RecordBatch) else data  # not pa.table(): it imports pandas
    table = data if isinstance(data, pa.Table) else pa.Table.from_batches(list(batches))
    return Dataset(
        (FromTable(without_view_types(table), _positive(num_shards, "num_shards", optional=False)),)
    )


def from_items(items: Iterable[dict], *, num_shards: int = 1) -> Dataset:
    """Python dict rows (types inferred by Arrow)."""
    return from_arrow(pa.Table.from_pylist(list(items)), num_shards=num_shards)


class Dataset:
    """A lazy plan over shards of Arrow record batches. Build with ``zephyr.read_*`` / ``from_*``."""

    def __init__(self, ops: tuple[Op, ...]):
        self._ops = ops

    def _then(self, op: Op) -> Dataset:
        return Dataset((*self._ops, op))

    def __repr__(self) -> str:
        return f"Dataset({' -> '.join(type(op).__name__ for op in self._ops)})"

    @property
    def files(self) -> tuple[str, ...]:
        """The files a plain read reads: a ``materialize`` result's Parquet parts (none when it had no rows)
        or a ``read_*``'s paths as given. A plan that computes its rows has no such files: ``ConfigError``.

        >>> import zephyr
        >>> zephyr.from_items([]).files
        ()
        """
        if len(self._ops) == 1 and isinstance(self._ops[0], ReadFiles):
            return self._ops[0].paths
        if len(self._ops) == 1 and isinstance(self._ops[0], FromTable):
            return ()
        raise ConfigError(f"{self!r} computes its rows: materialize it first to read its files")

    # -- narrow ops -------------------------------------------------------------------------------------
    def map(self, fn: Callable[[dict], dict], *, on_error: OnError = "raise") -> Dataset:
        """One output row (a dict) per input row.

        >>> from_items([{"x": 1}, {"x": 2}]).map(lambda r: {"y": r["x"] * 10}).to_arrow(
        ...     executor="inprocess").to_pylist()
        [{'y': 10}, {'y': 20}]
        """
        _check_on_error(on_error)
        return self._then(RowOp("map", fn, on_error))

    def filter(self, predicate: Callable[[dict], bool], *, on_error: OnError = "raise") -> Dataset:
        """Rows for which ``predicate`` is true; the others are counted as dropped."""
        _check_on_error(on_error)
        return self._then(RowOp("filter", predicate, on_error))

    def flat_map(self, fn: Callable[[dict], Iterable[dict]], *, on_error: OnError = "raise") -> Dataset:
        """Zero or more output rows per input row.

        >>> from_items([{"s": "a b"}, {"s": "c"}]).flat_map(lambda r: [{"w": w} for w in r["s"].split()]
        ...     ).to_arrow(executor="inprocess").column("w").to_pylist()
        ['a', 'b', 'c']
        """
        _check_on_error(on_error)
        return self._then(RowOp("flat_map", fn, on_error))

    def map_batches(
        self, fn: Callable[[pa.Table], Any], *, batch_rows: int | None = None, name: str | None = None
    ) -> Dataset:
        """A batch function: ``pa.Table`` in, ``pa.Table``/``RecordBatch``/``BatchOutput`` out.

        The preferred way to write operators: vectorized, no per-row Python. ``fn`` is unpickled once per
        task, so a callable object can load a model lazily on its first call.

        A callable object may hold batches back, to keep something busy across calls (the tokenize writer
        encodes batch n on the tokenizer's threads while it builds batch n - 1's output): give it a
        ``finish()`` method. Each task then gets its own shallow copy of it; a call may return ``None``
        (nothing yet) or the output of earlier batches, and ``finish()``, called once after the task's last
        batch, returns what is still held. Rows are then accounted over the task, not per call.

        >>> import pyarrow.compute as pc
        >>> from_items([{"x": 1}, {"x": 2}]).map_batches(
        ...     lambda t: t.append_column("y", pc.multiply(t["x"], 2))).to_arrow(executor="inprocess").to_pylist()
        [{'x': 1, 'y': 2}, {'x': 2, 'y': 4}]
        """
        return self._then(MapBatches(fn, _positive(batch_rows, "batch_rows"), name))

    def select(self, *columns: str | Sequence[str]) -> Dataset:
        """Keep these columns, in this order."""
        return self._then(Select(column_names(columns, "select")))

    def with_row_index(self, name: str = "index") -> Dataset:
        """Add an int64 column ``name`` that identifies each row: unique, increasing in input order, not dense.

        The value is ``shard << 40 | position in shard``; it depends only on the input and its shard layout,
        so every job over this plan sees the same index whatever the executor or worker count (dedup uses it
        to tell apart rows that share a user id).

        >>> from_items([{"x": "a"}, {"x": "b"}]).with_row_index("row").to_arrow(executor="inprocess").to_pylist()
        [{'x': 'a', 'row': 0}, {'x': 'b', 'row': 1}]
        """
        if not isinstance(name, str) or not name:
            raise ConfigError(f"with_row_index needs a column name, got {name!r}")
        return self._then(WithRowIndex(name))

    # -- wide ops ---------------------------------------------------------------------------------------
    def group_by(
        self,
        *keys: str | Sequence[str],
        sort_by: str | Sequence[str] | Sequence[tuple[str, bool]] | None = None,
        num_partitions: int | None = None,
    ) -> GroupedDataset:
        """Group rows by ``keys``; finish with ``.count()``, ``.agg(...)`` or ``.reduce(fn)``.

        ``sort_by`` orders the rows each ``reduce`` call sees (column names, or (name, descending) pairs).
        """
        items = [] if sort_by is None else [sort_by] if isinstance(sort_by, str) else sort_by
        order = [(i, False) if isinstance(i, str) else (str(i[0]), bool(i[1])) for i in items]
        partitions = _positive(num_partitions, "num_partitions")
        return GroupedDataset(self, column_names(keys, "group_by"), tuple(order), partitions)

    def deduplicate(self, *keys: str | Sequence[str], num_partitions: int | None = None) -> Dataset:
        """One row per distinct key: the first in input order.

        >>> from_items([{"k": 1, "v": "a"}, {"k": 1, "v": "b"}, {"k": 2, "v": "c"}]).deduplicate("k").sort(
        ...     "k").to_arrow(executor="inprocess").to_pylist()
        [{'k': 1, 'v': 'a'}, {'k': 2, 'v': 'c'}]
        """
        partitions = _positive(num_partitions, "num_partitions")
        return self._then(Deduplicate(column_names(keys, "deduplicate"), partitions))

    def sort(
        self,
        *by: str | Sequence[str],
        descending: bool | Sequence[bool] = False,
        num_partitions: int | None = None,
        boundaries: Sequence[Any] | None = None,
    ) -> Dataset:
        """Global sort (range-partitioned from a key sample); nulls last; ties keep input order.

        ``boundaries``: split points on the first column, in sort order, instead of cuts from a key sample:
        partition ``i`` holds the keys from ``boundaries[i - 1]`` (included) to ``boundaries[i]`` (excluded),
        in sort order (descending: ``boundaries[i - 1] >= key > boundaries[i]``); nulls last. The sampled
        cuts depend on how the input is split into tasks (each task samples its own rows); given cuts do not,
        so a caller whose keys it knows (uniform hashes) gets the same partitions from any input layout.

        >>> from_items([{"k": 2}, {"k": None}, {"k": 1}]).sort("k").to_arrow(executor="inprocess").to_pylist()
        [{'k': 1}, {'k': 2}, {'k': None}]
        """
        names = column_names(by, "sort")
        flags = [descending] * len(names) if isinstance(descending, bool) else list(descending)
        if len(flags) != len(names):
            raise ConfigError(f"sort: {len(names)} columns but {len(flags)} descending flags")
        cuts = _sort_boundaries(boundaries, descending=bool(flags[0]), num_partitions=num_partitions)
        partitions = _positive(num_partitions, "num_partitions")
        return self._then(Sort(names, tuple(bool(f) for f in flags), partitions, cuts))

    def join(
        self,
        other: Dataset,
        on: str | Sequence[str] | None = None,
        *,
        left_on: str | Sequence[str] | None = None,
        right_on: str | Sequence[str] | None = None,
        how: Literal["inner", "left", "right", "outer"] = "inner",
        suffix: str = "_right",
        num_partitions: int | None = None,
    ) -> Dataset:
        """Hash join with ``other``. Key columns are coalesced (one column per key); other clashing names of
        the right side get ``suffix``. Null keys never match.

        >>> left = from_items([{"k": 1, "a": "x"}, {"k": 2, "a": "y"}])
        >>> right = from_items([{"k": 2, "b": True}, {"k": 3, "b": False}])
        >>> left.join(right, on="k", how="outer").sort("k").to_arrow(executor="inprocess").to_pylist()
        [{'k': 1, 'a': 'x', 'b': None}, {'k': 2, 'a': 'y', 'b': True}, {'k': 3, 'a': None, 'b': False}]
        """
        if not isinstance(other, Dataset):
            raise ConfigError(f"join needs a Dataset, got {type(other).__name__}")
        if how not in ("inner", "left", "right", "outer"):
            raise ConfigError(f"join how must be inner, left, right or outer; got {how!r}")
        if on is not None:
            if left_on is not None or right_on is not None:
                raise ConfigError("join: give either on= or left_on=/right_on=, not both")
            left_keys = right_keys = column_names((on,), "join")
        else:
            if left_on is None or right_on is None:
                raise ConfigError("join: give on=, or both left_on= and right_on=")
            left_keys, right_keys = column_names((left_on,), "join"), column_names((right_on,), "join")
            if len(left_keys) != len(right_keys):
                raise ConfigError(
                    f"join: left_on has {len(left_keys)} columns but right_on has {len(right_keys)}"
                )
        partitions = _positive(num_partitions, "num_partitions")
        return self._then(Join(other._ops, left_keys, right_keys, how, suffix, partitions))

    def reshard(self, num_shards: int) -> Dataset:
        """Redistribute rows round-robin into ``num_shards`` shards (e.g. before an expensive map)."""
        return self._then(Reshard(_positive(num_shards, "num_shards", optional=False)))

    # -- actions ----------------------------------------------------------------------------------------
    def to_arrow(self, **execution: Any) -> pa.Table:
        """Run the plan and return all rows as one table, in shard order."""
        from zephyr.job import run_to_arrow

        return run_to_arrow(self._ops, _options(execution))

    def count(self, **execution: Any) -> int:
        """Run the plan and return the number of rows it produces."""
        from zephyr.job import run_count

        return run_count(self._ops, _options(execution))

    def write_parquet(self, directory: str, *, overwrite: bool = False, **execution: Any) -> WriteResult:
        """Write ``part-00000.parquet``, ... (zstd) into ``directory``, one file per output shard.

        The folder holds the part files only; what zephyr keeps about it (manifest, lock, stats, quarantined
        rows) is in the sidecar ``DIRECTORY.zephyr`` (``zephyr.io.layout``). The write is refused, before any
        work, when ``directory`` is, contains or lies inside an input, when another command holds its lock,
        or when it holds files zephyr did not write, unless ``overwrite=True`` (``zephyr.io.claim``); a folder
        a finished run wrote keeps its content until the new one has published in full.
        """
        from zephyr.job import run_write

        return run_write(self._ops, directory, "parquet", None, _options(execution), overwrite=overwrite)

    def write_jsonl(
        self,
        directory: str,
        *,
        compression: Literal["gzip", "zstd"] | None = None,
        overwrite: bool = False,
        **execution: Any,
    ) -> WriteResult:
        """Write ``part-00000.jsonl[.gz|.zst]``, ... into ``directory`` (claimed like ``write_parquet``)."""
        from zephyr.job import run_write

        if compression not in (None, "gzip", "zstd"):
            raise ConfigError(f"compression must be None, 'gzip' or 'zstd', got {compression!r}")
        options = _options(execution)
        return run_write(self._ops, directory, "jsonl", compression, options, overwrite=overwrite)

    def write_vortex(self, directory: str, *, overwrite: bool = False, **execution: Any) -> WriteResult:
        """Write ``part-00000.vortex``, ... into ``directory`` (claimed like ``write_parquet``)."""
        require("vortex", "vortex", "write_vortex")
        from zephyr.job import run_write

        return run_write(self._ops, directory, "vortex", None, _options(execution), overwrite=overwrite)

    def materialize(self, directory: str | None = None, **execution: Any) -> Dataset:
        """Run the plan once, write Parquet (to ``directory`` or under ``work_dir``), return a Dataset over it."""
        from zephyr.job import run_materialize

        return Dataset(run_materialize(self._ops, directory, _options(execution)))

    def explain(self, **execution: Any) -> str:
        """The physical plan, without running it: stages in the order they run, the shuffles between them,
        partition counts and the budget's shares in bytes (``zephyr.physical``). Takes an action's execution
        keywords: ``memory_budget`` sizes the partitions. Reads file listings and Parquet footers only."""
        from zephyr.physical import explain

        return explain(self._ops, _options(execution)).text


def _options(execution: dict[str, Any]):
    from zephyr.options import ExecutionOptions

    return ExecutionOptions.from_kwargs(**execution)


@dataclass(frozen=True)
class GroupedDataset:
    """The result of ``Dataset.group_by``: pick an aggregation."""

    _parent: Dataset
    _keys: tuple[str, ...]
    _sort_by: tuple[tuple[str, bool], ...]
    _num_partitions: int | None

    def count(self, name: str = "count") -> Dataset:
        """Rows per key: ``Dataset(keys..., count)``, the aggregation ``agg(name=(None, "count"))``."""
        return self.agg(**{name: (None, "count")})

    def agg(self, **aggregations: tuple[str, str]) -> Dataset:
        """Named aggregations ``out=(column, how)``; how: count, sum, min, max, mean, first, last, n_unique, list.

        >>> from_items([{"k": "a", "x": 1}, {"k": "a", "x": 3}]).group_by("k").agg(
        ...     total=("x", "sum"), top=("x", "max")).to_arrow(executor="inprocess").to_pylist()
        [{'k': 'a', 'total': 4, 'top': 3}]
        """
        if not aggregations:
            raise ConfigError("agg needs at least one aggregation, e.g. agg(total=('x', 'sum'))")
        aggs = []
        for output, spec in aggregations.items():
            if not (isinstance(spec, tuple) and len(spec) == 2):
                raise ConfigError(f"aggregation {output}= must be a (column, how) pair, got {spec!r}")
            aggs.append(Agg(output, spec[0], spec[1]))
        return self._parent._then(GroupAggregate(self._keys, tuple(aggs), self._num_partitions))

    def reduce(self, fn: Callable[[pa.Table], Any]) -> Dataset:
        """Call ``fn(group_rows: pa.Table)`` once per group (rows in ``sort_by`` order); it returns a table, a
        dict, a list of dicts or None."""
        return self._parent._then(GroupApply(self._keys, self._sort_by, fn, self._num_partitions))


def input_paths(paths: str | Sequence[str]) -> tuple[str, ...]:
    """The input paths as a tuple; one path may be a plain string, and none at all is refused."""
    if isinstance(paths, str):
        return (paths,)
    result = tuple(str(p) for p in paths)
    if not result:
        raise ConfigError("no input paths given")
    return result


def _check_on_error(on_error: str) -> None:
    """Refuse an ``on_error`` other than the two a reader knows, naming what it got."""
    if on_error not in ("raise", "quarantine"):
        raise ConfigError(f"on_error must be 'raise' or 'quarantine', got {on_error!r}")


def _schema_argument(schema: pa.Schema | str | None, unify_schemas: bool) -> pa.Schema | None:
    """A schema object, or one loaded from a schema file (``zephyr.io.schema.load_schema_file``)."""
    if schema is not None and unify_schemas:
        raise ConfigError("give unify_schemas=True or schema=, not both: a schema already says every type")
    if schema is None or isinstance(schema, pa.Schema):
        return schema
    if isinstance(schema, str | os.PathLike):
        from zephyr.io.schema import load_schema_file

        return load_schema_file(os.fspath(schema))
    raise ConfigError(f"schema must be a pyarrow.Schema or a schema file path, got {type(schema).__name__}")


def column_names(args: tuple, what: str) -> tuple[str, ...]:
    """Column names from ``*args`` (strings or sequences of them); at least one, else naming ``what``."""
    names: list[str] = []
    for arg in args:
        names.extend([arg] if isinstance(arg, str) else list(arg))
    if not names:
        raise ConfigError(f"{what} needs at least one column name")
    return tuple(names)


def _positive(value: Any, name: str, *, optional: bool = True) -> int | None:
    """``value`` as an int when it is a positive integer (a numpy one too), or None when ``optional``;
    anything else is refused naming the argument ``name``."""
    if value is None and optional:
        return None
    try:
        number = operator.index(value)
    except TypeError:
        number = 0
    if number < 1:
        raise ConfigError(f"{name} must be a positive integer, got {value!r}")
    return number


def _sort_boundaries(
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
