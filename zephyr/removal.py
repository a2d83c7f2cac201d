"""What a command that removes rows or adds columns shares: the rule for the columns it adds, and the
rows it drops kept with their reason (``--dropped-output``).

The one rule for a step that adds columns to rows: it never replaces a column the input already has, unless
told to.

Why: a replaced column is data lost without a word: the sample corpus has a ``lang`` column (each source's
claimed language), which ``zephyr langid`` would otherwise overwrite. Every step that adds columns
(language ID, quality scores, PII counts, decontamination flags, dedup annotations, and the pipeline steps
built on them) checks the schema it is about to extend here and raises ``ColumnExistsError``, naming the column
and the ways out: ``replace_columns=True`` (``--replace-columns`` on the command line, ``replace_columns: true`` in a pipeline
step) replaces it, and where the step can write under another name, that option.

Two entry points, one rule:

- ``check_added_columns(names, added, replace_columns=..., where=...)`` checks one schema (a batch inside a stage,
  a table given to a plain function);
- ``check_input_columns(paths, added, replace_columns=..., format=...)`` runs it on every input file before a job
  starts, reading only footers / first blocks (``zephyr.io.sources.peek_schemas``), so a command fails in
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

``--dropped-output DIR``: keep the rows a command drops, with the reason, instead of only counting them.

Why: a drop is a decision about data (datatrove's ``exclusion_writer``); a person checking a filter, a
language cut or a dedup needs the removed rows themselves. ``langid``, ``decontaminate`` and ``dedup
exact|fuzzy|url --mode remove`` route their rows with ``write_routed``, and so does ``zephyr filter`` (its
verdict is the rules' ``drop_reason``; it also routes quarantined rows and collects its report); the filter
steps route with the same op, ``Route``.

How, in one engine job per side after the verdict's, so the verdict (a language model, an n-gram index, a
dedup, the rules) runs once:

1. the command's dataset with a *verdict* column (``VERDICT``, from a ``Verdict`` op: the drop reason, null
   for a kept row) is written to a scratch folder in the output's sidecar (``OUT.zephyr/routed``,
   ``zephyr.io.layout``; removed after);
2. the kept rows, without the verdict column, go to ``OUTPUT`` — that job counts the others as dropped by
   reason, so its stats read like the command's own would;
3. the dropped rows, with the reason in a ``drop_reason`` column, go to ``DIR`` (``routes`` lists the jobs;
   ``zephyr explain`` prints them).

Without ``--dropped-output`` a command keeps its one-job plan and writes the same bytes as before.
``DIR`` may not be the output, a folder inside it or one that contains it
(``zephyr.io.claim.check_side_dir``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from zephyr.errors import ColumnExistsError, ConfigError

if TYPE_CHECKING:  # pyarrow is imported where a batch is handled: declaring a command imports this module
    import pyarrow as pa

    from zephyr.io.paths import Format


DROP_REASON = "drop_reason"
"""The one reason column of rows a rule removed (filters, langid, decontaminate, dedup ``--mode remove``): every
command that writes dropped rows names it so. Quarantined rows (bad input) carry ``quarantine_reason`` instead
(``zephyr.io.quarantine.QUARANTINE_REASON``)."""

VERDICT = "__zephyr_verdict"
"""The scratch column holding each row's drop reason (null: kept) between the jobs."""


