"""Example rows for the report, saved by the steps while they run: ``examples.json`` in a step's sidecar.

The report shows, for each filter, a few kept rows and a few dropped rows per top drop reason, and for each
dedup step a few clusters: the kept text beside a removed one, with their true Jaccard. Nothing is re-run
at report time: the steps record these rows as they go.

**Collection.** A pass-through op, ``CollectExamples``, sits in a step's plan just before the op that
drops rows. It gives each row a *group* (filters: its drop reason, or ``kept``; dedup: its cluster, when the
cluster has more than one row) and a *rank* (0 for a cluster's kept row, else the hash of the row id with
the low bit set: a pseudo-random but fixed order, so the kept examples are not all from one source), and
selects per group the ``per_group`` rows of smallest (rank, id); with ``max_groups``, only the groups whose
key (the hash of the group name) is smallest. The k smallest of a union are the k smallest of the parts'
k smallest, so every executor, worker count and task split selects the same rows.

Each op instance keeps its selection in memory; when a batch changes it, the rows that entered are written
to ``work/examples/part-<sha256>.parquet`` in the sidecar (named by content: a retried task writes the same name; a task
skipped on resume left its parts in the first run). A batch that cannot enter the selection writes nothing,
so a task leaves a handful of parts, not one per batch.

**Merging.** When the step's write is done, ``merge_filter_examples`` / ``merge_dedup_examples`` read the
parts, make the same selection once more, write ``examples.json`` and remove the parts. Filter texts are
cut to ``MAX_CHARS``; a dedup pair is cut to ``WINDOW_WORDS`` words from a little before its first
difference, and its Jaccard is computed on the full texts with the step's own shingling
(``zephyr.dedup._hashing.shingle_hashes`` and ``zephyr.dedup._graph.jaccard``, the verify step's kernels).

Sidecar format (version 1)::

    {"version": 1, "kind": "filter", "kept": [ROW, ...],
     "dropped": {reason: {"rows": n, "examples": [ROW, ...]}, ...}}      (the TOP_REASONS largest reasons)
    {"version": 1, "kind": "dedup", "shingles": "word 5-grams", "normalize": "default",
     "clusters": [{"cluster": id, "size": n, "kept": ROW | null, "removed": ROW, "jaccard": x | null}, ...]}
    ROW = {"id": str, "text": str, "chars": int (the full text's length), "start_word": int (the first word
           shown), "cut_before": bool, "cut_after": bool (text left out), "fields": {column: value, ...}}

``kept`` of a dedup cluster is null when its kept row is not in this step's input (a match against a
signature index of earlier runs). ``filter_example_blocks`` and ``dedup_example_blocks`` turn a payload into
the report's blocks, where the filter section and a dedup step's report show them.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import threading
from collections.abc import Callable
from dataclasses import KW_ONLY, dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from zephyr.pipelines.markdown import md_code, md_text

if TYPE_CHECKING:
    from zephyr.pipelines.step import StepContext

EXAMPLES_FILE = "examples.json"


PARTS_DIR = Path("work") / "examples"
"""Where the collecting ops write their parts, relative to the step's sidecar (``JOB/NN-NAME.zephyr``)."""


EXAMPLES_VERSION = 1


PER_GROUP = 3
"""Kept rows, and dropped rows per reason, that a filter's sidecar holds."""


TOP_REASONS = 3
"""Drop reasons with examples in a filter's sidecar: the ones that dropped the most rows."""


DEDUP_CLUSTERS = 3
"""Clusters with examples in a dedup step's sidecar."""


MAX_CHARS = 1500
"""A filter example's text is cut here (``chars`` keeps the full length)."""


WINDOW_WORDS = 250
"""Words of each dedup text kept, from ``CONTEXT_WORDS`` before the first difference."""


CONTEXT_WORDS = 40


DIFF_MAX_WORDS = 20_000
"""The first difference is searched in this many words (difflib is quadratic in the worst case)."""


KEPT = "kept"
"""The group of a filter's kept rows (no drop reason is named ``kept``)."""


GROUP, GROUP_KEY, RANK, ROW_ID, TEXT = "_group", "_group_key", "_rank", "_id", "_text"
"""The columns of a collected part: a row's group, the group's hash key, its rank, id and text."""


