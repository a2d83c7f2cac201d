"""Row identity and the dup columns shared by every dedup method: helper column names, the keep rule, the
cluster columns attached by row number or joined from the engine, and the eager phase's execution helpers.

Helper columns the dedup stages add to the rows they carry; all start with ``__dedup_`` and never reach
an output (``Finish`` drops them), except ROW and KEEPER when an index records row numbers.

From cluster labels to output columns: keep rule, annotate/remove, cluster-size histogram.

Rows are addressed by *keep rank*: their position in keep order (largest priority, then smallest id,
then input position; nulls last), so the kept member of a cluster is its smallest-rank one and a cluster
is named by the id of that kept row. User ids only order rows; two rows with one id are still two rows.
Rows outside dedup (null text) get null cluster columns and ``dup_keep = true``.

The dup columns of the Dataset dedup functions: from cluster assignments to ``dup_cluster`` /
``dup_cluster_size`` / ``dup_keep``, shared by the exact and fuzzy paths.

Both paths end the same way: each row gets (CLUSTER, SIZE, KEEPER) helper columns, by row number from
a small driver-side table (``_attach`` with ``cluster_node_info``) or by a join with per-group keepers formed
on the engine (``group_keepers``); ``Finish`` turns them into the user's columns (a row is kept when it is its
cluster's KEEPER), counts,
and annotates or removes. The keep rule (largest priority, then smallest id, then input order) is in
``group_keepers`` for the engine and in ``clusters.keep_ranks`` for the driver.

The eager phase of the engine dedup stages: execution options as keyword arguments, the memory budget
they imply, the driver's in-memory limit, and a scratch folder for intermediate Parquet.

Exact and fuzzy dedup run some jobs while the plan is built (hashes, candidate pairs, verified pairs) and
decide from their sizes whether the rest runs in the driver; these helpers are what both paths share.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from zephyr.dedup.config import DUP_COLUMNS, DedupColumns

from zephyr import counters
from zephyr.budget import Budget
from zephyr.config import RemovalMode, coerce
from zephyr.errors import ConfigError, SchemaError
from zephyr.io.schema import without_view_types

if TYPE_CHECKING:
    from zephyr.dataset import Dataset


ROW = "__dedup_row"
"""The engine's row number (``Dataset.with_row_index``): row identity on every dedup path."""
H0, H1 = "__dedup_h0", "__dedup_h1"
"""The two 64-bit halves of a document's exact hash."""
CLUSTER, SIZE, KEEPER = "__dedup_cluster", "__dedup_size", "__dedup_keeper"
"""A row's cluster (its kept row's id), the cluster's size, its kept row's number (its own: it is kept)."""
URL_KEY = "__dedup_url_key"
"""URL dedup's key: the normalized URL, the text exact dedup hashes (``exact.url_dedup_dataset``)."""
HELPERS = (ROW, H0, H1, CLUSTER, SIZE, KEEPER)


@dataclass
class DedupResult:
    """A dedup output: the table (annotated or with duplicates removed) and the job statistics."""

    table: pa.Table
    stats: dict[str, Any] = field(default_factory=dict)


def as_table(data: pa.Table | pa.RecordBatch | Any) -> pa.Table:
    """Accept a table, a record batch or an iterable of record batches; view-typed columns come back as
    plain ones (``zephyr.io.schema.without_view_types``: Arrow cannot select rows of a view)."""
    if isinstance(data, pa.Table):
        table = data
    elif isinstance(data, pa.RecordBatch):
        table = pa.Table.from_batches([data])
    else:
        batches = list(data)
        if not batches:
            raise ConfigError(
                "no record batches given: pass a pyarrow.Table or a non-empty iterable of batches"
            )
        table = pa.Table.from_batches(batches)
    return without_view_types(table)


def require_column(table: pa.Table, name: str, what: str) -> pa.ChunkedArray:
    """The column ``name``; a table without it, even an empty one, is a schema error naming it."""
    has_column(table, name, what, empty_ok=False)
    return table[name]