@dataclass(frozen=True)
class Removal:
    """What a command that removes rows does with them (the ``removal`` option group of dedup, decontaminate,
    langid...): drop them (``remove``, the default) or keep every row with the command's columns added
    (``annotate``), and keep the dropped rows with their reason (``dropped_output``).

    A command subclasses it to name its columns (``output_column``'s default is the prefix of the columns it
    computes, e.g. ``dup`` for ``dup_cluster``...), then runs: ``check`` before any work; ``aside`` on its
    input; its own work in ``internal_mode``; ``write``, which restores the input's own columns, names the
    added ones and routes the dropped rows; then ``zephyr.summary.write_summary`` writes
    ``OUTPUT.zephyr/stats.json``."""

    mode: Literal["remove", "annotate"] = "remove"
    """remove: drop the rows the command removes; annotate: keep every row and add the command's columns."""
    output_column: str = ""
    """Name of the added column in annotate mode (the prefix of its columns when it adds several)."""
    replace_columns: bool = False
    """Replace the columns the command adds when the input already has them (without it: an error naming the
    column, before any work)."""
    dropped_output: str | None = field(default=None, metadata={"metavar": "DIR"})
    """Also write the dropped rows to DIR as Parquet, each with its reason in a drop_reason column (without it:
    dropped rows are counted, not kept)."""

    @property
    def internal_mode(self) -> str:
        """The mode the command's work runs in: ``annotate`` when ``dropped_output`` needs every row's verdict."""
        return "annotate" if self.dropped_output else self.mode

    def _prefix(self) -> str:
        return type(self).__dataclass_fields__["output_column"].default

    def written(self, columns: Sequence[str]) -> tuple[str, ...]:
        """The names annotate mode writes ``columns`` (the command's own, under its prefix) under."""
        prefix = self._prefix()
        return tuple(self.output_column + name[len(prefix) :] for name in columns)

    def sets_aside(self, columns: Sequence[str]) -> bool:
        """Whether the input's own ``columns`` must be kept out of the work's way: in remove mode (the work's
        columns of those names are removed with the rows) and when annotate writes under other names."""
        return bool(columns) and (self.mode == "remove" or self.output_column != self._prefix())

    def check(self, inputs: Any, output: str, columns: Sequence[str] = (), *, format: Format | None = None):
        """Before any work: in annotate mode none of the written ``columns`` may exist in the inputs unless
        ``replace_columns``; ``dropped_output`` needs remove mode, a place of its own and, unless
        ``replace_columns``, inputs without a ``drop_reason`` column."""
        if self.mode == "annotate":
            rename = "output_column=NAME" if columns else None
            check_input_columns(
                inputs,
                self.written(columns),
                replace_columns=self.replace_columns,
                format=format,
                rename=rename,
            )
        if self.dropped_output:  # not read as part of the output; its rows get a drop_reason column
            if self.mode != "remove":
                raise ConfigError("dropped_output needs mode='remove': mode='annotate' keeps every row")
            from zephyr.io.claim import check_side_dir

            check_side_dir(self.dropped_output, output, "--dropped-output")
            check_input_columns(inputs, (DROP_REASON,), replace_columns=self.replace_columns, format=format)

    def aside(self, dataset: Any, columns: Sequence[str]) -> Any:
        """``dataset`` with the input's own ``columns`` moved out of the work's way (``set_aside``), if needed."""
        if not self.sets_aside(columns):
            return dataset
        return dataset.map_batches(set_aside(columns), name="removal.aside")

    def finish(self, dataset: Any, columns: Sequence[str]) -> Any:
        """The work's result as written: its ``columns`` under their written names (annotate), the input's own
        columns of those names restored."""
        if not self.sets_aside(columns):
            return dataset
        names = tuple(zip(columns, self.written(columns))) if self.mode == "annotate" else ()
        restore = tuple((ASIDE_PREFIX + name, name) for name in columns)
        rename = RenameColumns(names + restore, replace=self.replace_columns)
        return dataset.map_batches(rename, name="removal.columns")

    def write(
        self,
        dataset: Any,
        output: str,
        execution: dict[str, Any],
        reasons: Callable[[pa.Table], pa.Array] | None,
        columns: Sequence[str] = (),
    ) -> tuple[Any, list[dict[str, Any]] | None]:
        """Write the work's ``dataset`` (made in ``internal_mode``) to ``output``: as it is, or with
        ``dropped_output`` split by ``reasons`` into the kept rows and the dropped ones (``write_routed``; the
        ``columns`` the verdict was read from are left out of both). Returns (the kept rows' write, the stages
        its summary counts: ``Routed.stages``, or None for the write's own)."""
        if not self.dropped_output:
            return self.finish(dataset, columns).write_parquet(output, **execution), None
        verdict = dataset.map_batches(Verdict(reasons, tuple(columns)), name="verdict")
        sides = {"dropped": self.dropped_output}
        routed = write_routed(verdict, output, sides, execution, finish=lambda d: self.finish(d, columns))
        return routed.kept or routed.verdict, routed.stages


@dataclass(frozen=True)
class Verdict:
    """Picklable op: append ``VERDICT`` = ``reasons(table)`` (a string per row, null: kept; ``reasons`` None: a
    step that drops nothing, such as ``langid`` without ``--languages``), then remove the ``working`` columns the
    verdict was read from (dedup's ``dup_keep``...), which neither output keeps."""

    reasons: Callable[[pa.Table], pa.Array] | None
    working: tuple[str, ...] = ()

    def __call__(self, table: pa.Table) -> pa.Table:
        import pyarrow as pa
        import pyarrow.compute as pc

        reasons = self.reasons(table) if self.reasons else pa.nulls(table.num_rows, pa.string())
        if not isinstance(reasons, pa.Array | pa.ChunkedArray) or len(reasons) != table.num_rows:
            raise ValueError(
                f"a verdict must give one reason per row ({table.num_rows}), got {reasons!r:.80}"
            )
        table = table.drop_columns([c for c in self.working if c in table.column_names])
        return table.append_column(VERDICT, pc.cast(reasons, pa.string()))


