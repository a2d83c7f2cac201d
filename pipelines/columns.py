"""The columns each pipeline step adds, and the check that none replaces a column the data already has.

Why: ``zephyr langid`` used to replace a claimed ``lang`` column without a word (``zephyr.io.added_columns``),
and a pipeline built on the same steps did the same, deep inside a run. ``check_added_columns(config)`` walks
the enabled steps in order before any work: it starts from the read step's input files (their footers or
first blocks, ``zephyr.io.schema_plan.peek_schemas``, plus the source column the read step fills in) and
adds what each step writes. A step whose columns are already there fails in one line naming the step, the
column, where it came from (an input file or an earlier step) and the two keys that fix it: ``replace_columns:
true`` or ``output_column: NAME``.

What each step adds to the rows it passes on:

- ``langid``: the language and its score (``lang_column`` / ``<lang_column>_score``, or ``output_column``);
- ``quality``: ``quality_score`` (or ``output_column``);
- ``heuristic_filter``: ``drop_reason`` on the rows it writes to ``dropped/`` (or ``output_column``; an input
  ``drop_reason`` is then set aside around the filter and kept);
- ``exact_dedup`` / ``fuzzy_dedup`` / ``url_dedup``: nothing: their ``dup_*`` columns are removed with the
  duplicates, and an input's own ``dup_*`` columns are set aside around them (``DEDUP_COLUMNS``), so they
  pass unchanged; ``url_filter`` likewise keeps an input's ``drop_reason`` (``HeuristicFilter``).

The walk starts at the read step's input files, or at the columns an ``extract`` step writes.

A ``map`` step's output columns are unknown before it runs: the walk stops there, and the steps after it
still refuse a clash per batch (each step checks its own input, ``zephyr.io.added_columns``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from zephyr.errors import ColumnExistsError

if TYPE_CHECKING:
    from zephyr.pipelines.config import PipelineConfig, StepEntry

__all__ = ["DEDUP_COLUMNS", "added_columns", "check_added_columns", "lang_columns"]

DEDUP_COLUMNS = ("dup_cluster", "dup_cluster_size", "dup_keep")
"""Helper columns of the dedup steps in annotate mode: removed before their output is written."""


def lang_columns(entry: StepEntry, config: PipelineConfig) -> tuple[str, str]:
    """(language, score) columns a ``langid`` step writes."""
    lang = entry.config.output_column or config.lang_column
    return lang, f"{lang}_score"


def added_columns(entry: StepEntry, config: PipelineConfig) -> tuple[str, ...]:
    """The columns ``entry`` adds to its rows (its kept rows, or for ``heuristic_filter`` its dropped ones)."""
    if entry.type == "langid":
        return lang_columns(entry, config)
    if entry.type == "quality":
        return (entry.config.output_column or "quality_score",)
    if entry.type == "heuristic_filter":
        return (entry.config.output_column or "drop_reason",)
    return ()


def _read_columns(entry: StepEntry, config: PipelineConfig) -> dict[str, str]:
    """Column → the first input file that has it, for the read step's files (plus the source column)."""
    from zephyr.io.paths import input_files
    from zephyr.io.sources import list_shards, peek_schemas

    files, fmt = input_files(entry.config.paths, entry.config.format)
    origin: dict[str, str] = {}
    for path, schema in peek_schemas(list_shards(files, fmt)):
        for name in schema.names if schema is not None else ():
            origin.setdefault(name, path)
    origin.setdefault(config.source_column, f"step {entry.name!r}")
    return origin


def _extract_columns(entry: StepEntry, config: PipelineConfig) -> dict[str, str]:
    """The columns an ``extract`` step writes (its text column under the pipeline's name)."""
    from zephyr.pipelines.web.extract import OUTPUT_COLUMNS

    names = [config.text_column if name == "text" else name for name in OUTPUT_COLUMNS]
    return {name: f"step {entry.name!r}" for name in (*names, config.source_column)}


def check_added_columns(config: PipelineConfig) -> None:
    """Raise ``ColumnExistsError`` (one line, key paths) when an enabled step would replace a column the data
    has at that point without ``replace_columns: true``; see the module docstring for the walk."""
    enabled = [entry for entry in config.steps if entry.enabled]
    if not any(added_columns(entry, config) for entry in enabled):
        return  # nothing to check: no input file is opened
    origin: dict[str, str] = {}
    for i, entry in enumerate(config.steps):
        if not entry.enabled:
            continue
        if entry.type == "read":
            origin = _read_columns(entry, config)
            continue
        if entry.type == "extract":  # WARC records → a fixed set of columns
            origin = _extract_columns(entry, config)
            continue
        if entry.type == "map":
            return  # its output columns are unknown until it runs; each later step checks its own batches
        added = added_columns(entry, config)
        clash = [name for name in added if name in origin]
        if clash and not entry.config.replace_columns:
            what = ", ".join(repr(name) for name in clash)
            it = "it" if len(clash) == 1 else "them"
            raise ColumnExistsError(
                f"steps[{i}] ({entry.name}): the data already has {what} (from {origin[clash[0]]}); "
                f"set steps[{i}].replace_columns: true to replace {it}, or steps[{i}].output_column: NAME to write "
                "under another name"
            )
        if entry.type == "heuristic_filter":  # its reason column goes to dropped/, not to the next step
            if entry.config.replace_columns and entry.config.output_column is None:
                origin.pop("drop_reason", None)  # replaced, so gone from the kept rows
            continue
        for name in added:
            origin.setdefault(name, f"step {entry.name!r}")