def keep_ranks(table: pa.Table, id_column: str | None, priority_column: str | None = None) -> np.ndarray:
    """int64 rank of each row in keep order: priority descending, then id ascending, then input position
    (nulls after every value in both columns). Rank 0 is the row every rule keeps first.

    Rows are told apart by position, never by id, so rows that share an id (a crawl merged twice) are still
    two rows: one is kept, the other is its duplicate.
    """
    n = table.num_rows
    keys = [np.arange(n, dtype=np.int64)]  # np.lexsort: least significant key first
    if id_column is not None:
        keys.append(_rank(require_column(table, id_column, "id"), "ascending"))
    if priority_column is not None:
        keys.append(_rank(require_column(table, priority_column, "priority"), "descending"))
    ranks = np.empty(n, dtype=np.int64)
    ranks[np.lexsort(keys)] = np.arange(n, dtype=np.int64)
    return ranks


def _rank(column: pa.ChunkedArray, order: str) -> np.ndarray:
    """Dense-enough rank of a column (equal values share a rank; nulls last). A dictionary-encoded column
    (a categorical id) ranks by its values, and a null-typed one ties every row: Arrow's rank has no kernel
    for either type."""
    if pa.types.is_null(column.type):  # no value at all (an all-null id in JSONL): every row ties
        return np.zeros(len(column), dtype=np.int64)
    if pa.types.is_dictionary(column.type):
        column = column.cast(column.type.value_type)
    return np.asarray(pc.rank(column, sort_keys=order, tiebreaker="min"), dtype=np.int64)


def sums_per_source(
    table: pa.Table, column: str | None, null: str, *weights: np.ndarray
) -> dict[str, list[int]]:
    """Per value of the ``column`` (nulls named ``null``) there is, the sums of each per-row ``weights``."""
    if column is None or column not in table.column_names or not table.num_rows:
        return {}
    enc = pc.dictionary_encode(table[column].combine_chunks().cast(pa.large_string()).fill_null(null))
    codes = np.asarray(enc.indices, dtype=np.int64)
    sums = [np.bincount(codes, weights=w, minlength=len(enc.dictionary)) for w in weights]
    return {str(name): [int(s[i]) for s in sums] for i, name in enumerate(enc.dictionary.to_pylist())}


def has_column(table: pa.Table, name: str | None, what: str, *, empty_ok: bool = True) -> bool:
    """True when ``name`` is a column; an empty table without columns (an empty input file) is passed on
    untouched (False, unless not ``empty_ok``); any other table without it is a schema error naming the
    column."""
    if name is None or name in table.column_names:
        return True
    if table.num_rows == 0 and empty_ok:
        return False
    raise SchemaError(
        f"{what} column {name!r} not found; the input has {', '.join(table.column_names)} "
        f"(pass --{what}-column / {what}_column=)"
    )


class Finish:
    """Turns the helper columns (CLUSTER, SIZE, KEEPER: null for rows in no cluster) into dup_cluster /
    dup_cluster_size / dup_keep, counts, then annotates or removes. With ``row_numbers`` (annotate mode) the
    row's number (ROW) and its kept row's (KEEPER; its own outside a cluster) stay: what an index records."""

    def __init__(self, columns: DedupColumns, mode: str, row_numbers: bool = False):
        self.columns, self.mode, self.row_numbers = columns, mode, row_numbers

    def __call__(self, table: pa.Table) -> Any:
        text_column, id_column = self.columns.text_column, self.columns.id_column
        if not has_column(table, text_column, "text"):
            return table
        valid = pc.is_valid(table[text_column])
        own = table[id_column] if id_column is not None else table[ROW]
        # a row in no cluster of 2 or more (no SIZE, or a group of one from the engine) is its own cluster; its
        # CLUSTER may be null in a cluster too (a kept row without an id)
        lone = pc.and_(pc.invert(pc.greater(pc.fill_null(table[SIZE], 0), 1)), valid)
        cluster = pc.if_else(lone, own.cast(table.schema.field(CLUSTER).type), table[CLUSTER])
        size = pc.if_else(lone, pa.scalar(1, pa.int64()), table[SIZE].cast(pa.int64()))
        keep = pc.fill_null(pc.equal(table[ROW], table[KEEPER]), True)
        keep_np = np.asarray(keep, dtype=bool)
        members = np.asarray(valid, dtype=bool)
        counters.increment("dedup/null_text", int((~members).sum()))
        kept_sizes, per = np.unique(np.asarray(size.fill_null(0))[keep_np & members], return_counts=True)
        for s, c in zip(kept_sizes.tolist(), per.tolist()):
            counters.increment(f"dedup/cluster_size={s}", c)
        counters.increment("dedup/duplicates", int((~keep_np).sum()))
        added = {"dup_cluster": cluster, "dup_cluster_size": size, "dup_keep": keep}
        if self.row_numbers:
            added.update({ROW: table[ROW], KEEPER: pc.coalesce(table[KEEPER], table[ROW])})
        table = table.drop_columns([c for c in (*HELPERS, *DUP_COLUMNS) if c in table.column_names])
        for name, column in added.items():
            table = table.append_column(name, column)
        return StripRowNumbers("remove")(table) if self.mode == "remove" else table


