"""The request model of a shuffle on an object store: requests by kind, bytes and memory, call by call, as
the code makes them (docs/engine.md, "What a shuffle costs", gives the formulas). tests/shuffle/test_s3_requests.py
checks it request for request against a moto S3 server; ``shuffle_cost.py`` prints the figures of
benchmarks/RESULTS.md from it. The engine itself needs only when to coalesce (``zephyr.shuffle.runs.coalesce_plan``).

A map task writes one run (data + index) per spill; a reducer reads one index block of every run and its own
blobs, a chunk of consecutive blobs per request (``zephyr.shuffle.runs``); every task reads its marker before it
runs and writes it after. Reading the map runs as they are, a reducer makes about two requests per run:
``R × 2N`` for ``N`` runs and ``R`` partitions, the request storm of Marin #8301 (6.4 billion requests at 10 TB
in 128 MB tasks). Coalesced, a reducer reads one index block and one chunk per group.
"""

from __future__ import annotations

import itertools
import math
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from zephyr.shuffle.runs import COALESCE_PART_BYTES as COALESCE_PART_BYTES  # the rule, for shuffle_cost.py
from zephyr.shuffle.runs import MIB, RunPart, block_bytes, coalesce_plan, read_groups, windows

from zephyr.budget import Budget

S3FS_BLOCK = 50 * MIB
"""s3fs's default block: a file written without a block size is uploaded in one PUT up to this size, in
parts of this size above it; a file read without one is read ahead this far."""
GET_PER_PREFIX_S = 5_500
PUT_PER_PREFIX_S = 3_500
"""S3's request rates per prefix and second (GET/HEAD, and PUT/COPY/POST/LIST/DELETE)."""
GET_PRICE = 0.0004 / 1000
PUT_PRICE = 0.005 / 1000
"""S3 Standard list prices in dollars per request: GET and HEAD; PUT, COPY, POST and LIST. DELETE is free."""
GET_CLASS = ("GET", "HEAD")
PUT_CLASS = ("PUT", "COPY", "POST", "LIST")
KINDS = ("GET", "HEAD", "LIST", "PUT", "COPY", "POST", "DELETE")


# -- the request model --------------------------------------------------------------------------------------
@dataclass
class Cost:
    """Requests by kind (``KINDS``) and bytes moved, of one task or of a whole shuffle. ``requests`` name an
    object (a key: a test can attribute them to the file they touch), ``bucket`` requests only the bucket
    (s3fs's bucket lookup in ``makedirs``, a multi-object DELETE)."""

    requests: Counter = field(default_factory=Counter)
    bucket: Counter = field(default_factory=Counter)
    read_bytes: int = 0
    written_bytes: int = 0

    def __add__(self, other: Cost) -> Cost:
        return Cost(
            self.requests + other.requests,
            self.bucket + other.bucket,
            self.read_bytes + other.read_bytes,
            self.written_bytes + other.written_bytes,
        )

    def times(self, n: int) -> Cost:
        return Cost(
            Counter({k: v * n for k, v in self.requests.items()}),
            Counter({k: v * n for k, v in self.bucket.items()}),
            self.read_bytes * n,
            self.written_bytes * n,
        )

    @classmethod
    def of(cls, read: int = 0, written: int = 0, bucket: dict | None = None, **kinds: int) -> Cost:
        """``Cost.of(GET=2, read=100)``: requests on objects by kind, ``bucket`` those on the bucket."""
        return cls(Counter({k: v for k, v in kinds.items() if v}), Counter(bucket or {}), read, written)

    @property
    def all(self) -> Counter:
        """Every request, by kind."""
        return self.requests + self.bucket

    @property
    def total(self) -> int:
        return sum(self.all.values())

    @property
    def get_class(self) -> int:
        return sum(self.all[k] for k in GET_CLASS)

    @property
    def put_class(self) -> int:
        return sum(self.all[k] for k in PUT_CLASS)

    @property
    def dollars(self) -> float:
        """At S3 Standard list prices (DELETE is free)."""
        return self.get_class * GET_PRICE + self.put_class * PUT_PRICE

    @property
    def prefix_seconds(self) -> float:
        """Seconds of one S3 prefix's request rate these requests take (GET-class at 5,500/s, the rest at
        3,500/s): the floor under the shuffle's time while its files share one prefix."""
        return self.get_class / GET_PER_PREFIX_S + self.put_class / PUT_PER_PREFIX_S


