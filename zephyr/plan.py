"""From logical ops to stages: narrow ops fuse onto their input, wide ops cut the plan.

A ``Segment`` is what one stage computes: an input (files, an in-memory table, or the reduce side of a wide
op over one or two upstream segments) followed by fused narrow ops. The job runs segments depth-first; a wide
op's upstream segments run as the *map side* of its shuffle.

Fingerprints: every segment has a content hash of its input description and ops (functions by their
cloudpickle bytes). A task's marker holds the fingerprint of its stage, so a changed plan never reuses stale
outputs; an unchanged plan on the same work directory skips finished tasks.
"""

from __future__ import annotations

import hashlib
import io
from dataclasses import dataclass, field

import cloudpickle
import pyarrow as pa
import pyarrow.parquet as pq

from zephyr.errors import ConfigError
from zephyr.ops import NARROW_OPS, WIDE_OPS, FromTable, Join, Op, ReadFiles


@dataclass(eq=False)
class Segment:
    source: ReadFiles | FromTable | None
    """Set for a stage that reads input files or an in-memory table."""
    wide: Op | None = None
    """Set for a stage that reduces a shuffle: the wide op, with ``upstream`` as its map side(s)."""
    upstream: tuple[Segment, ...] = ()
    narrow: list[Op] = field(default_factory=list)

    @property
    def name(self) -> str:
        head = type(self.source or self.wide).__name__
        from zephyr.narrow import op_label

        return " → ".join([head, *(op_label(op) for op in self.narrow)])


def build_plan(ops: tuple[Op, ...]) -> Segment:
    """The segment tree of a dataset's ops (the root segment produces the dataset's rows)."""
    if not ops or not isinstance(ops[0], ReadFiles | FromTable):
        raise ConfigError("a Dataset must start with a source (zephyr.read_* or zephyr.from_*)")
    current = Segment(source=ops[0])
    for op in ops[1:]:
        if isinstance(op, NARROW_OPS):
            current.narrow.append(op)
        elif isinstance(op, WIDE_OPS):
            upstream = (current, build_plan(op.right)) if isinstance(op, Join) else (current,)
            current = Segment(source=None, wide=op, upstream=upstream)
        elif isinstance(op, ReadFiles | FromTable):
            raise ConfigError("a source can only start a Dataset")
        else:
            raise ConfigError(f"unknown op {type(op).__name__}")
    return current


def table_digest(table: pa.Table) -> str:
    """Content hash of an in-memory table (its Parquet bytes without timestamps)."""
    sink = io.BytesIO()
    pq.write_table(table, sink, compression="none")
    return hashlib.sha256(sink.getvalue()).hexdigest()


def _op_bytes(op: Op) -> bytes:
    if isinstance(op, FromTable):
        return f"FromTable:{table_digest(op.table)}:{op.num_shards}".encode()
    if isinstance(op, Join):
        return b"Join:" + cloudpickle.dumps((op.left_on, op.right_on, op.how, op.suffix, op.num_partitions))
    return cloudpickle.dumps(op)


def fingerprint_of(*parts: object) -> str:
    """sha256 over ops (cloudpickled), strings and nested tuples of them."""
    digest = hashlib.sha256()
    for part in parts:
        if isinstance(part, Op):
            digest.update(_op_bytes(part))
        elif isinstance(part, bytes):
            digest.update(part)
        else:
            digest.update(repr(part).encode())
        digest.update(b"\x00")
    return digest.hexdigest()
