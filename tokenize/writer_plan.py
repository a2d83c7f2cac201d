"""The plans of ``write_token_shards``' engine jobs and where they run, built by the same functions for the
writer (``zephyr.tokenize.writer``) and for ``zephyr explain tokenize`` (``zephyr.tokenize.explain``), so the
printed plan is the plan that runs.

- ``place_writer``: the read split and whether the jobs run in this process (``worker_pool``: the engine's
  small-job rule, ``ReadPlan.small``, or a local pool of at most ``DRIVER_MAX_WORKERS`` workers);
- ``tokenize_job``: ``map_batches(tokenize)`` of ``batch_rows`` documents → one reference row a document;
- ``shard_count``: ``ceil(total tokens × itemsize / shard_bytes)``, from the tokenize job's ``tokens`` counter;
- ``reference_sort``: the references sorted by (``key_hi``, ``key_lo``) into that many partitions;
- ``pack_job``: one pack task per sorted partition.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from zephyr.dataset import Dataset
    from zephyr.options import ExecutionOptions
    from zephyr.read_plan import ReadPlan

__all__ = [
    "DRIVER_MAX_WORKERS",
    "WriterPlacement",
    "driver_encodes",
    "pack_job",
    "pack_threads",
    "place_writer",
    "reference_sort",
    "shard_count",
    "tokenize_job",
    "worker_pool",
]

log = logging.getLogger("zephyr.tokenize.writer")  # the writer's decisions, logged under the writer's name


DRIVER_MAX_WORKERS = 2
"""With at most this many local workers, the writer's jobs run in the driver process. One process already
gives the encoder every core (its own threads), decodes the next input batch on a thread meanwhile
(``zephyr.read_ahead``), and loads, proves and warms the tokenizer once; two worker processes pay each of those
twice plus their start-up (~3 CPU-s at 320 MB). Measured at 320 MB on 2 cores with fastokens: 4.30 s in the
driver vs 5.22 s on 2 workers (median of 3; fastokens in memory 2.31 s); with tiktoken at 80 MB, 5.8 vs
6.2 s. With more workers, one Python thread (decoding, hashing, spilling) would not keep up with the encoder."""


@dataclass(frozen=True)
class WriterPlacement:
    """Where the writer's jobs run and how its inputs are split (``place_writer``)."""

    read_plan: ReadPlan | None
    concurrency: int
    """Tokenize tasks that run at once on one machine (``tokenize.inputs.plan_tasks``)."""
    pool: dict[str, Any]
    """The execution options of every job of the writer (``worker_pool``)."""

    @property
    def in_driver(self) -> bool:
        return self.pool.get("executor") == "inprocess"

    @property
    def approx_shard_bytes(self) -> int | None:
        """The read split: the engine's, unless the tasks run in the driver one after another anyway."""
        return (
            self.read_plan.approx_shard_bytes if self.read_plan is not None and not self.in_driver else None
        )


def place_writer(data: Any, options: ExecutionOptions, execution: dict[str, Any]) -> WriterPlacement:
    """The read plan of ``data`` and the options of the writer's jobs."""
    from zephyr.tokenize.inputs import plan_tasks

    read_plan, concurrency = plan_tasks(data, options)
    return WriterPlacement(read_plan, concurrency, worker_pool(execution, options, read_plan, concurrency))


def worker_pool(
    execution: dict[str, Any], options: Any, read_plan: ReadPlan | None, concurrency: int
) -> dict[str, Any]:
    """The execution options of the writer's jobs. A job the engine calls small (``ReadPlan.small``: its
    inputs are under ``small_job_bytes``, or its read split leaves one task) runs in this process, like
    every small engine job: a worker would add its start-up and nothing else (the driver only waits
    meanwhile); ``small_job_bytes=0`` turns that off. So does a local pool of at most ``DRIVER_MAX_WORKERS``
    workers (``driver_encodes``). Otherwise no more worker processes than tokenize tasks:
    more would only import and sit idle on the cores the encoder threads use (later stages are a small sort
    and I/O-bound packing). Outputs depend on neither."""
    pool = dict(execution)
    if read_plan is not None and read_plan.small:
        log.info(
            "tokenize: a small job (zephyr.read_plan): running in this process (small_job_bytes=0 to force workers)"
        )
        pool["executor"] = "inprocess"
    elif driver_encodes(options):
        log.info(
            "tokenize: %d workers: running in this process, the encoder on every core (small_job_bytes=0 to "
            "force workers)",
            options.num_workers,
        )
        pool["executor"] = "inprocess"
    elif options.executor == "local" and concurrency < options.num_workers:
        pool["workers"] = concurrency
    return pool