class StripRowNumbers:
    """The user's view of a dedup output made with ``row_numbers=True`` (or of URL dedup's): the row-number
    columns (and URL dedup's key) dropped, and in ``remove`` mode the removed rows and the dup columns too
    (counted as dropped, with ``reason``)."""

    def __init__(self, mode: str, reason: str = "duplicate"):
        self.mode, self.reason = coerce(mode, RemovalMode, "mode"), reason

    def __call__(self, table: pa.Table) -> Any:
        from zephyr.ops import BatchOutput

        table = table.drop_columns([c for c in (ROW, KEEPER, URL_KEY) if c in table.column_names])
        if self.mode == "annotate" or "dup_keep" not in table.column_names:
            return table
        kept = table.filter(table["dup_keep"]).drop_columns(list(DUP_COLUMNS))
        removed = table.num_rows - kept.num_rows
        return BatchOutput(kept=kept, dropped={self.reason: removed}) if removed else kept


def _attach(node_info: pa.Table | None, id_column: str | None, table: pa.Table) -> pa.Table:
    """Looks each row's number up in a small (ROW, CLUSTER, SIZE, KEEPER) table held in memory: a
    broadcast join, so the input keeps its shards and order and the text is never shuffled."""
    if ROW not in table.column_names or not has_column(table, id_column, "id"):
        return table
    if node_info is None or node_info.num_rows == 0:
        own = table.schema.field(id_column).type if id_column is not None else pa.int64()
        for name, kind in ((CLUSTER, own), (SIZE, pa.int64()), (KEEPER, pa.int64())):
            table = table.append_column(name, pa.nulls(table.num_rows, kind))
        return table
    idx = pc.index_in(table[ROW], value_set=node_info[ROW].combine_chunks())
    for name in (CLUSTER, SIZE, KEEPER):
        table = table.append_column(name, node_info[name].take(idx))
    return table


def attached(rows: Dataset, node_info: pa.Table | None, finish: Finish, method: str):
    """A method's output when its clusters formed in the driver: the cluster columns of ``node_info`` looked
    up by row number (``_attach``), then ``finish``."""
    attach = functools.partial(_attach, node_info, finish.columns.id_column)
    return rows.map_batches(attach, name=f"dedup.{method}.attach").map_batches(
        finish, name=f"dedup.{method}.finish"
    )


def cluster_node_info(rows: pa.Table, labels: np.ndarray, id_column: str | None) -> pa.Table:
    """(ROW, CLUSTER, SIZE, KEEPER) of the rows in clusters of 2 or more; ``labels[i]`` is the position
    in ``rows`` of row i's kept row (rows in keep order or not)."""
    sizes = np.bincount(labels, minlength=len(labels))[labels]
    grouped = np.flatnonzero(sizes > 1)
    own = rows[id_column] if id_column is not None else rows[ROW]
    return pa.table(
        {
            ROW: rows[ROW].take(pa.array(grouped)),
            CLUSTER: own.take(pa.array(labels[grouped])),
            SIZE: pa.array(sizes[grouped], pa.int64()),
            KEEPER: rows[ROW].take(pa.array(labels[grouped])),
        }
    ).combine_chunks()


