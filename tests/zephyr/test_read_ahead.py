"""Reading one batch ahead on a thread: same items in the same order, errors where they happened, the
caller's context inside the thread, no thread left behind, and byte-identical job outputs (quarantine
included) with and without it."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pyarrow.parquet as pq
import pytest

import zephyr
from zephyr import counters, tasks


def _reader_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "zephyr-read-ahead"]


def test_items_come_in_order_and_errors_where_they_happened() -> None:
    assert list(tasks.read_ahead(iter(range(100)))) == list(range(100))

    def failing():
        yield from range(3)
        raise ValueError("bad batch 3")

    seen = []
    with pytest.raises(ValueError, match="bad batch 3"):
        for item in tasks.read_ahead(failing()):
            seen.append(item)
    assert seen == [0, 1, 2]


def test_closing_early_stops_the_thread() -> None:
    produced = []

    def endless():
        i = 0
        while True:
            produced.append(i)
            yield i
            i += 1

    items = tasks.read_ahead(endless())
    assert [next(items) for _ in range(5)] == list(range(5))
    items.close()
    assert not _reader_threads()
    assert len(produced) <= 7  # the consumed 5, the one in the slot, the one being produced


def test_the_thread_sees_the_callers_context() -> None:
    def counted():
        for i in range(4):
            counters.increment("read", 1)
            yield i

    with counters.collecting() as seen:
        assert list(tasks.read_ahead(counted())) == [0, 1, 2, 3]
    assert dict(seen) == {"read": 4}


def test_in_process_tasks_read_ahead_and_write_the_same_bytes(tmp_path: Path, monkeypatch) -> None:
    """A JSONL input of several read batches with unparsable lines (quarantined by the reader) and rows a map
    rejects (quarantined by the op): outputs and quarantine files are the same bytes with and without the
    read-ahead, so quarantined rows keep their order although the reader runs on another thread."""
    src = tmp_path / "in.jsonl"
    with open(src, "w") as f:
        for i in range(30_000):
            f.write(
                "{not json\n" if i % 997 == 0 else json.dumps({"id": i, "text": f"document {i} " * 8}) + "\n"
            )

    def upper(row):
        if row["id"] % 1009 == 0:
            raise ValueError(f"row {row['id']}")
        return {"id": row["id"], "text": row["text"].upper()}

    used = []
    original = tasks.read_ahead

    def spy(items):
        used.append(True)
        return original(items)

    def run(name: str, executor: str) -> dict[str, bytes]:
        result = (
            zephyr.read_jsonl(str(src), on_error="quarantine")
            .map(upper, on_error="quarantine")
            .write_parquet(
                str(tmp_path / name),
                executor=executor,
                workers=1,
                memory_budget="8MB",
                work_dir=str(tmp_path / f"w-{name}"),
            )
        )
        stage = result.stats["stages"][0]
        assert stage["rows_quarantined"] == 31 + 29 and stage["rows_out"] == 30_000 - 60
        files = sorted(result.files) + sorted(stage["quarantine_files"])
        return {Path(p).name: Path(p).read_bytes() for p in files}

    monkeypatch.setattr(tasks, "read_ahead", spy)
    ahead = run("ahead", "inprocess")
    assert used, "the in-process executor reads ahead"
    used.clear()
    plain = run("plain", "threads")  # a task thread beside others: no read-ahead
    assert not used
    assert ahead == plain
    assert (
        sum(pq.read_metadata(tmp_path / "ahead" / n).num_row_groups for n in ahead if n.startswith("part-"))
        > 1
    )
    assert not _reader_threads()
