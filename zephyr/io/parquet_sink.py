"""The Parquet encoder of the sinks: zstd, statistics, dictionary encoding, one row group per flush; a widened
schema rewrites the file written so far into a new generation (see the ``zephyr.io.sinks`` contract)."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq

from zephyr.io.casting import conform
from zephyr.io.checksum import Checksummed
from zephyr.io.sink_encoder import SCHEMA_FIX, BufferedEncoder, quietly

__all__ = ["ParquetEncoder"]


class ParquetEncoder(BufferedEncoder):
    def __init__(self, fs, path: str, schema, row_group_bytes, row_group_rows, where):
        super().__init__(schema, row_group_bytes, row_group_rows, where)
        self.fs = fs
        self.base = path
        self.path = path
        self.generation = 0
        self.handle: Checksummed | None = None
        self.writer: pq.ParquetWriter | None = None
        self.checksum: dict | None = None
        """The finished file's checksum record (``zephyr.io.checksum``), hashed as written."""

    def _writer(self) -> pq.ParquetWriter:
        if self.writer is None:
            self.handle = Checksummed(self.fs.open(self.path, "wb"))  # a rewrite starts a new file and hash
            self.writer = pq.ParquetWriter(
                self.handle,
                self._fix_schema(),
                compression="zstd",
                write_statistics=True,
                use_dictionary=True,
            )
        return self.writer

    def emit(self, table: pa.Table) -> None:
        self._writer().write_table(table, row_group_size=max(1, table.num_rows))

    def _close_files(self) -> None:
        if self.writer is not None:
            self.writer.close()
            self.writer = None
        if self.handle is not None:
            self.handle.close()
            self.checksum = self.handle.record()
            self.handle = None

    def rewrite(self) -> None:
        self._close_files()
        old = self.path
        self.generation += 1
        self.path = f"{self.base}-{self.generation}"
        with self.fs.open(old, "rb") as source:
            parquet_file = pq.ParquetFile(source)
            for group in range(parquet_file.num_row_groups):
                table = conform(
                    parquet_file.read_row_group(group), self.schema, where=self.where, fix=SCHEMA_FIX
                )
                self.emit(table)
        self.fs.rm(old)

    def close_format(self) -> None:
        self._writer()
        self._close_files()

    def discard(self) -> None:
        quietly(self._close_files, self.path)
        for generation in range(self.generation + 1):  # a failed rewrite may leave the previous one behind
            path = self.base if generation == 0 else f"{self.base}-{generation}"
            quietly(lambda p=path: self.fs.rm(p) if self.fs.exists(p) else None, path)