@dataclass(frozen=True)
class Unless:
    """Picklable verdict: ``reason`` where the boolean column ``column`` is not true (null counts as false,
    as ``Table.filter`` drops it), else null; e.g. dedup's ``Unless("dup_keep", "duplicate")``."""

    column: str
    reason: str

    def __call__(self, table: pa.Table) -> pa.Array:
        import pyarrow as pa
        import pyarrow.compute as pc

        keep = pc.fill_null(table.column(self.column), False)
        return pc.if_else(keep, pa.scalar(None, pa.string()), pa.scalar(self.reason))


def keep_by(table: pa.Table, reasons: pa.Array | pa.ChunkedArray) -> Any:
    """The rows of ``table`` whose reason is null, the others reported to the engine as dropped by reason:
    the one way a removing op (a filter, a language cut, decontamination, a route) drops rows."""
    import pyarrow.compute as pc

    from zephyr.ops import BatchOutput

    counts = pc.value_counts(reasons.drop_null()).to_pylist()
    dropped = {str(c["values"]): int(c["counts"]) for c in counts}
    return BatchOutput(kept=table.filter(pc.is_null(reasons)), dropped=dropped)


@dataclass(frozen=True)
class Route:
    """Picklable op: one side of rows that carry their verdict in ``column`` (null: kept). ``kept`` drops
    the column and reports the other rows to the engine as dropped by reason (``keep_by``), so that stage's
    stats show the per-reason counts; ``dropped`` keeps the rows with a reason outside ``quarantine``, the
    reason in ``reason_column`` (an existing column of that name is replaced: the caller checked that it
    may); ``quarantined`` keeps the rows whose reason is in ``quarantine``, the reason in
    ``quarantine_reason``. ``aside`` lists input columns ``set_aside`` moved out of the way, restored on
    every side. The one routing of removed rows: ``write_routed``, ``zephyr filter`` and the filter steps."""

    side: Literal["kept", "dropped", "quarantined"] = "kept"
    column: str = VERDICT
    reason_column: str = DROP_REASON
    quarantine: tuple[str, ...] = ()
    aside: tuple[str, ...] = ()

    def __call__(self, table: pa.Table) -> Any:
        import pyarrow as pa
        import pyarrow.compute as pc

        from zephyr.io.quarantine import QUARANTINE_REASON
        from zephyr.ops import BatchOutput

        restore = set_aside(self.aside, restore=True)
        reasons = table.column(self.column)
        if self.side == "kept":
            out = keep_by(table, reasons)
            return BatchOutput(kept=restore(out.kept.drop_columns([self.column])), dropped=out.dropped)
        quarantined = pc.is_in(reasons, pa.array(self.quarantine, pa.string()))
        if self.side == "quarantined":
            name = QUARANTINE_REASON
            rows = table.filter(quarantined)
        else:
            name = self.reason_column
            rows = table.filter(pc.and_(pc.is_valid(reasons), pc.invert(quarantined)))
        return restore(RenameColumns(((self.column, name),), replace=self.side == "dropped")(rows))


@dataclass(frozen=True)
class Routed:
    """What ``write_routed`` wrote: the verdict job's write, the kept rows' (None: no row came through the
    verdict job, nothing was routed), each other side's by name, and the table the ``also`` job collected."""

    verdict: Any
    kept: Any = None
    sides: dict[str, Any] = field(default_factory=dict)
    also: Any = None

    @property
    def stages(self) -> list[dict[str, Any]]:
        """The stage records the command's ``Summary`` counts (``zephyr.summary.write_summary``): the kept job
        reads what the verdict job wrote, so the two jobs' stages are one chain: rows read by the verdict job
        (unreadable ones included), kept by the kept job, dropped by reason as both counted them."""
        kept = self.kept.stats.get("stages", []) if self.kept else []
        return [*self.verdict.stats.get("stages", []), *kept]


