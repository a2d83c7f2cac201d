"""The Vortex encoder of the sinks: row groups spill to a local Arrow IPC stream, converted by
``vortex.io.write`` on finish (its writer pulls from a ``RecordBatchReader``; see the ``zephyr.io.sinks``
contract)."""

from __future__ import annotations

from typing import IO

import pyarrow as pa

from zephyr.io.schema import conform
from zephyr.io.sink_encoder import SCHEMA_FIX, BufferedEncoder, quietly, remove_local

__all__ = ["VortexEncoder"]


class VortexEncoder(BufferedEncoder):
    """Spills row groups to an Arrow IPC stream; ``finish`` converts it with ``vortex.io.write``."""

    def __init__(self, local_path: str, schema, row_group_bytes, row_group_rows, where):
        super().__init__(schema, row_group_bytes, row_group_rows, where)
        self.path = local_path
        self.generation = 0
        self.spill_path = f"{local_path}.spill.arrows"
        self.spill_file: IO[bytes] | None = None
        self.spill_writer: pa.ipc.RecordBatchStreamWriter | None = None

    def _spill(self) -> pa.ipc.RecordBatchStreamWriter:
        if self.spill_writer is None:
            self.spill_file = open(self.spill_path, "wb")  # noqa: SIM115 - closed in _close_spill
            self.spill_writer = pa.ipc.new_stream(self.spill_file, self._fix_schema())
        return self.spill_writer

    def _close_spill(self) -> None:
        if self.spill_writer is not None:
            self.spill_writer.close()
            self.spill_writer = None
        if self.spill_file is not None:
            self.spill_file.close()
            self.spill_file = None

    def emit(self, table: pa.Table) -> None:
        self._spill().write_table(table)

    def rewrite(self) -> None:
        self._close_spill()
        old = self.spill_path
        self.generation += 1
        self.spill_path = f"{self.path}.spill-{self.generation}.arrows"
        with pa.OSFile(old, "rb") as source:
            for batch in pa.ipc.open_stream(source):
                self.emit(
                    pa.Table.from_batches([conform(batch, self.schema, where=self.where, fix=SCHEMA_FIX)])
                )
        remove_local(old)

    def close_format(self) -> None:
        import vortex

        self._spill()
        self._close_spill()
        try:
            with pa.OSFile(self.spill_path, "rb") as source:
                vortex.io.write(pa.ipc.open_stream(source), self.path)
        finally:
            remove_local(self.spill_path)

    def discard(self) -> None:
        quietly(self._close_spill, self.spill_path)
        remove_local(f"{self.path}.spill.arrows")
        for generation in range(1, self.generation + 1):
            remove_local(f"{self.path}.spill-{generation}.arrows")
        remove_local(self.path)
