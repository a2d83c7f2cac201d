"""The report examples' file, ``examples.json`` in a step's sidecar ``JOB/NN-NAME.zephyr``: its format, the selection rule
both the collecting op and the merge apply, merging the collected parts into the sidecar, and reading it.
Collection while a step runs is ``zephyr.pipelines.examples`` (which re-exports the public names here).

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
signature index of earlier runs).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

__all__ = [
    "EXAMPLES_FILE",
    "PARTS_DIR",
    "select_rows",
    "first_difference_window",
    "merge_filter_examples",
    "merge_dedup_examples",
    "read_examples",
]

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

    One stable Arrow sort on (group key, group, rank, id); a row equal to the one before it (the same row
    from a retried task, or already selected) is skipped, so earlier rows win ties."""
    n = keys.num_rows
    order = np.asarray(
        pc.sort_indices(keys, sort_keys=[(c, "ascending") for c in (GROUP_KEY, GROUP, RANK, ROW_ID)]),
        dtype=np.int64,
    )
    group = np.asarray(pc.dictionary_encode(keys.column(GROUP).combine_chunks()).indices, dtype=np.int64)[
        order
    ]
    rank = np.asarray(keys.column(RANK))[order]
    ids = np.asarray(pc.dictionary_encode(keys.column(ROW_ID).combine_chunks()).indices, dtype=np.int64)[
        order
    ]
    new_group = np.ones(n, dtype=bool)
    new_group[1:] = group[1:] != group[:-1]
    repeat = np.zeros(n, dtype=bool)
    repeat[1:] = ~new_group[1:] & (rank[1:] == rank[:-1]) & (ids[1:] == ids[:-1])
    order, new_group = order[~repeat], new_group[~repeat]
    group_no = np.cumsum(new_group) - 1
    position = np.arange(len(order)) - np.flatnonzero(new_group)[group_no]
    keep = position < per_group
    if max_groups is not None:
        keep &= group_no < max_groups
    return order[keep]


def _read_parts(step_dir: Path) -> pa.Table | None:
    import pyarrow.parquet as pq

    folder = step_dir / PARTS_DIR
    files = sorted(folder.glob("part-*.parquet")) if folder.is_dir() else []
    tables = [pq.read_table(f) for f in files]
    shutil.rmtree(folder, ignore_errors=True)
    tables = [t for t in tables if t.num_rows]
    return pa.concat_tables(tables, promote_options="permissive") if tables else None


def _selected(table: pa.Table, per_group: int, max_groups: int | None) -> list[dict[str, Any]]:
    """The selection over merged parts (the same row from retried tasks counted once), as row dicts."""
    keys = table.select(list(SELECTION_KEYS))
    return table.take(pa.array(select_rows(keys, per_group, max_groups))).to_pylist()


def _fields(row: dict[str, Any]) -> dict[str, Any]:
    """The recorded columns a reader sees beside the text (the cluster size goes in the cluster's line)."""
    return {k: v for k, v in row.items() if not k.startswith(("_", "dup_")) and v is not None}


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
        "fields": _fields(row),
    }


def merge_filter_examples(step_dir: Path, dropped_by_reason: dict[str, int]) -> Path:
    """Write a filter step's ``examples.json`` from its parts; ``dropped_by_reason`` picks the top reasons."""
    from zephyr.io.paths import write_json_atomic

    table = _read_parts(step_dir)
    rows = _selected(table, PER_GROUP, None) if table is not None else []
    top = sorted(dropped_by_reason.items(), key=lambda kv: (-kv[1], kv[0]))[:TOP_REASONS]
    payload = {
        "version": EXAMPLES_VERSION,
        "kind": "filter",
        "kept": [_row(r) for r in rows if r[GROUP] == KEPT],
        "dropped": {
            reason: {"rows": n, "examples": [_row(r) for r in rows if r[GROUP] == reason]}
            for reason, n in top
        },
    }
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


def merge_dedup_examples(step_dir: Path, *, shingle: str, ngram: int, normalize: str) -> Path:
    """Write a dedup step's ``examples.json``: per cluster the kept row, one removed row and their Jaccard
    on shingle sets made as the fuzzy step makes them (``shingle`` kind, ``ngram``, ``normalize``)."""
    from zephyr.dedup._graph import jaccard
    from zephyr.dedup._hashing import shingle_hashes

    from zephyr.io.paths import write_json_atomic

    table = _read_parts(step_dir)
    rows = _selected(table, 2, DEDUP_CLUSTERS) if table is not None else []
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
    scores = iter(jaccard(shingles, np.arange(len(texts), dtype=np.int64).reshape(-1, 2)).tolist())
    clusters = []
    for kept, removed in pairs:
        entry: dict[str, Any] = {"cluster": removed[GROUP], "size": removed.get("dup_cluster_size")}
        if kept is None:
            entry.update(kept=None, removed=_row(removed), jaccard=None)
        else:
            ka, rb = kept[TEXT] or "", removed[TEXT] or ""
            i, j = first_difference_window(ka, rb)
            entry.update(
                kept=_row(kept, i),
                removed=_row(removed, j),
                jaccard=round(float(next(scores)), 4),
            )
        clusters.append(entry)
    payload = {
        "version": EXAMPLES_VERSION,
        "kind": "dedup",
        "shingles": f"{shingle} {ngram}-grams",
        "normalize": normalize,
        "clusters": clusters,
    }
    path = step_dir / EXAMPLES_FILE
    write_json_atomic(str(path), payload)
    return path


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