INPROCESS = {"executor": "inprocess"}
"""The execution of a table function: its Dataset function, eagerly, in this process."""


def on_table(
    data: Any, mode: str, dedup: Callable[..., Dataset], columns: DedupColumns, **kwargs: Any
) -> DedupResult:
    """A table function: the Dataset function ``dedup`` (in ``mode``, executed ``INPROCESS``, with ``columns``
    and ``kwargs``) on ``data`` as a one-table Dataset, so both ways in share one path. The stats: the row
    balance, what ``Finish`` counted (``finished``), plus what ``dedup`` put in its ``stats``."""
    import zephyr
    from zephyr import job_stats

    table = as_table(data)
    require_column(table, columns.text_column, "text")
    info: dict[str, Any] = {}
    ds = zephyr.from_arrow(table)
    out = dedup(ds, columns=columns, mode=mode, execution=INPROCESS, stats=info, **kwargs)
    with job_stats.recording() as jobs:
        out = out.to_arrow(**INPROCESS)
    counted = finished(job_stats.counter_totals(st for job in jobs for st in job["stages"]))
    stats = {
        "rows_in": table.num_rows,
        "rows_out": out.num_rows,
        "rows_dropped": table.num_rows - out.num_rows,
        "rows_quarantined": 0,
        **counted,
        **info,
    }
    return DedupResult(out, stats)


def finished(counters: dict[str, int]) -> dict[str, Any]:
    """What ``Finish`` counted, from a run's ``counters``: ``null_text``, ``duplicates``, ``clusters`` (kept
    rows with text) and ``cluster_size_histogram`` (kept rows by cluster size, sizes ascending)."""
    sizes = {k.split("=", 1)[1]: v for k, v in counters.items() if k.startswith("dedup/cluster_size=")}
    histogram = dict(sorted(sizes.items(), key=lambda kv: int(kv[0])))
    return {
        "null_text": counters.get("dedup/null_text", 0),
        "duplicates": counters.get("dedup/duplicates", 0),
        "clusters": sum(histogram.values()),
        "cluster_size_histogram": histogram,
    }


def _null_safe_equal(a: Any, b: Any) -> Any:
    both_null = pc.and_(pc.is_null(a), pc.is_null(b))
    if pa.types.is_null(a.type) or pa.types.is_null(b.type):  # a null-typed id: Arrow has no equal kernel
        return both_null
    return pc.or_(pc.fill_null(pc.equal(a, b), False), both_null)


def group_keepers(members: Dataset, keys: list[str], columns: DedupColumns) -> Dataset:
    """(keys..., KEEPER = row number of the kept row, CLUSTER = its id, SIZE) per group, by aggregations only:
    narrow each group to its largest priority, then its smallest id, then its smallest row number."""
    sizes = members.group_by(*keys).agg(**{SIZE: (ROW, "count")})
    best = members
    for column, how in ((columns.priority_column, "max"), (columns.id_column, "min"), (ROW, "min")):
        if column is None:
            continue
        top = best.group_by(*keys).agg(**{"__dedup_best": (column, how)})
        best = best.join(top, on=keys).map_batches(
            lambda t, c=column: t.filter(_null_safe_equal(t[c], t["__dedup_best"])).drop_columns(
                ["__dedup_best"]
            ),
            name=f"dedup.keep_{how}_{column}",
        )
    own = columns.id_column if columns.id_column is not None else ROW
    keepers = best.map_batches(
        lambda t: pa.table({**{k: t[k] for k in keys}, KEEPER: t[ROW], CLUSTER: t[own]}), name="dedup.keepers"
    )
    return keepers.join(sizes, on=keys)