SELECTION_KEYS = (GROUP, GROUP_KEY, RANK, ROW_ID)
"""What ``select_rows`` orders by (the module docstring of ``zephyr.pipelines.examples``)."""


def select_rows(keys: pa.Table, per_group: int, max_groups: int | None) -> np.ndarray:
    """Positions in ``keys`` of the rows the selection rule keeps (see the module docstring), in order.

    One stable sort on (group key, group, rank, id); a row equal to the one before it (the same row from a
    retried task, or already selected) is left out, so earlier rows win ties."""
    import polars as pl

    order = [GROUP_KEY, GROUP, RANK, ROW_ID]
    rows = pl.from_arrow(keys.select(order)).with_row_index("_position")
    rows = rows.sort(order, nulls_last=True, maintain_order=True)
    rows = rows.filter(pl.any_horizontal([pl.col(c) != pl.col(c).shift() for c in order]).fill_null(True))
    rows = rows.filter(pl.int_range(pl.len()).over(GROUP_KEY, GROUP) < per_group)
    if max_groups is not None:
        rows = rows.filter(pl.struct(GROUP_KEY, GROUP).rank("dense") <= max_groups)
    return rows["_position"].to_numpy().astype(np.int64)


def _selected(step_dir: Path, per_group: int, max_groups: int | None) -> list[dict[str, Any]]:
    """The selection over a step's parts (the same row from retried tasks counted once), as row dicts; the
    parts are removed."""
    import pyarrow.parquet as pq

    folder = step_dir / PARTS_DIR
    files = sorted(folder.glob("part-*.parquet")) if folder.is_dir() else []
    tables = [t for t in map(pq.read_table, files) if t.num_rows]
    shutil.rmtree(folder, ignore_errors=True)
    if not tables:
        return []
    table = pa.concat_tables(tables, promote_options="permissive")
    keys = table.select(list(SELECTION_KEYS))
    return table.take(pa.array(select_rows(keys, per_group, max_groups))).to_pylist()


def _row(row: dict[str, Any], window_start: int | None = None) -> dict[str, Any]:
    """A sidecar ROW: the first ``MAX_CHARS`` of the text, or (dedup) ``WINDOW_WORDS`` words from a word."""
    full = row[TEXT] or ""
    if window_start is None:
        shown, before, after = full[:MAX_CHARS], False, len(full) > MAX_CHARS
    else:
        words = full.split()
        shown = " ".join(words[window_start : window_start + WINDOW_WORDS])
        before, after = window_start > 0, window_start + WINDOW_WORDS < len(words)
    return {
        "id": row[ROW_ID],
        "text": shown,
        "chars": len(full),
        "start_word": window_start or 0,
        "cut_before": before,
        "cut_after": after,
        # the recorded columns a reader sees beside the text (the cluster size goes in the cluster's line)
        "fields": {k: v for k, v in row.items() if not k.startswith(("_", "dup_")) and v is not None},
    }


def merge_filter_examples(
    step_dir: Path,
    dropped_by_reason: dict[str, int],
    per_group: int = PER_GROUP,
    reasons: int | None = TOP_REASONS,
) -> Path:
    """Write a filter step's ``examples.json`` from its parts: ``per_group`` rows per group, of the ``reasons``
    reasons (None: all) that ``dropped_by_reason`` counts most rows for."""
    rows = _selected(step_dir, per_group, None)
    top = sorted(dropped_by_reason.items(), key=lambda kv: (-kv[1], kv[0]))[:reasons]
    payload = {
        "version": EXAMPLES_VERSION,
        "kind": "filter",
        "kept": [_row(r) for r in rows if r[GROUP] == KEPT],
        "dropped": {
            reason: {"rows": n, "examples": [_row(r) for r in rows if r[GROUP] == reason]}
            for reason, n in top
        },
    }
    return _save(step_dir, payload)


def _save(step_dir: Path, payload: dict[str, Any]) -> Path:
    """Write a step's ``examples.json`` (atomically) and return its path."""
    from zephyr.io.paths import write_json_atomic

    path = step_dir / EXAMPLES_FILE
    write_json_atomic(str(path), payload)
    return path