def routes(
    rows: Any,
    output: str,
    sides: Mapping[str, str],
    route: Route = Route(),
    finish: Callable[[Any], Any] = lambda d: d,
    also: Callable[[Any], Any] | None = None,
) -> list[tuple[str, str, Any]]:
    """(side, folder, plan) of the jobs that route ``rows`` (their verdict in ``route.column``), in the order
    ``write_routed`` runs them: the kept rows to ``output``, then each of ``sides`` (side → folder), each
    ``finish``-ed (e.g. restoring columns a command set aside); then ``also(rows)``, collected to the driver
    (folder ``""``). ``zephyr explain`` plans them over the verdict job's plan, ``write_routed`` over its files."""
    jobs = []
    for side, folder in {"kept": output, **sides}.items():
        routed = rows.map_batches(dataclasses.replace(route, side=side), name=f"route_{side}")
        jobs.append((side, folder, finish(routed)))
    return jobs + ([("also", "", also(rows))] if also else [])


def write_routed(
    ds: Any,
    output: str,
    sides: Mapping[str, str],
    opts: dict[str, Any],
    *,
    scratch: str = "routed",
    overwrite: bool = False,
    **routing: Any,
) -> Routed:
    """Write ``ds`` (rows with their verdict in a column: a ``Verdict`` op's, a filter's reasons) to a scratch
    folder in the output's sidecar, then route its rows by the ``routes`` of ``routing`` (see the module
    docstring): the verdict runs once, however many sides it has."""
    import zephyr
    from zephyr.executors import reuse_workers
    from zephyr.io import layout

    folder = layout.side_path(output, scratch)
    try:
        # one worker pool for every job: each would otherwise start its own worker processes, which import
        # the engine and load the command's model or index again
        with reuse_workers(opts) as execution:
            verdict = ds.write_parquet(folder, overwrite=True, **execution)
            if not verdict.files:  # no row came through: nothing to route, and every side is an empty folder
                from zephyr.io.paths import filesystem

                for side in sides.values():
                    fs, root = filesystem(side)
                    fs.makedirs(root, exist_ok=True)
                return Routed(verdict)
            rows = zephyr.read_parquet(list(verdict.files))
            done = {
                side: plan.write_parquet(where, overwrite=overwrite, **execution)
                if where
                else plan.to_arrow(**execution)
                for side, where, plan in routes(rows, output, sides, **routing)
            }
            kept, also = done.pop("kept"), done.pop("also", None)
            return Routed(verdict, kept, done, also)
    finally:
        layout.remove_folder(folder)


def check_added_columns(
    names: Iterable[str],
    added: Sequence[str],
    *,
    replace_columns: bool,
    where: str | None = None,
    rename: str | None = None,
) -> None:
    """Raise ``ColumnExistsError`` when a column of ``added`` is among ``names`` and ``replace_columns`` is false.

    ``where`` (a file, a step) starts the message; ``rename`` is the option that writes under another name,
    where the step has one (``"--output-column NAME"``), offered as the second way out.
    """
    present = set(names)
    if replace_columns or not (clash := [name for name in added if name in present]):
        return
    names = ", ".join(map(repr, clash))
    what, it = (f"a column {names}", "it") if len(clash) == 1 else (f"columns {names}", "them")
    fix = f"pass replace_columns=True to replace {it}"  # a command's flag: ``zephyr.cli._cli_spelling``
    fix += f", or {rename} to write under another name" if rename else ""
    raise ColumnExistsError(f"{f'{where}: ' if where else ''}the input already has {what}; {fix}")


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
    from zephyr.io.sources import list_shards, peek_schemas

    for path, schema in peek_schemas(list_shards(paths, format)):
        if schema is not None:
            check_added_columns(schema.names, added, replace_columns=False, where=path, rename=rename)


ASIDE_PREFIX = "__zephyr_input__"
"""Reserved prefix of the input columns ``set_aside`` keeps out of a step's way."""


@dataclass(frozen=True)
class RenameColumns:
    """Picklable ``pa.Table -> pa.Table`` op: rename the columns of ``names`` (old → new) that the batch has.

    A batch without some of them (an empty input file without columns) passes as it is.

    >>> import pyarrow as pa
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

    >>> import pyarrow as pa
    >>> t = set_aside(["dup_keep"])(pa.table({"dup_keep": [1]}))
    >>> t.column_names, set_aside(["dup_keep"], restore=True)(t).column_names
    (['__zephyr_input__dup_keep'], ['dup_keep'])
    """
    pairs = tuple((name, ASIDE_PREFIX + name) for name in columns)
    return RenameColumns(tuple((b, a) for a, b in pairs) if restore else pairs)
