"""The sources of one job, each listed once: shards, fingerprint, planned schema and estimated size.

The driver (``zephyr.job``) asks for a source's shards and fingerprint when it runs the stage that reads it,
and the planner (``zephyr.physical``) asks for its size when it sizes partitions or decides a small job; both
answers come from one listing, so a file's size and version stamp are read once per job.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq

from zephyr import physical
from zephyr.io.paths import atomic_write, public_path
from zephyr.io.sources import Shard, list_shards, plan_input_schema
from zephyr.ops import FromTable, ReadFiles
from zephyr.physical import SourceSize
from zephyr.plan import fingerprint_of, table_digest

__all__ = ["JobInputs"]

Source = ReadFiles | FromTable


class JobInputs:
    """Per source (by identity): its shards and fingerprint, the schema every task casts to, its size."""

    def __init__(self, fs, root: str):
        self.fs = fs
        self.root = root
        """The job's work directory: in-memory tables are staged under ``inputs/``."""
        self._listed: dict[int, tuple[list[Shard], str]] = {}
        self._sizes: dict[int, SourceSize] = {}
        self._schemas: dict[int, pa.Schema | None] = {}

    def shards(self, source: Source) -> tuple[list[Shard], str]:
        """Shards of a source and its fingerprint (listed on first use)."""
        if id(source) not in self._listed:
            listed = self._stage_table(source) if isinstance(source, FromTable) else self._list_files(source)
            self._listed[id(source)] = listed
        return self._listed[id(source)]

    def size_of(self, source: Source) -> SourceSize:
        """The source's estimated size (``zephyr.physical.SizeOf``)."""
        self.shards(source)
        return self._sizes[id(source)]

    def schema(self, source: Source) -> pa.Schema | None:
        """The schema planned for all files of a source before any task (None: the files' own)."""
        return self._schemas.get(id(source))

    def _list_files(self, source: ReadFiles) -> tuple[list[Shard], str]:
        shards, stats = physical.list_source_files(source)
        self._sizes[id(source)] = physical.size_of_files(source, shards, stats)
        # one schema for all files, decided from footers/first blocks before any task (zephyr.io.schema)
        planned = (
            None
            if source.schema is not None
            else plan_input_schema(shards, unify=source.unify_schemas, columns=source.columns)
        )
        self._schemas[id(source)] = planned
        # size and version stamp (mtime / ETag): a same-size edit in place must not resume the old output
        source_fp = fingerprint_of(
            source, [(s, *stats[s.path]) for s in shards], None if planned is None else planned.to_string()
        )
        return shards, source_fp

    def _stage_table(self, source: FromTable) -> tuple[list[Shard], str]:
        """Write an in-memory table as ``num_shards`` Parquet files in the work directory (once per content)."""
        digest = table_digest(source.table)
        directory = f"{self.root}/inputs/{digest[:16]}-{source.num_shards}"
        rows = source.table.num_rows
        files = []
        for i in range(source.num_shards):
            start, stop = rows * i // source.num_shards, rows * (i + 1) // source.num_shards
            path = f"{directory}/part-{i:05d}.parquet"
            if not self.fs.exists(path):
                with atomic_write(public_path(self.fs, path)) as f:
                    pq.write_table(source.table.slice(start, stop - start), f, compression="zstd")
            files.append(path if "://" not in self.root else self.fs.unstrip_protocol(path))
        self._sizes[id(source)] = SourceSize(source.table.nbytes, None, source.num_shards, source.num_shards)
        return list_shards(files, "parquet"), digest