def first_difference_window(kept: str, removed: str) -> tuple[int, int]:
    """Word positions in ``kept`` and ``removed`` from which to show them: ``CONTEXT_WORDS`` before their first
    differing word (difflib on word tokens, over the first ``DIFF_MAX_WORDS`` words)."""
    import difflib

    a, b = kept.split()[:DIFF_MAX_WORDS], removed.split()[:DIFF_MAX_WORDS]
    for tag, i1, _, j1, _ in difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes():
        if tag != "equal":
            back = min(CONTEXT_WORDS, i1, j1)
            return i1 - back, j1 - back
    return 0, 0


def merge_dedup_examples(step_dir: Path, shingle: str, ngram: int, normalize: str) -> Path:
    """Write a dedup step's ``examples.json``: per cluster the kept row, one removed row and their Jaccard
    on shingle sets made as the fuzzy step makes them (``shingle`` kind, ``ngram``, ``normalize``)."""
    from zephyr.dedup._graph import jaccard
    from zephyr.dedup._hashing import shingle_hashes, unique_sets

    rows = _selected(step_dir, 2, DEDUP_CLUSTERS)
    pairs: list[tuple[dict[str, Any] | None, dict[str, Any]]] = []
    for group in dict.fromkeys(r[GROUP] for r in rows):
        members = [r for r in rows if r[GROUP] == group]
        kept = members[0] if members[0][RANK] == 0 else None
        removed = [r for r in members if r is not kept]
        if removed:
            pairs.append((kept, removed[0]))
    texts = [
        t for kept, removed in pairs if kept is not None for t in (kept[TEXT] or "", removed[TEXT] or "")
    ]
    shingles = shingle_hashes(pa.array(texts, pa.large_string()), kind=shingle, n=ngram, normalize=normalize)
    scores = iter(
        jaccard(unique_sets(shingles), np.arange(len(texts), dtype=np.int64).reshape(-1, 2)).tolist()
    )
    clusters = []
    for kept, removed in pairs:
        entry: dict[str, Any] = {"cluster": removed[GROUP], "size": removed.get("dup_cluster_size")}
        if kept is None:
            entry.update(kept=None, removed=_row(removed), jaccard=None)
        else:
            i, j = first_difference_window(kept[TEXT] or "", removed[TEXT] or "")
            entry.update(kept=_row(kept, i), removed=_row(removed, j), jaccard=round(float(next(scores)), 4))
        clusters.append(entry)
    payload = {
        "version": EXAMPLES_VERSION,
        "kind": "dedup",
        "shingles": f"{shingle} {ngram}-grams",
        "normalize": normalize,
        "clusters": clusters,
    }
    return _save(step_dir, payload)


def filter_example_blocks(step: str, payload: dict[str, Any]) -> list[tuple]:
    """A filter step's examples as report blocks (``zephyr.pipelines.report``'s block format): ``("cards", title, rows)``
    (document boxes; Markdown: one line each), the kept rows, then the dropped ones per top reason."""
    kept = payload.get("kept", [])
    shown = f" ({len(kept)} shown, picked by a fixed hash of their ids):" if kept else ": none."
    blocks: list[tuple] = [
        ("h", 3, f"Examples: {md_code(step)}"),
        ("p", "Kept" + shown),
        ("cards", "kept", kept),
    ]
    dropped = sorted(payload.get("dropped", {}).items(), key=lambda kv: (-kv[1]["rows"], kv[0]))
    for reason, entry in dropped:
        blocks.append(("p", f"Dropped by {md_code(reason)} ({entry['rows']:,} rows):"))
        blocks.append(("cards", "dropped", entry.get("examples", [])))
    return blocks if dropped else [*blocks, ("p", "Nothing dropped.")]


def dedup_example_blocks(step: str, payload: dict[str, Any]) -> list[tuple]:
    """A dedup step's example clusters as report blocks (``zephyr.pipelines.report``'s block format): ``("pair", kept, removed)`` (HTML: side by side with
    the differing words marked, Markdown: the differing runs listed)."""
    clusters = payload.get("clusters", [])
    if not clusters:
        return [("p", f"Examples from {md_code(step)}: no clusters, nothing was removed.")]
    blocks: list[tuple] = [
        (
            "p",
            f"Examples from {md_code(step)} ({len(clusters)} clusters, picked by a fixed hash of their ids). "
            f"Jaccard on {md_text(payload.get('shingles', ''))} after {md_code(payload.get('normalize', ''))} "
            "normalization, as the step measures it; the words that differ are shown for each pair.",
        )
    ]
    for c in clusters:
        jaccard = "–" if c.get("jaccard") is None else f"{c['jaccard']:.3f}"
        size = f"{md_text(c.get('size') or '?')} documents"
        line = f"**Cluster {md_code(c['cluster'])}**: {size}; Jaccard(kept, removed) = **{jaccard}**"
        blocks += [("p", line), ("pair", c.get("kept"), c["removed"])]
    return blocks