MAKEDIRS = Cost.of(bucket={"HEAD": 1})
"""``fs.makedirs`` on S3: s3fs looks the bucket up (a HEAD of the bucket); folders do not exist."""
MARKER_CHECK = Cost.of(HEAD=1, LIST=1)
"""A task looks for its marker before it runs (``tasks.finished_marker``); none there: s3fs's HEAD gets a 404
and a LIST then asks whether the key is a folder."""
ATOMIC_WRITE = Cost.of(PUT=1, HEAD=1, LIST=2, COPY=1, bucket={"HEAD": 1, "DELETE": 1})
"""``zephyr.io.paths.atomic_write`` of a small file (a marker, a sample): makedirs (a HEAD of the bucket), the
temporary object (PUT), then s3fs's move: a HEAD and a LIST of the temporary, a LIST of the final name, the
COPY, and the temporary's DELETE (a multi-object DELETE on the bucket)."""
MARKER_READ = Cost.of(HEAD=1, GET=1)
"""A finished task's marker, or a sort sample, read whole: s3fs sizes the object (HEAD) before reading it
(GET)."""


def upload(size: int, block: int = S3FS_BLOCK) -> Cost:
    """Writing a file of ``size`` bytes through an s3fs file of block ``block``: one PUT up to a block, else a
    multipart upload: create and complete (two POSTs) and ``ceil(size / block)`` parts — exact when the file
    is handed over in pieces of the block (a coalesced run); written in smaller pieces, s3fs uploads its buffer
    whenever it passes a block, and a part can hold a little more (a spill just above a multiple of 50 MiB
    then takes a part less)."""
    if size <= block:
        return Cost.of(written=size, PUT=1)
    return Cost.of(written=size, POST=2, PUT=math.ceil(size / block))


def check_file(size: int) -> Cost:
    """``zephyr.resume.check_files`` of one file on resume: its size (HEAD), then its bytes hashed, read through
    s3fs's read-ahead (a HEAD to open, one GET per 56 MiB: 8 MiB reads ahead of a 50 MiB block)."""
    return Cost.of(read=size, HEAD=2, GET=max(1, math.ceil(size / (56 * MIB))))


def map_task(spills: Iterable[tuple[int, int]]) -> Cost:
    """A map task's shuffle requests, ``spills`` its runs' (data bytes, index bytes): its marker looked for,
    its attempt folder made, each run's two files uploaded, its marker written."""
    cost = MARKER_CHECK + MAKEDIRS + ATOMIC_WRITE
    for data, index in spills:
        cost = cost + upload(data) + upload(index)
    return cost


def coalesce_task(inputs: Iterable[tuple[int, int, int]], data: int, index: int, upload_bytes: int) -> Cost:
    """A coalesce task: ``inputs`` its runs' (index bytes, data bytes, data reads) — each index read whole, its
    data in one read per window that holds its bytes — its run written (``data``, ``index`` bytes)."""
    cost = MARKER_CHECK + MAKEDIRS + ATOMIC_WRITE + upload(data, upload_bytes) + upload(index)
    for index_bytes, data_bytes, reads in inputs:
        cost = cost + Cost.of(read=index_bytes + data_bytes, GET=1 + reads)
    return cost


def coalesce_reads(sizes: Sequence[Sequence[int]], window_bytes: int) -> list[int]:
    """Data reads ``runs.coalesce_runs`` makes of each input, ``sizes[i][p]`` input i's bytes of partition p:
    one per window (``runs.windows``) that holds bytes of the input; a window of one partition is copied
    ``window_bytes`` a read."""
    totals = [sum(column) for column in zip(*sizes)] if sizes else []
    reads = [0] * len(sizes)
    for p0, p1 in windows(totals, window_bytes):
        for i, mine in enumerate(sizes):
            held = sum(mine[p0:p1])
            if held:
                reads[i] += math.ceil(held / window_bytes) if p1 - p0 == 1 else 1
    return reads


def reduce_task(index_reads: int, index_bytes: int, chunks: int, data_bytes: int) -> Cost:
    """A reduce task's shuffle requests: its marker looked for and written, one index block read per run
    (``index_reads`` reads of ``index_bytes`` in all), its blobs in ``chunks`` reads (``data_bytes``). Its
    output is not the shuffle's: a sink's costs are its own."""
    return MARKER_CHECK + ATOMIC_WRITE + Cost.of(read=index_bytes + data_bytes, GET=index_reads + chunks)


def chunk_reads(lengths: Sequence[int], chunk_bytes: int) -> int:
    """Reads ``runs.part_sources`` makes for one run's blobs of one partition (``lengths``, in slot order, back to
    back; ``runs.read_groups``): one per group of consecutive blobs of ``chunk_bytes`` at most. A blob larger
    than that is streamed alone, counted here as one read per ``chunk_bytes`` and one for its footer (an
    estimate: those reads follow pyarrow's).

    >>> chunk_reads([0, 10, 10, 10, 0], 25), chunk_reads([10, 30, 10], 25), chunk_reads([0, 0], 25)
    (2, 5, 0)
    """
    offsets = [0, *itertools.accumulate(lengths)]
    parts = [RunPart("", offsets[i], n, int(n > 0)) for i, n in enumerate(lengths)]
    return sum(
        1 if group[0].length <= chunk_bytes else math.ceil(group[0].length / chunk_bytes) + 1
        for group in read_groups(parts, chunk_bytes)
    )


