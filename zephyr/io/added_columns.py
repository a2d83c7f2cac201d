"""The one rule for a step that adds columns to rows: it never replaces a column the input already has, unless
told to.

Why: ``zephyr langid`` used to replace an existing ``lang`` column without a word, and the sample corpus has
one (each source's claimed language), so the claim was gone and nothing said so. Every step that adds columns
(language ID, quality scores, PII counts, decontamination flags, dedup annotations, and the pipeline steps
built on them) checks the schema it is about to extend here and raises ``ColumnExistsError``, naming the column
and the ways out: ``replace_columns=True`` (``--replace-columns`` on the command line, ``replace_columns: true`` in a pipeline
step) replaces it, and where the step can write under another name, that option.

Two entry points, one rule:

- ``check_added_columns(names, added, replace_columns=..., where=...)`` checks one schema (a batch inside a stage,
  a table given to a plain function);
- ``check_input_columns(paths, added, replace_columns=..., format=...)`` runs it on every input file before a job
  starts, reading only footers / first blocks (``zephyr.io.schema_plan.peek_schemas``), so a command fails in
  one line before any work instead of inside a task.

A step that uses columns of its own only on the way (dedup's ``dup_*`` before removal, the filter's
``drop_reason`` before routing) must not lose the input's columns of those names either: ``set_aside`` moves
them to reserved names before the step and back after it; ``RenameColumns`` writes the added columns under the
names a person chose (``--output-column``).

>>> check_added_columns(["id", "text"], ["lang", "lang_score"], replace_columns=False)
>>> check_added_columns(["text", "lang"], ["lang"], replace_columns=False, where="in.parquet")
Traceback (most recent call last):
    ...
zephyr.errors.ColumnExistsError: in.parquet: the input already has a column 'lang'; pass replace_columns=True to replace it
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import pyarrow as pa

from zephyr.errors import ColumnExistsError
from zephyr.io.paths import Format

__all__ = [
    "check_added_columns",
    "check_input_columns",
    "REPLACE_COLUMNS_HINT",
    "RenameColumns",
    "set_aside",
    "ASIDE_PREFIX",
]

REPLACE_COLUMNS_HINT = "pass replace_columns=True to replace it"
"""The library's spelling of the fix; ``zephyr.cli_errors`` turns it into ``--replace-columns`` for commands."""


def check_added_columns(
    names: Iterable[str],
    added: Sequence[str],
    *,
    replace_columns: bool,
    where: str | None = None,
    rename: str | None = None,
    replace_hint: str = REPLACE_COLUMNS_HINT,
) -> None:
    """Raise ``ColumnExistsError`` when a column of ``added`` is among ``names`` and ``replace_columns`` is false.

    ``where`` (a file, a step) starts the message; ``rename`` is the option that writes under another name,
    where the step has one (``"--output-column NAME"``), offered as the second way out. ``replace_hint``
    spells the first way out where it is not a keyword argument (a pipeline step's key path).
    """
    if replace_columns:
        return
    present = set(names)
    clash = [name for name in added if name in present]
    if not clash:
        return
    prefix = f"{where}: " if where else ""
    what = f"a column {clash[0]!r}" if len(clash) == 1 else f"columns {', '.join(map(repr, clash))}"
    fix = replace_hint if len(clash) == 1 else replace_hint.replace("replace it", "replace them")
    if rename:
        fix += f", or {rename} to write under another name"
    raise ColumnExistsError(f"{prefix}the input already has {what}; {fix}")


def check_input_columns(
    paths: str | Sequence[str],
    added: Sequence[str],
    *,
    replace_columns: bool,
    format: Format | None = None,
    rename: str | None = None,
) -> None:
    """``check_added_columns`` on every input file's schema, before any task runs; the first clash, in file
    order, names its file. A JSONL or Vortex file without rows has no columns and passes."""
    if replace_columns or not added:
        return
    from zephyr.io.schema_plan import peek_schemas
    from zephyr.io.sources import list_shards

    for path, schema in peek_schemas(list_shards(paths, format)):
        if schema is not None:
            check_added_columns(schema.names, added, replace_columns=False, where=path, rename=rename)


ASIDE_PREFIX = "__zephyr_input__"
"""Reserved prefix of the input columns ``set_aside`` keeps out of a step's way."""


@dataclass(frozen=True)
class RenameColumns:
    """Picklable ``pa.Table -> pa.Table`` op: rename the columns of ``names`` (old → new) that the batch has.

    A batch without some of them (an empty input file without columns) passes as it is.

    >>> RenameColumns((("a", "b"),))(pa.table({"a": [1], "c": [2]})).column_names
    ['b', 'c']
    """

    names: tuple[tuple[str, str], ...]
    replace: bool = False
    """Drop a column already named like a new name (one that is not renamed itself) instead of writing two
    columns of one name; only where the caller checked that it may (``replace_columns``)."""

    def __call__(self, table: pa.Table) -> pa.Table:
        mapping: Mapping[str, str] = dict(self.names)
        if not any(name in mapping for name in table.column_names):
            return table
        if self.replace:
            targets = set(mapping.values())
            table = table.drop_columns([c for c in table.column_names if c in targets and c not in mapping])
        return table.rename_columns([mapping.get(name, name) for name in table.column_names])


def set_aside(columns: Sequence[str], *, restore: bool = False) -> RenameColumns:
    """The op that moves ``columns`` to ``ASIDE_PREFIX`` names (``restore=False``) or back (``restore=True``).

    Put one before a step whose helper columns share the input's names and the other after it: the step sees
    no clash, and the input's columns come out as they went in.

    >>> t = set_aside(["dup_keep"])(pa.table({"dup_keep": [1]}))
    >>> t.column_names, set_aside(["dup_keep"], restore=True)(t).column_names
    (['__zephyr_input__dup_keep'], ['dup_keep'])
    """
    pairs = tuple((name, ASIDE_PREFIX + name) for name in columns)
    return RenameColumns(tuple((b, a) for a, b in pairs) if restore else pairs)