def read_examples(path: str | os.PathLike[str] | None) -> dict[str, Any] | None:
    """A step's sidecar, or None when it has none (steps from before examples, or non-filter steps)."""
    import json

    if not path:
        return None
    try:
        payload = json.loads(Path(path).read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return None
    return payload if payload.get("version") == EXAMPLES_VERSION else None


def _hash64(values: pa.Array) -> np.ndarray:
    """A stable 64-bit hash of each string, vectorized: the dedup kernels' polynomial span hash of its bytes,
    mixed with its length by ``fmix64`` (``zephyr.dedup._hashing``). Only orders rows; no security role."""
    from zephyr.dedup._hashing import fmix64, span_hashes, string_buffers

    data, offsets = string_buffers(values)
    starts, ends = offsets[:-1], offsets[1:]
    spans = span_hashes(data, starts, ends) if len(data) else np.zeros(len(values), dtype=np.uint64)
    spans[ends == starts] = 0
    return fmix64(spans ^ fmix64((ends - starts).astype(np.uint64)))


def _as_string(column: pa.Array | pa.ChunkedArray) -> pa.Array:
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks()
    return column if pa.types.is_string(column.type) else column.cast(pa.string())


@dataclass(frozen=True)
class ReasonGroups:
    """A filter's groups: the row's drop reason (null: kept), from ``reasons(table)`` or, when ``reasons`` is a
    column name, that column; ``skip`` reasons (rows that go to quarantine) get no group."""

    reasons: Callable[[pa.Table], pa.Array] | str
    skip: tuple[str, ...] = ()

    def __call__(self, table: pa.Table, ids: pa.Array) -> tuple[pa.Array, np.ndarray]:
        found = table.column(self.reasons) if isinstance(self.reasons, str) else self.reasons(table)
        reasons = _as_string(found)
        groups = pc.fill_null(reasons, KEPT)
        if self.skip:
            groups = pc.if_else(
                pc.is_in(reasons, pa.array(self.skip, pa.string())), pa.scalar(None, pa.string()), groups
            )
        return groups, np.zeros(len(ids), dtype=bool)


@dataclass(frozen=True)
class ClusterGroups:
    """A dedup step's groups (annotate mode's columns): the cluster of each row whose cluster has more than
    one row; the kept row ranks first."""

    def __call__(self, table: pa.Table, ids: pa.Array) -> tuple[pa.Array, np.ndarray]:
        sizes = pc.fill_null(table.column("dup_cluster_size"), 1)
        clusters = _as_string(table.column("dup_cluster"))
        groups = pc.if_else(pc.greater(sizes, 1), clusters, pa.scalar(None, pa.string()))
        keepers = np.asarray(pc.fill_null(table.column("dup_keep"), True), dtype=bool)
        return groups.combine_chunks() if isinstance(groups, pa.ChunkedArray) else groups, keepers


@dataclass(eq=False)
class CollectExamples:
    """Pass-through op: keeps a bounded, deterministic selection of rows, written as parts under ``folder``.

    ``groups`` says which group a row belongs to (``ReasonGroups``, ``ClusterGroups``); ``fields`` are the
    columns recorded beside id and text (missing ones are skipped). Thread-safe: the threads executor runs
    several tasks on one instance."""

    folder: str
    groups: ReasonGroups | ClusterGroups
    _: KW_ONLY
    id_column: str
    text_column: str
    fields: tuple[str, ...] = ()
    per_group: int = PER_GROUP
    max_groups: int | None = None

    def __post_init__(self) -> None:
        self._reset()

    def _reset(self) -> None:
        self._lock = threading.Lock()
        self._state: pa.Table | None = None
        self._written: list[str] = []

    def __getstate__(self) -> dict[str, Any]:  # configuration only: the plan fingerprint and workers see this
        return {k: v for k, v in self.__dict__.items() if not k.startswith("_")}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._reset()

    def __call__(self, table: pa.Table) -> pa.Table:
        if table.num_rows == 0 or not {self.id_column, self.text_column} <= set(table.column_names):
            return table
        keys = self._keys(table)
        if keys is None:
            return table
        with self._lock:
            if self._written and not os.path.exists(self._written[-1]):
                self._state, self._written = None, []  # the step folder was cleared (--from): start again
            entered = self._update(table, keys)
            if entered is not None:
                self._written.append(_write_part(Path(self.folder), entered))
        return table

    def _keys(self, table: pa.Table) -> pa.Table | None:
        """This batch's selection keys and row positions, for the rows that have a group (None: no row has)."""
        ids = _as_string(table.column(self.id_column))
        groups, keepers = self.groups(table, ids)
        valid = np.asarray(pc.is_valid(groups), dtype=bool)
        if not valid.any():
            return None
        rows = np.flatnonzero(valid)
        ids, groups = ids.take(pa.array(rows)), groups.take(pa.array(rows))
        codes = pc.dictionary_encode(groups)  # few distinct groups per batch: hash each once
        group_keys = _hash64(codes.dictionary)[np.asarray(codes.indices, dtype=np.int64)]
        rank = _hash64(ids) | np.uint64(1)
        rank[keepers[valid]] = 0
        return pa.table({GROUP: groups, GROUP_KEY: group_keys, RANK: rank, ROW_ID: ids, "_row": rows})

    def _payload(self, table: pa.Table, keys: pa.Table) -> pa.Table:
        """Keys plus text and recorded fields of the rows named by ``keys["_row"]`` (few rows: a cheap take)."""
        rows = keys.column("_row")
        columns = {name: keys.column(name) for name in SELECTION_KEYS}
        columns[TEXT] = table.column(self.text_column).take(rows).cast(pa.large_string())
        for name in self.fields:
            if name in table.column_names and name != self.text_column:
                columns[name] = table.column(name).take(rows)
        return pa.table(columns)

    def _update(self, table: pa.Table, keys: pa.Table) -> pa.Table | None:
        """Merge a batch into the selection; returns the rows that entered it (None: none did)."""
        state = self._state
        merged = keys.drop_columns(["_row"])
        if state is not None:
            merged = pa.concat_tables([state.select(list(SELECTION_KEYS)), merged])
        offset = 0 if state is None else state.num_rows
        chosen = select_rows(merged, self.per_group, self.max_groups)
        entered_at = np.sort(chosen[chosen >= offset] - offset)
        if len(entered_at) == 0:
            return None
        entered = self._payload(table, keys.take(pa.array(entered_at)))
        kept_old = np.sort(chosen[chosen < offset])
        parts = [state.take(pa.array(kept_old))] if state is not None and len(kept_old) else []
        self._state = pa.concat_tables([*parts, entered], promote_options="permissive")
        return entered


def _write_part(folder: Path, rows: pa.Table) -> str:
    """Write ``rows`` to ``folder/part-<sha256 of its keys>.parquet`` (atomically, via the engine's sink)."""
    from zephyr.io.sinks import ShardWriter

    digest = hashlib.sha256()
    for name in (GROUP, ROW_ID):
        for value in rows.column(name).to_pylist():
            digest.update(value.encode() + b"\x00")
    path = folder / f"part-{digest.hexdigest()[:24]}.parquet"
    folder.mkdir(parents=True, exist_ok=True)
    if not path.exists():
        with ShardWriter(str(path), "parquet") as writer:
            writer.write(rows)
    return str(path)


# -- what the step adapters (zephyr.pipelines.steps) call ----------------------------------------------
def filter_collector(ctx: StepContext, groups: ReasonGroups | ClusterGroups) -> CollectExamples:
    """The op that saves a filter step's examples, with the columns a reader wants beside the text."""
    p = ctx.pipeline
    fields = (p.source_column, p.lang_column, f"{p.lang_column}_score", "quality_score")
    folder = str(ctx.side_dir / PARTS_DIR)
    return CollectExamples(folder, groups, id_column=p.id_column, text_column=p.text_column, fields=fields)


def dedup_collector(ctx: StepContext) -> CollectExamples:
    """The op that saves a dedup step's examples: per cluster its kept row and the first removed row."""
    fields = (ctx.pipeline.source_column, "dup_cluster_size")
    return replace(
        filter_collector(ctx, ClusterGroups()), fields=fields, per_group=2, max_groups=DEDUP_CLUSTERS
    )