@dataclass
class Jobs:
    """How the engine jobs of one dedup run. Each method is one description, its Dataset function: it names
    every engine job through ``jobs(title, plan, how)``, every rule that chooses between jobs through
    ``jobs(title)`` and its output through ``jobs.output(title, plan)``. A run (``execution``) executes each
    job and gets back what it found; a listing (``Jobs.plans``: ``zephyr explain``, a pipeline's ``--explain``)
    runs nothing, records each title with its lazy plan and follows every branch, so what explain prints is
    what runs; with neither the description is lazy (no eager job: the path that needs none). ``info``
    receives the run's figures; ``finish``: what the caller does to the output before writing it (listed so);
    ``scratch``: the folder jobs with a ``folder`` write to."""

    execution: dict[str, Any] | None = None
    info: dict[str, Any] = field(default_factory=dict)
    budget: Budget | None = None
    finish: Callable[[Dataset], Dataset] = field(default=lambda out: out)
    scratch: str = ""
    listed: list[tuple[str, Dataset | None]] | None = None

    def __post_init__(self) -> None:
        if self.budget is None:
            self.budget = budget_of(self.execution or {})

    @classmethod
    def plans(cls, dedup: Callable[..., Any], *args: Any, budget: Budget, finish=None, **kwargs: Any) -> list:
        """The jobs ``dedup(*args, **kwargs)`` (a Dataset function) lists, with ``budget`` and ``finish``."""
        jobs = cls(budget=budget, finish=finish or (lambda out: out), listed=[])
        dedup(*args, jobs=jobs, **kwargs)
        return jobs.listed

    @property
    def explain(self) -> bool:
        return self.listed is not None

    @property
    def running(self) -> bool:
        return self.execution is not None and self.listed is None

    def __call__(
        self, title: str, plan: Dataset | None = None, how: str = "materialize", folder: str = ""
    ) -> Any:
        """One job (a rule: no plan): listed (giving the plan back), or run by ``how`` (the ``Dataset``
        method: ``materialize``, ``to_arrow``, ``write_parquet``; into ``scratch/folder`` when ``folder`` is
        given), giving what it found; lazy: None."""
        if self.listed is not None:
            self.listed.append((title, plan))
            return plan
        if plan is None or self.execution is None:
            return None
        return getattr(plan, how)(*([f"{self.scratch}/{folder}"] if folder else []), **self.execution)

    def output(self, title: str, plan: Dataset) -> Dataset:
        """The description's output ``plan`` (listed after ``finish``)."""
        if self.listed is not None:
            self.listed.append((title, self.finish(plan)))
        return plan

    def then(self, step: Callable[[Dataset], Dataset]) -> Jobs:
        """These jobs for a description whose output the caller takes through ``step`` first."""
        return dataclasses.replace(self, finish=lambda out: self.finish(step(out)))


def budget_of(kw: dict[str, Any]) -> Budget:
    """The engine's ``Budget`` for these execution options: every size the eager phase decides by is one of
    its shares (``zephyr.budget``), never a fraction computed here."""
    from zephyr.options import ExecutionOptions

    return Budget(ExecutionOptions.from_kwargs(**kw).memory_budget_bytes)


@contextlib.contextmanager
def scratch_folder(kw: dict[str, Any], name: str = "") -> Iterator[str]:
    """A folder for the eager phase's intermediate Parquet, removed when the block ends: under ``work_dir``
    when one is given (remote workers see it), else a local temporary folder. With ``name`` it is
    ``work_dir/name`` and stays when the block fails, so a rerun of the same work resumes the jobs that wrote
    there (a pipeline step's); without, a fresh folder each time."""
    import uuid

    import fsspec

    work_dir = kw.get("work_dir")
    if work_dir:
        url = f"{str(work_dir).rstrip('/')}/{name or f'dedup-scratch-{uuid.uuid4().hex[:12]}'}"
    else:
        url = tempfile.mkdtemp(prefix="zephyr-dedup-")
    done = False
    try:
        yield url
        done = True
    finally:
        if done or not (work_dir and name):
            fs, path = fsspec.core.url_to_fs(url)
            with contextlib.suppress(FileNotFoundError):
                fs.rm(path, recursive=True)