DRIVER_MIN_BUDGET_BYTES = 512 << 20
"""Below this ``memory_budget`` the writer keeps its worker processes even with ``DRIVER_MAX_WORKERS`` or fewer:
the driver holds more than a worker's stream of ``batch_rows`` batches (the read-ahead batch, the batches in
flight, the driver's own job state beside the encoder's caches), ~300-410 MiB above its baseline whatever the
budget. Measured with benchmarks/budget_peaks.py (inputs 6x the budget): at ``--memory-budget 64MiB`` 151 MiB
above it where the budget allows 1.25 x 64 = 80; at 256MiB 299-363 MiB over three runs, against 320 allowed
(1.17-1.42x); at 512MiB 360-383 MiB (0.70-0.75x) with one batch in flight, 401 MiB (0.78x) with three, and
320 MiB (0.63x; 354 MiB, 0.35x, at 1GiB) with two on the encode threads kept while batches come
(``TokenizeBatch.IN_FLIGHT``, ``encode_step._encode_threads``). On workers at 64MiB: 1.03x."""


def driver_encodes(options: Any) -> bool:
    """Whether a ``local`` job of at most ``DRIVER_MAX_WORKERS`` workers runs in the driver: not with
    ``small_job_bytes=0``, which forces worker processes as for every engine job, nor with a memory budget under
    ``DRIVER_MIN_BUDGET_BYTES``."""
    return (
        options.executor == "local"
        and options.num_workers <= DRIVER_MAX_WORKERS
        and options.small_job_bytes_value > 0
        and options.memory_budget_bytes >= DRIVER_MIN_BUDGET_BYTES
    )


def tokenize_job(dataset: Dataset, batch_fn: Any, batch_rows: int) -> Dataset:
    """Step 2: ``batch_rows`` documents at a time through ``batch_fn`` (a ``TokenizeBatch``): token ids to the
    spill files, one reference row a document out."""
    return dataset.map_batches(batch_fn, batch_rows=batch_rows, name="tokenize")


def shard_count(total_tokens: int, itemsize: int, shard_bytes: int) -> int:
    """Step 3: ``ceil(total_tokens * itemsize / shard_bytes)``, at least one."""
    return max(1, math.ceil(total_tokens * itemsize / shard_bytes))


def reference_sort(refs: Dataset, num_shards: int) -> Dataset:
    """Step 4: the global document shuffle, the references sorted by their seeded key into one partition a
    shard. Shard ``i`` holds the keys whose ``key_hi`` is in ``[i * 2**64 / P, (i + 1) * 2**64 / P)``
    (``shard_cuts``): the keys are uniform hashes, so the shards are even in expectation, and a shard's
    documents depend only on the data, the seed and the shard count, never on how the input was split into
    tasks (a key sample's cuts did: each task sampled its own references)."""
    return refs.sort("key_hi", "key_lo", boundaries=shard_cuts(num_shards))


def shard_cuts(num_shards: int) -> list[int]:
    """``num_shards - 1`` even split points of the ``uint64`` key space (``ceil(i * 2**64 / P)``)."""
    return [-(-(i << 64) // num_shards) for i in range(1, num_shards)]


def pack_threads(placed: WriterPlacement, options: Any) -> int:
    """Shards the pack step writes at once in the driver: as many as the local workers it stands in for
    (``driver_encodes``, or a small job), at most one a core; one with ``executor="inprocess"`` (the jobs run
    one task after another by request) or when workers pack. The pack of a shard spends most of its time
    reading spills, writing and hashing, which release the GIL: at 320 MB on 2 cores two threads took the pack
    job from 0.57-0.73 s to 0.41-0.52 s (3 interleaved runs), for one more batch of tokens in memory."""
    import os

    if not placed.in_driver or options.executor != "local":
        return 1
    return max(1, min(options.num_workers, os.cpu_count() or 1))


def pack_job(parts: list[str], packer: Any) -> Dataset:
    """Step 5: each sorted partition (``parts``, in order) packed into its shard by ``packer`` (a
    ``PackPartition``): one task a partition, or one task for all of them when the packer packs several at
    once on threads (``pack_threads``: in the driver, where tasks run one after another)."""
    import numpy as np
    import pyarrow as pa
    from zephyr.tokenize.arrow_buffers import numeric_array, string_array

    import zephyr

    # built from buffers: ``from_items`` (``pa.Table.from_pylist``) would import pandas in the driver (~1 s)
    jobs = pa.Table.from_arrays(
        [
            numeric_array(np.arange(len(parts)), pa.int64()),
            string_array([f"shard-{i:05d}" for i in range(len(parts))]),
            string_array(parts),
        ],
        names=["index", "name", "path"],
    )
    tasks = 1 if packer.threads > 1 else max(1, len(parts))
    return zephyr.from_arrow(jobs, num_shards=tasks).map_batches(packer, name="pack")
