"""What the quality commands share (``zephyr.pipelines.quality.cli`` and ``cli_classifier``): reading and
checking their text inputs, the engine options, the stats file in the output's sidecar and the one-job summary."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any


def side(args: argparse.Namespace, *names: str) -> Path:
    """A path in the sidecar of the command's output (``OUTPUT.zephyr/...``, ``zephyr.io.layout``)."""
    from zephyr.io.layout import side_path

    return Path(side_path(args.output, *names))


def stats_path(args: argparse.Namespace) -> Path:
    """The command's statistics: ``OUTPUT.zephyr/stats.json``."""
    from zephyr.io.layout import STATS

    return side(args, STATS)


def read_text_inputs(args: argparse.Namespace, adds: tuple[str, ...] = (), rename: str | None = None) -> Any:
    """The inputs as a Dataset, after checking that every file's text column holds text and has none of the
    columns ``adds`` the command will add (unless ``--replace-columns``): one line naming the file and the column,
    before any task starts. Files that disagree follow ``--unify-schemas`` / ``--schema FILE``
    (``zephyr.io.schema``)."""
    import zephyr
    from zephyr.cli import schema_arguments
    from zephyr.io.paths import input_files
    from zephyr.io.sources import check_text_inputs
    from zephyr.removal import check_input_columns

    files, fmt = input_files(args.inputs)
    check_text_inputs(files, args.text_column, format=fmt)
    check_input_columns(
        files, adds, replace_columns=getattr(args, "replace_columns", False), format=fmt, rename=rename
    )
    return zephyr.read(files, format=fmt, on_error=args.on_error, **schema_arguments(args))


def engine_options(args: argparse.Namespace) -> dict[str, Any]:
    from zephyr.cli import execution_options

    o = execution_options(args)
    return {
        "executor": o.executor,
        "workers": o.workers,
        "cluster": o.cluster,
        "memory_budget": o.memory_budget,
        "work_dir": o.work_dir,
        "max_retries": o.max_retries,
        "quarantine_dir": o.quarantine_dir,
        "small_job_bytes": o.small_job_bytes,
    }


def write_json(path: Path, data: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=True, ensure_ascii=False) + "\n", encoding="utf-8")
    tmp.replace(path)


def one_job_summary(result: Any, args: argparse.Namespace, **fields: Any) -> Any:
    """The ``Summary`` of a one-job command that wrote ``args.output`` (``zephyr.summary``)."""
    from zephyr.summary import from_stages

    stats = stats_path(args)
    return from_stages(
        result.stats.get("stages", []),
        output=args.output,
        stats=str(stats) if stats.exists() else None,
        **fields,
    )