# -- a shuffle at scale -------------------------------------------------------------------------------------
PARQUET_EXPANSION = 3
"""Arrow bytes per Parquet input byte, as the planner estimates them (``zephyr.io.estimate``)."""


@dataclass(frozen=True)
class Shape:
    """A hash shuffle of ``data_bytes`` of Parquet input (written to the shuffle as as many zstd Parquet
    bytes), read in map tasks of ``task_bytes``, with a budget of ``budget_bytes`` per task on ``workers``
    workers; ``partitions`` as the engine picks them unless given (``zephyr.physical.partition_count``, capped
    at ``MAX_PARTITIONS``)."""

    data_bytes: int
    task_bytes: int
    budget_bytes: int
    workers: int
    partitions: int | None = None

    @property
    def budget(self) -> Budget:
        return Budget(self.budget_bytes)

    @property
    def map_tasks(self) -> int:
        return math.ceil(self.data_bytes / self.task_bytes)

    @property
    def spills(self) -> int:
        """Runs per map task: its Arrow bytes over the shuffle buffer (``Budget.shuffle_buffer_bytes``)."""
        return math.ceil(self.task_bytes * PARQUET_EXPANSION / self.budget.shuffle_buffer_bytes)

    @property
    def runs(self) -> int:
        return self.map_tasks * self.spills

    @property
    def num_partitions(self) -> int:
        if self.partitions is not None:
            return self.partitions
        from zephyr.physical import MAX_PARTITIONS, partitions_for

        return min(MAX_PARTITIONS, partitions_for(self.data_bytes * PARQUET_EXPANSION, self.budget))

    @property
    def groups(self) -> list[range]:
        """The coalesce groups ``coalesce_plan`` picks for it (on an object store)."""
        return coalesce_plan(
            [self.spills] * self.map_tasks, self.data_bytes, self.num_partitions, self.workers, self.budget
        )

    def cost(self, coalesce: bool) -> dict[str, Cost]:
        """Per phase (``map``, ``coalesce``, ``reduce``), the shuffle's requests and bytes, with every run
        holding a blob of every partition (a hash shuffle of many more rows than partitions)."""
        r, n, m = self.num_partitions, self.runs, self.map_tasks
        run_data = self.data_bytes // n
        run_index = r * block_bytes(1)
        phases = {"map": map_task([(run_data, run_index)] * self.spills).times(m)}
        chunk = self.budget.spill_row_group_bytes
        groups = self.groups if coalesce else []
        if not groups:
            phases["coalesce"] = Cost()
            reads = n * chunk_reads([run_data // r], chunk)
            phases["reduce"] = reduce_task(n, n * block_bytes(1), reads, self.data_bytes // r).times(r)
            return phases
        phases["coalesce"] = Cost()
        group_runs = [len(g) * self.spills for g in groups]
        window = self.budget.coalesce_window_bytes
        reduce = Cost()
        for slots in sorted(set(group_runs)):
            count = group_runs.count(slots)
            data = slots * run_data
            windows = max(1, math.ceil(data / window))
            inputs = [(run_index, run_data, min(windows, r))] * slots
            task = coalesce_task(inputs, data, r * block_bytes(slots), self.budget.upload_part_bytes)
            phases["coalesce"] = phases["coalesce"] + task.times(count)
            per_reducer = Cost.of(
                read=block_bytes(slots) + data // r, GET=1 + chunk_reads([run_data // r] * slots, chunk)
            )
            reduce = reduce + per_reducer.times(count)
        phases["reduce"] = (MARKER_CHECK + ATOMIC_WRITE + reduce).times(r)
        return phases


def sample_task() -> Cost:
    """A task of a sort's sample stage: its marker looked for, its sample written (a folder made, then
    ``atomic_write``), its marker written; the driver then reads the sample (``MARKER_READ``)."""
    return MARKER_CHECK + MAKEDIRS + ATOMIC_WRITE + ATOMIC_WRITE + MARKER_READ


def resumed_task(sizes: Iterable[int]) -> Cost:
    """A finished task found on resume: its marker read, then every file it names checked whole."""
    cost = MARKER_READ
    for size in sizes:
        cost = cost + check_file(size)
    return cost
